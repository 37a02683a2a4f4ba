"""The results store: analysed runs appended to one SQLite database (through sqlite-utils), to query across
runs with SQL or Datasette (docs/store.md).

- `record(...)` turns an analysis into rows (a pure function; parallel workers run it where they analyse);
- `add(db, record)` writes them in one transaction (a run is there whole or not at all; concurrent writers wait
  for each other), or finds the run already there: a run is keyed by the
  SHA-256 of its trace file and of the analysis options, so importing the same run again changes nothing;
- `save(...)` adds the records of one import (`specprof analyze --db`; app/run.py's `Run.record` makes each);
- `list_runs(db)` lists the runs; `charges(db, id)` and `stored_sweep_run(db, id)` give `specprof compare` and
  `specprof sweep` what they need of a stored run, without its files (app/run.py's `StoredRun`).

Names from traces are untrusted: they are only ever bound as SQL parameters (`?` placeholders), never put into
SQL text. Table and column names come from this module alone. Times are integer
nanoseconds (`*_ns`), like everywhere inside specprof.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import sqlite3
from dataclasses import dataclass, field

import polars as pl

from specprof.analyzer import __version__, safe_files
from specprof.analyzer.core import categories
from specprof.analyzer.derived import views
from specprof.analyzer.derived.analysis import Analysis
from specprof.analyzer.derived.compare import Side
from specprof.analyzer.derived.ranks import per_rank
from specprof.analyzer.derived.sweep_runs import SweepRun
from specprof.analyzer.errors import SpecprofError

SCHEMA = "specprof.store/5"  # 2: the sweep_events table; 3: runs.setup, sweep_events.extend_ns; 4: the twin
# columns; 5: the batch_groups table
# older schemas this version still reads and appends to: what they lack is added (CREATE ... IF NOT EXISTS) on the
# first append, which sets the schema row to SCHEMA; read before then, their missing tables read as empty
READABLE = ("specprof.store/4",)
RUN_PREFIX = "@"  # `@3`: run 3 of the store given with --db

_INT, _FLOAT, _TEXT = int, float, str
RUN_FK = [("run_id", "runs", "id")]

# table -> (columns, primary key or None, foreign keys, indexes (columns, unique))
TABLES: dict[str, tuple[dict, str | None, list, list]] = {
    "meta": ({"key": _TEXT, "value": _TEXT}, "key", [], []),
    "runs": ({
        "id": _INT, "key": _TEXT, "trace_sha256": _TEXT, "trace_bytes": _INT, "options": _TEXT,
        "path": _TEXT, "trace_path": _TEXT, "run_dir": _TEXT, "format": _TEXT, "tool_version": _TEXT,
        "gpus": _TEXT, "rank_count": _INT, "trace_rank": _INT, "ops": _INT, "ranges": _INT, "streams": _INT,
        "cycles": _INT, "wall_ns": _INT, "attributed_ns": _INT, "cycle_attributed_ns": _INT, "busy_ns": _INT,
        "unattributed_ops": _INT, "unattributed_ns": _INT, "steps": _INT, "tokens": _INT, "accept_len": _FLOAT,
        "batch": _FLOAT, "period_unprofiled_ns": _INT, "speedup": _FLOAT, "manifest": _TEXT, "command": _TEXT,
        "host": _TEXT, "preset": _TEXT, "captured_at": _TEXT, "nsys_version": _TEXT, "torch_version": _TEXT,
        "sglang_version": _TEXT, "specprof_version": _TEXT, "imported_at": _TEXT, "setup": _TEXT,
    }, "id", [], [(["key"], True), (["captured_at"], False)]),
    "imports": ({"id": _INT, "at": _TEXT, "specprof_version": _TEXT, "argv": _TEXT}, "id", [], []),
    "import_runs": ({"import_id": _INT, "run_id": _INT, "created": _INT}, None,
                    [("import_id", "imports", "id"), ("run_id", "runs", "id")],
                    [(["import_id", "run_id"], True), (["run_id"], False)]),
    "phases": ({"run_id": _INT, "phase": _TEXT, "instances": _INT, "ops": _INT, "cpu_ns": _INT,
                "gpu_span_ns": _INT, "gpu_busy_ns": _INT, "attributed_ns": _INT, "cycle_ns": _INT},
               None, RUN_FK, [(["run_id", "phase"], True), (["phase"], False)]),
    "categories": ({"run_id": _INT, "phase": _TEXT, "category": _TEXT, "ns": _INT, "cycle_ns": _INT},
                   None, RUN_FK, [(["run_id", "phase", "category"], True), (["category"], False)]),
    "ranks": ({"id": _INT, "run_id": _INT, "rank": _INT, "pid": _INT, "os_pid": _INT, "device": _INT,
               "source": _TEXT, "ops": _INT, "streams": _INT, "wall_ns": _INT, "busy_ns": _INT,
               "attributed_ns": _INT, "comm_ns": _INT, "wait_ns": _INT, "transfer_ns": _INT, "unmatched_ns": _INT,
               "last_arrivals": _INT, "caused_wait_ns": _INT},
              "id", RUN_FK, [(["run_id", "rank"], True)]),
    "rank_phases": ({"rank_id": _INT, "phase": _TEXT, "instances": _INT, "ops": _INT, "cpu_ns": _INT,
                     "gpu_span_ns": _INT, "gpu_busy_ns": _INT, "attributed_ns": _INT, "comm_ns": _INT,
                     "wait_ns": _INT, "transfer_ns": _INT},
                    None, [("rank_id", "ranks", "id")], [(["rank_id", "phase"], True), (["phase"], False)]),
    "rank_categories": ({"rank_id": _INT, "phase": _TEXT, "category": _TEXT, "ns": _INT},
                        None, [("rank_id", "ranks", "id")], [(["rank_id", "phase", "category"], True)]),
    "rank_skew": ({"run_id": _INT, "phase": _TEXT, "ranks": _INT, "min_ns": _INT, "max_ns": _INT, "mean_ns": _FLOAT,
                   "skew_ns": _INT, "skew_pct": _FLOAT, "min_rank": _INT, "max_rank": _INT},
                  None, RUN_FK, [(["run_id", "phase"], True)]),
    "collectives": ({"run_id": _INT, "kernel": _TEXT, "ranks": _INT, "instances": _INT, "unmatched": _INT,
                     "ns": _INT, "wait_ns": _INT, "transfer_ns": _INT, "overlap_pct": _FLOAT, "shifts": _TEXT},
                    None, RUN_FK, [(["run_id"], False)]),
    "cycles": ({"id": _INT, "run_id": _INT, "rank_id": _INT, "pid": _INT, "cycle_index": _INT, "start_ns": _INT,
                "end_ns": _INT}, "id", RUN_FK + [("rank_id", "ranks", "id")],
               [(["run_id", "pid", "cycle_index"], True)]),
    "cycle_phases": ({"cycle_id": _INT, "phase": _TEXT, "attributed_ns": _INT, "gpu_busy_ns": _INT, "cpu_ns": _INT},
                     None, [("cycle_id", "cycles", "id")], [(["cycle_id", "phase"], True)]),
    "kernels": ({"run_id": _INT, "phase": _TEXT, "kernel": _TEXT, "category": _TEXT, "count": _INT, "ns": _INT},
                None, RUN_FK, [(["run_id", "phase"], False), (["kernel"], False)]),
    "launch": ({"run_id": _INT, "phase": _TEXT, "launches": _INT, "queued": _INT, "api_ns": _INT,
                "latency_p50_ns": _INT, "latency_p90_ns": _INT, "latency_max_ns": _INT, "idle_latency_p50_ns": _INT,
                "idle_latency_p90_ns": _INT}, None, RUN_FK, [(["run_id", "phase"], True)]),
    "streams": ({"run_id": _INT, "rank_id": _INT, "device": _INT, "stream": _INT, "ops": _INT, "wall_ns": _INT,
                 "busy_ns": _INT, "cpu_wait_ns": _INT, "launch_ns": _INT, "idle_ns": _INT},
                None, RUN_FK + [("rank_id", "ranks", "id")], [(["run_id", "device", "stream"], True)]),
    "notes": ({"run_id": _INT, "source": _TEXT, "seq": _INT, "text": _TEXT}, None, RUN_FK, [(["run_id"], False)]),
    "crosscheck_consistency": ({"run_id": _INT, "phase": _TEXT, "instances": _INT, "nsys_ns": _INT,
                                "sidecar_ns": _INT, "diff_ns": _INT, "diff_pct": _FLOAT, "verdict": _TEXT},
                               None, RUN_FK, [(["run_id"], False)]),
    "crosscheck_inflation": ({"run_id": _INT, "measure": _TEXT, "phase": _TEXT, "cycles_with": _INT,
                              "cycles_without": _INT, "with_ns": _INT, "without_ns": _INT, "ratio": _FLOAT,
                              "ratio_lo": _FLOAT, "ratio_hi": _FLOAT, "verdict": _TEXT},
                             None, RUN_FK, [(["run_id"], False)]),
    "crosscheck_alignment": ({"run_id": _INT, "path": _TEXT, "pid": _INT, "trace_pid": _INT, "method": _TEXT,
                              "marks": _INT, "offset_ns": _INT, "drift_ppm": _FLOAT, "matched_cycles": _INT,
                              "first_index": _INT, "last_index": _INT, "residual_p50_ns": _INT,
                              "residual_max_ns": _INT}, None, RUN_FK, [(["run_id"], False)]),
    "crosscheck_accept": ({"run_id": _INT, "sidecar_accept_len": _FLOAT, "sidecar_per_cycle_mean": _FLOAT,
                           "request_rounds": _INT, "cycles": _INT, "log_lines": _INT, "log_mean": _FLOAT,
                           "log_weighted": _FLOAT, "log_accept_rate_mean": _FLOAT, "gap": _FLOAT,
                           "overlap_bound": _FLOAT, "verdict": _TEXT, "explanations": _TEXT},
                          None, RUN_FK, [(["run_id"], False)]),
    "economics": ({"run_id": _INT, "source": _TEXT, "profiled": _INT, "cycles": _INT, "cycle_ns": _INT,
                   "accept_len": _FLOAT, "batch": _FLOAT, "tokens_per_s": _FLOAT, "baseline_ns": _INT,
                   "baseline_tokens_per_s": _FLOAT, "speedup": _FLOAT, "break_even_accept_len": _FLOAT,
                   "verdict": _TEXT, "headline": _INT}, None, RUN_FK, [(["run_id"], False)]),
    # the economics per batch-size group and K (derived/groups.py BatchGroups.rows): one row per (source, group, K)
    # of a run whose sidecar gives each cycle's batch size; *_lo / *_hi: the 95 % interval
    "batch_groups": ({"run_id": _INT, "source": _TEXT, "profiled": _INT, "batch_group": _TEXT, "batch_lo": _INT,
                      "batch_hi": _INT, "exact": _INT, "steps": _INT, "cycles": _INT, "cycle_ns": _INT,
                      "cycle_lo_ns": _INT, "cycle_hi_ns": _INT, "accept_len": _FLOAT, "accept_len_lo": _FLOAT,
                      "accept_len_hi": _FLOAT, "batch": _FLOAT, "tokens_per_s": _FLOAT, "tokens_per_s_lo": _FLOAT,
                      "tokens_per_s_hi": _FLOAT, "baseline_ns": _INT, "baseline_steps": _INT,
                      "baseline_tokens_per_s": _FLOAT, "speedup": _FLOAT, "speedup_lo": _FLOAT, "speedup_hi": _FLOAT,
                      "break_even_accept_len": _FLOAT, "verdict": _TEXT, "time_share": _FLOAT},
                     None, RUN_FK, [(["run_id", "source", "batch_group", "steps"], False)]),
    # what `specprof sweep @ID` needs beyond the per-cycle phase times: the accept counts of the cycles the
    # capture holds (twin null) and of its twins' without nsys (twin: the twin's folder), and the cycle periods of
    # those twins
    "sweep_accepts": ({"run_id": _INT, "cycle_index": _INT, "request": _INT, "correct": _INT, "twin": _TEXT},
                      None, RUN_FK, [(["run_id"], False)]),
    "sweep_periods": ({"run_id": _INT, "cycle_index": _INT, "period_ns": _INT, "twin": _TEXT},
                      None, RUN_FK, [(["run_id"], False)]),
    # the draft, verify and draft_extend GPU time per cycle of the run without nsys, from CUDA events (what the
    # sweep fits on, and the K-independent work whose drift it checks)
    "sweep_events": ({"run_id": _INT, "seq": _INT, "draft_ns": _INT, "verify_ns": _INT, "extend_ns": _INT},
                     None, RUN_FK, [(["run_id"], False)]),
}

# Views for people (Datasette shows them like tables): milliseconds, one row per run and phase.
VIEWS = {
    "phase_ms": """
        SELECT r.id AS run_id, r.path, r.steps, p.phase, p.instances,
               p.attributed_ns / 1e6 AS attributed_ms, p.gpu_busy_ns / 1e6 AS gpu_busy_ms,
               CASE WHEN r.cycles > 0 THEN p.cycle_ns / 1e6 / r.cycles END AS per_cycle_ms
        FROM phases p JOIN runs r ON r.id = p.run_id""",
    "rank_ms": """
        SELECT r.id AS run_id, r.path, k.rank, k.device, k.os_pid, p.phase, p.attributed_ns / 1e6 AS attributed_ms,
               p.comm_ns / 1e6 AS comm_ms, p.wait_ns / 1e6 AS wait_ms, p.transfer_ns / 1e6 AS transfer_ms
        FROM rank_phases p JOIN ranks k ON k.id = p.rank_id JOIN runs r ON r.id = k.run_id""",
}


@dataclass
class Record:
    """One run as rows: `run` (the runs row without id), run-level tables (DataFrames with the store's column
    names, without run_id), and the two nested ones: rank tables keyed by `rank`, cycle phases keyed by
    (pid, cycle_index)."""

    run: dict
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    ranks: pl.DataFrame | None = None
    rank_phases: pl.DataFrame | None = None
    rank_categories: pl.DataFrame | None = None
    cycles: pl.DataFrame | None = None
    cycle_phases: pl.DataFrame | None = None


# -- keys ----------------------------------------------------------------------------------------------------------

def file_sha256(path: str) -> tuple[str, int]:
    """(hex digest, size in bytes) of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
                size += len(block)
    except OSError as exc:
        raise SpecprofError(f"{path}: cannot read ({exc.strerror})", path) from None
    return h.hexdigest(), size


