"""One export of several processes analysed one process per task (app/process_tasks.py, --jobs/--dask): one walk
of the export hands each process its rows (readers/nsys/per_process.py), each task reads only its process's rows, and
each rank's figures equal those the one-process analysis gives that rank, on the real TP = 2 capture
(fixtures/reference-k4-tp2)."""

from __future__ import annotations

import json
import os
import pickle

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from specprof.analyzer.app import process_tasks
from specprof.analyzer.app import traces as many
from specprof.analyzer.app.analyze import Options
from specprof.analyzer.app.run import Run
from specprof.analyzer.cli import main
from specprof.analyzer.core.window import Window
from specprof.analyzer.readers import nsys
from specprof.analyzer.readers.nsys import Export, large_reads, read_nsys_sqlite, read_strings
from specprof.analyzer.readers.nsys import pages as page_reader
from specprof.analyzer.readers.nsys import per_process
from specprof.analyzer.render import json as json_render
from conftest import FIXTURES

TP2 = FIXTURES / "reference-k4-tp2"
EXPORT = str(TP2 / "run.sqlite")


@pytest.fixture(scope="module")
def whole():
    return Run.load(str(TP2), Options(cache=False)).analysis()


@pytest.mark.parametrize("pages", [True, False], ids=["pages", "sqlite"])
def test_a_process_read_is_its_rows_of_the_whole_read(pages):
    every = read_nsys_sqlite(EXPORT, pages=pages)
    pids = process_tasks.processes(EXPORT)
    assert len(pids) == 2 and set(pids) == set(every.ops["pid"].unique()) == set(nsys.processes(EXPORT, pages=pages))
    for pid in pids:
        part = read_nsys_sqlite(EXPORT, process=pid, pages=pages)
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
    one = Run.load(str(TP2), Options(cache=False, window=window)).analysis()
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


# The split: one walk of the export hands each process its rows (readers/nsys/per_process.py).

def _split(folder, monkeypatch, rows=None, **how):
    if rows is not None:
        monkeypatch.setattr(per_process, "SPLIT_ROWS", rows)
    return nsys.split(EXPORT, process_tasks.processes(EXPORT), str(folder), **how)


@pytest.mark.parametrize("pages", [True, False], ids=["pages", "sqlite"])
def test_the_split_gives_each_process_what_its_own_walk_reads(pages, tmp_path, monkeypatch):
    split = _split(tmp_path, monkeypatch, rows=3000, pages=pages)  # many slices: their order is kept
    assert split.rows() and len(os.listdir(tmp_path)) > 2 * 6
    for pid in process_tasks.processes(EXPORT):
        got = read_nsys_sqlite(EXPORT, process=pid, split=split, pages=pages)
        own = read_nsys_sqlite(EXPORT, process=pid, pages=pages)
        for table in ("ops", "api", "ranges", "marks"):
            assert_frame_equal(getattr(got, table), getattr(own, table))
        assert set(got.meta.extra["tables_read_by"].values()) == {"split"}


def test_each_file_of_a_process_holds_its_rows_only(tmp_path, monkeypatch):
    split = _split(tmp_path, monkeypatch, rows=3000)
    pids = process_tasks.processes(EXPORT)
    seen = set()
    for per in split.files.values():
        for pid, names in per.items():
            for name in names:
                df = pl.read_ipc(tmp_path / name)
                col = "pid" if "pid" in df.columns else "tid"
                assert (df.get_column(col) & nsys.PID_MASK == pid).all(), name
                seen.add(pid)
    assert seen == set(pids)


