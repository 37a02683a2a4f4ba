"""Inputs that used to end in a traceback or a hang: each is now one line on stderr and exit code 2. The exports
are copies of real captures with one value changed (said in each test); the stores are made by specprof from
real captures, then changed by hand as a user with the sqlite3 shell could."""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading

import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from conftest import FIXTURES

K2 = FIXTURES / "reference-k2" / "run.sqlite"
K4 = FIXTURES / "reference-k4" / "run.sqlite"


def one_line(result, *words):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    error = [line for line in lines if "rror" in line]
    assert len(error) == 1, result.stderr
    assert all(w in error[0] for w in words), error[0]
    return error[0]


@pytest.mark.parametrize("args, words", [
    (["--time-window", "1e300:1e301"], ["--time-window takes numbers up to"]),
    (["--cycle-window", "0:99999999999999999999"], ["--cycle-window takes numbers up to"]),
    (["--show-cycles", "99999999999999999999"], ["--show-cycles"]),
    (["--phases", "99999999999999999999"], ["--phases"]),
    (["--skip-warmup", "99999999999999999999"], ["--skip-warmup"]),
    (["--steps", "99999999999999999999"], ["--steps"]),
], ids=lambda x: x[0] if isinstance(x[0], str) and x[0].startswith("--") else None)
def test_numbers_beyond_64_bits_are_refused(args, words):
    one_line(CliRunner().invoke(main, ["analyze", str(K2), "--no-cache", "-q", *args]), *words)


def test_a_kernel_from_minus_to_plus_2_62_is_refused(tmp_path):
    # The first kernel of reference-k4-tp2 (two ranks: the per-rank step runs) moved to [-2^62, 2^62]: each
    # bound is allowed, but its duration (2^63 ns) overflowed 64 bits in derived/ranks.py.
    path = tmp_path / "run.sqlite"
    shutil.copy(FIXTURES / "reference-k4-tp2" / "run.sqlite", path)
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = ?, end = ? WHERE rowid = "
                "(SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)", (-2**62, 2**62))
    con.commit()
    con.close()
    for args in ([], ["--json"]):
        one_line(CliRunner().invoke(main, ["analyze", str(path), "--no-cache", "-q", *args]),
                 str(path), "more than 2^55 ns")