def options_of(grouping=("cycle",), domains=(), rules=None, sidecars=(), baseline_sidecars=(), server_log=None,
               baseline_run=None, baseline_ms=None, log_interval=None, window=None) -> dict:
    """The analysis options that change a run's results, as plain JSON values. Inputs that are files (sidecars,
    the server log) count by content; a window (core/window.py `Window.describe`) only when there is one."""
    rules = rules if rules is not None else categories.default_rules()
    return ({"window": window} if window else {}) | {
        "grouping": list(grouping), "domains": sorted(domains),
        "rules": [r.key() for r in rules],
        "sidecars": sorted(file_sha256(p)[0] for p in sidecars),
        "baseline_sidecars": sorted(file_sha256(p)[0] for p in baseline_sidecars),
        "server_log": file_sha256(server_log)[0] if server_log else None,
        "baseline_run": baseline_run, "baseline_ms": baseline_ms, "log_interval": log_interval,
    }


def run_key(trace_sha256: str, options: dict) -> str:
    text = json.dumps({"trace": trace_sha256, "options": options}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# -- rows ----------------------------------------------------------------------------------------------------------

def _clean(v):
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    return v


def _rows(df: pl.DataFrame | None) -> list[dict]:
    if df is None or df.is_empty():
        return []
    return [{k: _clean(v) for k, v in row.items()} for row in df.iter_rows(named=True)]


def _charges(a: Analysis) -> pl.DataFrame:
    """The charges behind the headline breakdown (derived/views.py cycle_charges): what compare and runs show."""
    return views.cycle_charges(a)[0].select(phase=pl.col("phase").cast(pl.Utf8), category=pl.col("category").cast(pl.Utf8),
                          cycle="cycle", ns="ns")


def _manifest_columns(manifest: dict | None) -> dict:
    if not isinstance(manifest, dict):
        return {"manifest": None, "command": None, "host": None, "preset": None, "captured_at": None,
                "nsys_version": None, "torch_version": None, "sglang_version": None}

    def text(x):
        return x if isinstance(x, str) else None

    nsys = manifest.get("nsys") if isinstance(manifest.get("nsys"), dict) else {}
    versions = manifest.get("versions") if isinstance(manifest.get("versions"), dict) else {}
    command = manifest.get("command")
    return {"manifest": json.dumps(manifest, sort_keys=True),
            "command": json.dumps(command) if isinstance(command, list) else text(command),
            "host": text(manifest.get("host")), "preset": text(manifest.get("preset")),
            "captured_at": text(manifest.get("start")), "nsys_version": text(nsys.get("version")),
            "torch_version": text(versions.get("torch")), "sglang_version": text(versions.get("sglang"))}


def record(a: Analysis, *, path: str, trace_path: str, options: dict, manifest: dict | None = None,
           trace_digest: tuple[str, int] | None = None, sweep: SweepRun | None = None) -> Record:
    """The rows of one analysed run (a pure function of the analysis; reads only the trace file's bytes for its
    hash unless `trace_digest` is given). `sweep`: the sweep's inputs when the run has sidecars."""
    sha, size = trace_digest or file_sha256(trace_path)
    meta = a.trace.meta
    ch = _charges(a)
    in_cycle = ch.filter(pl.col("cycle").is_not_null())
    cats = ch.group_by("phase", "category").agg(ns=pl.col("ns").sum()).join(
        in_cycle.group_by("phase", "category").agg(cycle_ns=pl.col("ns").sum()), on=["phase", "category"],
        how="left").with_columns(pl.col("cycle_ns").fill_null(0)).sort("phase", "category")
    phases = a.phases.select(
        "phase", "instances", "ops", cpu_ns="cpu", gpu_span_ns="gpu_span", gpu_busy_ns="gpu_busy",
        attributed_ns="attributed").join(cats.group_by("phase").agg(cycle_ns=pl.col("cycle_ns").sum()), on="phase",
                                         how="left").with_columns(pl.col("cycle_ns").fill_null(0))
    m = a.ranks if a.ranks is not None else per_rank(a)
    econ = a.economics
    head = econ.headline if econ is not None else None
    run_dir = os.path.dirname(os.path.abspath(trace_path)) if manifest is not None else None
    run = {
        "key": run_key(sha, options), "trace_sha256": sha, "trace_bytes": size,
        "options": json.dumps(options, sort_keys=True), "path": path, "trace_path": os.path.abspath(trace_path),
        "run_dir": run_dir, "format": meta.format, "tool_version": meta.tool_version,
        "gpus": json.dumps(meta.gpus), "rank_count": m.count, "trace_rank": meta.rank,
        "ops": a.ops.height, "ranges": a.ranges.height, "streams": a.streams.height,
        "cycles": views.cycle_charges(a)[1],
        "wall_ns": int(a.streams["wall"].sum() or 0), "attributed_ns": int(ch["ns"].sum() or 0),
        "cycle_attributed_ns": int(in_cycle["ns"].sum() or 0),
        "busy_ns": int(a.streams["busy"].fill_null(0).sum() or 0),
        "unattributed_ops": int(a.unattributed["ops"].sum() or 0) if a.unattributed.height else 0,
        "unattributed_ns": int(a.unattributed["ns"].sum() or 0) if a.unattributed.height else 0,
        "steps": None, "tokens": None,
        "accept_len": _clean(head["accept_len"]) if head else None, "batch": _clean(head["batch"]) if head else None,
        "period_unprofiled_ns": None, "speedup": _clean(head["speedup"]) if head else None,
        **_manifest_columns(manifest), "specprof_version": __version__,
        # the setup the sweep compares runs by (engine, model, tp, draft shape: model/settings.py RunSettings.setup), as JSON
        "setup": json.dumps(sweep.setup, sort_keys=True) if sweep is not None and sweep.setup is not None else None,
    }
    tables = {
        "phases": phases, "categories": cats,
        "kernels": a.kernels.select("phase", kernel="short_name", category="category", count="count", ns="ns"),
        "launch": a.launch.select("phase", "launches", "queued", "api_ns", latency_p50_ns="latency_p50",
                                  latency_p90_ns="latency_p90", latency_max_ns="latency_max",
                                  idle_latency_p50_ns="idle_latency_p50", idle_latency_p90_ns="idle_latency_p90"),
        "rank_skew": m.skew.select("phase", "ranks", min_ns="min", max_ns="max", mean_ns="mean", skew_ns="skew",
                                   skew_pct="skew_pct", min_rank="min_rank", max_rank="max_rank"),
        "collectives": m.collectives.select(kernel="name", ranks="ranks", instances="instances",
                                            unmatched="unmatched", ns="ns", wait_ns="wait", transfer_ns="transfer",
                                            overlap_pct="overlap_pct", shifts="shifts"),
    }
    notes = [("analysis", n) for n in a.notes] + [("multirank", n) for n in m.notes]
    if a.crosscheck is not None:
        c = a.crosscheck
        tables["crosscheck_consistency"] = c.consistency
        if c.inflation is not None:
            tables["crosscheck_inflation"] = c.inflation
        tables["crosscheck_alignment"] = c.alignment
        if c.accept is not None:
            x = c.accept
            tables["crosscheck_accept"] = pl.DataFrame([{
                "sidecar_accept_len": x.sidecar_pooled, "sidecar_per_cycle_mean": x.sidecar_per_cycle,
                "request_rounds": x.request_rounds, "cycles": x.cycles, "log_lines": x.log_lines,
                "log_mean": x.log_mean, "log_weighted": x.log_weighted, "log_accept_rate_mean": x.log_rate_mean,
                "gap": x.gap, "overlap_bound": x.overlap_bound, "verdict": x.verdict,
                "explanations": json.dumps(x.explanations)}])
        notes += [("crosscheck", n) for n in c.notes]
    if econ is not None:
        tables["economics"] = econ.estimates.with_columns(
            headline=pl.int_range(pl.len()) == 0, baseline_ns=pl.col("baseline_ns"))
        notes += [("economics", n) for n in list(econ.verdict) + list(econ.notes)]
        if econ.groups is not None and econ.groups.rows.height:
            tables["batch_groups"] = econ.groups.rows
    tables["notes"] = pl.DataFrame([(s, i, t) for i, (s, t) in enumerate(notes)], schema=["source", "seq", "text"],
                                   orient="row")
    if sweep is not None:
        run.update(steps=sweep.steps, tokens=sweep.tokens, period_unprofiled_ns=sweep.period_ns)
        if sweep.accept_len is not None:
            run.update(accept_len=sweep.accept_len, batch=sweep.batch)
        accepts = [sweep.accepts.select("request", "correct", cycle_index="cycle", twin=pl.lit(None, pl.Utf8))]
        if sweep.twin_accepts is not None:
            accepts.append(sweep.twin_accepts.select("request", "correct", cycle_index="cycle", twin="twin"))
        tables["sweep_accepts"] = pl.concat(accepts)
        if sweep.periods is not None:
            twin = pl.col("twin") if "twin" in sweep.periods.columns else pl.lit(None, pl.Utf8)
            tables["sweep_periods"] = sweep.periods.select(cycle_index="index", period_ns="period", twin=twin)
        if sweep.events is not None:
            ev = sweep.events if "extend_ns" in sweep.events.columns else \
                sweep.events.with_columns(extend_ns=pl.lit(None, dtype=pl.Int64))
            tables["sweep_events"] = ev.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("seq"),
                                               "draft_ns", "verify_ns", "extend_ns")
    streams = a.streams.select("device", "stream", "ops", wall_ns="wall", busy_ns="busy", cpu_wait_ns="cpu_wait",
                               launch_ns="launch", idle_ns="idle")
    stream_rank = a.ops.group_by("device", "stream", "pid").agg(n=pl.len()).sort("n", descending=True).unique(
        ["device", "stream"], keep="first").join(m.ranks.select("rank", "pid", "device"), on=["pid", "device"],
                                                 how="left").select("device", "stream", "rank")
    tables["streams"] = streams.join(stream_rank, on=["device", "stream"], how="left")
    last = m.stragglers.select("rank", last_arrivals="last", caused_wait_ns="caused")
    ranks = m.ranks.select("rank", "pid", "os_pid", "device", "source", "ops", "streams", wall_ns="wall",
                           busy_ns="busy", attributed_ns="attributed", comm_ns="comm", wait_ns="wait",
                           transfer_ns="transfer", unmatched_ns="unmatched").join(last, on="rank", how="left")
    comm = m.comm_phases.select("rank", "phase", comm_ns="comm", wait_ns="wait", transfer_ns="transfer")
    rank_phases = m.phases.select("rank", "phase", "instances", "ops", cpu_ns="cpu", gpu_span_ns="gpu_span",
                                  gpu_busy_ns="gpu_busy", attributed_ns="attributed").join(
        comm, on=["rank", "phase"], how="left").with_columns(
        [pl.col(c).fill_null(0) for c in ("comm_ns", "wait_ns", "transfer_ns")])
    cycles = a.cycles.select("pid", cycle_index="index", start_ns="start", end_ns="end", _cycle="cycle")
    # (the phases of the headline breakdown's decode cycles: what the sweep and compare take a cycle to be)
    shown = views.shown_cycles(a)
    per_cycle = a.cycle_phases if shown is None else a.cycle_phases.join(shown, on="cycle", how="semi")
    cycle_phases = per_cycle.join(cycles.select("_cycle", "pid", "cycle_index"), left_on="cycle",
                                       right_on="_cycle", how="inner").select(
        "pid", "cycle_index", "phase", attributed_ns="attributed", gpu_busy_ns="gpu_busy", cpu_ns="cpu")
    # a cycle belongs to the rank of its process (the first device of that process)
    first_rank = m.ranks.sort("rank").unique("pid", keep="first").select("pid", "rank")
    return Record(run=run, tables=tables, ranks=ranks,
                  rank_phases=rank_phases, rank_categories=m.categories,
                  cycles=cycles.drop("_cycle").join(first_rank, on="pid", how="left"), cycle_phases=cycle_phases)


