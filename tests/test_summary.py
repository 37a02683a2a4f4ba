"""Summaries computed the fast way equal the direct computation: GPU busy per (cycle, phase) from the
per-range unions (summary.range_busy) against one union over all ops per (cycle, phase), on real
captures; one synthetic edge case that no capture shows (a phase twice in one cycle, its GPU work
overlapping on two streams)."""

from __future__ import annotations

import polars as pl
import pytest

from specprof.analyzer.core import summary
from specprof.analyzer.core.attribution import attribute
from specprof.analyzer.readers.load import load_trace
from specprof.analyzer.model.trace import Trace, TraceMeta
from conftest import FIXTURES, shared_nsys

CAPTURES = [FIXTURES / "reference-k4" / "run.sqlite", FIXTURES / "reference-k4-graph" / "run.sqlite",
            FIXTURES / "reference-k4-tp2" / "run.sqlite", FIXTURES / "torch-k4" / "trace.json.gz",
            *shared_nsys()]


@pytest.mark.parametrize("domains", [(), ("*",)], ids=["tracer-ranges", "all-ranges"])
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_cycle_busy_from_range_unions_equals_direct_union(path, domains):
    a = attribute(load_trace(str(path)), domains=domains)
    direct = summary.cycle_table(a.ranges, a.ops, a.charges, a.grouping)[1]
    reused = summary.cycle_table(a.ranges, a.ops, a.charges, a.grouping, summary.range_busy(a.ops))[1]
    assert reused.sort("cycle", "phase").equals(direct.sort("cycle", "phase"))
    assert a.cycle_phases.sort("cycle", "phase").equals(direct.sort("cycle", "phase"))


def test_a_phase_twice_in_one_cycle_counts_its_overlap_once():
    # Synthetic. Cycle [0, 1000) on thread 7 holds two draft ranges, [10, 100) and [200, 300); each
    # launches one kernel (at 20 and 210), on streams 1 and 2, running [400, 600) and [500, 700).
    # Per range instance the busy time is 200 + 200; for the cycle's draft it is the union, 300.
    ranges = pl.DataFrame({"range_id": [0, 1, 2], "pid": [1] * 3, "tid": [7] * 3, "start": [0, 10, 200],
                           "end": [1000, 100, 300], "name": ["cycle", "draft", "draft"],
                           "domain": ["specprof"] * 3})
    api = pl.DataFrame({"pid": [1, 1], "tid": [7, 7], "start": [20, 210], "end": [30, 220],
                        "name": ["cudaLaunchKernel"] * 2, "correlation": [1, 2]})
    ops = pl.DataFrame({"op_id": [0, 1], "kind": ["kernel"] * 2, "start": [400, 500], "end": [600, 700],
                        "device": [0, 0], "stream": [1, 2], "pid": [1, 1], "correlation": [1, 2],
                        "name": ["gemm"] * 2, "short_name": ["gemm"] * 2, "graph_node": [None, None]})
    trace = Trace(ops=ops, api=api, ranges=ranges, marks=pl.DataFrame(), meta=TraceMeta("synthetic", "nsys-sqlite"))
    a = attribute(trace)
    draft = a.cycle_phases.filter(pl.col("phase") == "draft")
    assert draft["gpu_busy"].to_list() == [300]
    assert a.phases.filter(pl.col("phase") == "draft")["gpu_busy"].to_list() == [400]


def naive_union(ops: pl.DataFrame, by: list[str]) -> dict:
    """Per group (a tuple of `by` values, None included), the union length of its [start, end) intervals: the
    intervals sorted and merged one by one, in Python."""
    groups: dict = {}
    for row in ops.select(*by, "start", "end").iter_rows():
        groups.setdefault(row[:-2], []).append(row[-2:])
    out = {}
    for key, spans in groups.items():
        total, reach = 0, None
        for s, e in sorted(spans):
            if reach is None or s >= reach:
                total, reach = total + (e - s), e
            elif e > reach:
                total, reach = total + (e - reach), e
        out[key] = total
    return out


