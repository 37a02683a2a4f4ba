"""What every renderer shows, computed once: the statistics of a series (one quantile rule), the per-cycle table,
the phase-by-category pivot and its category order; the figures shown beside the analysis' tables (each phase's
per-instance time, shares and top busy categories, the sums, the streams', launches', ranks' and collectives'
shares, the cycle breakdown's totals and picks, the inflation in %); the report's charts (which phases they
name, the other-phases bar and series, the histogram's range) and its timeline (windows, picks, the windows
embedded op by op, rows, blocks). Renderers (terminal, JSON, HTML, CSV) format these values and compute none
of their own (tests/test_renderers_compute_nothing.py), so that one quantity has one value wherever it appears.

All times integer ns.
"""

from __future__ import annotations

import math

import polars as pl

from specprof.analyzer.model.labels import IDLE_CATEGORIES, IN_CYCLE, UNATTRIBUTED
from specprof.analyzer.model.stats import QUANTILE

STATS = ("mean", "p50", "p90", "p99", "min", "max")


def quantile(values: pl.Series, q: float) -> int | None:
    """The q-quantile of integer ns `values` by the one rule, rounded to a ns; None for no values."""
    v = values.drop_nulls()
    if v.is_empty():
        return None
    return int(round(float(v.quantile(q, QUANTILE))))


def stats(values: pl.Series) -> dict[str, int | None]:
    """mean, p50, p90, p99, min, max of integer ns `values` (rounded to a ns), and n."""
    v = values.drop_nulls()
    if v.is_empty():
        return {**{k: None for k in STATS}, "n": 0}
    return {"mean": int(round(float(v.mean()))), "p50": quantile(v, 0.5), "p90": quantile(v, 0.9),
            "p99": quantile(v, 0.99), "min": int(v.min()), "max": int(v.max()), "n": v.len()}


def category_order(categories: pl.DataFrame, communication: set[str] | frozenset = frozenset()) -> list[str]:
    """The categories of a (phase, category, ns) table in the order tables and charts show them: busy categories
    by time (communication kinds after the compute), then the idle kinds."""
    names = (categories.group_by("category").agg(pl.col("ns").sum()).sort(["ns", "category"],
                                                                          descending=[True, False])["category"]
             .to_list())
    comm = [c for c in names if c in communication]
    busy = [c for c in names if c not in IDLE_CATEGORIES and c not in comm]
    return busy + comm + [c for c in IDLE_CATEGORIES if c in names]


def category_pivot(categories: pl.DataFrame, phases: list[str], order: list[str]) -> pl.DataFrame:
    """phase, one column per category of `order` (ns, 0 where none), total: the phases of `phases`, in that order."""
    wide = categories.pivot(on="category", index="phase", values="ns").fill_null(0) if categories.height else \
        pl.DataFrame({"phase": []}, schema={"phase": pl.Utf8})
    rows = pl.DataFrame({"phase": phases}, schema={"phase": pl.Utf8}).join(wide, on="phase", how="inner",
                                                                          maintain_order="left")
    rows = rows.with_columns([pl.col(c).cast(pl.Int64) if c in rows.columns else pl.lit(0, pl.Int64).alias(c)
                              for c in order])
    return rows.select("phase", *order).with_columns(total=pl.sum_horizontal(order) if order else pl.lit(0))


