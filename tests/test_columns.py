"""analyzer/model/columns.py's primitives over real captures' columns: each equals the plain polars operation it
replaces, with the C module (analyzer/_scan.c) and without it."""

from __future__ import annotations

import polars as pl
import pytest

from specprof.analyzer.model import columns
from specprof.analyzer.readers.nsys import read_nsys_sqlite
from conftest import FIXTURES, shared_nsys

CAPTURES = [FIXTURES / "reference-k4-tp2" / "run.sqlite", FIXTURES / "reference-k4-graph" / "run.sqlite",
            *shared_nsys()[:2]]
needs_scan = pytest.mark.skipif(columns._scan is None, reason="analyzer/_scan.c was not built (no C compiler)")


@pytest.fixture(scope="module", params=CAPTURES, ids=lambda p: p.parent.name if p.name == "run.sqlite" else p.name)
def trace(request):
    return read_nsys_sqlite(str(request.param))


@pytest.mark.parametrize("with_c", [True, False])
def test_first_distinct_is_polars_is_first_distinct(trace, with_c, monkeypatch):
    if not with_c:
        monkeypatch.setattr(columns, "_scan", None)
    elif columns._scan is None:
        pytest.skip("analyzer/_scan.c was not built")
    for frame, by in ((trace.ops, ["pid", "correlation"]), (trace.ops, ["device", "stream"]),
                      (trace.api, ["tid"]), (trace.ops, ["graph_node"])):  # graph_node: mostly null
        got = columns.first_distinct(frame.select(by), by)
        want = frame.select(pl.struct(by).is_first_distinct()).to_series()
        assert got.to_list() == want.to_list(), by


def test_distinct_is_unique_sorted(trace):
    for col in (trace.ops["pid"], trace.ops["device"], trace.ops["graph_node"], trace.api["tid"], trace.ops["start"]):
        assert columns.distinct(col).to_list() == col.unique().sort().to_list()
    # Edge cases no capture shows (synthetic): all null, empty, one value, a null first.
    for col in (pl.Series([None, None], dtype=pl.Int64), pl.Series([], dtype=pl.Int64), pl.Series([7]),
                pl.Series([None, 2, 2, None, 1])):
        assert columns.distinct(col).to_list() == col.unique().sort().to_list()


def test_dense_key_numbers_wide_few_valued_columns_by_rank(trace):
    # globalPid values lie 2^24 and more apart: by range they would not pack; by rank they take a few codes.
    key, lo, span = columns.dense_key(trace.ops, ["pid", "correlation"])
    pids = trace.ops["pid"].n_unique()
    corr = trace.ops["correlation"]
    assert span == (pids + 1) * (corr.max() - corr.min() + 2)
    # One key per distinct (pid, correlation), and none shared by two.
    pairs = trace.ops.select("pid", "correlation").with_columns(k=key)
    assert pairs.select("k").n_unique() == pairs.select("pid", "correlation").n_unique()
    assert pairs.unique(["pid", "correlation"]).select(pl.col("k").n_unique()).item() == pairs["k"].n_unique()


@needs_scan
def test_lookup_rows_is_a_left_join(trace):
    # Every op's launch call by its (process number, correlation id) key, as projection._launch_rows
    # packs it: the C hash lookup against polars' join, unmatched and keyless ops included.
    pids = columns.distinct(pl.concat([trace.api["pid"], trace.ops["pid"]])).drop_nulls()
    number = {p: i for i, p in enumerate(pids.to_list())}

    def keys(df):
        return df.select(k=pl.col("pid").replace_strict(number, default=None, return_dtype=pl.Int64) * (1 << 40)
                         + pl.col("correlation")).to_series()

    build, probe = keys(trace.api), keys(trace.ops)
    got = columns.lookup_rows(build, probe)
    want = pl.DataFrame({"k": probe}).join(
        pl.DataFrame({"k": build, "row": pl.int_range(build.len(), eager=True).cast(pl.UInt32)}),
        on="k", how="left", maintain_order="left").get_column("row")
    assert got is not None and got.to_list() == want.to_list()


@needs_scan
def test_lookup_rows_gives_up_on_keys_that_collide():
    # Keys chosen to fall on one slot of the C table (synthetic: an adversarial trace): it stops at its
    # probe budget and says so (None), and the caller joins in polars instead.
    build = pl.Series([i << 40 for i in range(20_000)], dtype=pl.Int64)
    assert columns.lookup_rows(build, build) is None
    assert columns.lookup_rows(pl.Series([1, None]), pl.Series([1])) is None  # a null build key


@needs_scan
def test_merge_order_is_a_stable_sort_of_sorted_runs(trace):
    # The ops of each kind (kernels, memcpys, memsets: each a table of the export, in order) stacked
    # kind after kind, then merged back into (start, end) order: as polars' stable sort orders them.
    runs = [part for _, part in trace.ops.group_by("kind", maintain_order=True)]
    stacked = pl.concat(runs).select("start", "end")
    got = columns.merge_order(stacked["start"], stacked["end"], [r.height for r in runs])
    want = stacked.select(pl.arg_sort_by("start", "end", maintain_order=True)).to_series()
    assert got is not None and got.to_list() == want.to_list()
    # Ties across runs keep run order; a run out of order is refused (synthetic: no capture has one).
    starts, ends = pl.Series([5, 9, 5, 7]), pl.Series([6, 9, 6, 8])
    assert columns.merge_order(starts, ends, [2, 2]).to_list() == [0, 2, 3, 1]
    assert columns.merge_order(pl.Series([9, 5, 1]), pl.Series([9, 6, 2]), [2, 1]) is None


def test_by_rank_is_the_dictionary_lookup(trace):
    # Each value numbered by its rank among the sorted distinct values (null after them) by binary search, as a
    # dictionary lookup numbers it.
    for col in (trace.ops["pid"], trace.ops["device"], trace.api["tid"], trace.ops["graph_node"]):
        values = columns.distinct(col).drop_nulls()
        got = pl.select(columns.by_rank(pl.lit(col), values)).to_series()
        want = col.replace_strict(values, pl.int_range(values.len(), eager=True), default=values.len(),
                                  return_dtype=pl.Int64)
        assert got.to_list() == want.to_list()