# -- the database --------------------------------------------------------------------------------------------------

def connect(path: str, create: bool = True):
    """The store at `path` (created with its schema when `create`), foreign keys enforced.

    The connection is in autocommit mode: every write is one explicit `BEGIN IMMEDIATE` ... `COMMIT` of this
    module's own (never a commit sqlite-utils makes on its own, which some of its versions do inside
    `insert_all`), and a writer that finds the database locked by another waits for it (up to BUSY_S)."""
    import sqlite_utils

    if not create and not os.path.isfile(path):
        raise SpecprofError(f"{path}: no such results database (`specprof analyze ... --db {path}` makes one)", path)
    if create:
        _new_file(path)
    try:
        conn = sqlite3.connect(path, timeout=BUSY_S, isolation_level=None)
        conn.execute("PRAGMA foreign_keys = ON")
        db = sqlite_utils.Database(conn)
        version = _schema_version(db, path)
        if version is None:
            if not create:
                raise SpecprofError(f"{path}: an empty database, not a specprof results store", path)
            with _transaction(conn, path):  # one writer creates the schema; the others wait, then find it
                version = _schema_version(db, path)
                if version is None:
                    _create(db)
                    version = SCHEMA
        if create and version in READABLE:  # an older store: its missing tables added, once, by one writer
            with _transaction(conn, path):
                version = _schema_version(db, path)
                if version in READABLE:
                    _create(db)
                    version = SCHEMA
    except sqlite3.DatabaseError as exc:
        raise _db_error(path, exc) from None
    if version != SCHEMA and version not in READABLE:
        raise SpecprofError(f"{path}: results store schema {version!r}, this version reads {SCHEMA}; "
                            "use another file or update specprof", path)
    try:
        _check_objects(conn, path, appending=create)
    except SpecprofError:
        conn.close()
        raise
    return db