def test_a_task_reads_its_own_files_and_no_page_of_the_export(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECPROF_SPLIT_DIR", str(tmp_path))
    opened, task = [], process_tasks._task
    read_ipc = pl.read_ipc

    def recording(source, *a, **k):
        opened.append((current[0], os.path.basename(source)))
        return read_ipc(source, *a, **k)

    def no_walk(*a, **k):
        raise AssertionError("a task walked the export's pages")

    current = [None]

    def watched(t, *args):
        current[0] = t[2]
        with monkeypatch.context() as m:
            m.setattr(per_process.pl, "read_ipc", recording)
            m.setattr(page_reader.reader, "read", no_walk)
            m.setattr(Export, "read_sqlite", no_walk)
            return task(t, *args)

    monkeypatch.setattr(process_tasks, "_task", watched)
    several = process_tasks.analyze_all(str(TP2), Options(cache=False), many.Outputs())
    assert len(several.outputs) == 2
    pids = process_tasks.processes(EXPORT)
    assert {pid for pid, _ in opened} == set(pids)
    for pid, name in opened:
        assert name.split("-")[1] == str(pid)  # r<read>-<process>-<slice>.arrow
    assert os.listdir(tmp_path) == []  # the folder is gone once the tasks are done


def test_the_folder_is_removed_when_a_task_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECPROF_SPLIT_DIR", str(tmp_path))
    made = []

    def failing(t, *args):
        made.append(os.listdir(t[3].folder))
        raise RuntimeError("a task failed")

    monkeypatch.setattr(process_tasks, "_task", failing)
    with pytest.raises(RuntimeError, match="a task failed"):
        process_tasks.analyze_all(str(TP2), Options(cache=False), many.Outputs())
    assert made and made[0]  # the split had written its files
    assert os.listdir(tmp_path) == []


def test_a_full_disk_is_one_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECPROF_SPLIT_DIR", str(tmp_path))

    def full(self, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pl.DataFrame, "write_ipc", full)
    out = CliRunner().invoke(main, ["analyze", str(TP2), "--no-cache", "-q", "--jobs", "2"])
    assert out.exit_code != 0 and "Traceback" not in out.output
    assert "No space left on device" in out.output and "SPECPROF_SPLIT_DIR" in out.output
    assert os.listdir(tmp_path) == []


def test_pages_the_reader_gives_up_on_mid_walk_are_split_again_through_sqlite(tmp_path, monkeypatch):
    """A table whose pages turn out not to be readable directly (here: the third slice read says so) is read
    again through SQLite, and what the first reads wrote is forgotten: the same rows, once."""
    real, calls = page_reader.reader.read, [0]

    def gives_up(*a, **k):
        calls[0] += 1
        if calls[0] == 3:
            raise page_reader.reader.Unsupported("an overflowing record")
        return real(*a, **k)

    monkeypatch.setattr(page_reader.reader, "read", gives_up)
    split = _split(tmp_path, monkeypatch, rows=3000, threads=1)  # slices in order: the third is the kernel table's
    monkeypatch.setattr(page_reader.reader, "read", real)
    assert calls[0] >= 3 and split.read_by["CUPTI_ACTIVITY_KIND_KERNEL"] == "sqlite"
    assert split.read_by["CUPTI_ACTIVITY_KIND_RUNTIME"] == "pages"
    named = {n for per in split.files.values() for names in per.values() for n in names}
    assert named == set(os.listdir(tmp_path))  # no file of the abandoned walk is left or named
    for pid in process_tasks.processes(EXPORT):
        got, own = read_nsys_sqlite(EXPORT, process=pid, split=split), read_nsys_sqlite(EXPORT, process=pid)
        assert_frame_equal(got.ops, own.ops)
        assert got.meta.extra["tables_read_by"]["CUPTI_ACTIVITY_KIND_KERNEL"] == "split"


def test_a_task_where_the_folder_is_not_walks_the_export_itself(tmp_path, monkeypatch):
    """(A Dask worker on a host that does not see the folder.)"""
    split = _split(tmp_path, monkeypatch)
    elsewhere = nsys.Split(str(tmp_path / "not-here"), split.files)
    pid = process_tasks.processes(EXPORT)[0]
    got, own = read_nsys_sqlite(EXPORT, process=pid, split=elsewhere), read_nsys_sqlite(EXPORT, process=pid)
    assert_frame_equal(got.ops, own.ops)
    assert_frame_equal(got.api, own.api)
    assert set(got.meta.extra["tables_read_by"].values()) == {"pages"}


def test_dask_workers_give_what_the_tasks_here_give(tmp_path, monkeypatch):
    distributed = pytest.importorskip("dask.distributed")
    monkeypatch.setenv("SPECPROF_SPLIT_DIR", str(tmp_path))
    (tmp_path / "x").mkdir()
    split = _split(tmp_path / "x", monkeypatch)
    assert pickle.loads(pickle.dumps(split)) == split  # what a task is given travels to a worker
    here = process_tasks.analyze_all(str(TP2), Options(cache=False), many.Outputs(as_json=True))
    with distributed.LocalCluster(n_workers=2, processes=False, threads_per_worker=1, dashboard_address=None) as c, \
            distributed.Client(c) as client:
        there = process_tasks.analyze_all(str(TP2), Options(cache=False), many.Outputs(as_json=True), dask=client)
    assert [(d.rank, d.doc, d.row) for d in there.outputs] == [(d.rank, d.doc, d.row) for d in here.outputs]
    assert os.listdir(tmp_path) == ["x"]  # both splits' folders are gone


def test_the_walk_holds_a_slice_at_a_time(tmp_path, monkeypatch):
    """Bounded memory: the walk hands the files slices of about SPLIT_ROWS rows (the rows of a leaf page more at
    most), never a table, and every row read reaches one file."""
    seen, call = [], per_process.Sink.__call__

    def recording(self, number, df):
        seen.append(df.height)
        return call(self, number, df)

    monkeypatch.setattr(per_process.Sink, "__call__", recording)
    split = _split(tmp_path, monkeypatch, rows=4000)
    assert len(seen) > 10 and max(seen) <= 4000 + 400  # (reference-k4-tp2: at most ~150 rows a leaf)
    # every row of the two processes, each in one file: as many as their own walks read (the walk reads rows of
    # processes that ran no GPU work too, and drops them)
    ex, own = Export(EXPORT), 0
    try:
        for select, schema in large_reads(ex, read_strings(ex)):
            for pid in process_tasks.processes(EXPORT):
                ex.process = pid
                own += sum(df.height for df in ex.parallel(select, schema))
    finally:
        ex.close()
    assert split.rows() == own <= sum(seen)


def test_each_process_of_a_cached_export_has_its_own_synchronize_timer_estimate(tmp_path, monkeypatch):
    # The estimate kept beside an export's cached attribution is the whole export's: a process analysed as a task
    # of its own makes its own (these two differ: 8.152 and 8.116 ms per cycle), whatever the cache holds.
    monkeypatch.setenv("SPECPROF_CACHE_DIR", str(tmp_path))
    assert Run.load(str(TP2), Options()).analysis().sync_timers is not None  # the whole export's, cached
    outputs = many.Outputs(as_json=True, text=False)
    cached = [d.doc["sync_timer_estimate"] for d in process_tasks.analyze_all(str(TP2), Options(), outputs).outputs]
    fresh = [d.doc["sync_timer_estimate"]
             for d in process_tasks.analyze_all(str(TP2), Options(cache=False), outputs).outputs]
    assert cached == fresh and cached[0]["cycle_ms"] != cached[1]["cycle_ms"]
