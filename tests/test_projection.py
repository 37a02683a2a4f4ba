"""Projection on real exports, checked against an independent SQL formulation of the rule:
the innermost range on the launching thread that encloses the whole launch call."""

from __future__ import annotations

import sqlite3

import polars as pl
import pytest

from specprof.analyzer.model.labels import IN_CYCLE, UNATTRIBUTED
from specprof.analyzer.core.projection import nest, project, range_projection
from specprof.analyzer.readers.nsys import read_nsys_sqlite
from conftest import capture_id, own_nsys, shared_nsys

INNERMOST_SQL = """
SELECT n.start, n.end FROM NVTX_EVENTS n
WHERE n.eventType IN (59, 60, 70, 71) AND n.globalTid = ? AND n.start <= ? AND n.end >= ?
  AND (n.endGlobalTid IS NULL OR n.endGlobalTid = n.globalTid)
ORDER BY n.start DESC, n.end ASC LIMIT 1
"""


@pytest.mark.parametrize("path", own_nsys() + [p for p in shared_nsys() if "mock" not in p.name], ids=capture_id)
def test_innermost_range_matches_sql(path):
    trace = read_nsys_sqlite(str(path))
    p = project(trace)
    ops = p["ops"].filter(pl.col("launch_start").is_not_null())
    ranges = p["ranges"].select("range_id", r_start="start", r_end="end")
    sample = ops.join(ranges, on="range_id", how="left").sample(n=min(400, ops.height), seed=7)
    con = sqlite3.connect(path)
    for r in sample.iter_rows(named=True):
        hit = con.execute(INNERMOST_SQL, (r["launch_tid"], r["launch_start"], r["launch_end"])).fetchone()
        if hit is None:
            assert r["range_id"] is None and r["phase"] == UNATTRIBUTED
        else:
            assert (r["r_start"], r["r_end"]) == hit


@pytest.mark.parametrize("path", own_nsys() + shared_nsys(), ids=capture_id)
def test_unattributed_ops_are_counted_not_dropped(path):
    trace = read_nsys_sqlite(str(path))
    ops = project(trace)["ops"]
    assert ops.height == trace.ops.height
    no_launch = ops.filter(pl.col("unattributed") == "no_launch_record")
    assert no_launch["launch_start"].is_null().all()
    assert (ops.filter(pl.col("unattributed").is_not_null())["phase"] == UNATTRIBUTED).all()


def test_window_export_loses_launches(shared_dir):
    # nsys-ai cut this export to a 1 s window: the kernels whose launch fell before it keep no
    # runtime row (shared/traces/README.md says 1,810 of 3,442 kernels).
    trace = read_nsys_sqlite(str(shared_dir / "nsys_sqlite" / "nsysai_h100_2gpu_1s.sqlite"))
    ops = project(trace)["ops"].filter(pl.col("kind") == "kernel")
    assert ops.filter(pl.col("unattributed") == "no_launch_record").height == 1810


def _ranges(rows):
    """Synthetic ranges on one thread (edge cases no capture shows), ids in (start, -end) order."""
    df = pl.DataFrame(rows, schema=["start", "end", "name"], orient="row").with_columns(
        pid=pl.lit(1, pl.Int64), tid=pl.lit(1, pl.Int64), domain=pl.lit(""))
    return df.sort("start", pl.col("end"), descending=[False, True]).with_row_index("range_id").with_columns(
        pl.col("range_id").cast(pl.Int64))


def test_nesting_depth_and_parent_synthetic():
    # cycle [0,100) > draft [10,40) > step [10,20) (same start as its parent), verify [40,90)
    # (touches draft's end: a sibling), and a zero-length mark-like range at 50.
    r = nest(_ranges([(0, 100, "cycle"), (10, 40, "draft"), (10, 20, "step"), (40, 90, "verify"),
                      (50, 50, "zero")]))
    by = {row["name"]: row for row in r.iter_rows(named=True)}
    ids = {n: by[n]["range_id"] for n in by}
    assert [by[n]["depth"] for n in ("cycle", "draft", "step", "verify", "zero")] == [0, 1, 2, 1, 2]
    assert by["draft"]["parent"] == ids["cycle"] and by["step"]["parent"] == ids["draft"]
    assert by["verify"]["parent"] == ids["cycle"] and by["zero"]["parent"] == ids["verify"]
    assert by["cycle"]["parent"] is None


def test_range_projection_includes_nested_ranges_synthetic():
    r = nest(_ranges([(0, 100, "cycle"), (10, 40, "draft"), (40, 90, "verify")]))
    ids = dict(zip(r["name"], r["range_id"]))
    ops = pl.DataFrame({
        "range_id": [ids["draft"], ids["draft"], ids["verify"]],
        "start": [100, 150, 300], "end": [120, 170, 400], "correlation": [1, 2, 3],
    })
    proj = range_projection(r, ops).join(r.select("range_id", "name"), on="range_id")
    got = {row["name"]: (row["gpu_start"], row["gpu_end"], row["gpu_ops"]) for row in proj.iter_rows(named=True)}
    assert got == {"cycle": (100, 400, 3), "draft": (100, 170, 2), "verify": (300, 400, 1)}


def test_grouping_range_ops_get_the_in_cycle_phase(shared_dir):
    trace = read_nsys_sqlite(str(shared_dir / "nsys_sqlite" / "nsysai_mfu_2gpu_before.sqlite"))
    # Treat an NCCL range as the grouping range: its own ops are then "(cycle)" ops.
    ops = project(trace, grouping=("ncclGroupEnd",))["ops"]
    assert ops.filter(pl.col("phase") == IN_CYCLE).height == 64
    assert ops.filter(pl.col("phase") == "ncclGroupEnd").is_empty()


def test_per_call_suffixes_fold_into_one_phase(shared_dir):
    # torch.profiler numbers its steps (ProfilerStep#550, ...): one phase, five instances.
    from specprof.analyzer.core.attribution import attribute
    from specprof.analyzer.readers.load import load_trace

    a = attribute(load_trace(str(shared_dir / "torch_kineto" / "hta_negative_queue_length_values_check__rank0.json.gz")))
    steps = a.phases.filter(pl.col("phase").str.starts_with("ProfilerStep"))
    assert steps["phase"].to_list() == ["ProfilerStep"] and steps["instances"].item() == 5
    # A name whose '#' is not followed by a number only is kept as it is.
    assert "Optimizer.step#FusedAdam.step" in set(a.phases["phase"])
