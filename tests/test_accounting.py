"""Time accounting: segments tile every stream with no gap and no overlap, on real exports;
the splitting rules on synthetic tables for edge cases no capture shows (said per test)."""

from __future__ import annotations

import polars as pl
import pytest

from analyzer.core.accounting import cpu_waits, tile, with_prev_end
from analyzer.core.attribution import attribute
from analyzer.core.projection import nest, phase_names, timeline
from analyzer.model.labels import CPU_WAIT, IDLE, IN_CYCLE, LAUNCH, UNATTRIBUTED
from analyzer.readers.load import load_trace
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
