"""The results store (analyzer/app/store.py) on the project's real captures: what a run's rows hold, idempotent
re-import, foreign keys, listing, compare and sweep by run id (equal to the same commands on the files), and
untrusted names staying data."""

from __future__ import annotations

import json
import sqlite3

import polars as pl
import pytest
from click.testing import CliRunner

from specprof.analyzer.app import store, traces
from specprof.analyzer.app.analyze import Options
from specprof.analyzer.app.commands import load_sweep
from specprof.analyzer.app.run import Run
from specprof.analyzer.cli import main
from specprof.analyzer.core.attribution import attribute
from specprof.analyzer.derived.compare import compare
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.readers.load import load_trace
from conftest import FIXTURES

K2, K4, K6 = (str(FIXTURES / f"reference-k{k}") for k in (2, 4, 6))


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A store holding K=4, K=2, K=6 (in that order: @1, @2, @3), filled through the CLI."""
    db = str(tmp_path_factory.mktemp("store") / "results.db")
    for args in ([K4], [K2, K6]):
        out = CliRunner().invoke(main, ["analyze", *args, "--db", db, "--json"])
        assert out.exit_code == 0, out.output
    return db


def q(db, sql, *params):
    with sqlite3.connect(db) as conn:
        return conn.execute(sql, params).fetchall()


def test_a_run_dir_is_stored_with_its_manifest_phases_cycles_and_sidecar_results(stored):
    a = attribute(load_trace(K4))
    (run,) = q(stored, "SELECT id, path, format, cycles, steps, tokens, accept_len, preset, command, "
                       "rank_count, wall_ns FROM runs WHERE path = ?", K4)
    # cycles: the decode cycles of the breakdown (the last of the 100 has no end)
    assert run[:8] == (1, K4, "nsys-sqlite", 99, 4, 5, 2.625, "reference")
    assert json.loads(run[8])[-4:] == ["4", "--cycles", "100", "--profile-range"]
    assert run[9] == 1 and run[10] == int(a.streams["wall"].sum())
    phases = dict(q(stored, "SELECT phase, attributed_ns FROM phases WHERE run_id = 1"))
    assert phases == dict(a.phases.select("phase", "attributed").iter_rows())
    assert q(stored, "SELECT COUNT(*) FROM cycles WHERE run_id = 1") == [(100,)]
    assert q(stored, "SELECT COUNT(*) FROM crosscheck_consistency WHERE run_id = 1")[0][0] >= 3
    assert q(stored, "SELECT COUNT(*) FROM crosscheck_inflation WHERE run_id = 1")[0][0] > 0  # no-nsys/ baseline
    assert q(stored, "SELECT source FROM economics WHERE run_id = 1 AND headline = 1") == [("sidecar without nsys",)]
    # rank tables: one rank, its phases equal the run's
    assert q(stored, "SELECT rank, device, source FROM ranks WHERE run_id = 1") == [(0, 0, "device order")]
    rank_phases = dict(q(stored, "SELECT p.phase, p.attributed_ns FROM rank_phases p JOIN ranks k ON k.id = p.rank_id "
                                 "WHERE k.run_id = 1"))
    assert rank_phases == phases


def test_reimport_is_idempotent_and_each_import_is_recorded(stored):
    before = {t: q(stored, f"SELECT COUNT(*) FROM {t}")[0][0] for t in store.TABLES if t != "import_runs"}
    out = CliRunner().invoke(main, ["analyze", K4, "--db", stored])
    assert out.exit_code == 0
    assert "already in" in out.stderr and "as run @1" in out.stderr
    after = {t: q(stored, f"SELECT COUNT(*) FROM {t}")[0][0] for t in store.TABLES if t != "import_runs"}
    assert {t: after[t] - before[t] for t in before} == {t: (1 if t == "imports" else 0) for t in before}
    assert q(stored, "SELECT created FROM import_runs WHERE run_id = 1 ORDER BY import_id") == [(1,), (0,)]
    # other analysis options are another run (the key hashes the options as well as the trace)
    out = CliRunner().invoke(main, ["analyze", K4, "--db", stored, "--domain", "specprof"])
    assert out.exit_code == 0 and "stored as run @4" in out.stderr
    keys = q(stored, "SELECT trace_sha256, key FROM runs WHERE id IN (1, 4)")
    assert keys[0][0] == keys[1][0] and keys[0][1] != keys[1][1]


def test_foreign_keys_are_declared_and_enforced(stored):
    with sqlite3.connect(stored) as conn:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        fks = {t: {(r[3], r[2], r[4]) for r in conn.execute(f"PRAGMA foreign_key_list({t})")} for t in store.TABLES}
    assert ("run_id", "runs", "id") in fks["phases"] and ("rank_id", "ranks", "id") in fks["rank_phases"]
    assert ("cycle_id", "cycles", "id") in fks["cycle_phases"]
    db = store.connect(stored, create=False)
    with pytest.raises(sqlite3.IntegrityError):
        db.conn.execute("INSERT INTO phases (run_id, phase) VALUES (999, 'x')")
    db.conn.rollback()
    indexes = {r[1] for r in db.conn.execute("PRAGMA index_list(phases)")}
    assert any("run_id" in i for i in indexes)


def test_runs_lists_every_run(stored):
    out = CliRunner().invoke(main, ["runs", "--db", stored, "--json"])
    doc = json.loads(out.output)
    assert doc["schema"] == "specprof.runs/1"
    assert [(r["ref"], r["path"], r["steps"]) for r in doc["runs"]][:3] == [("@1", K4, 4), ("@2", K2, 2), ("@3", K6, 6)]
    text = CliRunner().invoke(main, ["runs", "--db", stored]).output
    assert "@3" in text and "reference-k6" in text


def test_compare_by_run_id_equals_compare_of_the_files(stored):
    a, b = Run.load(K4).analysis(), Run.load(K6).analysis()
    files = compare(a, b)
    out = CliRunner().invoke(main, ["compare", "@1", "@3", "--db", stored, "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    from_files = json.loads(CliRunner().invoke(main, ["compare", K4, K6, "--json"]).output)
    for key in ("phases", "categories", "unit", "total"):
        assert doc[key] == from_files[key]
    assert doc["total"]["change_pct"] == pytest.approx(files.change_pct, abs=1e-3)
    # a stored run against a run on disk (a CI baseline kept in the store)
    mixed = json.loads(CliRunner().invoke(main, ["compare", "@1", K6, "--db", stored, "--json"]).output)
    assert mixed["phases"] == from_files["phases"]
    slower = CliRunner().invoke(main, ["compare", "@1", "@3", "--db", stored, "--fail-if-slower", "5"])
    assert slower.exit_code == 1


def test_sweep_by_run_id_equals_the_sweep_of_the_run_dirs(stored):
    db = store.connect(stored, create=False)
    from_store = load_sweep(["@2", "@1", "@3"], db=db)
    from_files = load_sweep([K2, K4, K6])
    assert from_store.fits.drop("source").equals(from_files.fits.drop("source"))
    assert from_store.acceptance.equals(from_files.acceptance)
    assert from_store.predictions.equals(from_files.predictions)
    assert from_store.recommended_steps == from_files.recommended_steps
    assert from_store.runs.drop("path").equals(from_files.runs.drop("path"))


def test_errors_about_stored_runs_are_one_line(stored, tmp_path):
    r = CliRunner().invoke(main, ["compare", "@1", "@99", "--db", stored])
    assert r.exit_code == 2 and "no run with id 99" in r.output
    r = CliRunner().invoke(main, ["compare", "@1", "@3"])
    assert r.exit_code == 2 and "--db" in r.output
    r = CliRunner().invoke(main, ["runs", "--db", str(tmp_path / "none.db")])
    assert r.exit_code == 2 and "no such results database" in r.output
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    r = CliRunner().invoke(main, ["analyze", K4, "--db", str(other)])
    assert r.exit_code == 2 and "not a specprof results store" in r.output
    with pytest.raises(SpecprofError):
        store.parse_run_id("@x")


def test_untrusted_names_are_stored_as_data(tmp_path):
    # Synthetic names (no capture has hostile ones): a phase and a kernel named like SQL stay text.
    a = Run.load(K4).analysis()
    evil = "x'); DROP TABLE runs; --"
    a.attribution.phases = a.phases.with_columns(phase=pl.when(pl.int_range(pl.len()) == 0).then(pl.lit(evil))
                                                 .otherwise(pl.col("phase")))
    a.attribution.kernels = a.kernels.with_columns(short_name=pl.lit(evil + " kernel"))
    rec = store.record(a, path=K4, trace_path=str(FIXTURES / "reference-k4" / "run.sqlite"),
                       options={"test": "evil"})
    db = store.connect(str(tmp_path / "s.db"))
    run_id, created = store.add(db, rec)
    assert created and db.conn.execute("SELECT COUNT(*) FROM runs").fetchone() == (1,)
    assert (evil,) in db.conn.execute("SELECT phase FROM phases WHERE run_id = ?", [run_id]).fetchall()
    assert db.conn.execute("SELECT COUNT(*) FROM kernels WHERE kernel = ?", [evil + " kernel"]).fetchone()[0] > 0


def test_two_ranks_with_nccl_are_stored_per_rank(tmp_path, shared_dir):
    path = str(shared_dir / "nsys_sqlite" / "nsysai_mfu_2gpu_before.sqlite")
    db = str(tmp_path / "r.db")
    assert CliRunner().invoke(main, ["analyze", path, "--db", db]).exit_code == 0
    rows = q(db, "SELECT rank, device, wait_ns, transfer_ns, last_arrivals FROM ranks ORDER BY rank")
    assert [(r[0], r[1], r[4]) for r in rows] == [(0, 0, 11), (1, 1, 22)]
    assert [round(r[2] / 1e6, 3) for r in rows] == [10.898, 2.477]
    assert q(db, "SELECT instances, overlap_pct FROM collectives") == [(33, 100.0)]
    assert q(db, "SELECT COUNT(*) FROM rank_skew")[0][0] == q(db, "SELECT COUNT(*) FROM phases")[0][0]


def test_records_built_in_workers_equal_serial_ones(tmp_path):
    outputs = traces.Outputs(store=True, as_json=True)
    serial = traces.analyze_all([K4, K6], Options(), outputs).outputs
    pooled = traces.analyze_all([K4, K6], Options(), outputs, jobs=2).outputs
    for s, p in zip(serial, pooled):
        assert s.doc == p.doc and s.text == p.text and s.row == p.row
        assert s.record.run == p.record.run
        for name in s.record.tables:  # rows of a table: their order is not part of the result
            a, b = s.record.tables[name], p.record.tables[name]
            assert a.sort(a.columns, nulls_last=True).equals(b.sort(b.columns, nulls_last=True)), name


def test_the_server_log_reconciliation_is_stored(tmp_path):
    # The server log is SYNTHETIC (no capture here ran SGLang): made from the real K=4 sidecar's accept counts
    # as SGLang's metrics reporter writes them (tests/test_crosscheck.py `synthetic_log`).
    from specprof.analyzer.readers.sidecar import find
    from test_crosscheck import raw_cycles, synthetic_log

    log = tmp_path / "server.log"
    log.write_text("\n".join(synthetic_log(raw_cycles(find(K4)[0]), interval=35)) + "\n")
    db = str(tmp_path / "s.db")
    out = CliRunner().invoke(main, ["analyze", K4, "--server-log", str(log), "--log-interval", "35", "--db", db])
    assert out.exit_code == 0, out.output
    (row,) = q(db, "SELECT verdict, log_lines, explanations FROM crosscheck_accept")
    assert row[0] in ("agree", "explained") and row[1] > 0 and isinstance(json.loads(row[2]), list)
    # the log is part of the run's key: the same run without it is another run
    assert "stored as run @2" in CliRunner().invoke(main, ["analyze", K4, "--db", db]).stderr


# -- concurrent and killed writers ----------------------------------------------------------------------------------

_WRITER = """
import os, pickle, signal, sys
from specprof.analyzer.app import store
db_path, record_file, prefix, count, kill_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
with open(record_file, "rb") as fh:
    rec = pickle.load(fh)