def _check_objects(conn, path: str, appending: bool) -> None:
    """Refuse, in one line, a store where one of specprof's tables is a view (what is read there is not what
    specprof wrote, and nothing can be appended), and, before any append, a store that carries triggers: they
    would run on every row specprof adds (an AFTER INSERT on runs could set the earlier runs' wall time to 0)."""
    try:
        found = conn.execute("SELECT type, name FROM sqlite_master WHERE type IN ('view', 'trigger') "
                             "ORDER BY name").fetchall()
    except sqlite3.DatabaseError as exc:
        raise _db_error(path, exc) from None
    views = [name for kind, name in found if kind == "view" and name in TABLES]
    if views:
        raise SpecprofError(f"{path}: {', '.join(views)} {'is a view' if len(views) == 1 else 'are views'} where "
                            "the results store keeps a table: not a store specprof wrote; use another --db file",
                            path)
    triggers = [name for kind, name in found if kind == "trigger"]
    if appending and triggers:
        shown = ", ".join(triggers[:3]) + (", ..." if len(triggers) > 3 else "")
        raise SpecprofError(f"{path}: the results store carries {len(triggers)} trigger(s) ({shown}), which would "
                            "run on every row specprof adds; specprof adds runs only to a store without triggers: "
                            "drop them (DROP TRIGGER in sqlite3) or use another --db file", path)


