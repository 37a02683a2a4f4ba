"""Time accounting: segments tile every stream with no gap and no overlap, on real exports;
the splitting rules on synthetic tables for edge cases no capture shows (said per test)."""

from __future__ import annotations

import polars as pl
import pytest

from specprof.analyzer.core.accounting import cpu_waits, tile, with_prev_end
from specprof.analyzer.core.attribution import attribute
from specprof.analyzer.core.projection import nest, phase_names, timeline
from specprof.analyzer.model.labels import CPU_WAIT, IDLE, IN_CYCLE, LAUNCH, UNATTRIBUTED
from specprof.analyzer.readers.load import load_trace
from conftest import FIXTURES, capture_id, own_nsys, shared_nsys

# The project's own captures (nsys exports and the Kineto trace), then the third-party ones where they are.
CAPTURES = own_nsys() + [FIXTURES / "torch-k4" / "trace.json.gz"] + shared_nsys()


def assert_tiles(a):
    segs = a.segments.sort("device", "stream", "start")
    # No overlap, no gap: each segment starts where the previous one on its stream ended.
    gaps = segs.with_columns(prev=pl.col("end").shift(1).over("device", "stream")).filter(
        pl.col("prev").is_not_null() & (pl.col("prev") != pl.col("start")))
    assert gaps.is_empty()
    total = segs.group_by("device", "stream").agg(t=(pl.col("end") - pl.col("start")).sum())
    check = total.join(a.streams.select("device", "stream", "wall"), on=["device", "stream"])
    assert (check["t"] == check["wall"]).all()
    assert int(a.charges["ns"].sum()) == int(a.streams["wall"].sum())
    # The phases are charged on each rank's cycle stream: they sum to those streams' wall time.
    cycle = a.streams.filter(pl.col("role") == "cycle")
    assert int(a.phases["attributed"].sum()) == int(cycle["wall"].sum())


@pytest.mark.parametrize("path", CAPTURES, ids=capture_id)
def test_segments_tile_every_stream(path):
    a = attribute(load_trace(str(path)))
    assert_tiles(a)
    # Busy time equals the union of the ops' intervals per stream.
    busy = a.segments.filter(~pl.col("category").is_in([CPU_WAIT, LAUNCH, IDLE]))
    per_stream = busy.group_by("device", "stream").agg(b=(pl.col("end") - pl.col("start")).sum())
    check = per_stream.join(a.streams.select("device", "stream", "busy"), on=["device", "stream"])
    assert (check["b"] == check["busy"]).all()


def _synthetic(ops_rows, range_rows):
    """One stream, one thread. Synthetic: no capture has these exact overlaps and boundaries."""
    ranges = pl.DataFrame(range_rows, schema=["start", "end", "name"], orient="row").with_columns(
        pid=pl.lit(1, pl.Int64), tid=pl.lit(7, pl.Int64), domain=pl.lit("specprof"))
    ranges = ranges.sort("start", pl.col("end"), descending=[False, True]).with_row_index("range_id").with_columns(
        pl.col("range_id").cast(pl.Int64))
    ranges = phase_names(nest(ranges)).with_columns(cycle=pl.lit(None, pl.Int64))
    ops = pl.DataFrame(ops_rows, schema=["op_id", "start", "end", "launch_start", "phase"], orient="row").with_columns(
        device=pl.lit(0, pl.Int64), stream=pl.lit(1, pl.Int64), category=pl.lit("gemm"),
        cycle=pl.lit(None, pl.Int64), launch_tid=pl.lit(7, pl.Int64))
    ops = with_prev_end(ops)
    return tile(ops, cpu_waits(ops, ranges, timeline(ranges)))


def test_gap_splits_at_the_launch_call_and_at_range_boundaries():
    # draft [0, 50) on the CPU, then verify [50, 200). Op 0 (draft) runs [10, 20). Op 1 (verify)
    # is launched at 120 and runs [130, 140): the gap [20, 130) is cpu_wait [20, 120), split at
    # 50 between draft and verify, then launch [120, 130) for verify.
    segs = _synthetic([(0, 10, 20, 5, "draft"), (1, 130, 140, 120, "verify")],
                      [(0, 50, "draft"), (50, 200, "verify")])
    got = [(r["start"], r["end"], r["phase"], r["category"]) for r in segs.sort("start").iter_rows(named=True)]
    assert got == [(10, 20, "draft", "gemm"), (20, 50, "draft", CPU_WAIT), (50, 120, "verify", CPU_WAIT),
                   (120, 130, "verify", LAUNCH), (130, 140, "verify", "gemm")]


