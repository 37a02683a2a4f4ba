"""Damaged and unusual nsys exports: never a wrong number. A damaged table is refused, by both read paths,
with one line that names it; a valid file the page reader reads differently from SQLite is read as SQLite
reads it. The damage is made on copies of the real captures (the exact byte changed is said in each test);
the UTF-16 export is synthetic (a real capture's tables copied into a UTF-16 database: no nsys export seen
is UTF-16)."""

from __future__ import annotations

import shutil
import sqlite3

import polars as pl
import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.readers.nsys import Export, Select, read_nsys_sqlite
from conftest import FIXTURES
from fuzz_exports import Capture
from test_reader_pages import _assert_same, _both

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


def _copy(tmp_path, name="reference-k4") -> str:
    dst = tmp_path / "run.sqlite"
    shutil.copy(FIXTURES / name / "run.sqlite", dst)
    return str(dst)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """(value, length) of the SQLite varint at `at`."""
    value = 0
    for i in range(9):
        b = data[at + i]
        if i == 8:
            return (value << 8) | b, 9
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            return value, i + 1
    raise AssertionError


def _first_leaf_cells(path: str, table: str = KERNEL, middle: bool = False) -> tuple[bytearray, list[int]]:
    """The file's bytes and the offsets (in the file) of the cells of the table's first leaf page (with
    `middle`, of its middle leaf page)."""
    cap = Capture.__new__(Capture)  # only its page walk: the file as it is on disk
    cap.data = open(path, "rb").read()
    cap.page_size = int.from_bytes(cap.data[16:18], "big")
    root = sqlite3.connect(path).execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    leaves = [n for n in cap._pages(root) if cap.data[(n - 1) * cap.page_size] == 0x0D]
    first = min(leaves)  # an export writes its tables in rowid order: the lowest page holds the first rows
    if middle:
        first = sorted(leaves)[len(leaves) // 2]
    at = (first - 1) * cap.page_size
    cells = int.from_bytes(cap.data[at + 3:at + 5], "big")
    return bytearray(cap.data), [at + int.from_bytes(cap.data[at + 8 + 2 * i:at + 10 + 2 * i], "big")
                                 for i in range(cells)]


def _refused_both_ways(path: str, words: str):
    for direct in (True, False):
        with pytest.raises(SpecprofError, match=words):
            read_nsys_sqlite(path, pages=direct)


def shifted_record_header(path: str, middle: bool = False) -> bytearray:
    """The file's bytes with one serial type of the first kernel record of the first (or middle) leaf page
    changed from 6 (an 8-byte integer) to 4 (4 bytes)."""
    data, cells = _first_leaf_cells(path, middle=middle)
    at = cells[0]
    _, n1 = _varint(data, at)
    _, n2 = _varint(data, at + n1)
    header = at + n1 + n2
    size, n = _varint(data, header)
    types = [i for i in range(header + n, header + size) if data[i] == 6]
    assert types, "no 8-byte integer in the first kernel record"
    data[types[0]] = 4
    return data


def test_a_record_header_that_does_not_add_up_is_refused_by_both_paths(tmp_path):
    # One serial type of the first kernel record changed from 6 (an 8-byte integer) to 4 (4 bytes): every
    # column after it shifts by 4 bytes, and the header no longer adds up to the record's payload. The page
    # reader used to read the shifted values (exit 0, a phantom rank); SQLite says "malformed".
    path = _copy(tmp_path)
    data = shifted_record_header(path)
    open(path, "wb").write(data)
    _refused_both_ways(path, f"table {KERNEL} is damaged")
    result = CliRunner().invoke(main, ["analyze", path, "--no-cache"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    (line,) = [x for x in result.output.splitlines() if x.strip()]
    assert line.startswith(f"specprof: error: {path}: table {KERNEL} is damaged")


def test_a_column_added_with_a_default_reads_the_default_on_both_paths(tmp_path):
    # A valid file: streamId dropped and added back with DEFAULT 7. The records written before hold no
    # streamId; SQLite gives them the default, and so must the page reader (it gave NULL).
    path = _copy(tmp_path)
    con = sqlite3.connect(path)
    con.execute(f"ALTER TABLE {KERNEL} DROP COLUMN streamId")
    con.execute(f"ALTER TABLE {KERNEL} ADD COLUMN streamId INTEGER NOT NULL DEFAULT 7")
    con.commit()
    con.close()
    direct, through_sqlite = _both(path)
    _assert_same(direct, through_sqlite)
    assert direct.meta.extra["tables_read_by"][KERNEL] == "pages"
    kernels = direct.ops.filter(pl.col("kind") == "kernel")
    assert kernels.height > 1000 and kernels["stream"].unique().to_list() == [7]


@pytest.mark.parametrize("direct", [True, False], ids=["pages", "sqlite"])
def test_rowids_out_of_order_are_refused_not_read_in_part(tmp_path, direct):
    # The rowid of the fifth kernel record (a one-byte varint) set to 127: the B-tree's keys are out of order.
    # SQLite's rowid-range slices then stopped at it (rows lost, no note); the page reader must refuse too.
    path = _copy(tmp_path)
    data, cells = _first_leaf_cells(path)
    payload, n1 = _varint(data, cells[4])
    rowid, n2 = _varint(data, cells[4] + n1)
    assert n2 == 1 and rowid < 100
    data[cells[4] + n1] = 127
    open(path, "wb").write(data)
    ex = Export(path, pages=direct)
    try:
        select = Select(KERNEL, ("start", "end"))
        with pytest.raises(SpecprofError, match=f"table {KERNEL} is damaged"):
            ex.parallel(select, {"start": pl.Int64, "end": pl.Int64}, slice_rows=100)
    finally:
        ex.close()


def test_a_damaged_file_gets_the_same_answer_every_time(tmp_path):
    # The same damaged copies (a header byte, a rowid, and random bytes over kernel, runtime and NVTX pages)
    # read again and again, with 1, 2 and 8 threads over small slices: one outcome per path, every time.
    import random

    from fuzz_exports import read

    cap = Capture(FIXTURES / "reference-k4" / "run.sqlite")
    rng = random.Random(11)
    for trial in range(8):
        table, data, how = cap.mutant(rng)
        path = tmp_path / f"m{trial}.sqlite"
        path.write_bytes(data)
        for direct in (True, False):
            seen = set()
            for threads in (1, 2, 8, 1, 8):
                kind, value, _ = read(str(path), table, direct, threads=threads)
                assert kind != "raised", f"{how}: {value}"
                seen.add((kind, value.hash_rows().sum() if kind == "rows" else value))
            assert len(seen) == 1, f"{table} {how}: {seen}"


def _utf16_copy(src: str, dst: str, encoding: str) -> None:
    """Every table of `src` (schema and rows) in a new database whose text encoding is `encoding`."""
    old = sqlite3.connect(src)
    con = sqlite3.connect(dst)
    con.execute(f"PRAGMA encoding = '{encoding}'")
    for name, sql in old.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' "
                                 "AND name NOT LIKE 'sqlite_%'").fetchall():
        con.execute(sql)
        rows = old.execute(f'SELECT * FROM "{name}"')
        marks = ", ".join("?" * len(rows.description))
        con.executemany(f'INSERT INTO "{name}" VALUES ({marks})', rows)
    con.commit()
    assert con.execute("PRAGMA encoding").fetchone()[0] == encoding
    con.close()
    old.close()


@pytest.mark.parametrize("encoding", ["UTF-16le", "UTF-16be"])
def test_a_utf16_export_gives_the_names_of_the_utf8_one(tmp_path, encoding):
    # Synthetic: reference-k4's tables in a UTF-16 database. Text used to come out as UTF-16 bytes decoded as
    # UTF-8 (every call a phase of its own); now both paths give the UTF-8 export's trace exactly.
    src = str(FIXTURES / "reference-k4" / "run.sqlite")
    path = str(tmp_path / "utf16.sqlite")
    _utf16_copy(src, path, encoding)
    direct, through_sqlite = _both(path)
    _assert_same(direct, through_sqlite)
    assert direct.meta.extra["tables_read_by"][KERNEL] == "pages"
    _assert_same(direct, read_nsys_sqlite(src))
    assert "verify" in direct.ranges["name"].to_list()


def stale_index(path: str, table: str = "NVTX_EVENTS", column: str = "eventType", every: int = 5) -> None:
    """An index on `table`(`column`) that disagrees with its table, the table itself intact: the index is
    built while one row in `every` holds another value (99), then those rows are put back while SQLite
    believes the index is on another column (`category`: an UPDATE of `column` then leaves it alone), and
    the index's definition is restored. PRAGMA quick_check passes (it does not compare indexes with
    their tables); integrity_check does not. (Such an index is what a tool that indexes exports, as nsys-ai
    does, leaves after a write it did not finish, or what damage to its pages looks like.)"""
    con = sqlite3.connect(path)
    con.execute(f'CREATE TEMP TABLE kept AS SELECT rowid AS r, "{column}" AS v FROM "{table}" '
                f"WHERE rowid % {every} = 0")
    con.execute(f'UPDATE "{table}" SET "{column}" = 99 WHERE rowid IN (SELECT r FROM kept)')
    con.execute(f'CREATE INDEX specprof_test_stale ON "{table}"("{column}")')
    con.commit()
    rows = con.execute("SELECT r, v FROM kept").fetchall()
    con.close()

    def define(on: str) -> None:
        con = sqlite3.connect(path)
        con.execute("PRAGMA writable_schema = ON")
        con.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'specprof_test_stale'",
                    (f'CREATE INDEX specprof_test_stale ON "{table}"("{on}")',))
        con.commit()
        con.close()

    define("category")
    con = sqlite3.connect(path)
    con.executemany(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = ?', [(v, r) for r, v in rows])
    con.commit()
    con.close()
    define(column)
    con = sqlite3.connect(path)
    assert con.execute(f'PRAGMA quick_check("{table}")').fetchall() == [("ok",)]
    assert con.execute("PRAGMA integrity_check").fetchall() != [("ok",)]
    con.close()


def long_mark(path: str, length: int = 6000) -> None:
    """One NVTX mark of `length` characters: its record overflows its page, which sends NVTX_EVENTS to the
    SQLite path."""
    con = sqlite3.connect(path)
    start, tid = con.execute("SELECT min(start), min(globalTid) FROM NVTX_EVENTS").fetchone()
    con.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid) VALUES (?, 34, ?, ?)",
                (start, "m" * length, tid))
    con.commit()
    con.close()


