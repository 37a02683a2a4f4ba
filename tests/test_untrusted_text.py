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

from analyzer.cli import main
from analyzer.errors import clean
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
