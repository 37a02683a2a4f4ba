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
