"""The synchronize-class calls of a capture (model/trace.py SYNC_NAMES): read by both nsys read paths and the
Kineto reader, attributed to the phase they fall in, their own cost measured, and a capture whose own code
synchronizes inside a phase flagged (derived/sync_calls.py). The window reader's are checked against the full
read's cut on every capture and window in tests/test_window_reads.py."""

from __future__ import annotations

import json
import sqlite3

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from specprof.analyzer.cli import main
from specprof.analyzer.readers.kineto import read_kineto
from specprof.analyzer.readers.nsys import page_reader_built, read_nsys_sqlite
from conftest import FIXTURES, SHARED


def _in_export(path: str) -> list[tuple]:
    return sqlite3.connect(path).execute(
        "SELECT s.value, count(*), sum(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
        "ON s.id = r.nameId WHERE s.value LIKE '%Synchronize%' GROUP BY 1 ORDER BY 1").fetchall()


@pytest.mark.parametrize("name", ["sglang-dense-k3", "reference-k4", "sglang-k4-nooverlap",
                                  "shared:nsysai_h100_2gpu_1s.sqlite"])
def test_every_synchronize_call_is_read_both_ways(name):
    path = str(SHARED / "nsys_sqlite" / name[7:]) if name.startswith("shared:") else \
        str(FIXTURES / name / "run.sqlite")
    ways = [False, True] if page_reader_built() else [False]
    read = [read_nsys_sqlite(path, pages=way).syncs for way in ways]
    for other in read[1:]:
        assert_frame_equal(read[0], other)
    got = read[0].group_by(pl.col("name").cast(pl.Utf8)).agg(pl.len(), (pl.col("end") - pl.col("start")).sum())
    want = [(n.rsplit("_v", 1)[0], c, t) for n, c, t in _in_export(path)]
    assert sorted(got.rows()) == sorted(want) and want


def test_kineto_synchronize_calls():
    trace = read_kineto(str(SHARED / "torch_kineto" / "hta_nccl_parser_config__nccl_data.json.gz"))
    counts = dict(trace.syncs.group_by(pl.col("name").cast(pl.Utf8)).len().rows())
    assert counts == {"cudaDeviceSynchronize": 1, "cudaEventSynchronize": 24}


def test_dense_k3_synchronizes_inside_accept():
    # SGLang's own cudaEventSynchronize (the host reading the accepted tokens) falls in the accept phase: 40 calls,
    # 46.7 ms; before, the reader kept launch calls only and said "no synchronize call in the trace"
    out = CliRunner().invoke(main, ["analyze", str(FIXTURES / "sglang-dense-k3"), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    s = doc["sync_calls"]
    assert s["calls"] == 40 and s["total_ms"] == pytest.approx(46.734, abs=0.001)
    assert [(r["phase"], r["call"], r["calls"]) for r in s["per_phase"]] == [("accept", "cudaEventSynchronize", 40)]
    assert s["warning"].startswith("the captured code synchronizes inside a phase: accept (40 cudaEventSynchronize")
    assert 0 < s["own_us"] < 20
    est = doc["sync_timer_estimate"]
    assert est["sync_ms"] == pytest.approx(s["own_us"] / 1e3, abs=1e-6)
    assert not any("no synchronize call" in n for n in est["notes"])
    text = CliRunner().invoke(main, ["analyze", str(FIXTURES / "sglang-dense-k3")]).output
    assert "Synchronize calls in the capture: 40, 46.734 ms in all" in text
    assert "- warning: the captured code synchronizes inside a phase: accept" in text


def test_a_call_outside_every_phase_is_not_flagged():
    # reference-k4: the engine's cudaDeviceSynchronize before the capture's cycles lies in no phase
    out = CliRunner().invoke(main, ["analyze", str(FIXTURES / "reference-k4" / "run.sqlite"), "--json"])
    rows = {(r["phase"], r["call"]): r["calls"] for r in json.loads(out.output)["sync_calls"]["per_phase"]}
    assert rows == {("accept", "cudaEventSynchronize"): 100, (None, "cudaDeviceSynchronize"): 1}