BUSY_S = 60  # how long a writer waits for another to finish its transaction


def _new_file(path: str) -> None:
    """A store that specprof writes is never reached through a link: a link at `path` is refused, and a new
    store's file is created here (an empty file, which SQLite takes as an empty database) without following one
    planted since (specprof.analyzer.safe_files.create), before SQLite opens it."""
    try:
        fd = safe_files.create(path)
    except FileExistsError:
        if os.path.islink(path):
            raise SpecprofError(f"{path}: the results database is a symbolic link, which specprof never writes "
                                "through; give the file itself", path) from None
        return
    except OSError as exc:
        raise SpecprofError(f"{path}: the results database cannot be written ({exc.strerror}); give a --db file "
                            "in a folder you can write", path) from None
    os.close(fd)


def _schema_version(db, path: str) -> str | None:
    names = db.table_names()
    if "meta" in names:
        row = db.conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        return row[0] if row else None
    if names:
        raise SpecprofError(f"{path}: a SQLite database, but not a specprof results store (no `meta` table)", path)
    return None


def _db_error(path: str, exc: sqlite3.DatabaseError) -> SpecprofError:
    text = str(exc)
    if "readonly" in text or "unable to open" in text:
        return SpecprofError(f"{path}: the results database cannot be written ({text}); give a --db file in a "
                             "folder you can write", path)
    if "locked" in text or "busy" in text:
        return SpecprofError(f"{path}: the results database stayed locked by another writer for {BUSY_S} s "
                             f"({text}); try again when it is done", path)
    return SpecprofError(f"{path}: not a SQLite database, or a damaged one ({text})", path)


