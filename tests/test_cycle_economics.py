"""The user's questions on any capture: where one decode cycle goes (its breakdown), and whether speculation
pays, honestly: with the step count's bound, with a baseline from any plain capture, and saying when the
only cycle measured was profiled.

Real captures throughout: fixtures/sglang-* (SGLang 0.5.16 on an H200) and fixtures/reference-k* (the
reference engine); the exports are also read as plain nsys exports, copied out of the run directory and away from
its sidecar.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from specprof.analyzer.app.analyze import RunInputs
from specprof.analyzer.app.run import Run, baseline_step
from specprof.analyzer.cli import main
from specprof.analyzer.derived import economics as econ
from specprof.analyzer.readers.sidecar import find, read_sidecars
from conftest import FIXTURES


def run_json(*args) -> dict:
    out = CliRunner().invoke(main, ["analyze", *map(str, args), "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


# -- the cycle breakdown -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("run", ["sglang-k4", "sglang-k2", "sglang-plain", "reference-k4", "reference-k4-tp2"])
def test_the_shares_of_one_cycle_add_up_to_one_and_the_times_to_the_cycle(run):
    b = Run.load(str(FIXTURES / run)).analysis().cycle_breakdown
    assert b.phases["share"].sum() == pytest.approx(1.0, abs=1e-9)
    assert b.phases["ns_per_cycle"].sum() == pytest.approx(b.mean_ns, abs=len(b.phases))  # rounding per phase
    assert ((b.phases["busy_share"] >= 0) & (b.phases["busy_share"] <= 1)).all()
    assert b.median_ns <= b.p90_ns


def test_the_breakdown_cycle_is_the_cycle_the_sidecar_measured():
    # SGLang K = 4 under nsys: the sidecar's start-to-start period over the same window is 4.360 ms.
    a = Run.load(str(FIXTURES / "sglang-k4")).analysis()
    b = a.cycle_breakdown
    sidecar = a.economics.estimates.filter(a.economics.estimates["source"] == "sidecar under nsys").row(0, named=True)
    assert b.mean_ns == pytest.approx(sidecar["cycle_ns"], rel=0.002)
    assert (b.device, b.stream, b.cycles) == (0, 13, 119)
    shares = {r["phase"]: r["share"] for r in b.phases.iter_rows(named=True)}
    assert shares["verify"] == pytest.approx(0.321, abs=0.001) and shares["draft"] == pytest.approx(0.217, abs=0.001)
    # each phase's time per cycle on that stream is what its CUDA events measured (the ground-truth check)
    truth = {r["phase"]: r["events_ns"] for r in a.crosscheck.ground_truth.iter_rows(named=True)}
    per_cycle = {r["phase"]: r["ns_per_cycle"] for r in b.phases.iter_rows(named=True)}
    for phase in ("draft", "verify", "draft_extend"):
        assert per_cycle[phase] == pytest.approx(truth[phase], rel=0.03)


def test_the_breakdown_is_first_in_the_terminal_and_in_json():
    out = CliRunner().invoke(main, ["analyze", str(FIXTURES / "sglang-k4")])
    sections = out.output.split("\n\n")
    assert sections[1].startswith("Where a decode cycle goes (119 cycles on device 0 stream 13")
    doc = run_json(FIXTURES / "sglang-k4")
    assert list(doc)[:3] == ["schema", "source", "cycle_breakdown"]
    assert sum(p["share"] for p in doc["cycle_breakdown"]["phases"]) == pytest.approx(1.0, abs=1e-5)


# -- honest economics ---------------------------------------------------------------------------------------------

def test_every_estimate_carries_its_step_count_and_whether_the_break_even_is_reachable():
    e = run_json(FIXTURES / "sglang-k4", "--baseline", FIXTURES / "sglang-plain")["economics"]
    head = e["estimates"][0]
    assert head["draft_steps"] == 4 and head["max_accept_len"] == 5 and head["break_even_reachable"] is True
    assert e["profiled_only"] is False
    # a 0.90x speedup beside "yes": the column says what it is (the break-even is within K + 1), not "can pay"
    assert head["speedup"] == pytest.approx(0.90, abs=0.005) and head["break_even_accept_len"] < 5
    assert head["can_pay"] is head["break_even_reachable"]  # the former key, kept for readers of /2 (docs/json.md)
    text = CliRunner().invoke(main, ["analyze", str(FIXTURES / "sglang-k4"), "--baseline", str(FIXTURES / "sglang-plain"),
                                     "--no-cache", "-q"]).stdout
    header = next(x for x in text.splitlines() if x.startswith("cycle measured by"))
    assert header.rstrip().endswith("K  break-even <= K+1") and "can pay" not in text


def test_a_break_even_above_k_plus_one_says_speculation_cannot_pay_at_any_acceptance():
    # The real K = 4 cycle (3.018 ms without nsys) against a plain step of 0.5 ms: 6.04 steps per cycle, more
    # than the 5 tokens a cycle of 4 draft steps can give. (The step time is given: no capture here has one
    # so short.)
    e = run_json(FIXTURES / "sglang-k4", "--baseline-ms", "0.5")["economics"]
    head = e["estimates"][0]
    assert head["break_even_accept_len"] == pytest.approx(6.036, abs=0.001)
    assert head["break_even_reachable"] is False
    assert head["verdict"].startswith("speculation cannot pay at any acceptance: the cycle (3.018 ms) is 6.04 "
                                      "plain-decode steps (0.500 ms), more than the 5 tokens per request")
    # what it yields now, as a multiple of plain decoding's throughput: the speedup (0.25x), not the accept length
    assert f"(now {head['speedup']:.2f}x the plain-decode throughput)" in head["verdict"] and head["speedup"] < 0.3


def test_a_plain_export_without_a_sidecar_says_its_cycle_was_profiled_and_how_much_waited_on_the_host(export_alone):
    # Plain nsys exports of the reference engine, as someone else's: no run directory, no sidecar, no manifest.
    doc = run_json(export_alone("reference-k4"), "--baseline", FIXTURES / "reference-k0" / "run.sqlite", "--steps", "4")
    e = doc["economics"]
    assert e["profiled_only"] is True
    head = e["estimates"][0]
    assert head["source"] == "trace cycle ranges under nsys" and head["draft_steps"] == 4 and head["break_even_reachable"] is True
    assert "trace `cycle` ranges under nsys, 99 steps" in e["baseline_source"]
    line = next(v for v in e["verdict"] if v.startswith("measured under nsys only"))
    assert "the GPU waited for the host 25% of the decode cycle (draft 43% of its time" in line
    assert "specprof capture --no-nsys -o RUN/no-nsys" in line
    waits = {w["phase"]: w for w in e["gpu_waits_on_host"]}
    assert waits["draft"]["wait_share"] == pytest.approx(0.427, abs=0.005)


def test_the_step_count_unknown_is_said_and_the_check_not_made(export_alone):
    e = run_json(export_alone("reference-k4"), "--baseline-ms", "1")["economics"]
    assert e["estimates"][0]["draft_steps"] is None and e["estimates"][0]["break_even_reachable"] is None
    assert any("the number of draft steps is unknown" in n for n in e["notes"])


def test_a_baseline_from_any_capture_by_the_range_that_marks_one_step():
    k0 = FIXTURES / "reference-k0" / "run.sqlite"
    by_cycle = run_json(FIXTURES / "reference-k4", "--baseline", k0)["economics"]["baseline_ms"]
    # The plain engine's step is one `verify` of 1 token: naming that range gives the same step time.
    by_verify = run_json(FIXTURES / "reference-k4", "--baseline", k0, "--baseline-range", "verify")["economics"]
    assert by_verify["baseline_ms"] == pytest.approx(by_cycle, rel=0.002)
    assert "trace `verify` ranges under nsys" in by_verify["baseline_source"]
    # a Kineto trace too (its record_function ranges)
    kineto = run_json(FIXTURES / "reference-k4", "--baseline", FIXTURES / "torch-k4" / "trace.json.gz",
                      "--baseline-range", "cycle")["economics"]
    assert "trace `cycle` ranges under torch.profiler" in kineto["baseline_source"]
    out = CliRunner().invoke(main, ["analyze", str(FIXTURES / "reference-k4"), "--baseline", str(k0),
                                    "--baseline-range", "step"])
    assert out.exit_code == 2
    assert "no two consecutive `step` ranges on one thread" in out.output and "--baseline-range NAME" in out.output


def test_a_plain_sglang_sidecar_is_a_baseline_of_decode_cycles_only():
    sides = read_sidecars(find(str(FIXTURES / "sglang-plain" / "no-nsys")))
    prefill = sides.cycles.filter(~sides.cycles["decode"])
    assert prefill.height >= 2  # the 8 requests were prefilled in several batches: cycles too, not steps
    ns, source, notes, batch, *_ = baseline_step(str(FIXTURES / "sglang-plain"))
    assert "sidecar without nsys, its capture window, 120 steps of 8 requests" in source and batch == 8.0
    assert ns == pytest.approx(1_808_000, rel=0.001)


def test_estimate_rows_are_pure_functions_of_their_numbers():
    # synthetic: the bound alone
    row = econ.estimate("x", False, 10, 5_000_000, 2.0, 8.0, 1_000_000, draft_steps=3)
    assert row["break_even_accept_len"] == 5.0 and row["max_accept_len"] == 4 and row["break_even_reachable"] is False
    row = econ.estimate("x", False, 10, 3_000_000, 2.0, 8.0, 1_000_000, draft_steps=3)
    assert row["break_even_reachable"] is True and row["speedup"] == pytest.approx(2 / 3)
    assert econ.estimate("x", False, 10, 3_000_000, 2.0, 8.0, 1_000_000)["break_even_reachable"] is None


def test_inputs_can_name_the_step_count(export_alone):
    # the export alone: no sidecar, no command line that says K
    a = Run.load(str(export_alone("reference-k4")), inputs=RunInputs(baseline_ms=1.0, steps=6)).analysis()
    assert a.economics.estimates["break_even_reachable"].to_list() == [True]
