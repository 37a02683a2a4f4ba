"""Time accounting: tile every GPU stream's timeline, charging each nanosecond exactly once.

Between a stream's first op start and last op end, every instant is one of:
- busy: an op runs; charged to the op's phase and category (ops that overlap on one stream are
  clipped so that no instant counts twice);
- cpu_wait: the stream is idle and the op that comes next had not been launched yet (its launch
  API call had not begun): the GPU waited for the CPU. Charged to the phase whose range was
  innermost-open on the launching thread at that instant (split at range boundaries); where only
  a grouping range (cycle) or none was open, to the next op's phase;
- launch: idle after the next op's launch call began (launch latency, or a dependency inside a
  CUDA graph): charged to the next op's phase;
- idle: idle before an op whose launch is not in the capture (no way to split the gap).

So over all phases the segments of one stream sum to its wall time.
"""

from __future__ import annotations

import polars as pl

from analyzer.projection import IN_CYCLE, UNATTRIBUTED

SEGMENT_SCHEMA = {
    "device": pl.Int64,
    "stream": pl.Int64,
    "start": pl.Int64,
    "end": pl.Int64,
    "phase": pl.Categorical,
    "category": pl.Categorical,
    "cycle": pl.Int64,
    "op_id": pl.Int64,  # the op the segment belongs to (busy) or precedes (idle kinds)
}

CPU_WAIT = "cpu_wait"
LAUNCH = "launch"
IDLE = "idle"
IDLE_CATEGORIES = (CPU_WAIT, LAUNCH, IDLE)


def segments(ops: pl.DataFrame, ranges: pl.DataFrame, tl: pl.DataFrame,
             grouping: tuple[str, ...] = ("cycle",)) -> pl.DataFrame:
    """Tile each (device, stream) timeline. `ops` must carry phase, category, cycle and launch_*."""
    if ops.is_empty():
        return pl.DataFrame(schema=SEGMENT_SCHEMA)
    o = ops.sort("device", "stream", "start", "end", "op_id").with_columns(
        prev_end=pl.col("end").cum_max().shift(1).over("device", "stream")
    )
    busy = o.select(
        "device", "stream", "phase", "category", "cycle", "op_id",
        start=pl.max_horizontal("start", pl.col("prev_end").fill_null(pl.col("start"))),
        end=pl.col("end"),
    ).filter(pl.col("end") > pl.col("start"))

    gaps = o.filter(pl.col("prev_end").is_not_null() & (pl.col("start") > pl.col("prev_end")))
    # The launch call's start, clamped into the gap, splits it.
    gaps = gaps.with_columns(
        split=pl.min_horizontal(pl.max_horizontal("launch_start", "prev_end"), "start")
    )
    unknown = gaps.filter(pl.col("launch_start").is_null()).select(
        "device", "stream", "phase", "cycle", "op_id",
        start="prev_end", end="start", category=pl.lit(IDLE),
    )
    known = gaps.filter(pl.col("launch_start").is_not_null())
    launch = known.filter(pl.col("start") > pl.col("split")).select(
        "device", "stream", "phase", "cycle", "op_id",
        start="split", end="start", category=pl.lit(LAUNCH),
    )
    waits = known.filter(pl.col("split") > pl.col("prev_end")).select(
        "device", "stream", "op_id", "launch_tid",
        op_phase="phase", op_cycle="cycle", a="prev_end", b="split",
    )
    cpu_wait = _split_by_open_range(waits, ranges, tl, grouping)
    parts = [busy, launch, unknown, cpu_wait]
    out = pl.concat([p.select(list(SEGMENT_SCHEMA)).cast(SEGMENT_SCHEMA) for p in parts])
    return out.sort("device", "stream", "start")


def _split_by_open_range(waits: pl.DataFrame, ranges: pl.DataFrame, tl: pl.DataFrame,
                         grouping: tuple[str, ...]) -> pl.DataFrame:
    """Split each cpu_wait interval [a, b) on thread launch_tid at the range boundaries inside it."""
    if waits.is_empty():
        return pl.DataFrame(schema=SEGMENT_SCHEMA)
    look = tl.select("tid", "t", "row").sort("t")
    w = waits.with_row_index("w").sort("a")
    w = w.join_asof(look.rename({"row": "first"}), left_on="a", right_on="t",
                    by_left="launch_tid", by_right="tid", strategy="backward",
                    check_sortedness=False).drop("t")
    w = w.sort("b").join_asof(look.rename({"row": "last"}), left_on="b", right_on="t",
                              by_left="launch_tid", by_right="tid", strategy="backward",
                              allow_exact_matches=False, check_sortedness=False).drop("t")
    # A thread with no ranges at all has no timeline rows: one piece, nothing open.
    w = w.with_columns(pl.col("first").fill_null(-1), pl.col("last").fill_null(-1))
    pieces = w.with_columns(row=pl.int_ranges("first", pl.col("last") + 1)).explode("row")
    pieces = pieces.with_columns(pl.col("row").fill_null(-1))
    rows = tl.select("row", "t", "state", t_next=pl.col("t").shift(-1).over("tid"))
    pieces = pieces.join(rows, on="row", how="left")
    pieces = pieces.with_columns(
        start=pl.max_horizontal("a", pl.col("t").fill_null(pl.col("a"))),
        end=pl.min_horizontal("b", pl.col("t_next").fill_null(pl.col("b"))),
    ).filter(pl.col("end") > pl.col("start"))
    info = ranges.select(state="range_id", s_name="phase", s_cycle="cycle")
    pieces = pieces.join(info, on="state", how="left")
    own = pl.col("s_name").is_null() | pl.col("s_name").is_in(grouping)
    pieces = pieces.with_columns(
        phase=pl.when(own).then(pl.col("op_phase").cast(pl.Utf8)).otherwise(pl.col("s_name")),
        # The cycle open at that instant: the grouping range itself, the cycle around the open
        # range (none when that range is outside every cycle), or, with nothing open, the next op's.
        cycle=pl.when(pl.col("s_name").is_in(grouping)).then(pl.col("state"))
        .when(pl.col("s_name").is_not_null()).then(pl.col("s_cycle"))
        .otherwise(pl.col("op_cycle")),
        category=pl.lit(CPU_WAIT),
    )
    return pieces.select(list(SEGMENT_SCHEMA))


def stream_walls(ops: pl.DataFrame) -> pl.DataFrame:
    """Per (device, stream): first op start, last op end and wall time."""
    return ops.group_by("device", "stream").agg(
        first=pl.col("start").min(), last=pl.col("end").max(), ops=pl.len()
    ).with_columns(wall=pl.col("last") - pl.col("first")).sort("device", "stream")


def union_length(df: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Length of the union of [start, end) intervals per group `by`: (by..., busy)."""
    if df.is_empty():
        return pl.DataFrame(schema={**{k: df.schema[k] for k in by}, "busy": pl.Int64})
    s = df.select(*by, "start", "end").sort(*by, "start").with_columns(
        prev=pl.col("end").cum_max().shift(1).over(by)
    )
    s = s.with_columns(
        piece=(pl.col("end") - pl.max_horizontal("start", pl.col("prev").fill_null(pl.col("start"))))
        .clip(lower_bound=0)
    )
    return s.group_by(by).agg(busy=pl.col("piece").sum())


__all__ = ["segments", "stream_walls", "union_length", "IDLE_CATEGORIES", "CPU_WAIT", "LAUNCH",
           "IDLE", "IN_CYCLE", "UNATTRIBUTED"]