class _transaction:
    """`with _transaction(conn, path):` one `BEGIN IMMEDIATE` ... `COMMIT` (waiting for other writers), rolled
    back on any error; a database error is one SpecprofError naming the file."""

    def __init__(self, conn, path: str):
        self.conn, self.path = conn, path

    def __enter__(self):
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as exc:
            raise _db_error(self.path, exc) from None
        return self.conn

    def __exit__(self, kind, exc, tb):
        if kind is None:
            try:
                self.conn.execute("COMMIT")
                return False
            except sqlite3.DatabaseError as error:
                exc = error
        self.conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.DatabaseError):
            raise _db_error(self.path, exc) from None
        return False


def _path(db) -> str:
    return _path_of(db.conn)


def _create(db) -> None:
    """The tables, indexes, views and schema row, by statements run inside the caller's transaction (sqlite-utils
    only writes the CREATE TABLE text: some of its versions commit inside their own create calls)."""
    conn = db.conn
    for name, (columns, pk, fks, indexes) in TABLES.items():
        conn.execute(db.create_table_sql(name, columns, pk=pk, foreign_keys=fks or None, if_not_exists=True))
        for cols, unique in indexes:
            conn.execute(f"CREATE {'UNIQUE ' if unique else ''}INDEX IF NOT EXISTS [idx_{name}_{'_'.join(cols)}] "
                         f"ON [{name}] ({', '.join(f'[{c}]' for c in cols)})")
    for name, sql in VIEWS.items():
        conn.execute(f"CREATE VIEW IF NOT EXISTS [{name}] AS {sql}")
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema', ?)", [SCHEMA])


def _next_id(conn, table: str, count: int = 1) -> int:
    """The first of `count` new ids of `table`: above its own ids and above every id a row of another table
    refers to it by. A row deleted by hand may leave rows that point at its id (SQLite's own shell does not
    enforce foreign keys): SQLite would hand that id out again, and the new rows would collide with them."""
    refs = [(name, col) for name, (_, _, fks, _) in TABLES.items() for col, other, _ in fks if other == table]
    parts = [f"SELECT max(CASE WHEN typeof(id) = 'integer' THEN id END) AS m FROM [{table}]"]
    parts += [f"SELECT max(CASE WHEN typeof([{col}]) = 'integer' THEN [{col}] END) FROM [{name}]"
              for name, col in refs]
    top = conn.execute(f"SELECT max(m) FROM ({' UNION ALL '.join(parts)})").fetchone()[0]
    if top is not None and top + count >= VALUE_LIMIT:
        raise _damaged_store(_path_of(conn), f"table {table} holds the id {top}")
    return (top or 0) + 1


def _path_of(conn) -> str:
    row = conn.execute("PRAGMA database_list").fetchone()
    return row[2] if row and row[2] else "the results database"


def begin_import(db, argv: list[str] | None = None) -> int:
    """An `imports` row for one `specprof analyze --db` invocation; returns its id."""
    with _transaction(db.conn, _path(db)) as conn:
        import_id = _next_id(conn, "imports")
        conn.execute("INSERT INTO imports (id, at, specprof_version, argv) VALUES (?, ?, ?, ?)",
                     [import_id, _now(), __version__, json.dumps(argv) if argv is not None else None])
        return import_id


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _insert(db, table: str, df: pl.DataFrame | None, **fixed) -> None:
    """Rows of `df` (and the `fixed` columns) into `table`, by plain `executemany` inside the caller's
    transaction. Column names come from TABLES; values are bound as parameters."""
    rows = _rows(df)
    if not rows:
        return
    columns = TABLES[table][0]
    keep = [c for c in columns if c in rows[0] or c in fixed]
    sql = f"INSERT INTO {table} ({', '.join(keep)}) VALUES ({', '.join('?' * len(keep))})"
    db.conn.executemany(sql, ([fixed[c] if c in fixed else r.get(c) for c in keep] for r in rows))


def add(db, rec: Record, import_id: int | None = None) -> tuple[int, bool]:
    """Write `rec` in one transaction: a run is in the store whole or not at all (a writer killed mid-way
    leaves nothing of it). Returns (run id, created): created is False when the same run (same trace bytes and
    analysis options) was already in the store, which is then left unchanged."""
    with _transaction(db.conn, _path(db)) as conn:
        row = conn.execute("SELECT id FROM runs WHERE key = ?", [rec.run["key"]]).fetchone()
        created = row is None
        run_id = _insert_run(db, rec) if created else row[0]
        if import_id is not None:
            conn.execute("INSERT OR IGNORE INTO import_runs (import_id, run_id, created) VALUES (?, ?, ?)",
                         [import_id, run_id, int(created)])
    return run_id, created