@pytest.mark.parametrize("path", CAPTURES[:3] + CAPTURES[4:5], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_polars_union_equals_a_plain_merge(path):
    # The polars twin of the C scan against intervals merged one by one in Python: every grouping the analysis
    # uses, null groups included (ops of no range, or no cycle), and over the rows a predicate selects.
    from specprof.analyzer.core import accounting

    ops = attribute(load_trace(str(path)), domains=("*",)).ops
    for by in (["range_id"], ["cycle", "phase"], ["device", "stream"], ["device"]):
        got = accounting.union_by_polars(ops, by)
        assert dict(zip(got.select(by).iter_rows(), got["busy"])) == naive_union(ops, by), by
    loose = pl.col("phase").is_in(["(cycle)", "(unattributed)"]) | (pl.col("stream") % 2 == 0)
    by = ["phase", "device", "stream"]
    got = accounting.union_by_polars(ops, by, where=loose)
    assert dict(zip(got.select(by).iter_rows(), got["busy"])) == naive_union(ops.filter(loose), by)


@pytest.mark.skipif(__import__("specprof.analyzer.core.accounting", fromlist=["_scan"])._scan is None,
                    reason="the C scan (analyzer/_scan.c) was not built (no C compiler at install)")
@pytest.mark.parametrize("path", CAPTURES[:3] + CAPTURES[4:5], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_c_scan_equals_polars(path, monkeypatch):
    # The one-pass C scan and its polars twin give the same unions (every grouping the analysis
    # uses, null groups included, over the rows a predicate selects too) and the same prev_end per op;
    # and the whole analysis is the same either way.
    from specprof.analyzer.core import accounting

    a = attribute(load_trace(str(path)), domains=("*",))
    ops = a.ops
    loose = pl.col("phase").is_in(["(cycle)", "(unattributed)"]) | (pl.col("stream") % 2 == 0)
    for by, where in ((["range_id"], None), (["cycle", "phase"], None), (["device", "stream"], None),
                      (["device"], None), (["phase", "device", "stream"], loose)):
        scanned = accounting.union_length(ops, by, where=where).sort(by)
        # (the C path runs where the packed keys are dense enough for its table: always for ranges and
        # streams; a (cycle, phase) key may be too sparse, and then polars' path ran for both)
        if by != ["cycle", "phase"]:
            assert accounting.scan_groups(ops, accounting.combined_key(ops, by)) is not None
        monkeypatch.setattr(accounting, "USE_SCAN", False)
        twin = accounting.union_length(ops, by, where=where).sort(by)
        monkeypatch.setattr(accounting, "USE_SCAN", True)
        assert scanned.equals(twin.select(scanned.columns)), by
    with_c = accounting.with_prev_end(ops)
    monkeypatch.setattr(accounting, "USE_SCAN", False)
    assert with_c.get_column("prev_end").equals(accounting.with_prev_end(ops).get_column("prev_end"))
    b = attribute(load_trace(str(path)), domains=("*",))
    for table in ("phases", "categories", "cycle_phases", "streams", "cycles"):
        assert getattr(a, table).equals(getattr(b, table)), table


@pytest.mark.skipif(__import__("specprof.analyzer.core.accounting", fromlist=["_scan"])._scan is None,
                    reason="the C scan (analyzer/_scan.c) was not built (no C compiler at install)")
@pytest.mark.parametrize("path", CAPTURES[:3] + CAPTURES[4:5], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_range_scan_equals_the_group_bys(path, monkeypatch):
    # One C pass per range (its busy union, first start, last end, ops, launches) against polars' union
    # and group-by (the per-range projection, NVIDIA's definition).
    from specprof.analyzer.core import accounting, projection, summary

    a = attribute(load_trace(str(path)), domains=("*",))
    scanned = accounting.range_scan(a.ops)
    assert scanned is not None
    with_scan = projection.range_projection(a.ranges, a.ops, scanned)
    busy = summary.range_busy(a.ops, scanned).sort("range_id")
    monkeypatch.setattr(accounting, "USE_SCAN", False)
    assert with_scan.equals(projection.range_projection(a.ranges, a.ops))
    assert busy.equals(summary.range_busy(a.ops).sort("range_id"))


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_pair_tables_in_place_equal_over_a_copy(path, monkeypatch):
    # A (process, device) pair's phases and categories, its rows selected in place by each query, equal those over a
    # copy of its rows (what a small pair gets), on every capture of several pairs.
    from specprof.analyzer.core import categories
    from specprof.analyzer.model.labels import COMMUNICATION
    a = attribute(load_trace(str(path)), domains=("*",))
    if a.pairs.height < 2:
        pytest.skip("one (process, device) pair: its tables are the capture's")
    kinds = categories.kinds_of(COMMUNICATION, categories.parents(categories.default_rules()))

    def tables(share):
        monkeypatch.setattr(summary, "IN_PLACE_SHARE", share)
        return summary.pair_tables(a.ops, a.ranges, a.charges, a.streams, a.grouping, a.phases, a.categories, kinds)

    in_place, copied = tables(0.0), tables(1.0)
    for name in ("pairs", "pair_phases", "pair_categories", "comm_ops"):
        assert in_place[name].equals(copied[name]), name
        assert in_place[name].equals(getattr(a, name)), name


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_launch_table_is_one_group_by_over_the_launches(path):
    # The launch table (its sums from the ops, each percentile's values gathered one at a time) equals one group-by
    # over every launch's derived values.
    from specprof.analyzer.model.stats import QUANTILE
    ops = attribute(load_trace(str(path)), domains=("*",)).ops
    at = pl.col("launch_start")
    rows = ops.filter(pl.col("launch_first")).select(
        "phase", api_ns=pl.col("launch_end") - at, latency=pl.col("start") - at,
        queued=pl.col("prev_end").fill_null(at) > at,
        idle_latency=(pl.col("start") - pl.max_horizontal(at, pl.col("prev_end").fill_null(at))).clip(lower_bound=0))
    q = lambda c, p: pl.col(c).quantile(p, QUANTILE).round().cast(pl.Int64)  # noqa: E731
    want = rows.group_by("phase").agg(
        launches=pl.len().cast(pl.Int64), api_ns=pl.col("api_ns").sum(), queued=pl.col("queued").sum().cast(pl.Int64),
        latency_p50=q("latency", 0.5), latency_p90=q("latency", 0.9), latency_max=pl.col("latency").max(),
        idle_latency_p50=q("idle_latency", 0.5), idle_latency_p90=q("idle_latency", 0.9)).with_columns(
        pl.col("phase").cast(pl.Utf8))
    got = summary.launch_table(ops)
    assert got.height == want.height
    assert got.sort("phase").equals(want.sort("phase"))