db = store.connect(db_path)
if kill_at:  # SIGKILL this writer when it starts writing that table: mid-way through a run
    db.conn.set_trace_callback(lambda sql: sql.startswith("INSERT INTO") and kill_at in sql.split("(")[0]
                               and os.kill(os.getpid(), signal.SIGKILL))
import_id = store.begin_import(db, [prefix])
for i in range(count):
    rec.run["key"] = f"{prefix}-{i}"
    store.add(db, rec, import_id)
"""


@pytest.fixture(scope="module")
def record_file(tmp_path_factory):
    """The K=4 capture analysed once, as the store's rows (pickled for the writer processes)."""
    import pickle

    from specprof.analyzer.readers.inputs import resolve

    a = Run.load(K4).analysis()
    rec = store.record(a, path=K4, trace_path=resolve(K4), options=store.options_of())
    path = tmp_path_factory.mktemp("record") / "record.pickle"
    path.write_bytes(pickle.dumps(rec))
    return str(path)


def _writers(db, record_file, prefixes, count, kill_at=""):
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, db, record_file, p, str(count), kill_at],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in prefixes]
    return [(p.wait(timeout=300), p.stderr.read()) for p in procs]


def test_concurrent_writers_on_a_new_store_lose_no_run(tmp_path, record_file):
    # Four processes append eight runs each to a database that does not exist yet: they race to create the
    # schema, then to append. Every run arrives, whole.
    db = str(tmp_path / "results.db")
    done = _writers(db, record_file, ["a", "b", "c", "d"], 8)
    assert all(rc == 0 for rc, _ in done), [err[-800:] for _, err in done]
    assert q(db, "SELECT COUNT(*) FROM runs") == [(32,)]
    phases = q(db, "SELECT COUNT(*) FROM phases WHERE run_id = 1")[0][0]
    assert phases > 0 and q(db, "SELECT COUNT(DISTINCT run_id), COUNT(*) FROM phases") == [(32, 32 * phases)]


