"""The JSON contract (docs/json.md): schema `specprof.analysis/2`. Times in float milliseconds.

Additive keys may appear in later versions; a breaking change bumps `schema`.
"""

from __future__ import annotations

import json
import math
import uuid

import polars as pl

from analyzer.analysis import Analysis

SCHEMA = "specprof.analysis/2"


def ms(ns) -> float:
    return round(float(ns or 0) / 1e6, 6)


def _num(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return x


def phase_list(phases, categories) -> list[dict]:
    """The `phases` entries (docs/json.md) of a phase table and its (phase, category, ns) table."""
    cats: dict[str, dict[str, float]] = {}
    for row in categories.iter_rows(named=True):
        cats.setdefault(row["phase"], {})[row["category"]] = ms(row["ns"])
    return [
        {
            "name": r["phase"],
            "instances": r["instances"],
            "ops": r["ops"],
            "cpu_ms": ms(r["cpu"]),
            "gpu_span_ms": ms(r["gpu_span"]),
            "gpu_busy_ms": ms(r["gpu_busy"]),
            "attributed_ms": ms(r["attributed"]),
            "categories": cats.get(r["phase"], {}),
        }
        for r in phases.iter_rows(named=True)
    ]


def to_dict(a: Analysis, max_cycles: int | None = None) -> dict:
    return {**_document(a), "cycles": cycle_list(a, max_cycles)}


def cycle_list(a: Analysis, max_cycles: int | None = None) -> list[dict]:
    """The `cycles` entries: one per cycle, its phases' attributed, busy and CPU time."""
    per_cycle: dict[int, dict] = {}
    # (rows as tuples: a cycle table has one row per cycle and phase, hundreds of thousands at scale)
    for cycle, phase, attributed, busy, cpu in a.cycle_phases.select(
            "cycle", "phase", "attributed", "gpu_busy", "cpu").iter_rows():
        per_cycle.setdefault(cycle, {})[phase] = {
            "attributed_ms": ms(attributed), "gpu_busy_ms": ms(busy), "cpu_ms": ms(cpu),
        }
    cycles_df = a.cycles if max_cycles is None else a.cycles.head(max_cycles)
    return [
        {"index": index, "pid": pid, "start_ns": start, "end_ns": end, "phases": per_cycle.get(cycle, {})}
        for cycle, index, pid, start, end in cycles_df.select("cycle", "index", "pid", "start", "end").iter_rows()
    ]


def _document(a: Analysis) -> dict:
    """Everything but the cycles."""
    meta = a.trace.meta
    phases = phase_list(a.phases, a.categories)
    un = a.unattributed
    return {
        "schema": SCHEMA,
        "source": {
            "path": meta.path,
            "format": meta.format,
            "nsys_version": meta.tool_version if meta.format == "nsys-sqlite" else None,
            "tool_version": meta.tool_version,
            "gpus": meta.gpus,
        },
        # Category -> its parent (every kind of communication -> `communication`): sum a parent over its kinds.
        "category_parents": dict(sorted(a.category_parents.items())),
        "phases": phases,
        "cycles": [],
        "unattributed": {
            "ops": int(un["ops"].sum()) if un.height else 0,
            "ms": ms(un["ns"].sum()) if un.height else 0.0,
            "by_reason": {r["reason"]: {"ops": r["ops"], "ms": ms(r["ns"])} for r in un.iter_rows(named=True)},
        },
        "launch": [
            {"phase": r["phase"], "launches": r["launches"], "queued": r["queued"], "api_cpu_ms": ms(r["api_ns"]),
             "latency_p50_us": _us(r["latency_p50"]), "latency_p90_us": _us(r["latency_p90"]),
             "latency_max_us": _us(r["latency_max"]), "idle_latency_p50_us": _us(r["idle_latency_p50"]),
             "idle_latency_p90_us": _us(r["idle_latency_p90"])}
            for r in a.launch.iter_rows(named=True)
        ],
        "streams": [
            {"device": r["device"], "stream": r["stream"], "ops": r["ops"], "wall_ms": ms(r["wall"]),
             "busy_ms": ms(r["busy"]), "cpu_wait_ms": ms(r["cpu_wait"]), "launch_ms": ms(r["launch"]),
             "idle_ms": ms(r["idle"])}
            for r in a.streams.iter_rows(named=True)
        ],
        "notes": a.notes,
        # Additive (docs/crosscheck.md, docs/economics.md): null unless sidecars were given.
        "crosscheck": _checks().crosscheck(a.crosscheck) if a.crosscheck is not None else None,
        "economics": _checks().economics(a.economics) if a.economics is not None else None,
        # Additive (docs/multirank.md): one entry per (process, device) with its own phases; skew across ranks.
        **_ranks(a),
    }


def _ranks(a: Analysis) -> dict:
    from analyzer.render import multirank

    return multirank.to_json(getattr(a, "multirank", None))


def _checks():
    from analyzer.render import checks_json

    return checks_json


def _us(ns):
    ns = _num(ns)
    return None if ns is None else round(float(ns) / 1e3, 3)


def render(a: Analysis) -> str:
    """The JSON text: indented, except that each cycle is one line.

    The cycles (51,200 at 10 M kernels, each with its phases) are written by polars as text, one line
    each, not built as Python dicts: their numbers are made from the integer nanoseconds (decimal
    milliseconds, exact), so they parse to the very floats `to_dict` gives (tests/test_cli_analyze.py)."""
    doc = _document(a)
    lines = _cycle_lines(a)
    if lines is None:
        return json.dumps(doc, indent=1, ensure_ascii=True)
    # A placeholder no trace can contain (a fresh random token), replaced once.
    token = f"specprof-cycles-{uuid.uuid4().hex}"
    text = json.dumps({**doc, "cycles": token}, indent=1, ensure_ascii=True)
    return text.replace(f'"{token}"', "[\n  " + lines + "\n ]", 1)


def _ms_text(col: str) -> pl.Expr:
    """Integer nanoseconds (null: 0) as milliseconds in JSON: q.rrrrrr, trailing zeros dropped."""
    ns = pl.col(col).fill_null(0).cast(pl.Int64)
    sign = pl.when(ns < 0).then(pl.lit("-")).otherwise(pl.lit(""))
    q, r = ns.abs() // 1_000_000, ns.abs() % 1_000_000
    text = (q.cast(pl.Utf8) + "." + r.cast(pl.Utf8).str.zfill(6)).str.strip_chars_end("0")
    return sign + pl.when(text.str.ends_with(".")).then(text + "0").otherwise(text)


def _int_text(col: str) -> pl.Expr:
    return pl.col(col).cast(pl.Utf8).fill_null("null")


def _cycle_lines(a: Analysis) -> str | None:
    """The cycles' JSON, one cycle per line (joined by ",\n  "), or None when there are none."""
    if a.cycles.is_empty():
        return None
    cp = a.cycle_phases.select("cycle", "phase", "attributed", "gpu_busy", "cpu")
    # Phase names come from the trace: each distinct one is encoded by Python's encoder, then looked up.
    names = cp.get_column("phase").cast(pl.Utf8).unique().drop_nulls()
    keys = pl.Series([json.dumps(n, ensure_ascii=True) for n in names.to_list()], dtype=pl.Utf8)
    entries = cp.select(
        "cycle",
        text=pl.col("phase").cast(pl.Utf8).replace_strict(names, keys, default="null")
        + pl.lit(': {"attributed_ms": ') + _ms_text("attributed") + pl.lit(', "gpu_busy_ms": ')
        + _ms_text("gpu_busy") + pl.lit(', "cpu_ms": ') + _ms_text("cpu") + pl.lit("}"),
    ).group_by("cycle", maintain_order=True).agg(pl.col("text").str.join(", "))
    lines = a.cycles.select("cycle", "index", "pid", "start", "end").join(
        entries, on="cycle", how="left", maintain_order="left").select(
        pl.lit('{"index": ') + _int_text("index") + pl.lit(', "pid": ') + _int_text("pid")
        + pl.lit(', "start_ns": ') + _int_text("start") + pl.lit(', "end_ns": ') + _int_text("end")
        + pl.lit(', "phases": {') + pl.col("text").fill_null("") + pl.lit("}}"))
    return lines.to_series().str.join(",\n  ").item()
