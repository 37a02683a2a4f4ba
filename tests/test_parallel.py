"""Many traces at once (analyzer/app/parallel.py, analyzer/app/traces.py): one process per file (--jobs) and a Dask cluster (--dask, here a
LocalCluster in this process) give exactly what the serial analysis gives, on real captures."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from specprof.analyzer.app import parallel
from specprof.analyzer.app.analyze import Options, RunInputs
from specprof.analyzer.app.traces import Outputs, produce_one_of_several
from specprof.analyzer.cli import main
from conftest import FIXTURES

K2, K4, K6 = (str(FIXTURES / f"reference-k{k}") for k in (2, 4, 6))


@pytest.fixture(scope="module")
def traces(request):
    from conftest import SHARED

    paths = [K4, K6]
    if SHARED is not None:
        paths += [str(SHARED / "nsys_sqlite" / f"nsysai_{n}.sqlite") for n in ("mfu_2gpu_before", "h100_2gpu_1s")]
    return paths


def analyze(*args):
    out = CliRunner().invoke(main, ["analyze", *args])
    assert out.exit_code == 0, out.output
    return out


def test_jobs_give_the_serial_result(traces, tmp_path):
    serial = analyze(*traces, "--json").output
    pooled = analyze(*traces, "--json", "--jobs", "3").output
    assert pooled == serial
    doc = json.loads(serial)
    assert doc["ranks_of_one_run"] is False  # nsys exports that say no rank: several runs, in the order given
    assert [r["path"] for r in doc["runs"]] == traces
    assert all(r["analysis"]["ranks"] for r in doc["runs"])
    assert analyze(*traces, "--jobs", "2").output == analyze(*traces).output


def test_stored_in_parallel_equals_stored_serially(traces, tmp_path):
    import sqlite3

    def dump(db):
        with sqlite3.connect(db) as conn:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                                 "AND name NOT IN ('imports', 'import_runs') ORDER BY name")]
            return {t: sorted(map(repr, conn.execute(f"SELECT * FROM {t}").fetchall())) for t in tables}

    serial, pooled = str(tmp_path / "serial.db"), str(tmp_path / "pooled.db")
    analyze(*traces, "--db", serial)
    analyze(*traces, "--db", pooled, "--jobs", "2")
    a, b = dump(serial), dump(pooled)
    for t in a:  # the import time differs; nothing else may
        rows_a = [r for r in a[t]] if t != "runs" else [r.split("imported_at")[0] for r in a[t]]
        rows_b = [r for r in b[t]] if t != "runs" else [r.split("imported_at")[0] for r in b[t]]
        if t == "runs":
            with sqlite3.connect(serial) as ca, sqlite3.connect(pooled) as cb:
                sql = "SELECT * FROM runs ORDER BY id"
                cols = [d[0] for d in ca.execute(sql).description]
                keep = [i for i, c in enumerate(cols) if c != "imported_at"]
                rows_a = [[r[i] for i in keep] for r in ca.execute(sql)]
                rows_b = [[r[i] for i in keep] for r in cb.execute(sql)]
        assert rows_a == rows_b, t


@pytest.mark.parametrize("run", ["sglang-k4", "reference-k4-tp2"])
def test_the_inflation_is_the_same_whatever_order_its_rows_come_in(run):
    # A group-by's row order varies between processes: the inflation's means and intervals must not depend on
    # it (float sums in that order differ in their last digit; integer sums do not). The same sidecars in
    # shuffled row orders give one table.
    from dataclasses import replace

    from specprof.analyzer.derived import crosscheck as cc
    from specprof.analyzer.readers.sidecar import find, read_sidecars

    d = FIXTURES / run
    sides, baseline = read_sidecars(find(str(d))), read_sidecars(find(str(d / "no-nsys")))
    tables = set()
    for seed in range(20):
        shuffled = replace(sides, **{t: getattr(sides, t).sample(fraction=1.0, shuffle=True, seed=seed)
                                     for t in ("cycles", "phases", "gpu_time")})
        tables.add(tuple(cc.inflation(shuffled, baseline, 5, 104).rows()))
    assert len(tables) == 1


def test_dask_local_cluster_gives_the_serial_result(traces):
    distributed = pytest.importorskip("dask.distributed")
    outputs = Outputs(as_json=True, store=True)
    serial = parallel.map_paths(produce_one_of_several, traces, Options(), RunInputs(), outputs)
    with distributed.LocalCluster(n_workers=2, processes=False, threads_per_worker=1, dashboard_address=None) as c, \
            distributed.Client(c) as client:
        remote = parallel.map_paths(produce_one_of_several, traces, Options(), RunInputs(), outputs, dask=client)
        # the CLI's path: the scheduler's address
        out = CliRunner().invoke(main, ["analyze", *traces, "--json", "--dask", c.scheduler_address])
    assert [d.path for d in remote] == traces
    for s, r in zip(serial, remote):
        assert r.doc == s.doc and r.row == s.row and r.record.run == s.record.run
    assert out.exit_code == 0, out.output
    by_path = {d.path: d.doc for d in serial}
    assert [r["analysis"] for r in json.loads(out.output)["runs"]] == [by_path[p] for p in traces]


def test_dask_refuses_table_folders_and_says_an_unreachable_scheduler(tmp_path, monkeypatch):
    pytest.importorskip("dask.distributed")
    monkeypatch.setattr(parallel, "CONNECT_TIMEOUT", "2s")
    out = CliRunner().invoke(main, ["analyze", K4, K6, "--dask", "tcp://127.0.0.1:9", "--csv", str(tmp_path)])
    assert out.exit_code == 2 and "not with --dask" in out.output
    out = CliRunner().invoke(main, ["analyze", K4, K6, "--dask", "tcp://127.0.0.1:9"])
    assert out.exit_code == 2 and "cannot reach the Dask scheduler" in out.output


def test_a_directory_of_exports_is_each_export(tmp_path):
    for k in (2, 4):
        shutil.copy(FIXTURES / f"reference-k{k}" / "run.sqlite", tmp_path / f"node{k}.sqlite")
    doc = json.loads(analyze(str(tmp_path), "--json", "--jobs", "2", "--csv", str(tmp_path / "csv")).output)
    assert [os.path.basename(r["path"]) for r in doc["runs"]] == ["node2.sqlite", "node4.sqlite"]
    # Two exports that say no rank: two runs, their tables in folders named after them.
    assert sorted(os.listdir(tmp_path / "csv")) == ["1-node2", "2-node4"]
    assert "skew" not in doc