def cycle_table(cycles: pl.DataFrame, cycle_phases: pl.DataFrame, phases: list[str], cpu: bool = False,
                idle: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per cycle (in order per process): cycle, index, pid, start, end, one column per phase of `phases`
    (attributed ns on the rank's cycle stream), total (the cycle's length on that stream); with `cpu`, cpu too
    (the cycle range's own duration, end - start). `idle` (cycle, ns: the breakdown's `idle_cycles`): the idle time
    while no request ran, taken out of the `(unattributed)` time of the cycle it followed, as the breakdown does."""
    wide = cycle_phases.pivot(on="phase", index="cycle", values="attributed").fill_null(0) \
        if cycle_phases.height else pl.DataFrame(schema={"cycle": pl.Int64})
    cols = [p for p in phases if p in wide.columns]
    if idle is not None and idle.height and UNATTRIBUTED in wide.columns:
        wide = wide.join(idle.rename({"ns": "_idle"}), on="cycle", how="left").with_columns(
            (pl.col(UNATTRIBUTED) - pl.col("_idle").fill_null(0)).alias(UNATTRIBUTED)).drop("_idle")
    data = cycles.sort("pid", "index").join(wide.select("cycle", *cols), on="cycle", how="left",
                                            maintain_order="left").with_columns(
        [pl.col(c).fill_null(0) for c in cols])
    data = data.with_columns(total=pl.sum_horizontal(cols) if cols else pl.lit(0, pl.Int64))
    return data.with_columns(cpu=pl.col("end") - pl.col("start")) if cpu else data


def cycle_stats(table: pl.DataFrame, keep: pl.DataFrame | None, columns: list[str]) -> dict[str, dict]:
    """Per column of the per-cycle `table`: `stats` over the cycles `keep` (cycle ids: the breakdown's decode
    cycles), or over every cycle when `keep` is None."""
    rows = table if keep is None else table.join(keep.select("cycle"), on="cycle", how="semi")
    return {c: stats(rows[c]) for c in columns}


def capture(ops: pl.DataFrame, streams: pl.DataFrame) -> dict:
    """The capture's wall time (first GPU op start to last op end, over every stream) and, per stream, its GPU
    busy time, role and what a side stream's work overlapped: {"wall", "streams": [rows of `streams`]}."""
    first, last = ops["start"].min(), ops["end"].max()
    wall = int(last - first) if first is not None else 0
    return {"wall": wall, "streams": list(streams.iter_rows(named=True))}


_WAITING = pl.col("phase").is_null() | (pl.col("phase").cast(pl.Utf8) == UNATTRIBUTED)


def idle_cycles(a) -> pl.DataFrame | None:
    """The headline breakdown's idle time per cycle it followed (cycle, ns), for the per-cycle table: None without."""
    b = getattr(a, "cycle_breakdown", None)
    return None if b is None else b.idle_cycles


def shown_cycles(a) -> pl.DataFrame | None:
    """The cycles the per-cycle statistics are over: the headline breakdown's decode cycles (cycle), or None
    (every cycle) without a breakdown."""
    b = getattr(a, "cycle_breakdown", None)
    return None if b is None or b.per_cycle is None else b.per_cycle.select("cycle")


def cycle_charges(a, b=None) -> tuple[pl.DataFrame, int]:
    """The charges behind the headline breakdown `b` (default: `a`'s), for what compares runs (compare, the results
    store, the sweep): (charges of the shown rank's cycle stream, with `cycle` null outside the breakdown's decode
    cycles; how many decode cycles). Without a breakdown: every charge of the cycle streams, and every cycle."""
    b = b if b is not None else getattr(a, "cycle_breakdown", None)
    home = a.home_charges
    if b is None or b.per_cycle is None:
        return home, a.cycles.height
    mine = home.filter((pl.col("device") == b.device) & (pl.col("stream") == b.stream))
    keep = b.per_cycle.get_column("cycle").implode()
    inside = pl.col("cycle").is_in(keep)
    if b.idle_cycles is not None and b.idle_cycles.height:  # the idle after a cycle is in no cycle
        inside = inside & ~(pl.col("cycle").is_in(b.idle_cycles["cycle"].implode()) & _WAITING
                            & pl.col("category").cast(pl.Utf8).is_in(IDLE_CATEGORIES))
    return mine.with_columns(cycle=pl.when(inside).then(pl.col("cycle"))), b.cycles


def timeline_blocks(segs: pl.DataFrame, gpu_key: pl.DataFrame, t0: int, budget: int) -> pl.DataFrame:
    """The timeline's bins (the HTML report draws them): segments (`gpu_key`: device, stream -> row), as blocks: runs of consecutive segments charged to one phase
    on one stream; when there are more than `budget` runs, fixed time bins named by their main phase."""
    schema = {"row": pl.Int64, "start": pl.Int64, "end": pl.Int64, "phase": pl.Utf8, "busy": pl.Int64,
              "ops": pl.Int64, "mixed": pl.Boolean}
    if segs.is_empty():
        return pl.DataFrame(schema=schema)
    s = segs.join(gpu_key, on=["device", "stream"], how="left").sort("row", "start").with_columns(
        dur=pl.col("end") - pl.col("start"), is_busy=~pl.col("category").is_in(IDLE_CATEGORIES))
    gap = pl.col("start") != pl.col("end").shift(1).over("row")
    run = ((pl.col("phase") != pl.col("phase").shift(1).over("row")) | gap).fill_null(True).cum_sum()
    s = s.with_columns(run=run)
    runs = s.group_by("row", "run").agg(
        start=pl.col("start").min(), end=pl.col("end").max(), phase=pl.col("phase").first(),
        busy=(pl.col("dur") * pl.col("is_busy")).sum(), ops=pl.col("is_busy").sum().cast(pl.Int64),
    ).with_columns(mixed=pl.lit(False))
    if runs.height <= budget:
        return runs.select(list(schema)).sort("row", "start")
    rows = max(1, gpu_key.height)
    span = int(s["end"].max() - s["start"].min())
    width = max(1, math.ceil(span * rows / budget))
    s = s.with_columns(bin=(pl.col("start") - t0) // width)
    per = s.group_by("row", "bin", "phase").agg(ns=pl.col("dur").sum(), start=pl.col("start").min(),
                                                end=pl.col("end").max(),
                                                busy=(pl.col("dur") * pl.col("is_busy")).sum(),
                                                ops=pl.col("is_busy").sum().cast(pl.Int64))
    top = per.sort("ns", descending=True).group_by("row", "bin").agg(
        phase=pl.col("phase").first(), start=pl.col("start").min(), end=pl.col("end").max(),
        busy=pl.col("busy").sum(), ops=pl.col("ops").sum(), mixed=(pl.len() > 1))
    return top.select(list(schema)).sort("row", "start")


# ----------------------------------------------------------------------------------------------------------------
# The figures the tables and the report's tiles show beside the analysis' own tables: shares, per-instance times,
# sums and picks, each computed here once (renderers format them).

PSEUDO_PHASES = (IN_CYCLE, UNATTRIBUTED)
TOP_CATEGORIES = 3  # the busy categories the Phases table names per phase


def share(part, whole) -> float | None:
    """part / whole, or None when the whole is 0 or unknown (a share of nothing is no share)."""
    if not whole or part is None:
        return None
    return float(part) / float(whole)


def _share_expr(part: str, whole: str) -> pl.Expr:
    return pl.when(pl.col(whole) != 0).then(pl.col(part).fill_null(0) / pl.col(whole)).cast(pl.Float64)


def phase_rows(phases: pl.DataFrame, categories: pl.DataFrame) -> pl.DataFrame:
    """The phase table (in its order) with what the Phases table and the report show of each phase: per_instance
    (attributed ns per instance, rounded; null without instances), share (of every phase's attributed time: the
    cycle stream's), busy (ns of its busy categories), idle (ns of its idle kinds), idle_share (of its attributed
    time), top_busy (its TOP_CATEGORIES largest busy categories: list of {category, ns, share of its attributed
    time})."""
    total = int(phases["attributed"].sum() or 0) if phases.height else 0
    cats = categories.select(pl.col("phase").cast(pl.Utf8), pl.col("category").cast(pl.Utf8), "ns")
    is_idle = pl.col("category").is_in(IDLE_CATEGORIES)
    per = cats.group_by("phase").agg(busy=pl.col("ns").filter(~is_idle).sum().cast(pl.Int64),
                                     idle=pl.col("ns").filter(is_idle).sum().cast(pl.Int64))
    top = (cats.filter(~is_idle).sort(["phase", "ns", "category"], descending=[False, True, False])
           .group_by("phase", maintain_order=True).head(TOP_CATEGORIES)
           .join(phases.select(pl.col("phase").cast(pl.Utf8), "attributed"), on="phase", how="left")
           .with_columns(share=_share_expr("ns", "attributed"))
           .group_by("phase", maintain_order=True)
           .agg(top_busy=pl.struct("category", pl.col("ns").cast(pl.Int64), "share")))
    inst = pl.col("instances").fill_null(0)
    return (phases.with_columns(pl.col("phase").cast(pl.Utf8))
            .join(per, on="phase", how="left", maintain_order="left")
            .join(top, on="phase", how="left", maintain_order="left")
            .with_columns(pl.col("busy").fill_null(0), pl.col("idle").fill_null(0),
                          per_instance=pl.when(inst > 0).then((pl.col("attributed") / inst).round().cast(pl.Int64)),
                          share=(pl.col("attributed") / total).cast(pl.Float64) if total else
                          pl.lit(None, pl.Float64),
                          idle_share=_share_expr("idle", "attributed")))


def shown_phases(rows: pl.DataFrame, limit: int) -> pl.DataFrame:
    """The `limit` phases with the most attributed time (the table's first), then the pseudo-phases."""
    special = pl.col("phase").is_in(PSEUDO_PHASES)
    return pl.concat([rows.filter(~special).head(limit), rows.filter(special)])


def real_phases(rows: pl.DataFrame, n: int | None = None) -> pl.DataFrame:
    """The rows of a table by phase that are phases of the trace (no pseudo-phase), the first `n` of them."""
    out = rows.filter(~pl.col("phase").is_in(PSEUDO_PHASES))
    return out if n is None else out.head(n)


def totals(phases: pl.DataFrame, unattributed: pl.DataFrame, devices: pl.DataFrame) -> dict:
    """The analysis' sums (integer ns): attributed (every phase's, the cycle stream's time), gpu_busy (every
    phase's busy time), side_busy (every phase's work on side streams), outside_busy (the busy time of the pseudo-phases: GPU work no phase launched) and its
    share of gpu_busy; unattributed_ops and unattributed_ns (op time of the ops no range claims, every stream) and
    unattributed_attributed (the `(unattributed)` pseudo-phase's attributed time on the cycle stream) with its
    share of attributed; device_wall, device_busy (summed over the devices) and device_busy_share."""
    attributed = int(phases["attributed"].sum() or 0) if phases.height else 0
    busy = int(phases["gpu_busy"].sum() or 0) if phases.height else 0
    pseudo = phases.filter(pl.col("phase").is_in(PSEUDO_PHASES))
    outside = int(pseudo["gpu_busy"].sum() or 0) if pseudo.height else 0
    un = phases.filter(pl.col("phase") == UNATTRIBUTED)
    un_attr = int(un["attributed"].sum() or 0) if un.height else 0
    wall = int(devices["wall"].sum() or 0) if devices.height else 0
    dev_busy = int(devices["busy"].sum() or 0) if devices.height else 0
    side = int(phases["side_busy"].sum() or 0) if "side_busy" in phases.columns and phases.height else 0
    return {"attributed": attributed, "gpu_busy": busy, "side_busy": side, "outside_busy": outside, "outside_share": share(outside, busy),
            "unattributed_ops": int(unattributed["ops"].sum() or 0) if unattributed.height else 0,
            "unattributed_ns": int(unattributed["ns"].sum() or 0) if unattributed.height else 0,
            "unattributed_attributed": un_attr, "unattributed_share": share(un_attr, attributed) or 0.0,
            "device_wall": wall, "device_busy": dev_busy, "device_busy_share": share(dev_busy, wall)}


def with_shares(df: pl.DataFrame, **shares: tuple[str, str]) -> pl.DataFrame:
    """`df` with a share column per keyword: name=(part, whole) (null where the whole is 0)."""
    return df.with_columns(**{name: _share_expr(part, whole) for name, (part, whole) in shares.items()})


def streams(streams: pl.DataFrame) -> pl.DataFrame:
    """The streams with each one's busy_share and its idle kinds' shares of its own wall time."""
    return with_shares(streams, busy_share=("busy", "wall"), cpu_wait_share=("cpu_wait", "wall"),
                       launch_share=("launch", "wall"), idle_share=("idle", "wall"))


def launch(launch: pl.DataFrame) -> pl.DataFrame:
    """The launch table with queued_share: the launches made while the stream was still busy, of all."""
    return with_shares(launch, queued_share=("queued", "launches"))


def breakdown_summary(b) -> dict:
    """What is shown of a cycle breakdown `b` beyond its tables (integer ns, shares as fractions): max (the longest
    cycle), busy_ns_per_cycle (the GPU running ops, every phase's) and busy_share (of the mean cycle);
    unprofiled (whether any phase has the column without the profiler) with ratio (mean cycle over the unprofiled
    period), untimed_ns (the unprofiled period less its phases' events: time no event pair covers) and
    untimed_share (of that period); largest (the largest real phase: phase, share, and `unprofiled` whether the
    share is the one without the profiler, used where the events give it) and outside_share (the pseudo-phases'
    share of the cycle)."""
    ph = b.phases
    unprof = b.unprofiled_mean_ns is not None and bool(ph["unprofiled_ns_per_cycle"].is_not_null().any())
    traced = b.mean_ns is not None  # else a run without nsys: its events alone (breakdown.py `from_events`)
    busy = int(ph["busy_ns_per_cycle"].sum() or 0) if traced else None
    timed = int(ph["unprofiled_ns_per_cycle"].drop_nulls().sum() or 0)
    real = real_phases(ph)
    real_unprof = bool(real["unprofiled_share"].is_not_null().any())
    col = "unprofiled_share" if real_unprof else "share"
    ranked = real.with_columns(pl.col(col).fill_null(0.0).alias("_s")).sort(["_s"], descending=True,
                                                                          maintain_order=True)
    largest = None if ranked.is_empty() else {"phase": ranked["phase"][0], "share": float(ranked["_s"][0]),
                                              "unprofiled": real_unprof}
    pseudo = ph.filter(pl.col("phase").is_in(PSEUDO_PHASES))
    top = stats(b.per_cycle["ns"])["max"] if b.per_cycle is not None else None
    return {"max": top, "busy_ns_per_cycle": busy, "busy_share": share(busy, b.mean_ns), "unprofiled": unprof,
            "ratio": share(b.mean_ns, b.unprofiled_mean_ns) if unprof and traced else None,
            "untimed_ns": b.unprofiled_mean_ns - timed if unprof else None,
            "untimed_share": share(b.unprofiled_mean_ns - timed, b.unprofiled_mean_ns) if unprof else None,
            "largest": largest, "outside_share": (float(pseudo["share"].fill_null(0.0).sum()) if pseudo.height else 0.0) if traced else None}


def inflation_rows(inflation: pl.DataFrame) -> pl.DataFrame:
    """The cross-check's inflation table with inflation_pct: (ratio - 1) in % (how much longer under the
    profiler)."""
    return inflation.with_columns(inflation_pct=(pl.col("ratio") - 1) * 100)


def most_waited_for(stragglers: pl.DataFrame) -> dict | None:
    """The rank whose lateness made the others wait longest (the stragglers' row with the most `caused`)."""
    if stragglers.is_empty():
        return None
    return stragglers.sort(["caused", "rank"], descending=[True, False]).row(0, named=True)


def ranks_view(ranks: pl.DataFrame, comm_kinds: pl.DataFrame, collectives: pl.DataFrame) -> dict:
    """The per-rank tables with their shares: ranks (busy_share of wall), comm_kinds (wait_share of comm),
    collectives (wait_share of ns), and instances: the matched collectives' instances, summed."""
    return {"ranks": with_shares(ranks, busy_share=("busy", "wall")),
            "comm_kinds": with_shares(comm_kinds, wait_share=("wait", "comm")),
            "collectives": with_shares(collectives, wait_share=("wait", "ns")),
            "instances": int(collectives["instances"].sum() or 0) if collectives.height else 0}


def runs_view(listed: pl.DataFrame) -> pl.DataFrame:
    """The results store's run list with per_cycle_ns: each run's attributed ns per decode cycle (rounded; null
    without cycles)."""
    return listed.with_columns(per_cycle_ns=pl.when(pl.col("cycles") > 0).then(
        (pl.col("cycle_attributed_ns") / pl.col("cycles")).round().cast(pl.Int64)))


def traces_view(summary: pl.DataFrame) -> pl.DataFrame:
    """Several traces' summary rows with busy_share: busy over wall, summed over each trace's streams."""
    return with_shares(summary, busy_share=("busy", "wall"))


def category_totals(categories: pl.DataFrame) -> dict[str, int]:
    """Each category's ns over every phase."""
    return dict(categories.group_by("category").agg(ns=pl.col("ns").sum()).iter_rows())


# ----------------------------------------------------------------------------------------------------------------
# The report's timeline: its windows (what the cycle selector steps through), which of them are embedded op by op,
# and the rows, ops, launch calls, idle segments, blocks and ranges it draws (the HTML report encodes these).


def timeline_windows(cycles: pl.DataFrame, segments: pl.DataFrame, ops_count: int, t0: int, t_end: int,
                     slice_ops: int) -> pl.DataFrame:
    """The windows covering the capture: w, start, end, label, kind (`cycle`, `before`, `after`; without cycles
    time slices of about `slice_ops` ops, kind `slice`)."""
    if cycles.height:
        byi = cycles.group_by("index").agg(start=pl.col("start").min(), cycles=pl.col("cycle")).sort("index")
        starts = byi["start"].to_list()
        last_ids = byi["cycles"][-1].to_list()
        last_end = segments.filter(pl.col("cycle").is_in(last_ids))["end"].max()
        last_end = max(int(last_end or 0), int(cycles.filter(pl.col("cycle").is_in(last_ids))["end"].max()))
        ends = starts[1:] + [last_end]
        rows = [(s, e, f"cycle {i}", "cycle") for i, s, e in zip(byi["index"].to_list(), starts, ends)]
        if starts[0] > t0:
            rows.insert(0, (t0, starts[0], "before cycle 0", "before"))
        if t_end > last_end:
            rows.append((last_end, t_end, "after the last cycle", "after"))
    else:
        n = max(1, min(500, math.ceil(ops_count / slice_ops)))
        width = max(1, math.ceil((t_end - t0) / n))
        rows = [(t0 + i * width, min(t_end, t0 + (i + 1) * width), f"slice {i}", "slice") for i in range(n)]
    return pl.DataFrame(rows, schema={"start": pl.Int64, "end": pl.Int64, "label": pl.Utf8, "kind": pl.Utf8},
                        orient="row").with_row_index("w").with_columns(pl.col("w").cast(pl.Int64))


def in_window(df: pl.DataFrame, windows: pl.DataFrame, col: str = "start") -> pl.DataFrame:
    """`df` (sorted by `col`) with `w`: the window whose start is the last one at or before df[col]."""
    return df.sort(col).join_asof(windows.select("w", w_start="start"), left_on=col, right_on="w_start",
                                  strategy="backward").with_columns(pl.col("w").fill_null(0)).drop("w_start")


def window_picks(windows: pl.DataFrame) -> dict[str, int]:
    """The cycle windows the report offers to jump to, by window length (start to the next cycle's start; ties by
    window): slowest, p90, median, fastest (the window nearest the one quantile rule's position, round(q (n - 1))
    of the sorted lengths: a pick must be a window, where the rule's value can fall between two), first, last;
    {} without cycle windows."""
    cyc = windows.filter(pl.col("kind") == "cycle").with_columns(dur=pl.col("end") - pl.col("start"))
    if cyc.is_empty():
        return {}
    by_dur = cyc.sort(["dur", "w"])["w"].to_list()
    at = lambda q: int(by_dur[int(round(q * (len(by_dur) - 1)))])  # noqa: E731
    return {"slowest": at(1.0), "p90": at(0.9), "median": at(0.5), "fastest": at(0.0),
            "first": int(cyc["w"][0]), "last": int(cyc["w"][-1])}


def detail_windows(windows: pl.DataFrame, counts: dict[int, int], budget: int) -> set[int]:
    """The windows embedded op by op: all when their ops (`counts`: window -> ops) fit the budget, else, in this
    order while they fit: the first five cycles, the three slowest, then the fastest, the median and the p90 cycle
    (window_picks), then evenly spaced others, coarse to fine."""
    total = sum(counts.values())
    ws = windows["w"].to_list()
    if total <= budget:
        return set(ws)
    cyc = windows.filter(pl.col("kind") == "cycle").with_columns(dur=pl.col("end") - pl.col("start"))
    order: list[int] = []
    order += cyc["w"].head(5).to_list() if cyc.height else ws[:5]
    if cyc.height:
        picks = window_picks(windows)
        order += cyc.sort(["dur", "w"])["w"].tail(3).reverse().to_list()  # the slowest
        order += [picks["fastest"], picks["median"], picks["p90"]]
    step = len(ws)
    while step >= 1:
        order += ws[::step]
        step //= 2
    chosen: set[int] = set()
    used = 0
    for w in order:
        if w in chosen:
            continue
        n = counts.get(w, 0)
        if used + n <= budget:
            chosen.add(w)
            used += n
    return chosen


OP_COLUMNS = ("start", "end", "device", "stream", "pid", "correlation", "name", "short_name", "phase", "category",
              "kind", "launch_start", "launch_end", "launch_tid", "launch_name")


def timeline(ops: pl.DataFrame, segments: pl.DataFrame, ranges: pl.DataFrame, cycles: pl.DataFrame, t0: int,
             detail_ops: int, blocks: int, max_ranges: int, slice_ops: int, max_lanes: int) -> dict:
    """What the report's timeline draws (integer ns on the trace's clock): t_end; windows (timeline_windows, with
    ops: the ops starting in each, and detail: embedded op by op, at most `detail_ops` ops: detail_windows);
    cpu_rows (pid, tid, row, range_lanes: nesting depths drawn, at most `max_lanes`, api: it made launch calls),
    then gpu_rows (device, stream, row) after them; the detailed windows' ops (with i, their order, and row),
    launches (their launch calls: pid, tid, correlation, start, end, name, first_op, ops, row), idle (their idle
    segments, with row); blocks (timeline_blocks of the other windows, at most `blocks`); ranges (those of the
    detailed windows, then the shallow ones of the rest while `max_ranges` allows, with row); picks
    (window_picks)."""
    t_end = int(max(ops["end"].max(), ranges["end"].max() if ranges.height else 0))
    windows = timeline_windows(cycles, segments, ops.height, t0, t_end, slice_ops)
    o = in_window(ops.select(*OP_COLUMNS), windows)
    counts = dict(o.group_by("w").agg(n=pl.len()).iter_rows())
    detail = detail_windows(windows, counts, detail_ops)
    in_detail = pl.col("w").is_in(sorted(detail))
    d_ops = o.filter(in_detail).sort("start").with_row_index("i")
    # The launch calls of the detailed ops (a CUDA-graph launch once), with the first op each launched.
    launches = d_ops.filter(pl.col("launch_start").is_not_null()).group_by("pid", "launch_tid", "correlation").agg(
        start=pl.col("launch_start").first(), end=pl.col("launch_end").first(), name=pl.col("launch_name").first(),
        first_op=pl.col("i").min(), ops=pl.len()).rename({"launch_tid": "tid"}).sort("start")
    # Rows: CPU threads (that hold ranges or launched ops), then GPU streams.
    keys = {"pid": pl.Int64, "tid": pl.Int64}
    threads = pl.concat([ranges.select("pid", "tid").cast(keys), launches.select("pid", "tid").cast(keys)]
                        ).unique().sort("pid", "tid").with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))
    depth = (ranges.group_by("pid", "tid").agg(d=pl.col("depth").max(), has=pl.lit(True))
             .cast({"pid": pl.Int64, "tid": pl.Int64}) if ranges.height else
             pl.DataFrame(schema={"pid": pl.Int64, "tid": pl.Int64, "d": pl.Int64, "has": pl.Boolean}))
    api = launches.select(pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64)).unique().with_columns(
        api=pl.lit(True))
    cpu_rows = (threads.join(depth, on=["pid", "tid"], how="left", maintain_order="left")
                .join(api, on=["pid", "tid"], how="left", maintain_order="left")
                .with_columns(range_lanes=pl.when(pl.col("has").is_null()).then(0).otherwise(
                    pl.min_horizontal(pl.lit(max_lanes), pl.col("d").fill_null(0) + 1)).cast(pl.Int64),
                    api=pl.col("api").fill_null(False))
                .select("pid", "tid", "row", "range_lanes", "api"))
    gpu_rows = ops.select("device", "stream").unique().sort("device", "stream").with_row_index("row").with_columns(
        (pl.col("row").cast(pl.Int64) + cpu_rows.height).alias("row"))
    gpu_key = gpu_rows.select(pl.col("device").cast(pl.Int64), pl.col("stream").cast(pl.Int64), "row")
    cpu_key = cpu_rows.select("pid", "tid", "row")
    d_ops = d_ops.join(gpu_key, on=["device", "stream"], how="left").sort("i")
    launches = launches.with_columns(pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64)).join(
        cpu_key, on=["pid", "tid"], how="left").sort("start")
    sg = in_window(segments.select("device", "stream", "start", "end", "phase", "category"), windows)
    idle = sg.filter(in_detail & pl.col("category").is_in(IDLE_CATEGORIES)).join(
        gpu_key, on=["device", "stream"], how="left").sort("start")
    bins = timeline_blocks(sg.filter(~in_detail), gpu_key, t0, blocks)
    kept = None
    if ranges.height:
        rg = in_window(ranges.select("pid", "tid", "start", "end", "name", "domain", "depth", "phase"), windows)
        kept = rg.filter(in_detail)
        rest = rg.filter(~in_detail)
        for max_depth in (1, 0):
            if kept.height + rest.filter(pl.col("depth") <= max_depth).height <= max_ranges:
                kept = pl.concat([kept, rest.filter(pl.col("depth") <= max_depth)])
                break
        kept = kept.head(max_ranges).sort("start").with_columns(pl.col("pid").cast(pl.Int64),
                                                              pl.col("tid").cast(pl.Int64))
        kept = kept.join(cpu_key, on=["pid", "tid"], how="left").sort("start")
    windows = windows.with_columns(ops=pl.col("w").replace_strict(counts, default=0, return_dtype=pl.Int64),
                                   detail=pl.col("w").is_in(sorted(detail)))
    return {"t_end": t_end, "windows": windows, "picks": window_picks(windows), "cpu_rows": cpu_rows, "gpu_rows": gpu_rows, "ops": d_ops,
            "launches": launches, "idle": idle, "blocks": bins, "ranges": kept}


