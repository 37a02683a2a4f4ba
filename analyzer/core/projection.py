"""Projection: which CPU range was the innermost one open when each GPU op was launched.

A GPU op belongs to the innermost range on the launching thread that encloses its launching API
call (joined by correlation id); CUDA-graph nodes carry the correlation id of the graph launch.
This is NVIDIA's `nvtx_gpu_proj_trace` containment rule (range.start <= api.start and
range.end >= api.end, same thread), made innermost. Everything here is vectorised polars: the
only Python loops run over nesting depth levels, never over rows.
"""

from __future__ import annotations

import polars as pl

from specprof.analyzer.model.columns import collect, distinct, first_distinct, lookup_rows, per_distinct
from specprof.analyzer.model.labels import IN_CYCLE, UNATTRIBUTED

I64_MIN = -(2**63)

# torch.autograd.profiler.emit_nvtx names ranges "aten::mm, seq = 12, op_id = 34, sizes = [...]", and
# torch.profiler numbers its steps "ProfilerStep#550": one phase per operator or step, not per call.
_PER_CALL_SUFFIX = r",\s*(seq|op_id|sizes|input_op_ids|stream)\s*=.*$|#\d+$"


def phase_names(ranges: pl.DataFrame) -> pl.DataFrame:
    """Add `phase` (dictionary-encoded, as `name` is): the range name with per-call suffixes (emit_nvtx's op
    ids, step numbers) removed, computed once per distinct name."""
    phase = per_distinct(ranges.get_column("name").cast(pl.Categorical), lambda t: t.str.replace(_PER_CALL_SUFFIX, ""))
    return ranges.with_columns(phase.alias("phase"))


def phase_of_ops(grouping: tuple[str, ...]) -> pl.Expr:
    """Over ranges (with `phase`): the phase an op gets when the range is its innermost one: the
    range's phase, or "(cycle)" for a grouping range."""
    return pl.when(pl.col("name").is_in(grouping)).then(pl.lit(IN_CYCLE)).otherwise(pl.col("phase"))


def nest(ranges: pl.DataFrame) -> pl.DataFrame:
    """Add `depth` (0 = outermost) and `parent` (range_id or null) to ranges, per thread.

    Ranges on one thread from push/pop nest properly; `range_id` must follow the order
    (tid, start, -end), as the readers assign it.
    """
    if ranges.is_empty():
        return ranges.with_columns(depth=pl.lit(0, pl.Int64), parent=pl.lit(None, pl.Int64))
    zero = pl.col("start") == pl.col("end")
    starts = ranges.select("tid", "range_id", t=pl.col("start"), key=pl.lit(1, pl.Int64), delta=pl.lit(1, pl.Int64))
    ends = ranges.select(
        "tid", "range_id", t=pl.col("end"),
        # A range that ends where another starts is its sibling: ends sort first. A zero-length
        # range's end sorts after its own start.
        key=pl.when(zero).then(2).otherwise(0).cast(pl.Int64), delta=pl.lit(-1, pl.Int64),
    )
    events = pl.concat([starts, ends]).sort("tid", "t", "key", "range_id")
    # Every range adds one start and one end, so each thread's events sum to 0: the running sum over all
    # threads (sorted by thread) is each thread's own (no window per thread).
    events = events.with_columns(open=pl.col("delta").cum_sum())
    depth = events.filter(pl.col("delta") == 1).select("range_id", depth=pl.col("open") - 1)
    out = ranges.sort("range_id")
    out = out.with_columns(depth=lookup(depth.sort("range_id"), out.get_column("range_id"), "depth"))
    # Parent: the latest range (in start order) one level up on the same thread.
    left = out.select("range_id", "tid", key=pl.col("depth") - 1)
    right = out.select(parent="range_id", tid="tid", key="depth")
    parents = left.join_asof(right, left_on="range_id", right_on="parent", by=["tid", "key"],
                             strategy="backward", allow_exact_matches=False, check_sortedness=False)
    return out.with_columns(parents.get_column("parent"))


def crossing_note(ranges: pl.DataFrame) -> str | None:
    """A note on the ranges (with depth and parent: `nest`) that end after the range they began in: ranges on
    one thread nest (push/pop), so these times are damaged or the ranges are of another kind, and which range an
    op launched after the outer one ended belongs to is a guess (the outer one's parent). None when all nest."""
    if ranges.is_empty():
        return None
    parent_end = lookup(ranges, ranges.get_column("parent"), "end")
    crossing = int(((ranges.get_column("end") > parent_end) & parent_end.is_not_null()).sum())
    if not crossing:
        return None
    return (f"{crossing:,} ranges end after the range they begin in, on its thread: ranges on one thread nest, so "
            "their times are damaged (or they are start/end ranges, which need not nest); the ops launched where "
            "they cross are attributed to the enclosing range as if they nested")