def test_an_index_that_disagrees_with_its_table_is_never_read_through(tmp_path):
    import json

    path = _copy(tmp_path)
    long_mark(path)
    assert read_nsys_sqlite(path).meta.extra["tables_read_by"]["NVTX_EVENTS"] == "sqlite"
    whole = json.loads(CliRunner().invoke(main, ["analyze", path, "--json", "--no-cache"]).stdout)
    stale_index(path)
    damaged = CliRunner().invoke(main, ["analyze", path, "--json", "--no-cache"])
    assert damaged.exit_code == 0, damaged.output
    got = json.loads(damaged.stdout)
    assert len(got["cycles"]) == len(whole["cycles"]) == 100
    assert got["phases"] == whole["phases"]


@pytest.mark.parametrize("direct", [True, False], ids=["pages", "sqlite"])
def test_a_kernel_table_with_a_stale_index_reads_the_tables_rows(tmp_path, direct):
    # The kernels' streamId index disagrees with the table; a read filtered on streamId gives the table's rows.
    path = _copy(tmp_path)
    original = read_nsys_sqlite(path)
    stale_index(path, KERNEL, "streamId", every=3)
    ex = Export(path, pages=direct)
    try:
        streams = sorted(original.ops.filter(pl.col("kind") == "kernel")["stream"].unique().to_list())
        select = Select(KERNEL, ("start", "streamId"), (("in", "streamId", streams),))
        got = ex.whole(select, {"start": pl.Int64, "stream": pl.Int64})
    finally:
        ex.close()
    assert got.height == original.ops.filter(pl.col("kind") == "kernel").height


