"""Names out of their box: file names, kernel and range names are untrusted text. Printed to a terminal, they
pass through the one cleaner (analyzer/errors.py `clean`), so no escape sequence (ESC, an OSC title ended by
BEL, a right-to-left override) reaches it raw; written to CSV, a cell that a spreadsheet would read as a
formula starts with `'`, while Parquet keeps the exact value. The hostile names are made up for these tests
(no capture holds one); the exports are real captures, copied and renamed or with a name changed."""

from __future__ import annotations

import shutil
import sqlite3

import polars as pl
import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from specprof.analyzer.errors import clean
from conftest import FIXTURES

HOSTILE = "run\x1b[2J\x1b]0;owned\x07\u202etxt.\x1b[31m"
RAW = ("\x1b", "\x07", "\u202e", "\u2028", "\r")


def _raw(text: str) -> list[str]:
    return [c for c in RAW if c in text]


def test_the_cleaner_replaces_every_control_and_format_character():
    assert clean(HOSTILE) == "run?[2J?]0;owned??txt.?[31m"
    assert clean("a\u2028b\u2029c\u200fd\u0085e\tf\nG") == "a?b?c?d?e?f?G"
    assert clean("kernel<128, 64>::run() ÿ µs") == "kernel<128, 64>::run() ÿ µs"  # printable: untouched
    assert clean("x" * 10, 5) == "xxxx…"


def test_the_db_line_names_a_hostile_file_cleaned(tmp_path):
    export = tmp_path / f"{HOSTILE}.sqlite"
    shutil.copy(FIXTURES / "reference-k2" / "run.sqlite", export)
    out = CliRunner().invoke(main, ["analyze", str(export), "--db", str(tmp_path / "runs.db"), "-q"])
    assert out.exit_code == 0, out.output
    assert "stored as run @1" in out.stderr and not _raw(out.stderr) and not _raw(out.stdout)
    again = CliRunner().invoke(main, ["analyze", str(export), "--db", str(tmp_path / "runs.db"), "-q"])
    assert "already in" in again.stderr and not _raw(again.stderr)
    listed = CliRunner().invoke(main, ["runs", "--db", str(tmp_path / "runs.db")])
    assert listed.exit_code == 0 and not _raw(listed.output)


@pytest.mark.parametrize("args", [
    ["analyze", "{dir}/{name}.sqlite"],  # no such file
    ["analyze", "{dir}/{name}.sqlite", "--db", "{dir}/{name}/runs.db"],  # a database that cannot be written
    ["compare", "@1", "@2", "--db", "{dir}/{name}.db"],
    ["capture", "-o", "{dir}/{name}", "--no-tracer", "--", "{name}"],  # no such executable
], ids=["analyze", "analyze --db", "compare --db", "capture"])
def test_error_lines_name_a_hostile_file_cleaned(tmp_path, args):
    if args[0] == "analyze" and "--db" in args:
        shutil.copy(FIXTURES / "reference-k2" / "run.sqlite", tmp_path / f"{HOSTILE}.sqlite")
        (tmp_path / HOSTILE).write_text("a file where the database's folder would be")
    argv = [a.format(dir=tmp_path, name=HOSTILE) for a in args]
    out = CliRunner().invoke(main, [*argv, "-q"] if args[0] == "analyze" else argv)
    assert out.exit_code == 2, out.output
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("specprof: error:"), out.stderr
    assert clean(HOSTILE) in lines[0] and not _raw(out.output)


def test_a_cache_note_names_a_hostile_folder_cleaned(tmp_path, monkeypatch):
    blocked = tmp_path / HOSTILE
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("SPECPROF_CACHE_DIR", str(blocked / "cache"))
    out = CliRunner().invoke(main, ["analyze", str(FIXTURES / "reference-k2" / "run.sqlite"), "-q"])
    assert out.exit_code == 0, out.output
    assert "not cached" in out.stderr and not _raw(out.stderr)


FORMULAS = ("=HYPERLINK(\"http://x\",\"y\")", "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)", "\t=1", "\r=1")


def _hostile_names(tmp_path) -> str:
    """reference-k4 with its six most frequent kernel names, and its NVTX range names other than the phases,
    replaced by formulas (StringIds changed in place)."""
    path = tmp_path / "run.sqlite"
    shutil.copy(FIXTURES / "reference-k4" / "run.sqlite", path)
    con = sqlite3.connect(path)
    ids = [r[0] for r in con.execute("SELECT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY shortName "
                                     "ORDER BY count(*) DESC LIMIT 6")]
    for string_id, formula in zip(ids, FORMULAS):
        con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (formula, string_id))
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = shortName")
    con.commit()
    con.close()
    return str(path)


def test_csv_cells_that_a_spreadsheet_would_run_start_with_a_quote_and_parquet_keeps_them(tmp_path):
    import csv

    path = _hostile_names(tmp_path)
    for fmt in ("csv", "parquet"):
        out = CliRunner().invoke(main, ["analyze", path, f"--{fmt}", str(tmp_path / fmt), "--no-cache", "-q"])
        assert out.exit_code == 0, out.output
    for table, column in (("kernels", "short_name"), ("ops", "name"), ("ops", "short_name")):
        exact = pl.read_parquet(tmp_path / "parquet" / f"{table}.parquet").get_column(column).cast(pl.Utf8)
        present = set(FORMULAS) & set(exact.to_list())  # Parquet: the exact names (kernels: the top ones)
        assert present == set(FORMULAS) if table == "ops" else len(present) >= 2, table
        with open(tmp_path / "csv" / f"{table}.csv", newline="") as fh:
            cells = [row[column] for row in csv.DictReader(fh)]
        assert {"'" + f for f in present} <= set(cells), table
        assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")], table
        assert sorted(c[1:] if c.startswith("'") and c[1:2] in "=+-@\t\r" else c for c in cells) == \
            sorted("" if v is None else v for v in exact.to_list())  # nothing else changed
    for name in (tmp_path / "csv").iterdir():  # and no cell of any table starts as a formula
        with open(name, newline="") as fh:
            for row in csv.reader(fh):
                assert not [c for c in row if c[:1] in ("=", "+", "@", "\t", "\r")
                            or (c[:1] == "-" and not c[1:2].isdigit() and c != "-")], name