def timeline(ranges: pl.DataFrame) -> pl.DataFrame:
    """Per thread, the innermost open range after each range boundary: (tid, t, state, row).

    `state` is a range_id or null (no range open). Each thread starts with a sentinel row at
    the smallest time, so an as-of lookup always finds a row. Rows are sorted by (tid, t) and
    `row` is the position, so consecutive rows of a thread are consecutive positions.
    """
    tids = ranges.select("tid").unique()
    sentinel = tids.select("tid", t=pl.lit(I64_MIN, pl.Int64), state=pl.lit(None, pl.Int64),
                           order=pl.lit(0, pl.Int64))
    if ranges.is_empty():
        events = sentinel
    else:
        # At one instant: ends (innermost first) then starts (outermost first); the last wins.
        starts = ranges.select("tid", t=pl.col("start"), state=pl.col("range_id"),
                               order=2 * 10**6 + pl.col("depth"))
        ends = ranges.select("tid", t=pl.col("end"), state=pl.col("parent"),
                             order=10**6 - pl.col("depth"))
        events = pl.concat([sentinel, starts, ends]).sort("tid", "t", "order")
        # The last event of each (tid, t): sorted, so the one whose next row differs (no hash table).
        last = pl.col("tid").ne_missing(pl.col("tid").shift(-1)) | pl.col("t").ne_missing(pl.col("t").shift(-1))
        events = events.filter(last)
    return events.select("tid", "t", "state").with_row_index("row").with_columns(
        pl.col("row").cast(pl.Int64)
    )


def cycle_of_ranges(ranges: pl.DataFrame, grouping: tuple[str, ...]) -> pl.DataFrame:
    """For each range, its cycle: (range_id, cycle).

    A cycle lasts from the start of its grouping range to the start of the next one on the same
    thread, so a range that follows a cycle range (the host read of that cycle's accept counts, say)
    belongs to it; ranges before the first cycle belong to none.
    """
    cycles = ranges.filter(pl.col("name").is_in(grouping)).select(
        "tid", cycle="range_id", c_start="start"
    ).sort("c_start")
    probe = ranges.select("range_id", "tid", "start").sort("start")
    hit = probe.join_asof(cycles, left_on="start", right_on="c_start", by="tid", strategy="backward",
                          check_sortedness=False)
    return hit.select("range_id", "cycle")


def innermost_at_launch(api: pl.DataFrame, ranges: pl.DataFrame, tl: pl.DataFrame) -> pl.DataFrame:
    """For each API call, the innermost range on its thread that encloses the whole call.

    Returns api (in start order) with a `range_id` column (null when no range encloses it).
    """
    if api.is_empty():
        return api.with_columns(range_id=pl.lit(None, pl.Int64))
    probe = api if _ascending(api, "start") else api.sort("start")
    look = tl.select("tid", "t", range_id="state").sort("t")
    found = probe.join_asof(look, left_on="start", right_on="t", by="tid", strategy="backward",
                            check_sortedness=False)
    found = found.drop("t")
    if ranges.is_empty():
        return found
    # The innermost range open at the call's start may end before the call does (the call
    # straddles its end): then the enclosing range is an ancestor. Walk up, level by level, only
    # for those calls (rare).
    r_end = lookup(ranges, found.get_column("range_id"), "end")
    bad = (found.get_column("range_id").is_not_null() & (r_end < found.get_column("end"))).fill_null(False)
    if not bad.any():
        return found
    idx = bad.arg_true()
    walk = found.select("end", "range_id").filter(bad)
    for _ in range(int(ranges["depth"].max() or 0) + 1):
        ends = lookup(ranges, walk.get_column("range_id"), "end")
        wrong = (walk.get_column("range_id").is_not_null() & (ends < walk.get_column("end"))).fill_null(False)
        if not wrong.any():
            break
        parent = lookup(ranges, walk.get_column("range_id"), "parent")
        walk = walk.with_columns(range_id=pl.when(wrong).then(parent).otherwise(pl.col("range_id")))
    return found.with_columns(found.get_column("range_id").scatter(idx, walk.get_column("range_id")))