def kernels(kernels: pl.DataFrame, phases: pl.DataFrame) -> pl.DataFrame:
    """The top kernels per phase with phase_busy (the phase's GPU busy time in the kernels' own scope: every rank
    and stream, `phases` being the whole attribution's phase table) and busy_share (the kernel's GPU time over
    it)."""
    busy = phases.select(pl.col("phase").cast(pl.Utf8), phase_busy=pl.col("gpu_busy").cast(pl.Int64))
    return (kernels.with_columns(pl.col("phase").cast(pl.Utf8)).join(busy, on="phase", how="left",
                                                                      maintain_order="left")
            .with_columns(busy_share=_share_expr("ns", "phase_busy")))


def kernels_of(kernels: pl.DataFrame, phases: pl.DataFrame) -> pl.DataFrame:
    """The kernel rows of the phases in `phases` (its `phase` column), in the kernel table's order."""
    keep = phases.select(_phase=pl.col("phase").cast(pl.Utf8))
    return kernels.with_columns(_phase=pl.col("phase").cast(pl.Utf8)).join(
        keep, on="_phase", how="semi", maintain_order="left").drop("_phase")


def of_rank(df: pl.DataFrame, rank: int) -> pl.DataFrame:
    """The rows of one rank of a per-rank table (derived/ranks.py), without the `rank` column."""
    return df.filter(pl.col("rank") == rank).drop("rank")