def test_a_blob_in_the_export_metadata_is_read_as_text(tmp_path):
    import json

    path = tmp_path / "run.sqlite"
    shutil.copy(K2, path)
    con = sqlite3.connect(path)
    con.execute("UPDATE META_DATA_EXPORT SET value = ? WHERE name = 'EXPORT_PRODUCT_VERSION'", (b"\x00\xff\x1b",))
    con.execute("UPDATE TARGET_INFO_GPU SET name = ?", (b"GPU\xff",))
    con.commit()
    con.close()
    out = CliRunner().invoke(main, ["analyze", str(path), "--no-cache", "-q", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["source"]["tool_version"] == "\x00\ufffd\x1b"


def test_text_where_the_export_metadata_has_an_id_is_refused(tmp_path):
    path = tmp_path / "run.sqlite"
    shutil.copy(K2, path)
    con = sqlite3.connect(path)
    con.execute("UPDATE PROCESSES SET globalPid = 'x'")
    con.commit()
    con.close()
    one_line(CliRunner().invoke(main, ["analyze", str(path), "--no-cache", "-q"]), "table PROCESSES")


def test_a_fifo_named_like_an_export_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "run.sqlite"
    os.mkfifo(fifo)
    done = {}
    worker = threading.Thread(target=lambda: done.setdefault(
        "result", CliRunner().invoke(main, ["analyze", str(fifo), "--no-cache", "-q"])), daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive():  # let the blocked open go, then fail
        with open(fifo, "wb"):
            pass
        worker.join(10)
        pytest.fail("specprof waited on a FIFO")
    one_line(done["result"], str(fifo), "not a regular file")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = tmp_path_factory.mktemp("store") / "runs.db"
    for export in (K2, K4):
        out = CliRunner().invoke(main, ["analyze", str(export), "--db", str(db), "-q"])
        assert out.exit_code == 0, out.output
    return db


@pytest.mark.parametrize("change, words", [
    ("UPDATE runs SET cycles = 'abc' WHERE id = 1", ["table runs, column cycles: 'abc'"]),
    ("UPDATE runs SET wall_ns = 1e300 WHERE id = 1", ["table runs, column wall_ns: 1e+300"]),
    ("UPDATE runs SET cycles = 9223372036854775807 WHERE id = 1", ["9223372036854775807"]),
    ("UPDATE categories SET ns = 'x' WHERE run_id = 1", ["table categories, column ns"]),
    ("UPDATE categories SET ns = 9223372036854775807 WHERE run_id = 1", ["table categories"]),
    ("DROP VIEW phase_ms; DROP TABLE categories", ["no such table: categories"]),
    ("DROP VIEW phase_ms; DROP VIEW rank_ms; DROP TABLE runs", ["no such table: runs"]),
], ids=["text", "real", "huge", "text-categories", "huge-categories", "no-categories", "no-runs"])
def test_a_store_changed_by_hand_is_one_line(store, tmp_path, change, words):
    db = tmp_path / "runs.db"
    shutil.copy(store, db)
    con = sqlite3.connect(db)
    con.executescript(change)
    con.close()
    results = [CliRunner().invoke(main, ["compare", "@1", "@2", "--db", str(db)])]
    if "categories" not in change:
        results.append(CliRunner().invoke(main, ["runs", "--db", str(db)]))
        results.append(CliRunner().invoke(main, ["runs", "--db", str(db), "--json"]))
    for result in results:
        one_line(result, str(db), "the results store is damaged or was changed by hand", *words)


def _store_state(db) -> tuple:
    con = sqlite3.connect(db)
    try:
        return tuple(con.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in ("runs", "imports", "phases"))
    finally:
        con.close()


@pytest.mark.parametrize("change, words", [
    # an earlier run's wall time set to 0 by every run added after it
    ("CREATE TRIGGER zero_wall AFTER INSERT ON runs BEGIN UPDATE runs SET wall_ns = 0 WHERE id < NEW.id; END",
     ["1 trigger(s) (zero_wall)", "DROP TRIGGER"]),
    ("CREATE TRIGGER a AFTER INSERT ON imports BEGIN DELETE FROM phases; END; "
     "CREATE TRIGGER b BEFORE INSERT ON phases BEGIN SELECT 1; END", ["2 trigger(s) (a, b)"]),
    # a view where a table belongs: what is read there is not what specprof wrote, and nothing can be added
    ("ALTER TABLE kernels RENAME TO kernels_kept; CREATE VIEW kernels AS SELECT * FROM kernels_kept",
     ["kernels is a view where the results store keeps a table"]),
], ids=["trigger-on-runs", "two-triggers", "view-for-a-table"])
def test_a_store_with_triggers_or_views_for_tables_is_refused_before_any_append(store, tmp_path, change, words):
    db = tmp_path / "runs.db"
    shutil.copy(store, db)
    con = sqlite3.connect(db)
    con.executescript(change)
    con.close()
    before = _store_state(db)
    out = CliRunner().invoke(main, ["analyze", str(FIXTURES / "reference-k6" / "run.sqlite"), "--db", str(db), "-q"])
    one_line(out, str(db), *words)
    assert _store_state(db) == before  # nothing appended, no trigger ran
    listed = CliRunner().invoke(main, ["runs", "--db", str(db)])
    if "VIEW" in change:  # read nowhere either
        one_line(listed, str(db), *words)
    else:  # a trigger runs on writes only: reading the store is as before
        assert listed.exit_code == 0 and "@2" in listed.output, listed.output


def test_ids_of_runs_deleted_by_hand_are_not_given_again(store, tmp_path):
    # The last run deleted in the sqlite3 shell (no foreign keys there): its phases, ranks and cycles stay,
    # and SQLite would give its id to the next run, whose rows then collided with them ("damaged").
    db = tmp_path / "runs.db"
    shutil.copy(store, db)
    con = sqlite3.connect(db)
    con.execute("DELETE FROM runs WHERE id = 2")
    con.execute("DELETE FROM imports WHERE id = (SELECT max(id) FROM imports)")
    con.commit()
    con.close()
    out = CliRunner().invoke(main, ["analyze", str(FIXTURES / "reference-k6" / "run.sqlite"), "--db", str(db), "-q"])
    assert out.exit_code == 0, out.output
    assert "stored as run @3" in out.stderr
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM phases WHERE run_id = 3").fetchone()[0] > 0
    assert con.execute("SELECT max(id) FROM imports").fetchone()[0] == 3
    con.close()
    compared = CliRunner().invoke(main, ["compare", "@1", "@3", "--db", str(db)])
    assert compared.exit_code == 0, compared.output


# -- JSON nested deeper than Python's parser goes: a RecursionError, once a traceback -----------------------------
DEEP = "[" * 50_000


def _run_copy(tmp_path):
    """A copy of the reference-k2 run directory (its export, sidecar, ground truth, manifest and its twin's)."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "reference-k2", run)
    return run


def _sidecar(folder):
    (path,) = folder.glob("specprof-sidecar.*.jsonl")
    return path


def _plant_line(path, number: int) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[number - 1] = DEEP + "\n"
    path.write_text("".join(lines))


@pytest.mark.parametrize("where", ["sidecar header", "sidecar line", "twin's sidecar line", "manifest",
                                   "ground truth", "categories"])
def test_json_nested_too_deep_is_one_line_naming_the_file(tmp_path, where):
    run = _run_copy(tmp_path)
    args = ["analyze", str(run), "-q", "--no-cache"]
    if where == "sidecar header":
        path = _sidecar(run)
        _plant_line(path, 1)
        words = [f"{path}: not a specprof sidecar (the first line is not JSON, nested too deep to read)"]
    elif where == "sidecar line":
        path = _sidecar(run)
        _plant_line(path, 5)
        words = [f"{path}:5: not valid JSON, nested too deep to read: the sidecar is damaged"]
    elif where == "twin's sidecar line":
        path = _sidecar(run / "no-nsys")
        _plant_line(path, 7)
        words = [f"{path}:7: not valid JSON, nested too deep to read: the sidecar is damaged"]
    elif where == "manifest":
        path = run / "manifest.json"
        path.write_text(DEEP)
        words = [f"{path}: not valid JSON, nested too deep to read: the run's manifest is damaged"]
    elif where == "ground truth":
        path = run / "ground_truth.json"
        path.write_text(DEEP)
        words = [f"{path}: JSON nested too deep to read: not a specprof ground-truth file"]
    else:
        path = tmp_path / "categories.toml"
        path.write_text("[[rule]]\ncategory = \"x\"\npattern = " + DEEP + "\n")
        args += ["--categories", str(path)]
        words = [f"{path}: not valid TOML (nested too deep to read)"]
    one_line(CliRunner().invoke(main, args), *words)


def test_a_last_sidecar_line_nested_too_deep_and_cut_is_left_out_with_a_note(tmp_path):
    # A process killed in the middle of its last write: the cut line is left out, as any cut last line is.
    from specprof.analyzer.readers.sidecar import read_sidecars

    path = _sidecar(_run_copy(tmp_path))
    path.write_bytes(path.read_bytes() + DEEP.encode())  # no newline: the line was cut
    sidecars = read_sidecars([str(path)])
    assert any("the last line is cut off" in n for n in sidecars.notes)


# -- exports edited by hand: each value below made nsys's reader give other numbers with exit 0, or a traceback --

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
FIRST_RANGE = "(SELECT min(rowid) FROM NVTX_EVENTS WHERE eventType = 59)"
A_LAUNCH = ("(SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IN "
            "(SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL))")


def _edited(tmp_path, *sql, source=K4) -> str:
    path = tmp_path / "run.sqlite"
    shutil.copy(source, path)
    con = sqlite3.connect(path)
    for statement in sql:
        con.execute(statement)
    con.commit()
    con.close()
    return str(path)


def _refused_both_ways(path: str, *words) -> None:
    from specprof.analyzer.errors import SpecprofError
    from specprof.analyzer.readers.nsys import read_nsys_sqlite

    for pages in (True, False):
        with pytest.raises(SpecprofError) as caught:
            read_nsys_sqlite(path, pages=pages)
        assert all(w in str(caught.value) for w in words), (pages, str(caught.value))
    for pages in ("1", "0"):  # and as a user meets it: one line
        os.environ["SPECPROF_SQLITE_PAGES"] = pages
        try:
            one_line(CliRunner().invoke(main, ["analyze", path, "--no-cache", "-q"]), path)
        finally:
            os.environ.pop("SPECPROF_SQLITE_PAGES")


@pytest.mark.parametrize("sql, words", [
    # filtered on before it was validated: the range's row left out without a word (500 ranges, exit 0)
    (f"UPDATE NVTX_EVENTS SET eventType = 'x' WHERE rowid = {FIRST_RANGE}", ["not integers", "event_type"]),
    (f"UPDATE NVTX_EVENTS SET eventType = 59.0001 WHERE rowid = {FIRST_RANGE}", ["not integers", "event_type"]),
    # a launch call without its thread: left out by the filter that keeps the calls an op carries
    (f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = NULL WHERE rowid = {A_LAUNCH}",
     ["CUPTI_ACTIVITY_KIND_RUNTIME", "1 rows have no globalTid"]),
    (f"UPDATE NVTX_EVENTS SET globalTid = NULL WHERE rowid = {FIRST_RANGE}", ["NVTX_EVENTS", "no globalTid"]),
], ids=["event-type-text", "event-type-real", "call-without-thread", "range-without-thread"])
def test_a_value_filtered_on_is_validated_before_its_row_is_left_out(tmp_path, sql, words):
    _refused_both_ways(_edited(tmp_path, sql), *words)


@pytest.mark.parametrize("sql, words", [
    (f"UPDATE {KERNEL} SET end = start - 1000 WHERE rowid = 100", [KERNEL, "before"]),
    # the 31st verify range with start and end swapped: argmax of an empty sequence in derived/economics.py
    ("UPDATE NVTX_EVENTS SET start = end, end = start WHERE rowid = (SELECT n.rowid FROM NVTX_EVENTS n JOIN "
     "StringIds s ON s.id = n.textId WHERE s.value = 'verify' ORDER BY n.start LIMIT 1 OFFSET 30)",
     ["NVTX_EVENTS", "before"]),
    (f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end = start - 1 WHERE rowid = {A_LAUNCH}",
     ["CUPTI_ACTIVITY_KIND_RUNTIME", "before"]),
], ids=["kernel", "verify-range", "call"])
def test_a_span_that_ends_before_it_starts_is_refused(tmp_path, sql, words):
    _refused_both_ways(_edited(tmp_path, sql), *words)


def test_a_span_that_ends_before_it_starts_outside_a_window_is_refused_by_the_window_read(tmp_path):
    # The last kernel ends before it starts: a window of the first cycles reads none of its rows, but the zones it
    # plans with are read from every page, as the whole read reads them.
    path = _edited(tmp_path, f"UPDATE {KERNEL} SET end = start - 1000 WHERE rowid = (SELECT max(rowid) FROM {KERNEL})")
    one_line(CliRunner().invoke(main, ["analyze", path, "--no-cache", "-q", "--cycle-window", "0:3"]), path, KERNEL,
             "before it starts")


@pytest.mark.parametrize("sql, words", [
    # read as empty: 1,209 GPU ops (memcpys and memsets), exit 0
    ([f"DROP TABLE {KERNEL}"], [f"no {KERNEL} table", "launched kernels"]),
    # every op unattributed, every cycle 0.000 ms
    (["DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME"], ["no CUPTI_ACTIVITY_KIND_RUNTIME table"]),
    # 0 cycles: the phases' names are strings
    (["DROP TABLE StringIds"], ["no StringIds table"]),
    (["ALTER TABLE NVTX_EVENTS DROP COLUMN textId"], ["no textId column"]),
    # 1,002 ranges (each range once per name), exit 0
    (["ALTER TABLE StringIds RENAME TO kept", "CREATE TABLE StringIds (id INTEGER NOT NULL, value TEXT NOT NULL)",
      "INSERT INTO StringIds SELECT * FROM kept", "INSERT INTO StringIds SELECT id, value || '_2' FROM kept",
      "DROP TABLE kept"], ["StringIds gives 518 ids more than one name"]),
    # TypeError in derived/ranks.py
    ([f"ALTER TABLE {KERNEL} DROP COLUMN globalPid"], [f"{KERNEL} has no column globalPid"]),
], ids=["no-kernels", "no-calls", "no-strings", "no-textId", "strings-twice", "no-globalPid"])
def test_a_table_or_column_nsys_writes_is_never_read_as_empty(tmp_path, sql, words):
    _refused_both_ways(_edited(tmp_path, *sql), *words)


@pytest.mark.parametrize("sql, table", [
    # a name id StringIds does not have: the kernel, the launch call or the range had no name, with exit 0
    (f"UPDATE {KERNEL} SET demangledName = 999999, shortName = 999999 WHERE rowid = 300", KERNEL),
    (f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 999999 WHERE rowid = {A_LAUNCH}", "CUPTI_ACTIVITY_KIND_RUNTIME"),
    ("UPDATE NVTX_EVENTS SET textId = 999999 WHERE rowid = (SELECT rowid FROM NVTX_EVENTS WHERE eventType = 59 "
     "ORDER BY start LIMIT 1 OFFSET 20)", "NVTX_EVENTS"),
], ids=["kernel", "launch-call", "range"])
def test_a_name_that_is_not_in_stringids_is_refused(tmp_path, sql, table):
    _refused_both_ways(_edited(tmp_path, sql), f"table {table}: 1 rows name a string (id 999999)")


def test_an_export_without_kernels_of_a_capture_without_kernels_is_still_read(tmp_path):
    # The other side of the rule above: nsys writes its tables lazily, and a capture that launched no kernel has
    # no kernel table. The kernels and their launch calls removed: the memcpys and memsets are analysed.
    path = _edited(tmp_path, f"DROP TABLE {KERNEL}", "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN "
                   "(SELECT id FROM StringIds WHERE value LIKE 'cu%LaunchKernel%' OR value LIKE 'cu%GraphLaunch%')")
    out = CliRunner().invoke(main, ["analyze", path, "--no-cache", "-q"])
    assert out.exit_code == 0, out.output
    assert "1,209 GPU ops" in out.stdout


def test_one_column_read_twice_through_sqlite(tmp_path):
    # shortName dropped (the kernels' short names are then read from demangledName) and the write-ahead log on,
    # which sends the tables to SQLite: its two columns of one name were polars' DuplicateError.
    path = _edited(tmp_path, f"ALTER TABLE {KERNEL} DROP COLUMN shortName", "PRAGMA journal_mode = WAL")
    out = CliRunner().invoke(main, ["analyze", path, "--no-cache", "-q"])
    assert out.exit_code == 0, out.output
    assert "21,126 GPU ops" in out.stdout


@pytest.mark.parametrize("sql, note", [
    # one kernel made 2^30 ns long: it covers the 15,824 ops after it on its stream, and the median cycle read
    # 0.0 ms without a word
    (f"UPDATE {KERNEL} SET end = start + (1 << 30) WHERE rowid = 5000",
     "15,824 GPU ops lie wholly inside an earlier op on their stream (device 0 stream 7)"),
    # the 21st range made 3 ms longer: it ends after the cycle it began in (push/pop ranges nest)
    ("UPDATE NVTX_EVENTS SET end = end + 3000000 WHERE rowid = (SELECT rowid FROM NVTX_EVENTS WHERE eventType = 59 "
     "ORDER BY start LIMIT 1 OFFSET 20)", "3 ranges end after the range they begin in, on its thread"),
], ids=["op-inside-an-op", "ranges-crossing"])
def test_times_no_capture_can_have_are_announced(tmp_path, sql, note):
    import json

    path = _edited(tmp_path, sql)
    out = CliRunner().invoke(main, ["analyze", path, "--no-cache", "-q"])
    assert out.exit_code == 0, out.output
    assert note in out.stdout
    out = CliRunner().invoke(main, ["analyze", path, "--no-cache", "-q", "--json"])
    assert any(n.startswith(note) for n in json.loads(out.stdout)["notes"])


@pytest.mark.parametrize("baseline, words", [
    ("sglang-plain", ["different engines: reference", "sglang (", "different models"]),
    ("sglang-dense-plain", ["different engines", "model-path=/root/sglang-runs/model-dense/target"]),
])
def test_a_baseline_of_another_workload_is_refused_as_compare_and_sweep_refuse_it(baseline, words):
    # `analyze fixtures/reference-k4 --baseline fixtures/sglang-plain` printed "a wash: 1.04x": the step time of
    # another engine and model, as if it were this workload's plain decoding.
    run = str(FIXTURES / "reference-k4")
    out = CliRunner().invoke(main, ["analyze", run, "--baseline", str(FIXTURES / baseline), "-q"])
    one_line(out, f"--baseline {FIXTURES / baseline} is not the plain decoding of this workload", "--allow-mixed",
             *words)
    out = CliRunner().invoke(main, ["analyze", run, "--baseline", str(FIXTURES / baseline), "-q", "--allow-mixed"])
    assert out.exit_code == 0 and "the plain-decode throughput" in out.stdout, out.output
    # its own plain decoding is a baseline, as for the sglang runs: their draft model is no difference
    for run, plain in (("reference-k4", "reference-k0"), ("sglang-k4", "sglang-plain")):
        out = CliRunner().invoke(main, ["analyze", str(FIXTURES / run), "--baseline", str(FIXTURES / plain), "-q"])
        assert out.exit_code == 0 and "the plain-decode throughput" in out.stdout, out.output
