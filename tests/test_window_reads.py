"""A window read from part of an export (readers/nsys/window.py, app/window_reads.py) gives exactly what the whole
export read and then cut gives (core/window.py `select`): the same ops (their op_id too), CUDA calls, ranges, marks
and notes, and the same analysis, on every capture of fixtures/ and on windows of every kind; and it reads only a
part of the rows."""

from __future__ import annotations

import json
import shutil
import sqlite3

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from specprof.analyzer.app import window_reads
from specprof.analyzer.app.analyze import Options
from specprof.analyzer.app.run import Run
from specprof.analyzer.core.window import Window, hull, select
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.readers.inputs import resolve
from specprof.analyzer.readers.nsys import Export, Whole, page_reader_built, read_nsys_sqlite, read_window
from specprof.analyzer.readers.nsys import tables
from specprof.analyzer.readers.nsys.pages import PartialReads
from specprof.analyzer.render import json as json_render
from conftest import FIXTURES, capture_id, own_nsys, shared_nsys

pytestmark = pytest.mark.skipif(not page_reader_built(), reason="the page reader (C module) is not built")

WINDOWS = [dict(cycles=(10, 20)), dict(cycles=(0, 50)), dict(skip_warmup=25), dict(cycles=(3, None)),
           dict(time_ns=(100_000_000, 300_000_000)), dict(time_ns=(None, 50_000_000)),
           dict(cycles=(5, None), time_ns=(0, 200_000_000))]


def _part(path: str, window: Window, grouping=("cycle",)):
    return read_window(path, lambda ranges, first: hull(ranges, first, window, grouping, path))


def _same_trace(a, b):
    for name in ("ops", "api", "ranges", "marks", "syncs"):
        assert_frame_equal(getattr(a, name), getattr(b, name))
    assert a.meta == b.meta


@pytest.mark.parametrize("export", own_nsys(), ids=lambda p: p.parent.name)
def test_a_window_read_in_part_is_the_whole_read_cut(export):
    path = str(export)
    whole = read_nsys_sqlite(path)
    for kw in WINDOWS:
        window = Window.of(**kw)
        try:
            expected = select(whole, window)
        except SpecprofError as exc:  # a window this capture cannot take: the same error either way
            with pytest.raises(SpecprofError, match="window|cycle"):
                trace, told = _part(path, window)
                select(trace, window, whole=told)
            assert str(exc)
            continue
        trace, told = _part(path, window)
        assert told == Whole(whole.ops.height, whole.ops["start"].min(), whole.ops["end"].max())
        _same_trace(expected, select(trace, window, whole=told))
        assert trace.ops.height <= whole.ops.height


@pytest.mark.parametrize("export", shared_nsys(), ids=capture_id)
def test_time_windows_of_third_party_exports(export):
    """Exports of other programs (no cycles; some ops without a launch record: a window export), time windows
    at fractions of the trace: the same ops and calls, or the same error."""
    path = str(export)
    whole = read_nsys_sqlite(path)
    first, last = whole.ops["start"].min(), whole.ops["end"].max()
    for a, b in ((0.0, 0.05), (0.1, 0.3), (0.5, 0.6), (0.9, 1.0)):
        window = Window.of(time_ns=(int(a * (last - first)), int(b * (last - first))))
        try:
            expected = select(whole, window)
        except SpecprofError as exc:
            trace, told = _part(path, window)
            with pytest.raises(SpecprofError) as got:
                select(trace, window, whole=told)
            assert str(got.value) == str(exc)
            continue
        trace, told = _part(path, window)
        _same_trace(expected, select(trace, window, whole=told))


def test_rows_out_of_time_order_are_read_as_well(tmp_path):
    """A synthetic edge case made from a real capture: reference-k4's kernel and CUDA-call tables rewritten in a
    shuffled row order (nsys writes them in time order): which rows are read is decided from the data, so the
    result is the same, only more of the table is read."""
    path = tmp_path / "shuffled.sqlite"
    shutil.copy(FIXTURES / "reference-k4" / "run.sqlite", path)
    with sqlite3.connect(path) as db:
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
            sql = db.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
            db.execute(f"ALTER TABLE {table} RENAME TO old")
            db.execute(sql)
            db.execute(f"INSERT INTO {table} SELECT * FROM old ORDER BY (rowid * 7919) % 10007")
            db.execute("DROP TABLE old")
    db.close()
    whole = read_nsys_sqlite(str(path))
    for kw in WINDOWS[:5]:
        window = Window.of(**kw)
        trace, told = _part(str(path), window)
        _same_trace(select(whole, window), select(trace, window, whole=told))


@pytest.mark.parametrize("fixture", ["reference-k4", "reference-k4-tp2", "sglang-k4"])
def test_the_analysis_of_a_window_read_in_part_is_the_same(fixture, monkeypatch):
    """The whole JSON contract of `specprof analyze --cycle-window` and `--time-window`, read in part and read
    whole (the page reader turned off for the window's read: the path taken before)."""
    path = str(FIXTURES / fixture)
    for window in (Window.of(cycles=(10, 40)), Window.of(time_ns=(50_000_000, 150_000_000))):
        part = json_render.render(Run.load(path, Options(cache=False, window=window)).analysis())
        with monkeypatch.context() as m:
            m.setattr(window_reads, "read_window", lambda *a, **k: None)
            cut = json_render.render(Run.load(path, Options(cache=False, window=window)).analysis())
        assert json.loads(part) == json.loads(cut)


def test_a_window_reads_a_part_of_the_rows():
    path = resolve(str(FIXTURES / "reference-k4"))
    trace, told = _part(path, Window.of(cycles=(10, 20)))
    assert trace.ops.height < told.ops / 4


def test_zones_bound_every_row():
    """The page reader's zones (rows, least and greatest value, small values seen) against the rows themselves."""
    path = resolve(str(FIXTURES / "reference-k4-tp2"))
    with Export(path) as ex:
        pages = PartialReads(ex)
        select_, schema = tables.KERNELS.read(ex.columns(tables.KERNELS.name), only=tables.OP_COLUMNS)
        zones = pages.zones(select_, schema)
        rows = pl.concat(pages.read(select_, schema, zones=list(range(zones.height))))
    assert zones.get_column("rows").sum() == rows.height
    bounds = zones.select("min_start", "max_start", "min__rowid", "max__rowid", "mask_device", "rows")
    at = 0
    for lo, hi, rlo, rhi, mask, n in bounds.iter_rows():
        part = rows.slice(at, n)
        at += n
        assert (part["start"].min(), part["start"].max(), part["_rowid"].min(), part["_rowid"].max()) == (lo, hi, rlo,
                                                                                                          rhi)
        assert mask == sum(1 << d for d in part["device"].unique().to_list())