def test_wait_under_grouping_range_goes_to_the_cycle_and_outside_every_range_to_no_phase():
    # Only `cycle` is open during [30, 60): the worker's own code between its phases, charged to the cycle
    # ("(cycle)"), not to the next phase (CUDA events at the phase boundaries do not see it either). Before the
    # cycle opens [20, 25) no range is open at all (the engine between cycles): no phase, "(unattributed)".
    # Synthetic: the rule at exact boundaries.
    segs = _synthetic([(0, 10, 20, 0, "verify"), (1, 70, 80, 65, "draft")],
                      [(25, 300, "cycle"), (0, 20, "verify"), (60, 100, "draft")])
    got = [(r["start"], r["end"], r["phase"], r["category"]) for r in segs.sort("start").iter_rows(named=True)]
    assert got == [(10, 20, "verify", "gemm"), (20, 25, UNATTRIBUTED, CPU_WAIT), (25, 60, IN_CYCLE, CPU_WAIT),
                   (60, 65, "draft", CPU_WAIT), (65, 70, "draft", LAUNCH), (70, 80, "draft", "gemm")]


def test_overlapping_ops_on_one_stream_count_once():
    # Programmatic dependent launch lets the next kernel start before the previous ends.
    segs = _synthetic([(0, 0, 100, 0, "verify"), (1, 90, 150, 0, "verify"), (2, 95, 120, 0, "verify")],
                      [(0, 200, "verify")])
    assert sorted((r["start"], r["end"]) for r in segs.iter_rows(named=True)) == [(0, 100), (100, 150)]


def test_gap_before_an_op_with_no_launch_record_is_idle():
    segs = _synthetic([(0, 0, 10, 0, "verify"), (1, 40, 50, None, "(unattributed)")], [(0, 100, "verify")])
    idle = segs.filter(pl.col("category") == IDLE)
    assert idle.rows() == [(0, 1, 10, 40, "(unattributed)", IDLE, None, 1)]


def _waits_by_as_of_joins(ops, ranges, tl, grouping=("cycle",)):
    """The cpu_wait pieces by the definition: each gap's timeline rows found by as-of joins backward by thread (the
    last boundary at or before its start, the last before its end), exploded to one piece per row it crosses, each
    piece charged by the state of its row (the test's oracle for `cpu_waits`, its binary searches and its slices)."""
    from specprof.analyzer.core import accounting as acc
    from specprof.analyzer.core.projection import lookup
    gaps = ops.filter(acc._GAP & pl.col("launch_start").is_not_null()).select(
        "device", "stream", "op_id", "launch_tid", a="prev_end", b=acc._SPLIT, op_cycle="cycle").filter(
        pl.col("b") > pl.col("a"))
    if gaps.is_empty():
        return pl.DataFrame(schema=acc.SEGMENT_SCHEMA)
    look = tl.select("tid", "t", "row").sort("tid", "t")
    w = gaps.sort("a").join_asof(look.rename({"row": "first"}), left_on="a", right_on="t", by_left="launch_tid",
                                 by_right="tid", strategy="backward", check_sortedness=False).drop("t")
    w = w.sort("b").join_asof(look.rename({"row": "last"}), left_on="b", right_on="t", by_left="launch_tid",
                              by_right="tid", strategy="backward", allow_exact_matches=False,
                              check_sortedness=False).drop("t")
    w = w.with_columns(row=pl.when(pl.col("first").is_null()).then(pl.lit([None], pl.List(pl.Int64)))
                       .otherwise(pl.int_ranges("first", pl.col("last") + 1))).explode("row")
    nxt = tl.select("t", "state", t_next=pl.when(pl.col("tid") == pl.col("tid").shift(-1)).then(pl.col("t").shift(-1)))
    w = w.with_columns(nxt.select(pl.all().gather(w.get_column("row"))))
    w = w.with_columns(start=pl.max_horizontal("a", pl.col("t").fill_null(pl.col("a"))),
                       end=pl.min_horizontal("b", pl.col("t_next").fill_null(pl.col("b")))).filter(
        pl.col("end") > pl.col("start"))
    state = w.get_column("state")
    info = ranges.select("range_id", name=pl.col("phase").cast(pl.Utf8), cyc="cycle", group=pl.col("phase").is_in(grouping))
    w = w.with_columns(s_name=lookup(info, state, "name"), s_cycle=lookup(info, state, "cyc"),
                       s_group=lookup(info, state, "group").fill_null(False))
    w = w.with_columns(
        phase=pl.when("s_group").then(pl.lit(IN_CYCLE)).when(pl.col("s_name").is_null()).then(pl.lit(UNATTRIBUTED))
        .otherwise("s_name").cast(pl.Categorical),
        cycle=pl.when("s_group").then("state").when(pl.col("s_name").is_not_null()).then("s_cycle").otherwise("op_cycle"),
        category=pl.lit(CPU_WAIT, pl.Categorical))
    return acc._fill_wait_cycles(ops, w.select(list(acc.SEGMENT_SCHEMA)).cast(acc.SEGMENT_SCHEMA))


