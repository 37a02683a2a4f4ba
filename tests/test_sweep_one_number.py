"""One number per run: `specprof sweep`'s accept length, cycle, tokens/s and speedup at a measured K are the ones
`analyze --baseline` heads that run's economics with, over every multi-run set of captures (the dense and MoE
SGLang targets, the reference engine). The sweep's cycle is the period without nsys, so its accept length is
the twin's (the same cycles), not the run under nsys's window: on the MoE K = 4 capture those differ (2.481
against 2.500), and the sweep read 1.01x where `analyze` reads 1.00x."""

from __future__ import annotations

import pytest

from specprof.analyzer.app.analyze import Options, RunInputs
from specprof.analyzer.app.commands import load_sweep
from specprof.analyzer.app.run import Run
from specprof.analyzer.derived.analysis import sweep_input_of
from conftest import FIXTURES

SETS = {
    "sglang-dense": ([f"sglang-dense-k{k}" for k in (1, 2, 3, 4, 6)], "sglang-dense-plain"),
    "sglang-moe": (["sglang-moe-k2", "sglang-moe-k4"], "sglang-moe-plain"),
    "reference": (["reference-k2", "reference-k4", "reference-k6"], "reference-k0"),
}


@pytest.mark.parametrize("name", SETS)
def test_the_sweep_shows_analyzes_headline_for_each_run(name):
    runs, plain = SETS[name]
    paths, base = [str(FIXTURES / r) for r in runs], str(FIXTURES / plain)
    s = load_sweep(paths, baseline=base)
    assert s.basis == "cycle_unprofiled"  # every run has its twin without nsys
    rows = {r["steps"]: r for r in s.predictions.filter(s.predictions["measured"]).iter_rows(named=True)}
    table = {r["path"]: r for r in s.runs.iter_rows(named=True)}
    for path in paths:
        run = Run.load(path, Options(), RunInputs(baseline_run=base)).analysis()
        head = run.economics.headline
        assert head["source"] == "sidecar without nsys" and not head["profiled"]
        me = table[path]
        row = rows[me["steps"]]
        # the same accept length, over the same cycles, in the runs table and the throughput row
        assert me["accept_len"] == row["accept_len"] == row["measured_accept_len"] == head["accept_len"]
        assert me["accept_source"] == "sidecar without nsys"
        assert row["cycle_ns"] == head["cycle_ns"] == me["period_unprofiled_ns"]
        assert row["tokens_per_s"] == head["tokens_per_s"]
        assert row["speedup"] == head["speedup"]
        assert row["speedup_lo"] == pytest.approx(head["speedup_lo"], rel=1e-9)
        assert row["speedup_hi"] == pytest.approx(head["speedup_hi"], rel=1e-9)
        # what the store keeps for the run is that number too
        assert sweep_input_of(run).accept_len == head["accept_len"]


def test_the_moe_k4_capture_and_its_twin_accept_differently():
    # The run under nsys's window accepts 2.500 per request-round, its twin without nsys 2.481: the sweep pairs
    # the twin's with the twin's cycle (5.718 ms), and pools the acceptance per position over the same cycles.
    path, base = str(FIXTURES / "sglang-moe-k4"), str(FIXTURES / "sglang-moe-plain")
    est = Run.load(path, Options(), RunInputs(baseline_run=base)).analysis().economics.estimates
    by = {r["source"]: r for r in est.iter_rows(named=True)}
    assert by["sidecar under nsys"]["accept_len"] == pytest.approx(2.500, abs=5e-4)
    assert by["sidecar without nsys"]["accept_len"] == pytest.approx(2.481, abs=5e-4)
    s = load_sweep([str(FIXTURES / "sglang-moe-k2"), path], baseline=base)
    k4 = s.predictions.filter(s.predictions["steps"] == 4).row(0, named=True)
    assert k4["accept_len"] == pytest.approx(2.481, abs=5e-4) and k4["cycle_ns"] == pytest.approx(5.718e6, abs=1e3)
    assert round(k4["speedup"], 2) == 1.00 and round(by["sidecar without nsys"]["speedup"], 2) == 1.00
    # the acceptance per position is pooled over the twins' request-rounds, the cycles the accept lengths are
    # over: position 1 is reached by every one of them, and each run's accept length is 1 + their mean correct
    inputs = [Run.load(p, Options()).sweep_input() for p in (str(FIXTURES / "sglang-moe-k2"), path)]
    acc = s.acceptance.row(0, named=True)
    assert acc["reached"] == sum(x.twin_accepts.height for x in inputs) == 640
    assert acc["accepted"] == 456  # (458 over the captures' cycles under nsys)
    for x in inputs:
        assert x.accept_len == pytest.approx(1 + x.twin_accepts["correct"].mean(), rel=1e-12)
    from specprof.analyzer.render import terminal
    assert "over the cycles their accept lengths are over: their twins' without nsys" in terminal.sweep(s)


def test_a_stored_run_sweeps_with_the_same_accept_lengths(tmp_path):
    # The store keeps both sets of accept counts (the capture's and the twins'): `sweep @ID` pairs the twin's
    # with the twin's period as the sweep of the folders does, on the MoE runs where the two differ.
    from click.testing import CliRunner

    from specprof.analyzer.app import store
    from specprof.analyzer.cli import main
    db = str(tmp_path / "results.db")
    runs = [str(FIXTURES / "sglang-moe-k2"), str(FIXTURES / "sglang-moe-k4")]
    base = str(FIXTURES / "sglang-moe-plain")
    out = CliRunner().invoke(main, ["analyze", *runs, "--db", db, "--json"])
    assert out.exit_code == 0, out.output
    from_store = load_sweep(["@1", "@2"], db=store.connect(db, create=False), baseline=base)
    from_files = load_sweep(runs, baseline=base)
    assert from_store.runs.drop("path").equals(from_files.runs.drop("path"))
    assert from_store.acceptance.equals(from_files.acceptance)
    assert from_store.predictions.equals(from_files.predictions)
    assert from_store.runs["accept_len"].to_list() == pytest.approx([2.0875, 2.481], abs=5e-4)


def test_without_every_twin_the_sweep_pairs_the_captures_accept_lengths_with_their_cycles():
    # One run without its twin (its periods left out): the sweep's cycle is the attributed cycle under nsys for
    # all, so each accept length is the capture's (as `analyze`'s "sidecar under nsys" row gives it), not a
    # twin's over other cycles; the acceptance per position is pooled over the captures' request-rounds.
    from dataclasses import replace
    paths = [str(FIXTURES / "sglang-moe-k2"), str(FIXTURES / "sglang-moe-k4")]
    inputs = [Run.load(p, Options()).sweep_input() for p in paths]
    inputs[0] = replace(inputs[0], periods=None)
    from specprof.analyzer.derived.sweep_runs import fit_sweep
    s = fit_sweep(list(zip(paths, inputs)))
    assert s.basis == "cycle"
    for path, r in zip(paths, s.runs.iter_rows(named=True)):
        est = Run.load(path, Options()).analysis().economics.estimates
        under = next(x for x in est.iter_rows(named=True) if x["source"] == "sidecar under nsys")
        assert r["accept_len"] == under["accept_len"] and r["accept_source"] == "sidecar under nsys"
    assert s.runs["accept_len"].to_list() == pytest.approx([2.094, 2.500], abs=5e-4)
    assert s.acceptance.row(0, named=True)["accepted"] == 458
