"""One export of several processes analysed one process per task (app/process_tasks.py, --jobs/--dask): each task
reads only its process's rows, and each rank's figures equal those the one-process analysis gives that rank, on
the real TP = 2 capture (fixtures/reference-k4-tp2)."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from analyzer.app import process_tasks
from analyzer.app import traces as many
from analyzer.app.analyze import Options
from analyzer.app.run import Run
from analyzer.cli import main
from analyzer.core.window import Window
from analyzer.readers import nsys_sqlite
from analyzer.readers.nsys_sqlite import read_nsys_sqlite
from analyzer.render import json as json_render
from conftest import FIXTURES

TP2 = FIXTURES / "reference-k4-tp2"
EXPORT = str(TP2 / "run.sqlite")


@pytest.fixture(scope="module")
def whole():
    return Run.load(str(TP2), Options(cache=False))


@pytest.mark.parametrize("pages", [True, False], ids=["pages", "sqlite"])
def test_a_process_read_is_its_rows_of_the_whole_read(pages, monkeypatch):
    monkeypatch.setattr(nsys_sqlite, "DIRECT_PAGES", pages)
    every = read_nsys_sqlite(EXPORT)
    pids = process_tasks.processes(EXPORT)
    assert len(pids) == 2 and set(pids) == set(every.ops["pid"].unique())
    for pid in pids:
        part = read_nsys_sqlite(EXPORT, process=pid)
        mine = pl.col("pid") == pid
        # op_id and range_id number the rows read: the process's own
        assert_frame_equal(part.ops.drop("op_id"), every.ops.filter(mine).drop("op_id"))
        assert_frame_equal(part.api, every.api.filter(mine))
        assert_frame_equal(part.ranges.drop("range_id"), every.ranges.filter(mine).drop("range_id"))
        assert_frame_equal(part.marks, every.marks.filter(mine))
        assert set(part.meta.extra["tables_read_by"].values()) == {"pages" if pages else "sqlite"}


def _rank_phases(doc: dict, rank: int) -> dict:
    """A rank's phase table (each phase with its categories) in the one-process analysis's JSON."""
    return {p["name"]: p for p in next(r for r in doc["ranks"] if r["rank"] == rank)["phases"]}


def test_each_rank_of_the_tasks_is_that_rank_of_the_one_process_analysis(whole):
    several = process_tasks.analyze_all(str(TP2), Options(cache=False), many.Outputs(as_json=True))
    assert several.one_run and [d.rank for d in several.outputs] == [0, 1]
    r, doc = whole.ranks, json_render.to_dict(whole)
    for d in several.outputs:
        # the whole phase table, each phase's categories too
        assert {p["name"]: p for p in d.doc["phases"]} == _rank_phases(doc, d.rank)
        assert d.phase_ns == dict(r.phases.filter(pl.col("rank") == d.rank).select("phase", "attributed").iter_rows())
        row = r.ranks.filter(pl.col("rank") == d.rank).row(0, named=True)
        assert (d.row["ops"], d.row["streams"], d.row["busy"]) == (row["ops"], row["streams"], row["busy"])
    assert_frame_equal(many.skew(several.outputs), r.skew)


def test_a_cycle_window_is_taken_per_process(whole):
    window = Window.of(cycles=(10, 30))
    one = Run.load(str(TP2), Options(cache=False, window=window))
    several = process_tasks.analyze_all(str(TP2), Options(cache=False, window=window), many.Outputs())
    for d in several.outputs:
        assert d.phase_ns == dict(one.ranks.phases.filter(pl.col("rank") == d.rank)
                                  .select("phase", "attributed").iter_rows())


def test_when_an_export_is_split():
    jobs = Options(cache=False)
    assert process_tasks.wanted(str(TP2), jobs, 2, None)
    assert not process_tasks.wanted(str(TP2), jobs, 1, None)  # one worker: one task
    assert not process_tasks.wanted(str(FIXTURES / "reference-k4"), jobs, 2, None)  # one process
    assert not process_tasks.wanted(str(FIXTURES / "torch-k4"), jobs, 2, None)  # Kineto
    timed = Options(cache=False, window=Window.of(time_ns=(0, 10**8)))
    assert not process_tasks.wanted(str(TP2), timed, 2, None)  # measured from the whole export's first op


def test_the_cli_splits_with_jobs(whole):
    out = CliRunner().invoke(main, ["analyze", str(TP2), "--no-cache", "-q", "--json", "--jobs", "2"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["ranks_of_one_run"] and doc["why"] == process_tasks.WHY and len(doc["ranks"]) == 2
    one = json_render.to_dict(whole)
    for t in doc["ranks"]:
        assert {p["name"]: p for p in t["analysis"]["phases"]} == _rank_phases(one, t["rank"])