def _insert_run(db, rec: Record) -> int:
    conn = db.conn
    run = {**rec.run, "imported_at": _now()}
    run["id"] = run_id = _next_id(conn, "runs")
    cols = list(TABLES["runs"][0])
    conn.execute(f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                 [run.get(c) for c in cols])
    for name, df in rec.tables.items():
        if name == "streams":
            continue
        _insert(db, name, df, run_id=run_id)
    rank_ids = {}
    if rec.ranks is not None and rec.ranks.height:
        first = _next_id(conn, "ranks", rec.ranks.height)
        _insert(db, "ranks", rec.ranks.with_columns(id=pl.int_range(first, first + rec.ranks.height)),
                run_id=run_id)
        rank_ids = dict(conn.execute("SELECT rank, id FROM ranks WHERE run_id = ?", [run_id]).fetchall())
    ids = pl.DataFrame({"rank": list(rank_ids), "rank_id": list(rank_ids.values())},
                       schema={"rank": pl.Int64, "rank_id": pl.Int64})
    for name, df in (("rank_phases", rec.rank_phases), ("rank_categories", rec.rank_categories)):
        if df is not None and df.height:
            _insert(db, name, df.join(ids, on="rank", how="inner"))
    streams = rec.tables.get("streams")
    if streams is not None and streams.height:
        _insert(db, "streams", streams.join(ids, on="rank", how="left"), run_id=run_id)
    if rec.cycles is not None and rec.cycles.height:
        first = _next_id(conn, "cycles", rec.cycles.height)
        _insert(db, "cycles", rec.cycles.join(ids, on="rank", how="left", maintain_order="left").with_columns(
            id=pl.int_range(first, first + rec.cycles.height)), run_id=run_id)
        got = conn.execute("SELECT pid, cycle_index, id FROM cycles WHERE run_id = ?", [run_id]).fetchall()
        cyc = pl.DataFrame(got, schema={"pid": pl.Int64, "cycle_index": pl.Int64, "cycle_id": pl.Int64},
                           orient="row")
        _insert(db, "cycle_phases", rec.cycle_phases.join(cyc, on=["pid", "cycle_index"], how="inner"))
    return run_id


# -- reading -------------------------------------------------------------------------------------------------------

VALUE_LIMIT = 1 << 62  # no count or time specprof stores is larger; sums and differences of two then fit in 64 bits
_KINDS = {pl.Int64: (int,), pl.Float64: (int, float), pl.Utf8: (str,)}


def _damaged_store(path: str, what: str) -> SpecprofError:
    return SpecprofError(f"{path}: the results store is damaged or was changed by hand ({what}); specprof reads "
                         "only what it wrote: use another --db file, or a copy from before the change", path)


def _read(db, table: str, sql: str, params, schema: dict) -> list[tuple]:
    """The rows of `sql` (reading `table`), each value checked against `schema` (column -> pl.Int64, pl.Float64
    or pl.Utf8, by position): the type specprof writes there, integers within +-VALUE_LIMIT, finite floats;
    NULL is kept. Anything else (text in an integer column, a huge number, a table gone) is one SpecprofError
    naming the file, never a traceback or a silently wrong number."""
    path = _path(db)
    try:
        rows = db.conn.execute(sql, params).fetchall()
    except sqlite3.DatabaseError as exc:
        raise _damaged_store(path, str(exc)) from None
    kinds = [(name, _KINDS[dtype]) for name, dtype in schema.items()]
    for row in rows:
        for value, (name, kind) in zip(row, kinds):
            if value is None:
                continue
            bad = (not isinstance(value, kind) or isinstance(value, bool)
                   or (isinstance(value, int) and abs(value) > VALUE_LIMIT)
                   or (isinstance(value, float) and not (math.isfinite(value) and abs(value) <= VALUE_LIMIT)))
            if bad:
                shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
                wants = {(str,): "text", (int,): "an integer within +-2^62"}.get(kind, "a finite number")
                raise _damaged_store(path, f"table {table}, column {name}: {shown}, where specprof writes {wants}")
    return rows


def _frame(db, table: str, sql: str, params, schema: dict) -> pl.DataFrame:
    return pl.DataFrame(_read(db, table, sql, params, schema), schema=schema, orient="row")


def list_runs(db) -> pl.DataFrame:
    """One row per stored run, oldest first."""
    return _frame(db, "runs",
                  "SELECT id, imported_at, path, format, rank_count, cycles, wall_ns, attributed_ns, "
                  "cycle_attributed_ns, steps, accept_len, speedup, captured_at, key FROM runs ORDER BY id", (), {
                      "id": pl.Int64, "imported_at": pl.Utf8, "path": pl.Utf8, "format": pl.Utf8, "ranks": pl.Int64,
                      "cycles": pl.Int64, "wall_ns": pl.Int64, "attributed_ns": pl.Int64,
                      "cycle_attributed_ns": pl.Int64, "steps": pl.Int64, "accept_len": pl.Float64,
                      "speedup": pl.Float64, "captured_at": pl.Utf8, "key": pl.Utf8})


def is_run_id(arg: str) -> bool:
    return arg.startswith(RUN_PREFIX)


def parse_run_id(arg: str) -> int:
    """`@3` -> 3."""
    text = arg[len(RUN_PREFIX):]
    if not text.isdigit():
        raise SpecprofError(f"{arg!r}: a stored run is written @ID with ID a number from `specprof runs`")
    return int(text)


_POLARS = {_INT: pl.Int64, _FLOAT: pl.Float64, _TEXT: pl.Utf8}