def _edited(tmp_path, *sql, name="reference-k4") -> str:
    """A copy of a fixture's export with `sql` run on it (the schema writable, as a hand edit needs)."""
    path = _copy(tmp_path, name)
    con = sqlite3.connect(path)
    con.execute("PRAGMA writable_schema = ON")
    for statement in sql:
        con.execute(statement)
    con.commit()
    con.close()
    return path


def _root_of(table: str) -> str:
    return f"(SELECT rootpage FROM sqlite_master WHERE name = '{table}')"


@pytest.mark.parametrize("table, other, words", [
    # memcpys read as memsets' rows: memsets counted twice, memcpys gone (exit 0 before)
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "begin at the same page"),
    # NVTX events read from the kernels' B-tree: "no phases" from the pages, refused through SQLite before
    ("NVTX_EVENTS", KERNEL, "begin at the same page"),
], ids=["memcpy-on-memset", "nvtx-on-kernel"])
def test_two_tables_on_one_root_page_are_refused_by_both_paths(tmp_path, table, other, words):
    path = _edited(tmp_path, f"UPDATE sqlite_master SET rootpage = {_root_of(other)} WHERE name = '{table}'")
    assert sqlite3.connect(path).execute("PRAGMA quick_check").fetchone()[0] != "ok"  # SQLite's whole-file check
    _refused_both_ways(path, words)


