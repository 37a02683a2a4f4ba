"""Errors a user can meet: one clear line naming the file, exit code 2, never a traceback."""

from __future__ import annotations

import shutil
import sqlite3

import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from conftest import FIXTURES


def run(*args):
    result = CliRunner().invoke(main, ["analyze", *map(str, args)])
    return result


def assert_clean_error(result, path, words):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert str(path) in lines[0] and lines[0].startswith("specprof: error:")
    assert any(w in lines[0] for w in words), lines[0]


def test_missing_path(tmp_path):
    p = tmp_path / "nope.sqlite"
    assert_clean_error(run(p), p, ["no such file"])


def test_directory_without_an_export(tmp_path):
    assert_clean_error(run(tmp_path), tmp_path, ["no nsys SQLite export"])


def test_not_sqlite(tmp_path, monkeypatch):
    # with no nsys to export it (tests/test_nsys_report.py: with one)
    from specprof.tracer import capture

    for name in ("NSYS", "SPECPROF_NSYS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", "/nowhere")
    monkeypatch.setattr(capture, "SEARCH_ROOT", tmp_path / "no-install-folders")
    p = tmp_path / "report.nsys-rep"
    p.write_bytes(b"\x00\x01binary nsys report, not an export" * 10)
    assert_clean_error(run(p), p, ["not a SQLite file"])


def test_sqlite_but_not_nsys(tmp_path):
    p = tmp_path / "other.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE t (a INTEGER)")
    con.commit()
    con.close()
    assert_clean_error(run(p), p, ["not an Nsight Systems export"])


def test_truncated(tmp_path, shared_dir):
    src = shared_dir / "nsys_sqlite" / "nsysai_mfu_2gpu_before.sqlite"
    p = tmp_path / "cut.sqlite"
    p.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    assert_clean_error(run(p), p, ["truncated"])