def _launch_rows(ops: pl.DataFrame, api: pl.DataFrame) -> pl.Series | None:
    """For each op, the row of `api` with its (pid, correlation), or null.

    Processes are numbered and packed with the correlation id into one integer key. When the keys
    are dense enough, a table indexed by key gives each op's row in O(1); otherwise a hash join on
    the one packed key (in C where it is built; else polars', faster on one key than on two columns).
    None when correlation ids do not fit in 40 bits (no export seen has that); the caller then joins
    on the two columns."""
    if api.is_empty():
        return pl.Series("row", [None] * ops.height, pl.UInt32)
    lo, hi = api.select(lo=pl.col("correlation").min(), hi=pl.col("correlation").max()).row(0)
    if lo is None or lo < 0 or hi >= 1 << 40:
        return None
    pids = pl.concat([distinct(api.get_column("pid")), distinct(ops.get_column("pid"))]).unique().drop_nulls().sort()
    dense = (hi + 1) * max(1, pids.len()) <= max(1 << 24, 4 * (ops.height + api.height))
    stride = hi + 1 if dense else 1 << 40
    slots = pl.int_range(pids.len(), eager=True).cast(pl.Int64) * stride

    def keys(df):
        # A dictionary lookup of the (few) processes, not a join over the rows; one fused expression.
        slot = pl.col("pid").replace_strict(pids, slots, default=None, return_dtype=pl.Int64)
        c = pl.col("correlation")
        return df.select(k=pl.when((c >= 0) & (c <= hi)).then(slot + c)).get_column("k")

    rows = pl.int_range(api.height, eager=True).cast(pl.UInt32)
    at = keys(ops)
    if dense:
        table = pl.Series("row", [None], pl.UInt32).extend_constant(None, stride * max(1, pids.len()) - 1)
        table = table.scatter(keys(api), rows)
        return table.gather(at.fill_null(0)).zip_with(at.is_not_null(), pl.Series([None], dtype=pl.UInt32))
    built = keys(api)
    found = lookup_rows(built, at)  # one pass in C where it is built
    if found is not None:
        return found
    found = pl.DataFrame({"k": at}).join(pl.DataFrame({"k": built, "row": rows}), on="k", how="left",
                                         maintain_order="left")
    return found.get_column("row")


def _ascending(df: pl.DataFrame, col: str) -> bool:
    return df.height < 2 or bool(df.select((pl.col(col) >= pl.col(col).shift(1)).fill_null(True).all()).item())


def lookup(ranges: pl.DataFrame, ids: pl.Series, col: str) -> pl.Series:
    """ranges[col] for each range id in `ids` (null for a null or unknown id), in the order of `ids`.

    The readers number ranges 0..n-1 in table order: then this is a gather, not a join."""
    dense = ranges.height and ranges.get_column("range_id").is_sorted() and \
        ranges.get_column("range_id")[0] == 0 and ranges.get_column("range_id")[-1] == ranges.height - 1
    if dense:
        return ranges.get_column(col).gather(ids)
    return pl.DataFrame({"range_id": ids}).join(ranges.select("range_id", col), on="range_id", how="left",
                                                maintain_order="left").get_column(col)