@pytest.mark.parametrize("table", ["CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME"])
def test_a_table_rooted_inside_another_is_refused_by_both_paths(tmp_path, table):
    # The table's root moved to a leaf page of the kernels' B-tree: no two roots are equal, every page of either
    # table is well formed, and each table's own check passes; the memsets read 856 kernels as memsets before.
    con = sqlite3.connect(_copy(tmp_path))
    leaf = con.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno "
                       "LIMIT 1 OFFSET 3", (KERNEL,)).fetchone()[0]
    con.close()
    path = _edited(tmp_path, f"UPDATE sqlite_master SET rootpage = {leaf} WHERE name = '{table}'")
    assert sqlite3.connect(path).execute(f'PRAGMA quick_check("{table}")').fetchone()[0] == "ok"
    _refused_both_ways(path, f"tables {KERNEL} and {table} share their pages")


@pytest.mark.parametrize("sql, words", [
    # the same rows behind a view: its min(rowid) is NULL, so it read as empty (0 ranges, exit 0)
    (["ALTER TABLE NVTX_EVENTS RENAME TO kept", "CREATE VIEW NVTX_EVENTS AS SELECT * FROM kept"],
     "NVTX_EVENTS is a view where nsys writes a table"),
    ([f"ALTER TABLE {KERNEL} RENAME TO kept", f"CREATE VIEW {KERNEL} AS SELECT * FROM kept"],
     f"{KERNEL} is a view where nsys writes a table"),
    # a view named in another case: SQLite's names ignore case
    (["ALTER TABLE StringIds RENAME TO kept", "CREATE VIEW stringids AS SELECT * FROM kept"],
     "stringids is a view where nsys writes a table"),
    (["DROP TABLE StringIds", "CREATE VIRTUAL TABLE StringIds USING fts5(id, value)"],
     "StringIds is a virtual table where nsys writes a table"),
    # read in rowid slices: "no such column: rowid", said as a truncated file
    (["ALTER TABLE NVTX_EVENTS RENAME TO kept", "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, "
      "eventType INTEGER NOT NULL, text TEXT, globalTid INTEGER, textId INTEGER, k INTEGER PRIMARY KEY) WITHOUT ROWID",
      "INSERT INTO NVTX_EVENTS SELECT start, end, eventType, text, globalTid, textId, rowid FROM kept"],
     "NVTX_EVENTS is a table without rowids where nsys writes a rowid table"),
], ids=["nvtx-view", "kernel-view", "strings-view-other-case", "strings-virtual", "nvtx-without-rowid"])
def test_views_and_virtual_tables_where_nsys_writes_tables_are_refused(tmp_path, sql, words):
    path = _copy(tmp_path)
    con = sqlite3.connect(path)
    for statement in sql:
        con.execute(statement)
    con.commit()
    con.close()
    _refused_both_ways(path, words)


def test_a_recursive_view_is_one_line_not_a_hang(tmp_path):
    # ThreadNames as a view that never ends: the join that names the threads ran until it was killed.
    import subprocess
    import sys

    path = _copy(tmp_path)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE ThreadNames")
    con.execute("CREATE VIEW ThreadNames AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
                "SELECT 1 AS nameId, 0 AS priority, n AS globalTid FROM r")
    con.commit()
    con.close()
    done = subprocess.run([sys.executable, "-m", "specprof", "analyze", path, "--no-cache", "-q"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert lines == [f"specprof: error: {path}: ThreadNames is a view where nsys writes a table; specprof reads "
                     "only the tables nsys writes: export the report again with `nsys export --type sqlite`"]