def test_a_writer_killed_mid_run_leaves_nothing_of_it_and_the_run_is_added_again_whole(tmp_path, record_file):
    db = str(tmp_path / "results.db")
    ((rc, err),) = _writers(db, record_file, ["whole"], 1)
    assert rc == 0, err[-800:]
    complete = {t: q(db, f"SELECT COUNT(*) FROM {t}")[0][0] for t in ("phases", "cycles", "cycle_phases", "kernels")}
    ((rc, err),) = _writers(db, record_file, ["killed"], 1, kill_at="cycle_phases")
    assert rc == -9, err[-800:]  # SIGKILL: after the runs row, phases, kernels and cycles were written
    assert q(db, "SELECT key FROM runs") == [("whole-0",)]
    assert {t: q(db, f"SELECT COUNT(*) FROM {t}")[0][0] for t in complete} == complete
    ((rc, err),) = _writers(db, record_file, ["killed"], 1)  # added again: created, and whole
    assert rc == 0, err[-800:]
    (run_id,) = q(db, "SELECT id FROM runs WHERE key = 'killed-0'")[0]
    assert q(db, "SELECT COUNT(*) FROM phases WHERE run_id = ?", run_id) == [(complete["phases"],)]
    assert q(db, "SELECT COUNT(*) FROM cycle_phases p JOIN cycles c ON c.id = p.cycle_id WHERE c.run_id = ?",
             run_id) == [(complete["cycle_phases"],)]


