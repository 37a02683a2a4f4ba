"""A `.nsys-rep` report given alone (analyzer/readers/nsys_report.py): exported with nsys, then analysed.

There is no nsys here. As in tests/test_capture.py, the `nsys` these tests run is a test double for nsys's
command-line contract: a small Python script that records its argv and, on `export --type sqlite -o OUT REP`,
writes OUT, here by copying a real export (fixtures/reference-k4/run.sqlite). It shows that specprof runs the
right command and analyses what it wrote; it says nothing about what the real nsys writes.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from conftest import FIXTURES

EXPORT = FIXTURES / "reference-k4" / "run.sqlite"

FAKE_NSYS = '''#!{python}
"""Test double for `nsys export` (written by tests/test_nsys_report.py); not nsys."""
import json, os, shutil, sys
args = sys.argv[1:]
with open({log!r}, "a") as out:
    out.write(json.dumps(args) + "\\n")
if os.environ.get("FAKE_NSYS_EXPORT_RC"):
    print("ERROR: the report is damaged", file=sys.stderr)
    sys.exit(int(os.environ["FAKE_NSYS_EXPORT_RC"]))
assert args[:3] == ["export", "--type", "sqlite"] and args[3] == "-o", args
assert not os.path.exists(args[4]), "nsys export does not overwrite"
shutil.copyfile({export!r}, args[4])
'''


@pytest.fixture
def fake(tmp_path, monkeypatch):
    log = tmp_path / "nsys-calls.jsonl"
    nsys = tmp_path / "bin" / "nsys"
    nsys.parent.mkdir()
    nsys.write_text(FAKE_NSYS.format(python=sys.executable, log=str(log), export=str(EXPORT)))
    nsys.chmod(0o755)
    monkeypatch.setenv("SPECPROF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.delenv("SPECPROF_NSYS", raising=False)
    monkeypatch.delenv("FAKE_NSYS_EXPORT_RC", raising=False)
    from specprof.tracer import capture

    monkeypatch.setattr(capture, "SEARCH_ROOT", tmp_path / "no-install-folders")
    report = tmp_path / "runs" / "run.nsys-rep"
    report.parent.mkdir()
    report.write_bytes(b"a report only nsys reads")

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return nsys, report, calls


def ops(doc) -> int:
    return sum(p["ops"] for p in doc["phases"])


def analyze(*args):
    return CliRunner().invoke(main, ["analyze", *map(str, args)])


def test_on_path_the_report_is_exported_into_the_cache_once_and_analysed(fake, tmp_path, monkeypatch):
    nsys, report, calls = fake
    monkeypatch.setenv("PATH", f"{nsys.parent}:/usr/bin:/bin")
    result = analyze(report, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert ops(doc) == 21126 and len(doc["cycles"]) == 100  # the analysis of the export nsys wrote
    (call,) = calls()
    assert call[-1] == str(report)
    cache = tmp_path / "cache"
    exports = list(cache.rglob("export.sqlite"))
    assert len(exports) == 1 and str(exports[0]) in result.stderr
    assert not (report.parent / "run.sqlite").exists()  # nothing written beside the report
    # the second time: the export in the cache, no second `nsys export`
    again = analyze(report, "--json")
    assert again.exit_code == 0 and len(calls()) == 1
    assert ops(json.loads(again.stdout)) == 21126
    # a changed report is exported again
    report.write_bytes(b"another report, longer than the first")
    assert analyze(report, "--json").exit_code == 0 and len(calls()) == 2


def test_export_here_writes_the_export_beside_the_report(fake, monkeypatch):
    nsys, report, calls = fake
    monkeypatch.setenv("SPECPROF_NSYS", str(nsys))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    result = analyze(report, "--export-here")
    assert result.exit_code == 0, result.output
    beside = report.parent / "run.sqlite"
    assert beside.read_bytes() == EXPORT.read_bytes()
    assert "Phases" in result.stdout and str(beside) in result.stderr
    # the export beside it is newer than the report: used as it is
    assert analyze(report).exit_code == 0 and len(calls()) == 1


def test_a_failing_export_is_one_line_naming_the_report(fake, monkeypatch):
    nsys, report, _ = fake
    monkeypatch.setenv("SPECPROF_NSYS", str(nsys))
    monkeypatch.setenv("FAKE_NSYS_EXPORT_RC", "3")
    result = analyze(report)
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"specprof: error: {report}: `nsys export --type sqlite` failed (exit 3: ERROR: the "
                           "report is damaged)")
    assert not list((report.parent).glob("*.sqlite")) and not list(Path(report.parent).glob(".export-*"))


def test_without_nsys_the_one_line_explanation_stays(fake, monkeypatch):
    _, report, calls = fake
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    if shutil.which("nsys"):
        pytest.skip("an nsys is installed in /usr/bin here")
    result = analyze(report)
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line == (f"specprof: error: {report}: not a SQLite file; export the report with `nsys export --type "
                    "sqlite -o RUN.sqlite RUN.nsys-rep` and analyze RUN.sqlite")
    assert calls() == []


def test_a_specprof_nsys_that_is_not_executable_is_named(fake, monkeypatch):
    _, report, _ = fake
    monkeypatch.setenv("SPECPROF_NSYS", str(report))
    result = analyze(report)
    assert result.exit_code == 2
    assert result.output.strip() == (f"specprof: error: $SPECPROF_NSYS is {str(report)!r}, which is not an "
                                     "executable nsys; fix it or leave it unset")
