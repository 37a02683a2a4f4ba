"""Plain-text tables for the terminal. Names from the trace are untrusted: printed sanitised."""

from __future__ import annotations

import polars as pl

from analyzer.accounting import IDLE_CATEGORIES
from analyzer.analysis import Analysis
from analyzer.projection import IN_CYCLE, UNATTRIBUTED


def clean(text, width: int | None = None) -> str:
    """Printable text only (no escape sequences from a trace can reach the terminal)."""
    s = "" if text is None else str(text)
    s = "".join(ch if ch.isprintable() else "?" for ch in s)
    if width is not None and len(s) > width:
        s = s[: max(1, width - 1)] + "…"
    return s


def table(headers: list[str], rows: list[list], align: str | None = None) -> str:
    """Columns padded to fit; `align` is one char per column, 'l' or 'r'."""
    cells = [[clean(h) for h in headers]] + [[clean(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    align = align or "l" + "r" * (len(headers) - 1)
    out = []
    for n, r in enumerate(cells):
        line = "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(r, widths, align))
        out.append(line.rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def f_ms(ns, digits: int = 3) -> str:
    return f"{(ns or 0) / 1e6:,.{digits}f}"


def f_us(ns) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.1f}"


def pct(part, whole) -> str:
    return "-" if not whole else f"{100.0 * (part or 0) / whole:.1f}%"


def header(a: Analysis) -> str:
    meta = a.trace.meta
    gpus = ", ".join(f"{g['device']}: {g['name'] or 'GPU'}" for g in meta.gpus) or "none"
    total = int(a.charges["ns"].sum() or 0)  # the segments' total, without building them
    un_ns = int(a.unattributed["ns"].sum()) if a.unattributed.height else 0
    un_ops = int(a.unattributed["ops"].sum()) if a.unattributed.height else 0
    lines = [
        f"specprof analysis of {clean(meta.path)}",
        f"  format {meta.format}, {clean(meta.tool_version or 'unknown version')}; GPUs {clean(gpus)}",
        f"  {a.ops.height:,} GPU ops on {a.streams.height} stream(s), {a.ranges.height:,} ranges, "
        f"{a.cycles.height:,} cycles; GPU time accounted {f_ms(total)} ms",
        f"  unattributed: {un_ops:,} ops, {f_ms(un_ns)} ms of GPU op time",
    ]
    busy = a.phases.select(pl.col("gpu_busy").sum()).item() if a.phases.height else 0
    if busy and a.cycles.height:
        # GPU work that no phase launched: outside every range, or in a cycle but between its phases.
        outside = a.phases.filter(pl.col("phase").is_in([UNATTRIBUTED, IN_CYCLE]))
        lines.append(f"  GPU busy time outside every phase: {f_ms(int(outside['gpu_busy'].sum()))} ms of "
                     f"{f_ms(busy)} ms ({pct(outside['gpu_busy'].sum(), busy)}; {UNATTRIBUTED}: launched between "
                     f"cycles, {IN_CYCLE}: in a cycle between its phases)")
    return "\n".join(lines)


def _shown_phases(a: Analysis, limit: int) -> pl.DataFrame:
    """The `limit` phases with the most attributed time, plus the pseudo-phases, in table order."""
    special = pl.col("phase").is_in([IN_CYCLE, UNATTRIBUTED])
    top = a.phases.filter(~special).head(limit)
    return pl.concat([top, a.phases.filter(special)])


def _more(a: Analysis, shown: pl.DataFrame) -> str:
    hidden = a.phases.height - shown.height
    return f"\n({hidden:,} more phases with less time: --phases N shows more, --json shows all)" if hidden else ""


def phases(a: Analysis, limit: int = 20) -> str:
    cats = a.categories
    total = int(a.phases["attributed"].sum() or 0)
    rows = []
    shown = _shown_phases(a, limit)
    for r in shown.iter_rows(named=True):
        mine = cats.filter(pl.col("phase") == r["phase"]).sort("ns", descending=True)
        busy_cats = mine.filter(~pl.col("category").is_in(IDLE_CATEGORIES)).head(3)
        top = ", ".join(f"{c} {pct(n, r['attributed'])}" for c, n in busy_cats.select("category", "ns").rows())
        idle = mine.filter(pl.col("category").is_in(IDLE_CATEGORIES))["ns"].sum()
        inst = r["instances"] or 0
        rows.append([
            r["phase"], f"{inst:,}" if inst else "-", f"{r['ops']:,}", f_ms(r["cpu"]), f_ms(r["gpu_span"]),
            f_ms(r["gpu_busy"]), f_ms(r["attributed"]),
            f_ms(r["attributed"] / inst) if inst else "-", pct(r["attributed"], total),
            pct(idle, r["attributed"]), top,
        ])
        rows[-1][0] = clean(rows[-1][0], 48)
    t = table(["phase", "inst", "ops", "cpu ms", "gpu span ms", "gpu busy ms", "attributed ms",
               "per inst ms", "share", "idle", "top busy categories"], rows, "lrrrrrrrrrl")
    return ("Phases (totals over instances; attributed time tiles every GPU stream's timeline)\n" + t
            + _more(a, shown))


def categories(a: Analysis, limit: int = 20) -> str:
    cats = a.categories
    names = (cats.group_by("category").agg(pl.col("ns").sum()).sort("ns", descending=True)["category"]
             .to_list())
    busy = [c for c in names if c not in IDLE_CATEGORIES]
    order = busy + [c for c in IDLE_CATEGORIES if c in names]
    wide = cats.pivot(on="category", index="phase", values="ns").fill_null(0)
    rows = []
    for ph in _shown_phases(a, limit)["phase"].to_list():
        r = wide.filter(pl.col("phase") == ph)
        if r.is_empty():
            continue
        vals = [int(r[c].item()) if c in r.columns else 0 for c in order]
        rows.append([clean(ph, 48)] + [f_ms(v) for v in vals] + [f_ms(sum(vals))])
    t = table(["phase"] + order + ["total"], rows)
    return "Attributed ms by category (cpu_wait: GPU idle waiting for the CPU; launch: idle after the launch call)\n" + t


def cycles(a: Analysis, limit: int = 10) -> str:
    if a.cycles.is_empty():
        return "Cycles: no `cycle` ranges in this trace."
    wide = a.cycle_phases.pivot(on="phase", index="cycle", values="attributed").fill_null(0)
    phase_cols = [p for p in a.phases["phase"].to_list() if p in wide.columns]
    data = a.cycles.join(wide, on="cycle", how="left").fill_null(0).with_columns(
        total=pl.sum_horizontal(phase_cols) if phase_cols else pl.lit(0))
    first = data["start"].min()
    rows = [[str(r["index"]), f_ms(r["start"] - first, 3)] + [f_ms(r[p]) for p in phase_cols] + [f_ms(r["total"])]
            for r in data.head(limit).iter_rows(named=True)]
    stats = []
    for label, fn in (("mean", lambda c: data[c].mean()), ("p50", lambda c: data[c].median()),
                      ("p90", lambda c: data[c].quantile(0.9, "nearest")), ("max", lambda c: data[c].max())):
        stats.append([label, ""] + [f_ms(fn(p)) for p in phase_cols] + [f_ms(fn("total"))])
    t = table(["cycle", "start ms"] + phase_cols + ["total"], rows + [["", ""] + [""] * (len(phase_cols) + 1)] + stats)
    shown = min(limit, data.height)
    return (f"Per cycle: attributed ms per phase (first {shown} of {data.height:,} cycles; "
            "--cycles N shows more)\n" + t)


def launch(a: Analysis, limit: int = 20) -> str:
    rows = [[r["phase"], f"{r['launches']:,}", pct(r["queued"], r["launches"]), f_ms(r["api_ns"]),
             f_us(r["latency_p50"]), f_us(r["latency_p90"]), f_us(r["latency_max"]),
             f_us(r["idle_latency_p50"]), f_us(r["idle_latency_p90"])]
            for r in a.launch.head(limit).iter_rows(named=True)]
    for row in rows:
        row[0] = clean(row[0], 48)
    return ("Launch overhead (api cpu: time inside launch calls; latency: first op start - launch call start, "
            "queueing included;\n idle latency: the part after the stream drained; queued: launched while the "
            "stream was still busy)\n"
            + table(["phase", "launches", "queued", "api cpu ms", "latency p50 us", "p90 us", "max us",
                     "idle latency p50 us", "p90 us"], rows))


def streams(a: Analysis) -> str:
    rows = [[str(r["device"]), str(r["stream"]), f"{r['ops']:,}", f_ms(r["wall"]), f_ms(r["busy"]),
             f_ms(r["cpu_wait"]), f_ms(r["launch"]), f_ms(r["idle"]), pct(r["busy"], r["wall"])]
            for r in a.streams.iter_rows(named=True)]
    return "GPU streams\n" + table(["device", "stream", "ops", "wall ms", "busy ms", "cpu_wait ms",
                                    "launch ms", "idle ms", "busy %"], rows)


def kernels(a: Analysis, limit: int = 20) -> str:
    shown = _shown_phases(a, limit).select("phase")
    rows = [[clean(r["phase"], 48), clean(r["short_name"], 60), r["category"], f"{r['count']:,}", f_ms(r["ns"])]
            for r in a.kernels.join(shown, on="phase", how="semi").iter_rows(named=True)]
    return "Top kernels per phase\n" + table(["phase", "kernel", "category", "count", "gpu ms"], rows, "lllrr")


def unattributed(a: Analysis) -> str:
    if a.unattributed.is_empty():
        return "Unattributed: none (every op was launched inside a range)."
    why = {"no_launch_record": "launch not in the capture (the export starts after it)",
           "no_enclosing_range": "launched outside every range"}
    rows = [[why.get(r["reason"], r["reason"]), f"{r['ops']:,}", f_ms(r["ns"])]
            for r in a.unattributed.iter_rows(named=True)]
    return (f"Unattributed ops (phase {UNATTRIBUTED}; ops in a cycle outside any phase are {IN_CYCLE})\n"
            + table(["reason", "ops", "gpu op ms"], rows, "lrr"))


def render(a: Analysis, cycle_limit: int = 10, phase_limit: int = 20) -> str:
    parts = [header(a), phases(a, phase_limit), categories(a, phase_limit), cycles(a, cycle_limit),
             launch(a, phase_limit), streams(a), unattributed(a), kernels(a, phase_limit)]
    from analyzer.render import multirank

    ranks = multirank.terminal(getattr(a, "multirank", None), phase_limit)
    if ranks:
        parts.append(ranks)
    if a.crosscheck is not None or a.economics is not None:
        from analyzer.render import checks_terminal

        if a.crosscheck is not None:
            parts.append(checks_terminal.crosscheck(a.crosscheck))
        if a.economics is not None:
            parts.append(checks_terminal.economics(a.economics))
    if a.notes:
        parts.append("Notes\n" + "\n".join(f"- {clean(n)}" for n in a.notes))
    return "\n\n".join(parts) + "\n"