# ----------------------------------------------------------------------------------------------------------------
# The report's charts: which phases they draw by name, the bars of the per-phase chart, the per-cycle series of
# the phases left out, and the cycle-time histogram's range.

CHART_PHASES = 12  # phases a chart draws by name (the largest); the rest are stacked as "other phases"


def chart_phases(rows: pl.DataFrame, limit: int = CHART_PHASES) -> dict[str, list[str]]:
    """{"shown": the `limit` largest real phases (table order), then the pseudo-phases; "hidden": the other real
    phases, which the charts stack as one}."""
    real = real_phases(rows)["phase"].to_list()
    pseudo = rows.filter(pl.col("phase").is_in(PSEUDO_PHASES))["phase"].to_list()
    return {"shown": real[:limit] + pseudo, "hidden": real[limit:]}


def phase_bars(rows: pl.DataFrame, categories: pl.DataFrame, split: dict[str, list[str]]) -> list[dict]:
    """The per-phase chart's bars: one per shown phase, then one for the hidden ones together (members): name,
    members, instances, attributed, per_instance (attributed ns per instance, rounded; None without instances),
    and per category: ns, share (of the bar's attributed time; None when it has none) and per-instance ns."""
    cats = categories.select(pl.col("phase").cast(pl.Utf8), pl.col("category").cast(pl.Utf8), "ns")
    by = {}
    for phase, cat, ns in cats.iter_rows():
        by.setdefault(phase, {})[cat] = by.get(phase, {}).get(cat, 0) + int(ns)
    info = {r["phase"]: r for r in rows.select("phase", "instances", "attributed").iter_rows(named=True)}
    groups = [(p, [p]) for p in split["shown"]]
    if split["hidden"]:
        groups.append((None, split["hidden"]))
    out = []
    for name, members in groups:
        inst = int(sum(info[m]["instances"] or 0 for m in members))
        attributed = int(sum(info[m]["attributed"] or 0 for m in members))
        ns = {}
        for m in members:
            for c, v in by.get(m, {}).items():
                ns[c] = ns.get(c, 0) + v
        out.append({"name": name, "members": members if name is None else [name], "instances": inst,
                    "attributed": attributed, "per_instance": int(round(attributed / inst)) if inst else None,
                    "ns": ns, "share": {c: share(v, attributed) for c, v in ns.items()},
                    "per_instance_ns": {c: int(round(v / inst)) for c, v in ns.items()} if inst else {}})
    return out