def test_truncated_tail_pages_with_a_lying_header(tmp_path, shared_dir):
    # A file cut short whose header was rewritten to match: SQLite itself must then report it.
    src = shared_dir / "nsys_sqlite" / "nsysai_mfu_2gpu_before.sqlite"
    data = bytearray(src.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    keep = (len(data) // page // 3) * page
    data = data[:keep]
    data[28:32] = (keep // page).to_bytes(4, "big")
    p = tmp_path / "cut2.sqlite"
    p.write_bytes(bytes(data))
    assert_clean_error(run(p), p, ["truncated or corrupt", "is damaged", "no GPU operations"])


def test_no_gpu_ops(tmp_path, shared_dir):
    p = tmp_path / "nogpu.sqlite"
    shutil.copy(shared_dir / "nsys_sqlite" / "nsysai_mock.sqlite", p)
    con = sqlite3.connect(p)
    for t in ("KERNEL", "MEMCPY", "MEMSET"):
        try:
            con.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_{t}")
        except sqlite3.OperationalError:
            pass
    con.commit()
    con.close()
    assert_clean_error(run(p), p, ["no GPU operations"])


def test_no_nvtx_ranges_still_reports_kernels(shared_dir):
    # mock.sqlite is a real export with no NVTX at all.
    p = shared_dir / "nsys_sqlite" / "nsysai_mock.sqlite"
    result = run(p)
    assert result.exit_code == 0, result.output
    assert "no phases found" in result.output
    assert "Top kernels per phase" in result.output and "reduce_kernel" in result.output


def test_bad_categories_file(tmp_path, shared_dir):
    cats = tmp_path / "cats.toml"
    cats.write_text('[[rule]]\ncategory = "x"\npattern = "(unclosed"\n')
    result = CliRunner().invoke(main, ["analyze", str(shared_dir / "nsys_sqlite" / "nsysai_mock.sqlite"),
                                       "--categories", str(cats)])
    assert_clean_error(result, cats, ["bad pattern"])


@pytest.mark.parametrize("name", ["we?ird#name%20.sqlite", "spa ce.sqlite"])
def test_paths_with_uri_characters(tmp_path, shared_dir, name):
    p = tmp_path / name
    shutil.copy(shared_dir / "nsys_sqlite" / "nsysai_mock.sqlite", p)
    result = run(p)
    assert result.exit_code == 0, result.output


# -- inputs an attacker (or a broken disk) gives: one line, exit 2 ----------------------------------------------------

K4 = FIXTURES / "reference-k4"


def _cli(*args, drop_root=False):
    """`specprof ARGS` in a child process; with `drop_root`, without the capabilities that let root read and
    write whatever the file modes say (the tests run as root in CI)."""
    import subprocess
    import sys

    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if drop_root else []
    if drop_root and shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not here to drop the file-permission override")
    return subprocess.run([*prefix, sys.executable, "-m", "specprof", *args], capture_output=True, timeout=300)


def _one_line(done, starts: str) -> str:
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2 and "Traceback" not in err, err[-2000:]
    (line,) = [x for x in err.splitlines() if x.strip()]
    assert line.startswith(starts), line
    return line


def test_an_unreadable_trace_file_and_directory(tmp_path):
    export = tmp_path / "run.sqlite"
    shutil.copy(K4 / "run.sqlite", export)
    export.chmod(0)
    line = _one_line(_cli("analyze", str(export), "-q", drop_root=True), f"specprof: error: {export}: cannot read")
    assert "Permission denied" in line
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(K4 / "run.sqlite", folder / "run.sqlite")
    folder.chmod(0)
    try:
        _one_line(_cli("analyze", str(folder), "-q", drop_root=True),
                  f"specprof: error: {folder}: cannot list the directory")
    finally:
        folder.chmod(0o755)


def test_file_and_directory_names_that_are_not_utf8(tmp_path):
    import os

    folder = os.fsencode(tmp_path) + b"/run-\xff"
    os.mkdir(folder)
    shutil.copy(K4 / "run.sqlite", os.fsdecode(folder + b"/run.sqlite"))
    loose = os.fsencode(tmp_path) + b"/k4-\xfe.sqlite"
    shutil.copy(K4 / "run.sqlite", os.fsdecode(loose))
    for path in (folder, loose):
        done = _cli("analyze", os.fsdecode(path), "-q")
        assert done.returncode == 0, done.stderr.decode("utf-8", "replace")[-2000:]
        assert b"verify" in done.stdout


def test_a_binary_categories_file(tmp_path):
    cats = tmp_path / "cats.toml"
    cats.write_bytes(bytes(range(256)) * 8)
    result = CliRunner().invoke(main, ["analyze", str(K4 / "run.sqlite"), "--categories", str(cats)])
    assert_clean_error(result, cats, ["not UTF-8 text"])


@pytest.mark.parametrize("args", [["analyze", str(K4), "--baseline-ms", "inf"],
                                  ["analyze", str(K4), "--baseline-ms", "nan"],
                                  ["compare", str(K4), str(K4), "--fail-if-slower", "nan"],
                                  ["compare", str(K4), str(K4), "--fail-if-slower", "inf"]])
def test_numbers_that_are_not_finite_are_refused(args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "is not a finite number" in result.output, result.output


@pytest.mark.parametrize("command", [["analyze", str(K4)], ["report", str(K4)],
                                     ["sweep", str(FIXTURES / "reference-k2"), str(K4)]], ids=lambda c: c[0])
def test_a_baseline_that_is_not_there_names_what_baseline_takes(tmp_path, command):
    # --baseline takes a run directory, a sidecar or a trace of any kind: the line says so, not "an nsys export"
    nope = tmp_path / "nope"
    result = CliRunner().invoke(main, [*command, "--baseline", str(nope), "-o" if command[0] == "report" else "--json",
                                       *([str(tmp_path / "r.html")] if command[0] == "report" else [])])
    assert_clean_error(result, nope, ["no such file or directory"])
    assert "give the non-speculative run's directory, its sidecar (specprof-sidecar.*.jsonl), or its trace" in \
        result.output


@pytest.mark.parametrize("args, words", [(["--skip-warmup", "-1"], "-1 is not in the range x>=0"),
                                         (["--show-cycles", str(2**63)], "is more than any trace holds")])
def test_counts_out_of_range_say_the_range_the_help_shows(args, words):
    result = CliRunner().invoke(main, ["analyze", str(K4), *args])
    assert result.exit_code == 2 and words in result.output, result.output


def _changed(tmp_path, *sql) -> str:
    path = tmp_path / "run.sqlite"
    shutil.copy(K4 / "run.sqlite", path)
    con = sqlite3.connect(path)
    for statement in sql:
        con.execute(statement)
    con.commit()
    con.close()
    return str(path)


@pytest.mark.parametrize("sql, words", [
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = NULL WHERE rowid = 3", "1 rows have no globalPid"),
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = 'abc' WHERE rowid = 3",
     "not integers in the column read as stream"),
    ("UPDATE NVTX_EVENTS SET start = 'abc' WHERE rowid = 30", "not integers in the column read as start"),
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -9223372036854775808 WHERE rowid = 3", "a start beyond +-2^62 ns"),
    ("UPDATE NVTX_EVENTS SET start = -9223372036854775808 WHERE rowid = 30", "a start beyond +-2^62 ns"),
], ids=["null-globalPid", "text-stream", "text-nvtx-start", "int64-min-kernel", "int64-min-nvtx"])
def test_values_nsys_never_writes_are_refused_by_both_paths(tmp_path, monkeypatch, sql, words):
    path = _changed(tmp_path, sql)
    for direct in (True, False):
        monkeypatch.setenv("SPECPROF_SQLITE_PAGES", "1" if direct else "0")  # as a user picks the read path
        result = run(path, "--no-cache")
        assert_clean_error(result, path, [words])


def test_text_in_the_schema_that_is_not_utf8(tmp_path):
    # A declared column type with a byte that is not UTF-8 (SQLite keeps the schema's text as it was given).
    path = tmp_path / "run.sqlite"
    shutil.copy(K4 / "run.sqlite", path)
    con = sqlite3.connect(path)
    sql = con.execute("SELECT sql FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()[0]
    new = sql.encode().replace(b"INTEGER   NOT NULL,", b"INTEGER\xff NOT NULL,", 1)
    con.execute("PRAGMA writable_schema = ON")
    con.execute("UPDATE sqlite_master SET sql = CAST(? AS TEXT) WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'", (new,))
    con.commit()
    con.close()
    result = run(path, "--no-cache")
    assert result.exit_code == 0, result.output
    assert "verify" in result.output


@pytest.mark.parametrize("name, body", [
    ("trace.json.gz", None),  # a real Kineto trace, decompressed but still named .gz
    ("trace.json.gz", b"\x00garbage that is no gzip"),
    ("run.sqlite.gz", None),
])
def test_a_gz_that_is_not_gzip_says_so(tmp_path, shared_dir, name, body):
    if body is None:
        import gzip

        src = "torch_kineto/hta_trace_diff__control__control.json.gz" if name.endswith(".json.gz") else None
        body = gzip.open(shared_dir / src).read() if src else (FIXTURES / "reference-k4" / "run.sqlite").read_bytes()
    p = tmp_path / name
    p.write_bytes(body)
    assert_clean_error(run(p), p, ["not gzip-compressed"])
    lines = run(p).output
    assert "no GPU events" not in lines and "truncated" not in lines


# -- a crash in native code (the console script's handler, analyzer/_scan.c fatal_line) ---------------------------
# A workload that ends once specprof (its parent) is gone.
_WAITING = "import os, time\nparent = os.getppid()\nwhile os.getppid() == parent:\n    time.sleep(0.05)\n"


def _console_script_waiting(tmp_path):
    """`python3 -m specprof capture --no-nsys` of a workload that waits: a console script that has set its handlers
    (they are set first) and sits in Python code until a signal comes."""
    import os
    import subprocess
    import sys
    import time

    from conftest import ROOT

    pytest.importorskip("specprof.analyzer._scan")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONFAULTHANDLER", None)
    child = subprocess.Popen([sys.executable, "-m", "specprof", "capture", "--no-nsys", "--no-tracer", "-o",
                              str(tmp_path / "run"), "--", sys.executable, "-c", _WAITING],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not (tmp_path / "run" / "server.log").exists():  # made just before the workload starts
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()
        time.sleep(0.05)
    return child


@pytest.mark.parametrize("name", ["SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGFPE"])
def test_a_crash_in_native_code_names_its_signal_and_keeps_pythons_traceback(tmp_path, name):
    # Every such signal was "a crash in native code, out of memory as a rule ... raise the limit": a memory bug
    # (in the page reader, on a crafted file) would have been reported as a lack of memory.
    import signal

    from specprof.analyzer.cli import CRASH, FATAL_SIGNALS

    child = _console_script_waiting(tmp_path)
    signum = getattr(signal, name)
    child.send_signal(signum)
    _, err = child.communicate(timeout=120)
    assert child.returncode == -signum, err  # ended by the signal, after the handlers it passed through
    lines = err.splitlines()
    assert lines[0] == CRASH.format(name=name, what=FATAL_SIGNALS[name]), err
    assert "report it to specprof's maintainers" in lines[0] and "out of memory" not in err
    # Python's faulthandler: the fatal error, then each thread's stack, this one's ending in the console script
    assert lines[1].startswith("Fatal Python error: ") and "Current thread" in err, err
    assert 'specprof/__main__.py", line' in err


def test_a_crash_close_to_a_memory_limit_is_the_out_of_memory_line(tmp_path):
    # A failed allocation that a library dereferenced is the same SIGSEGV; close to the address-space limit
    # (here: set just above the process's size), it is one line, exit 2, as running out of memory is.
    import resource
    import signal

    from specprof.analyzer.cli import NATIVE_OUT_OF_MEMORY

    child = _console_script_waiting(tmp_path)
    size = int(open(f"/proc/{child.pid}/statm").read().split()[0]) * resource.getpagesize()
    resource.prlimit(child.pid, resource.RLIMIT_AS, (size + (64 << 20), resource.RLIM_INFINITY))
    child.send_signal(signal.SIGSEGV)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 2 and err == NATIVE_OUT_OF_MEMORY + "\n", err