def test_a_read_only_store_is_one_clear_error(tmp_path):
    # As root, file modes do not stop a write: the CLI runs without the capabilities that override them.
    import shutil
    import subprocess
    import sys

    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not here to drop the file-permission override")
    db = tmp_path / "results.db"
    store.connect(str(db)).conn.close()
    db.chmod(0o444)
    done = subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-m",
                           "specprof", "analyze", K4, "--db", str(db), "-q"], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.strip()]
    assert line.startswith(f"specprof: error: {db}: the results database cannot be written")


RAMP = str(FIXTURES / "sglang-ramp-dense-adaptive")
RAMP_PLAIN = str(FIXTURES / "sglang-ramp-dense-plain")


def test_the_economics_per_batch_size_and_k_are_stored(tmp_path):
    """A ramp run (batch sizes 1 to 16, K set by SGLang's adaptive thresholds) stores one batch_groups row per
    (source, batch-size group, K), the same figures as its JSON's economics.batch_groups."""
    db = str(tmp_path / "results.db")
    out = CliRunner().invoke(main, ["analyze", RAMP, "--baseline", RAMP_PLAIN, "--db", db, "--json"])
    assert out.exit_code == 0, out.output
    groups = json.loads(out.stdout)["economics"]["batch_groups"]["groups"]
    rows = q(db, "SELECT source, batch_group, steps, cycles, cycle_ns, cycle_lo_ns, accept_len, tokens_per_s, "
                 "tokens_per_s_hi, baseline_ns, speedup, speedup_lo, speedup_hi, verdict, baseline_steps "
                 "FROM batch_groups WHERE run_id = 1 ORDER BY rowid")
    assert len(rows) == len(groups) >= 10
    for row, g in zip(rows, groups):
        assert row[:4] == (g["source"], g["batch_group"], g["steps"], g["cycles"])
        assert row[4] / 1e6 == pytest.approx(g["cycle_ms"], abs=1e-6)
        assert row[6] == pytest.approx(g["accept_len"], abs=1e-4)
        assert row[7] == pytest.approx(g["tokens_per_s"], abs=0.1)
        assert row[13] and row[14] == g["baseline_steps"]
        if g["speedup"] is None:
            assert row[9:13] == (None, None, None, None)
        else:
            assert row[10] == pytest.approx(g["speedup"], abs=1e-4)
            assert (row[11], row[12]) == pytest.approx(tuple(g["speedup_ci"]), abs=1e-4)
    # keyed by run, source, batch-size group and K: no two rows share one
    assert len(set(r[:3] for r in rows)) == len(rows)
    # a run at one batch size (the reference capture, batch 8, K 4) has one group per source
    out = CliRunner().invoke(main, ["analyze", K4, "--db", db])
    assert out.exit_code == 0
    assert q(db, "SELECT source, batch_group, steps FROM batch_groups WHERE run_id = 2 ORDER BY rowid") == [
        ("sidecar without nsys", "8", 4), ("sidecar under nsys", "8", 4)]