@pytest.mark.parametrize("path", CAPTURES, ids=capture_id)
def test_cpu_waits_equal_the_as_of_joins(path, monkeypatch):
    # The cpu_wait pieces, found by binary search over the threads' timelines a slice of gaps at a time, are those of
    # as-of joins by thread over all the gaps at once: with the time itself as the search key's code, with the
    # time's rank (for timelines whose span does not fit beside the thread's rank), and in 40 slices (of 7 gaps, or
    # more on large captures).
    from specprof.analyzer.core import accounting as acc
    from specprof.analyzer.core import projection
    a = attribute(load_trace(str(path)), domains=("*",))
    p = projection.project(a.trace)
    ranges, tl = p["ranges"], p["timeline"]
    order = ["op_id", "start"]
    want = _waits_by_as_of_joins(a.ops, ranges, tl).sort(order)
    got = acc.cpu_waits(a.ops, ranges, tl)
    assert got.equals(got.sort(order))  # (in (op_id, start) order)
    assert got.height and got.equals(want)
    assert a.waits.equals(got)
    assert acc.cpu_waits(a.ops, ranges, tl, slice_rows=max(7, want.height // 40)).equals(want)
    assert acc._OpenRanges(ranges, tl, ("cycle",)).times is None
    monkeypatch.setattr(acc._OpenRanges, "BITS", 8)
    assert acc._OpenRanges(ranges, tl, ("cycle",)).times is not None or tl.is_empty()
    assert acc.cpu_waits(a.ops, ranges, tl, slice_rows=1000).equals(want)


@pytest.mark.parametrize("path", CAPTURES, ids=capture_id)
def test_stream_cycle_in_slices_is_one_forward_fill(path):
    # Each op's stream cycle computed a slice of the ops at a time (the last cycle of each stream carried) equals one
    # forward fill per stream over all the ops.
    from specprof.analyzer.core import accounting as acc
    ops = attribute(load_trace(str(path)), domains=("*",)).ops
    want = ops.select(pl.coalesce("cycle", pl.col("cycle").forward_fill().over("device", "stream"))).to_series()
    for rows in (1 << 20, max(7, ops.height // 40)):  # (at most 40 slices: slices of 7 rows on small captures)
        assert acc.stream_cycle(ops, slice_rows=rows).equals(want), rows


def test_op_order_is_checked_across_slices():
    # A pair of ops out of (start, end, op_id) order is found wherever it lies, a slice boundary included.
    # Synthetic: the readers never give ops out of order.
    from specprof.analyzer.core import accounting as acc
    n = 50
    ops = pl.DataFrame({"start": list(range(0, 10 * n, 10)), "end": list(range(5, 10 * n, 10)), "op_id": list(range(n))})
    assert acc._in_op_order(ops, slice_rows=7)
    for i in range(1, n):
        swapped = pl.concat([ops.slice(0, i - 1), ops.slice(i, 1), ops.slice(i - 1, 1), ops.slice(i + 1)])
        assert not acc._in_op_order(swapped, slice_rows=7), i
        assert not acc._in_op_order(swapped), i
    tie = ops.with_columns(start=pl.lit(0, pl.Int64), end=pl.lit(9, pl.Int64))  # equal start and end: by op_id
    assert acc._in_op_order(tie, slice_rows=7)
    assert not acc._in_op_order(tie.reverse(), slice_rows=7)