def project(trace, grouping: tuple[str, ...] = ("cycle",)) -> dict[str, pl.DataFrame]:
    """Project ranges onto ops. Returns the tables the accounting and summaries need.

    - ops: every op (in the trace's order) with launch_start/launch_end/launch_tid/launch_name (from
      its API call) and launch_first (the op is its launch's first; absent when the launch calls were
      matched by a join), range_id (the innermost enclosing range), cycle, `unattributed` (null,
      "no_launch_record" or "no_enclosing_range") and phase.
    - ranges: ranges with depth, parent and cycle.
    - timeline: the per-thread innermost-range timeline (see `timeline`).
    """
    ranges = phase_names(nest(trace.ranges))
    cyc = cycle_of_ranges(ranges, grouping)
    ranges = ranges.join(cyc, on="range_id", how="left").sort("range_id")
    tl = timeline(ranges)
    api = innermost_at_launch(trace.api, ranges, tl)

    # Each op's launch call (in the ops' order); the new columns are added to the ops, whose own
    # columns are not copied.
    calls = api.select(launch_start="start", launch_end="end", launch_tid="tid", launch_name="name",
                       range_id="range_id")
    at = _launch_rows(trace.ops, api)
    if at is not None:
        launch = calls.select(pl.all().gather(at)) if calls.height else pl.DataFrame(
            {c: pl.Series(c, [None] * trace.ops.height, dt) for c, dt in calls.schema.items()})
        # The first op (in start order) of each launch call: a launch of a CUDA graph has many ops.
        launch = launch.with_columns(
            launch_first=first_distinct(pl.DataFrame({"row": at}), ["row"]) & at.is_not_null())
    else:
        launch = trace.ops.select("pid", "correlation").join(
            pl.concat([api.select("pid", "correlation"), calls], how="horizontal"),
            on=["pid", "correlation"], how="left", maintain_order="left",
        ).drop("pid", "correlation")
    # Computed once per range and dictionary-encoded, then looked up per op.
    names = ranges.select("range_id", "cycle", op_phase=phase_of_ops(grouping).cast(pl.Categorical))
    rid = launch.get_column("range_id")
    cat = pl.Categorical  # literals typed as categoricals: no string column of all the ops' length
    reason = (pl.when(pl.col("launch_start").is_null()).then(pl.lit("no_launch_record", dtype=cat))
              .when(pl.col("range_id").is_null()).then(pl.lit("no_enclosing_range", dtype=cat))
              .otherwise(pl.lit(None, dtype=cat)))
    launch = launch.with_columns(
        cycle=lookup(names, rid, "cycle"),
        unattributed=reason,
        phase=lookup(names, rid, "op_phase").fill_null(pl.lit(UNATTRIBUTED).cast(pl.Categorical)),
    )
    ops = trace.ops.with_columns(launch)
    return {"ops": ops, "ranges": ranges, "timeline": tl}


def range_projection(ranges: pl.DataFrame, ops: pl.DataFrame, scanned: pl.DataFrame | None = None,
                     where: pl.Expr | None = None) -> pl.DataFrame:
    """Per range instance, the GPU projection as NVIDIA defines it (nested ranges included).

    Columns: range_id, gpu_start, gpu_end, gpu_ops (op rows), gpu_launches (distinct
    correlation ids). A range with no ops has null gpu_start/gpu_end and zero counts. `scanned`: each
    range's own ops' figures from `accounting.range_scan(ops)`, when the caller has them; `where`: of the
    ops, only those it selects (selected in place: no copy).
    """
    # An op's range is its launch call's, so a range's distinct correlation ids are its launches: counted
    # by the ops that begin a launch (`launch_first`, from the projection) where there, a sum instead of a
    # distinct count per range.
    launches = pl.col("launch_first").sum() if "launch_first" in ops.columns else pl.col("correlation").n_unique()
    own = (
        ops.lazy().filter(pl.col("range_id").is_not_null() & (True if where is None else where))
        .group_by("range_id")
        .agg(gpu_start=pl.col("start").min(), gpu_end=pl.col("end").max(),
             gpu_ops=pl.len().cast(pl.Int64), gpu_launches=launches.cast(pl.Int64))
        .pipe(collect)
    ) if scanned is None else scanned.filter(pl.col("range_id").is_not_null()).select(
        "range_id", "gpu_start", "gpu_end", "gpu_ops", "gpu_launches")
    stats = ranges.select("range_id", "parent", "depth").join(own, on="range_id", how="left").with_columns(
        pl.col("gpu_ops").fill_null(0), pl.col("gpu_launches").fill_null(0)
    )
    if stats.is_empty():
        return stats.select("range_id", "gpu_start", "gpu_end", "gpu_ops", "gpu_launches")
    # Every op has exactly one innermost range, so children's totals add up into parents.
    for depth in range(int(stats["depth"].max()), 0, -1):
        up = (
            stats.filter((pl.col("depth") == depth) & (pl.col("gpu_ops") > 0))
            .group_by("parent")
            .agg(c_start=pl.col("gpu_start").min(), c_end=pl.col("gpu_end").max(),
                 c_ops=pl.col("gpu_ops").sum(), c_launches=pl.col("gpu_launches").sum())
            .rename({"parent": "range_id"})
        )
        if up.is_empty():
            continue
        stats = stats.join(up, on="range_id", how="left").with_columns(
            gpu_start=pl.min_horizontal("gpu_start", "c_start"),
            gpu_end=pl.max_horizontal("gpu_end", "c_end"),
            gpu_ops=pl.col("gpu_ops") + pl.col("c_ops").fill_null(0),
            gpu_launches=pl.col("gpu_launches") + pl.col("c_launches").fill_null(0),
        ).drop("c_start", "c_end", "c_ops", "c_launches")
    return stats.select("range_id", "gpu_start", "gpu_end", "gpu_ops", "gpu_launches").sort("range_id")