def _run_row(db, run_id: int) -> dict:
    columns = TABLES["runs"][0]
    rows = _read(db, "runs", f"SELECT {', '.join(columns)} FROM runs WHERE id = ?", [run_id],
                 {c: _POLARS[t] for c, t in columns.items()})
    row = rows[0] if rows else None
    if row is None:
        raise SpecprofError(f"@{run_id}: no run with id {run_id} in the results database (`specprof runs --db ...` "
                            "lists them)")
    return dict(zip(columns, row))


def charges(db, run_id: int) -> Side:
    """A stored run as one side of a comparison (derived/compare.py): attributed ns per (phase, category), split
    into the part inside cycles (cycle = 0) and the rest (cycle = null)."""
    run = _run_row(db, run_id)
    df = _frame(db, "categories", "SELECT phase, category, ns, cycle_ns FROM categories WHERE run_id = ?",
                [run_id], {"phase": pl.Utf8, "category": pl.Utf8, "ns": pl.Int64, "cycle_ns": pl.Int64})
    long = pl.concat([
        df.select("phase", "category", cycle=pl.lit(0, dtype=pl.Int64), ns="cycle_ns"),
        df.select("phase", "category", cycle=pl.lit(None, dtype=pl.Int64), ns=pl.col("ns") - pl.col("cycle_ns")),
    ]).filter(pl.col("ns") > 0)
    instances = dict(_read(db, "phases", "SELECT phase, instances FROM phases WHERE run_id = ?", [run_id],
                           {"phase": pl.Utf8, "instances": pl.Int64}))
    return Side(f"@{run_id} ({run['path']})", int(run["cycles"] or 0), long, instances)


def stored_sweep_run(db, arg: str) -> SweepRun:
    """The sweep's inputs of a stored run (`@ID`)."""
    t = sweep_tables(db, parse_run_id(arg))
    run = t["run"]
    if run["steps"] is None and not t["accepts"].height:
        raise SpecprofError(f"{arg}: stored without the tracer's sidecar: the sweep needs the accept counts; "
                            "store the run directory made by `specprof capture`")
    try:
        setup = json.loads(run["setup"]) if run["setup"] else None
    except (ValueError, RecursionError):
        setup = None
    acc = t["accepts"]
    twin = acc.filter(pl.col("twin").is_not_null()) if t["periods"] is not None else None
    return SweepRun(path=f"{arg} ({run['path']})", steps=run["steps"], tokens=run["tokens"], cycles=t["cycles"],
                    accepts=acc.filter(pl.col("twin").is_null()).drop("twin"), accept_len=run["accept_len"],
                    batch=run["batch"], periods=t["periods"], events=t["events"],
                    accept_source=("sidecar without nsys" if twin is not None else "sidecar under nsys")
                    if run["accept_len"] is not None else None,
                    setup=setup if isinstance(setup, dict) else None, twin_accepts=twin)


def sweep_tables(db, run_id: int) -> dict:
    """What `specprof sweep` needs to put a stored run into a sweep: the runs row, per-cycle draft/verify/total
    attributed ns, the accept counts and the unprofiled cycle periods (None when the run had no baseline)."""
    run = _run_row(db, run_id)
    ints = pl.Int64
    cyc = _read(db, "cycle_phases",
                "SELECT c.id, COALESCE(SUM(CASE WHEN p.phase = 'draft' THEN p.attributed_ns END), 0), "
                "COALESCE(SUM(CASE WHEN p.phase = 'verify' THEN p.attributed_ns END), 0), "
                "COALESCE(SUM(p.attributed_ns), 0), "
                "COALESCE(SUM(CASE WHEN p.phase = 'draft' THEN p.gpu_busy_ns END), 0), "
                "COALESCE(SUM(CASE WHEN p.phase = 'verify' THEN p.gpu_busy_ns END), 0), "
                "COALESCE(SUM(CASE WHEN p.phase = 'draft_extend' THEN p.gpu_busy_ns END), 0) "
                "FROM cycles c JOIN cycle_phases p ON p.cycle_id = c.id "
                "WHERE c.run_id = ? GROUP BY c.id ORDER BY c.id", [run_id], dict.fromkeys("abcdefg", ints))
    acc = _read(db, "sweep_accepts", "SELECT cycle_index, request, correct, twin FROM sweep_accepts WHERE run_id = ?",
                [run_id], {**dict.fromkeys("abc", ints), "d": pl.Utf8})
    per = _read(db, "sweep_periods", "SELECT cycle_index, period_ns, twin FROM sweep_periods WHERE run_id = ?",
                [run_id], {"a": ints, "b": ints, "c": pl.Utf8})
    ev = _read(db, "sweep_events", "SELECT draft_ns, verify_ns, extend_ns FROM sweep_events WHERE run_id = ? "
               "ORDER BY seq", [run_id], dict.fromkeys("abc", ints))
    return {
        "run": run,
        "cycles": pl.DataFrame([r[1:] for r in cyc], schema={"draft_ns": pl.Int64, "verify_ns": pl.Int64,
                                                              "total_ns": pl.Int64, "draft_busy_ns": pl.Int64,
                                                              "verify_busy_ns": pl.Int64, "extend_busy_ns": pl.Int64},
                                orient="row"),
        "accepts": pl.DataFrame(acc, schema={"cycle": pl.Int64, "request": pl.Int64, "correct": pl.Int64,
                                             "twin": pl.Utf8}, orient="row"),
        "periods": pl.DataFrame(per, schema={"index": pl.Int64, "period": pl.Int64, "twin": pl.Utf8}, orient="row")
        if per else None,
        "events": pl.DataFrame(ev, schema={"draft_ns": pl.Int64, "verify_ns": pl.Int64, "extend_ns": pl.Int64},
                               orient="row") if ev else None,
    }


def save(db_path: str, records: list[tuple[str, Record]], argv: list[str] | None = None) -> list[tuple[str, int, bool]]:
    """Append (path, record) runs to the store at `db_path` as one import (`argv`: the command that imports them);
    [(path, run id, created)] in order."""
    db = connect(db_path)
    try:
        import_id = begin_import(db, argv)
        return [(path, *add(db, rec, import_id)) for path, rec in records]
    finally:
        db.conn.close()
