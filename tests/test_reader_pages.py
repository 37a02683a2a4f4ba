"""The direct page reader (analyzer/readers/nsys/_sqlite_pages.c) against SQLite itself, on real captures.

Every table the page reader reads gives the same rows as SQLite gives them; what the page reader does
not handle (a write-ahead log, records spilling onto overflow pages, a value of another type than the
column's, text that is not UTF-8) falls back to SQLite with the same result; and a damaged file never
crashes the process: it is read, refused, or reported by SQLite, as before.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import subprocess
import sys
import textwrap

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from specprof.analyzer.model.columns import ArrowStream
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.readers import bounds
from specprof.analyzer.readers.nsys import Export, Select, read_nsys_sqlite, read_strings
from specprof.analyzer.readers.nsys import pages as page_reader
from specprof.analyzer.readers.nsys.tables import not_launches
from conftest import FIXTURES, SHARED, shared_nsys

pages = page_reader.reader  # the C module, or None
needs_pages = pytest.mark.skipif(pages is None, reason="the C page reader was not built (no C compiler at install)")

CAPTURES = [str(FIXTURES / n / "run.sqlite") for n in
            ("reference-k4", "reference-k4-graph", "reference-k4-tp2", "reference-k0")] + \
           [str(p) for p in shared_nsys()]
LARGE = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")


def _both(path: str):
    """The trace read straight from the pages, and through SQLite."""
    return read_nsys_sqlite(path, pages=True), read_nsys_sqlite(path, pages=False)


def _assert_same(a, b):
    for table in ("ops", "api", "ranges", "marks"):
        assert_frame_equal(getattr(a, table), getattr(b, table))
    assert (a.meta.notes, a.meta.skipped, a.meta.gpus) == (b.meta.notes, b.meta.skipped, b.meta.gpus)


@needs_pages
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.split("/")[-2] if "fixtures" in p else p.split("/")[-1])
def test_pages_give_the_rows_sqlite_gives(path):
    direct, through_sqlite = _both(path)
    _assert_same(direct, through_sqlite)
    read_by = direct.meta.extra["tables_read_by"]
    assert {read_by[t] for t in LARGE if t in read_by} == {"pages"}
    assert set(through_sqlite.meta.extra["tables_read_by"].values()) == {"sqlite"}
    assert direct.ops.height > 0


@needs_pages
def test_every_column_value_matches_sqlite_row_by_row():
    # The raw reader on every column of the kernel table (integers of every serial type, NULLs), not only
    # the columns the analysis reads.
    path = str(FIXTURES / "reference-k4-tp2" / "run.sqlite")
    con = sqlite3.connect(path)
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    names = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    capsule = pages.read(path, pages.leaves(path, root), tuple(range(len(names))), b"i" * len(names), (), (), b"")
    got = pl.DataFrame(ArrowStream(capsule))
    want = con.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
    assert got.height == len(want) > 1000
    assert got.rows() == want


@needs_pages
def test_filters_match_sql():
    path = str(FIXTURES / "reference-k4" / "run.sqlite")
    schema = {"start": pl.Int64, "correlation": pl.Int64, "name_id": pl.Int64, "nothing": pl.Int64}
    got = {}
    for way in (True, False):
        with Export(path, pages=way) as ex:
            strings = read_strings(ex)
            cols = ex.columns("CUPTI_ACTIVITY_KIND_RUNTIME")
            select = Select("CUPTI_ACTIVITY_KIND_RUNTIME", ("start", "correlationId", "nameId", None),
                            (("not null", "correlationId"), *not_launches(strings, cols),
                             ("in", "eventClass", (1, 2, 3, 4, 5))))
            got[way] = pl.concat(ex.parallel(select, schema, slice_rows=5000))
            assert ex.read_by["CUPTI_ACTIVITY_KIND_RUNTIME"] == ("pages" if way else "sqlite")
    direct, sql = got[True], got[False]
    assert_frame_equal(direct, sql)
    assert 0 < direct.height < sqlite3.connect(path).execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    assert direct["nothing"].null_count() == direct.height


def _copy(tmp_path, name="reference-k4") -> str:
    dst = tmp_path / "run.sqlite"
    shutil.copy(FIXTURES / name / "run.sqlite", dst)
    return str(dst)


@needs_pages
def test_write_ahead_log_database_is_read_through_sqlite(tmp_path):
    path = _copy(tmp_path)
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    con.close()
    direct, through_sqlite = _both(path)
    _assert_same(direct, through_sqlite)
    assert set(direct.meta.extra["tables_read_by"].values()) == {"sqlite"}


@needs_pages
def test_records_on_overflow_pages_are_read_through_sqlite(tmp_path):
    # A range name longer than a page: its record spills onto overflow pages.
    path = _copy(tmp_path)
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = (SELECT min(rowid) FROM NVTX_EVENTS "
                "WHERE eventType = 59)", ("verify " * 2000,))
    con.commit()
    con.close()
    direct, through_sqlite = _both(path)
    _assert_same(direct, through_sqlite)
    # (and, at 14,000 characters, cut to the names' bound: bounds.MAX_NAME_CHARS, with a note)
    long = direct.ranges.filter(pl.col("name").cast(pl.Utf8).str.starts_with("verify verify"))
    assert long.height == 1 and long["name"][0] == ("verify " * 2000)[:bounds.MAX_NAME_CHARS - 1] + "…"
    assert any("longer than 4,096 characters were cut" in note for note in direct.meta.notes)
    read_by = direct.meta.extra["tables_read_by"]
    assert read_by["NVTX_EVENTS"] == "sqlite" and read_by["CUPTI_ACTIVITY_KIND_KERNEL"] == "pages"


@needs_pages
@pytest.mark.parametrize("value", ["'text'", "2.5"])
def test_a_value_of_another_type_is_refused(tmp_path, value):
    # SQLite lets any column hold any type; an integer column holding text or a real is not read
    # directly (the reader then reads the table through SQLite, whatever that makes of it).
    path = _copy(tmp_path)
    con = sqlite3.connect(path)
    con.execute(f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = {value} WHERE rowid = 5")
    con.commit()
    names = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()[0]
    con.close()
    leaves = pages.leaves(path, root)
    with pytest.raises(pages.Unsupported, match="non-integer"):
        pages.read(path, leaves, (names.index("streamId"),), b"i", (), (), b"")
    pages.read(path, leaves, (names.index("deviceId"),), b"i", (), (), b"")  # the other columns still read


@needs_pages
def test_text_that_is_not_utf8_is_shown_with_replacement_characters(tmp_path):
    # SQLite stores whatever bytes a program gave it; a range name and a kernel name that are not UTF-8
    # read (both paths alike) with U+FFFD in place of the bad bytes.
    path = _copy(tmp_path)
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET text = CAST(X'76657269667980FF' AS TEXT) WHERE rowid = "
                "(SELECT min(rowid) FROM NVTX_EVENTS WHERE eventType = 59)")
    con.execute("UPDATE StringIds SET value = CAST(X'6B65726E656CC3' AS TEXT) WHERE id = "
                "(SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1)")
    con.commit()
    con.close()
    direct, through_sqlite = _both(path)
    _assert_same(direct, through_sqlite)
    assert "verify\ufffd\ufffd" in direct.ranges.get_column("name").to_list()
    assert direct.ops.filter(pl.col("name") == "kernel\ufffd").height > 0


@needs_pages
def test_truncated_file_is_an_error_not_a_crash(tmp_path):
    path = _copy(tmp_path)
    con = sqlite3.connect(path)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()[0]
    con.close()
    leaves = pages.leaves(path, root)
    with open(path, "r+b") as fh:
        fh.truncate(len(open(path, "rb").read()) // 2)
    with pytest.raises(pages.Corrupt):
        pages.read(path, leaves, (0, 1), b"ii", (), (), b"")
    with pytest.raises(SpecprofError, match="truncated"):
        read_nsys_sqlite(path)


@needs_pages
def test_damaged_pages_never_crash_the_reader(tmp_path):
    # Random bytes written over a real capture's kernel, runtime and NVTX pages, 300 times: each read
    # returns rows or raises Unsupported/Corrupt, in a child process, so that a crash is a failure here.
    src = FIXTURES / "reference-k4" / "run.sqlite"
    script = textwrap.dedent(f"""
        import random, shutil, sqlite3, sys
        from specprof.analyzer.readers.nsys.pages import reader as pages
        src, dst = {str(src)!r}, {str(tmp_path / "damaged.sqlite")!r}
        con = sqlite3.connect(src)
        tables = {{n: r for n, r in con.execute("SELECT name, rootpage FROM sqlite_master WHERE type = 'table'")}}
        cols = {{n: len(con.execute(f"PRAGMA table_info({{n}})").fetchall()) for n in tables}}
        con.close()
        original = open(src, "rb").read()
        page_size = int.from_bytes(original[16:18], "big")
        rng = random.Random(7)
        outcomes = {{"read": 0, "refused": 0}}
        for trial in range(300):
            data = bytearray(original)
            name = rng.choice({list(LARGE)!r})
            leaves = pages.leaves(src, tables[name])
            at = pages.LEAF_SIZE * rng.randrange(len(leaves) // pages.LEAF_SIZE)
            pageno = int.from_bytes(leaves[at:at + 4], sys.byteorder)
            for _ in range(rng.choice([1, 4, 32])):
                at = (pageno - 1) * page_size + rng.randrange(page_size)
                data[at] = rng.randrange(256)
            if rng.random() < 0.2:  # an interior page too
                data[(tables[name] - 1) * page_size + rng.randrange(page_size)] = rng.randrange(256)
            open(dst, "wb").write(data)
            try:
                lv = pages.leaves(dst, tables[name])
                n = cols[name]
                pages.read(dst, lv, tuple(range(n)), b"i" * n, ((0, b"\\xff", True, True),), (), b"")
                outcomes["read"] += 1
            except (pages.Unsupported, pages.Corrupt):
                outcomes["refused"] += 1
        print(outcomes)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    outcomes = eval(done.stdout.strip().splitlines()[-1], {})  # a dict of two counts, printed above
    assert outcomes["read"] + outcomes["refused"] == 300 and outcomes["refused"] > 0


@needs_pages
def test_without_the_c_module_every_table_is_read_through_sqlite(monkeypatch):
    path = str(FIXTURES / "reference-k4" / "run.sqlite")
    monkeypatch.setattr(page_reader, "reader", None)  # as where it was not built
    trace = read_nsys_sqlite(path)
    assert set(trace.meta.extra["tables_read_by"].values()) == {"sqlite"}
    monkeypatch.undo()
    _assert_same(trace, read_nsys_sqlite(path))


def test_the_c_module_is_built_where_a_compiler_is():
    # setup.py builds it at `pip install` when a C compiler is found (and goes on without it otherwise):
    # on such a machine (CI's among them) the fast path must really be there.
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: the reader uses SQLite alone")
    assert pages is not None, "analyzer/readers/nsys/_sqlite_pages was not built: run `pip install -e .` again"