def test_a_store_made_before_the_batch_groups_table_still_reads_and_gains_it_on_append(tmp_path):
    """A store of schema 4 (made here from a new one by taking the table out: no capture of the old version is
    kept) reads as before, and the next append adds the table and sets the schema, once."""
    db = str(tmp_path / "results.db")
    assert CliRunner().invoke(main, ["analyze", K4, "--db", db]).exit_code == 0
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE batch_groups")
        conn.execute("UPDATE meta SET value = 'specprof.store/4' WHERE key = 'schema'")
    out = CliRunner().invoke(main, ["runs", "--db", db, "--json"])
    assert out.exit_code == 0, out.output
    assert [r["ref"] for r in json.loads(out.output)["runs"]] == ["@1"]
    assert q(db, "SELECT value FROM meta WHERE key = 'schema'") == [("specprof.store/4",)]  # reading changes nothing
    out = CliRunner().invoke(main, ["analyze", RAMP, "--baseline", RAMP_PLAIN, "--db", db])
    assert out.exit_code == 0, out.output
    assert q(db, "SELECT value FROM meta WHERE key = 'schema'") == [(store.SCHEMA,)]
    assert q(db, "SELECT COUNT(*) FROM batch_groups WHERE run_id = 2")[0][0] >= 10
    # a schema this version does not know is still refused in one line
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = 'specprof.store/3' WHERE key = 'schema'")
    out = CliRunner().invoke(main, ["runs", "--db", db])
    assert out.exit_code != 0 and "specprof.store/3" in out.output