def hidden_sum(table: pl.DataFrame, hidden: list[str]) -> pl.Series:
    """Per row of the per-cycle table, the hidden phases' ns summed (what the per-cycle chart stacks as one)."""
    cols = [c for c in hidden if c in table.columns]
    return table.select(pl.sum_horizontal(cols) if cols else pl.lit(0, pl.Int64)).to_series()


def cycle_hist_range(table: pl.DataFrame, st: dict[str, dict]) -> dict:
    """The cycle-time histogram's range (ns): lo, hi (the larger p99 of the cycles' `total` and `cpu` x 1.25),
    and, when the longest cycle is more than twice that (a prefill inside a cycle, say, would squeeze every other
    cycle into one bin), clip: True, above (how many cycle times, of both series, lie above hi) and max."""
    t, c = st["total"], st["cpu"]
    if t["n"] == 0:
        return {"clip": False, "lo": None, "hi": None, "above": 0, "max": None}
    hi = max(t["p99"], c["p99"]) * 1.25
    lo = min(t["min"], c["min"])
    top = max(t["max"], c["max"])
    clip = top > 2 * hi
    above = int((table["total"] > hi).sum() + (table["cpu"] > hi).sum()) if clip else 0
    return {"clip": clip, "lo": int(max(0, lo - (hi - lo) * 0.05)), "hi": int(round(hi)), "above": above,
            "max": int(top)}
