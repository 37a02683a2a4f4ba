"""The sweep over the dense-target SGLang captures (fixtures/sglang-dense-*: K = 1, 2, 3, 4, 6 and plain, made in
rounds in one hold): the draft fitted over its forward passes, one accept length and one cycle per row, and a
recommendation that says when the best K is not told apart from the others."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from specprof.analyzer.app.analyze import Options
from specprof.analyzer.app.run import open_run
from specprof.analyzer.cli import main
from specprof.analyzer.derived.sweep_runs import fit_sweep
from conftest import FIXTURES

DENSE = [str(FIXTURES / f"sglang-dense-k{k}") for k in (1, 2, 3, 4, 6)]
PLAIN = str(FIXTURES / "sglang-dense-plain")


@pytest.fixture(scope="module")
def doc():
    out = CliRunner().invoke(main, ["sweep", *DENSE, "--baseline", PLAIN, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


@pytest.fixture(scope="module")
def text():
    out = CliRunner().invoke(main, ["sweep", *DENSE, "--baseline", PLAIN])
    assert out.exit_code == 0, out.output
    return out.output


def test_sglang_draft_is_fitted_over_its_forward_passes(doc, text):
    # SGLang's draft runs K - 1 forward passes (the first draft token comes from the draft re-extend, the loop
    # breaks before the last step's forward): K = 1's draft runs none, and reads 19 us.
    runs = {r["steps"]: r for r in doc["runs"]}
    assert [r["draft_forwards"] for r in doc["runs"]] == [0, 1, 2, 3, 5]
    assert runs[1]["draft_ms"] < 0.05 < 0.4 < runs[2]["draft_ms"]
    d = doc["draft"]
    assert d["unit"] == "forward" and "per_step_ms" not in d
    # over K the fixed cost comes out -0.4068 ms (interval -0.4082..-0.4054); over the forward passes it is
    # physical: 0.027 ms (the runs' interval 0.010..0.045, above zero), and the per-forward cost the same 0.434 ms
    # (each K's twins pooled: the second twins of K = 1, 3, 4, 6 moved the fixed cost from 0.030 ms)
    assert d["fixed_ms"] == pytest.approx(0.0272, abs=0.0005) and d["ci95_runs"]["fixed_ms"][0] > 0
    assert d["per_forward_ms"] == pytest.approx(0.4340, abs=0.0005) and d["resolvable"] is True
    assert d["contradicts"] is None and doc["contradictions"] == [] and doc["model_ok"] is True
    assert "0.4340 /forward" in text and "draft forward passes, K - 1 per cycle" in text
    assert any(line.startswith("draft = 0.027 ms + 0.434 ms per draft forward pass") and "K - 1" in line
               for line in doc["reasoning"])
    # rest and the cycles stay per draft step
    assert "per_step_ms" in doc["cycle_unprofiled"] and "per_step_ms" in doc["rest"]


def test_a_negative_fixed_cost_is_flagged_with_its_likely_cause():
    # The same captures with the engine not known (as plain exports from an engine specprof does not know): the
    # draft is fitted over K, its fixed cost is negative beyond its interval, and that contradicts the model.
    inputs = [(p, replace(open_run(p, Options()).sweep_input(), setup=None)) for p in DENSE]
    s = fit_sweep(inputs)
    d = s.fit("draft")
    assert d["x"] == "steps" and d["fixed_ns"] == pytest.approx(-0.4068e6, abs=0.001e6)
    assert d["fixed_hi_ns"] < 0 and d["per_unit_lo_ns"] > 0  # the per-step cost alone would pass
    assert "draft" in s.contradictions and s.model_ok is False
    assert all(s.predictions["measured"])  # nothing predicted from it
    why = next(line for line in s.reasoning if line.startswith("draft = "))
    assert "a fixed cost of -0.407 ms" in why and "contradicts the model" in why and "K - 1" in why
    assert any("draft: a fixed cost of -0.407 ms" in n and "fewer draft forward passes than K" in n
               for n in s.notes)
    from specprof.analyzer.render import json as json_render
    from specprof.analyzer.render import terminal
    assert json_render.sweep(s)["draft"]["contradicts"] == "fixed"
    assert "CONTRADICTS: fixed < 0" in terminal.sweep(s)


def test_each_row_is_one_accept_length_and_one_cycle(doc):
    # It printed K = 4 at 2,320 tokens/s (the predicted accept length 2.418 over the fitted 8.336 ms cycle: 1.38x)
    # beside "vs plain 1.41x" from the measured 2.481 over the measured 8.379 ms.
    runs = {r["steps"]: r for r in doc["runs"]}
    base = doc["baseline_ms"]
    for r in doc["predictions"]:
        assert r["tokens_per_s_per_request"] == pytest.approx(r["accept_len"] / r["cycle_ms"] * 1e3, rel=1e-4)
        assert r["tokens_per_s"] == pytest.approx(r["tokens_per_s_per_request"] * 8, rel=1e-4)
        assert r["speedup"] == pytest.approx(r["accept_len"] * base / r["cycle_ms"], rel=1e-3)
        if r["measured"]:
            assert r["accept_len"] == r["measured_accept_len"] == runs[r["steps"]]["accept_len"]
            assert r["cycle_ms"] == pytest.approx(runs[r["steps"]]["period_unprofiled_ms"], abs=1e-3)
            lo, hi = r["tokens_per_s_per_request_ci"]
            assert lo < r["tokens_per_s_per_request"] < hi
        else:
            # the model's change from the nearest measured K below, added to what that K measured
            k0 = max(k for k in runs if k < r["steps"])
            pred = {p["steps"]: p["predicted_accept_len"] for p in doc["predictions"]}
            assert r["accept_len"] == pytest.approx(runs[k0]["accept_len"] + pred[r["steps"]] - pred[k0], abs=2e-4)
            assert r["cycle_ms"] == r["fit_cycle_ms"]
            assert r["tokens_per_s_per_request_ci"] is None
    # one more chain step never reads fewer tokens per cycle (K = 5's model value 2.439 sits below K = 4's 2.481;
    # the acceptance per position pooled over the twins without nsys, the cycles the accept lengths are over)
    by_k = sorted(doc["predictions"], key=lambda p: p["steps"])
    assert all(b["accept_len"] >= a["accept_len"] - 1e-4 for a, b in zip(by_k, by_k[1:]))
    k5 = next(r for r in doc["predictions"] if r["steps"] == 5)
    assert k5["accept_len"] == pytest.approx(2.5035, abs=5e-4) and k5["predicted_accept_len"] == pytest.approx(2.4392, abs=5e-4)
    k4 = next(r for r in doc["predictions"] if r["steps"] == 4)
    assert k4["accept_len"] == pytest.approx(2.481, abs=5e-4) and k4["predicted_accept_len"] == pytest.approx(2.417, abs=5e-4)
    assert k4["tokens_per_s"] == pytest.approx(2370, abs=1) and k4["speedup"] == pytest.approx(1.41, abs=0.005)
    # the number `analyze` gives for that run (one number per thing)
    analyzed = json.loads(CliRunner().invoke(main, ["analyze", DENSE[3], "--baseline", PLAIN, "--json"]).output)
    head = analyzed["economics"]["estimates"][0]
    assert k4["speedup"] == pytest.approx(head["speedup"], abs=1e-3)
    assert k4["tokens_per_s"] == pytest.approx(head["tokens_per_s"], rel=1e-3)


def test_the_best_k_is_said_not_told_apart_within_the_intervals(doc, text):
    # Measured, K = 4 gives 296.3 tokens/s per request and K = 3 295.3: 0.3 % apart, while each one's interval
    # (the accept length's own over 39 cycles, and the cycle's) is some 4 % wide.
    assert doc["recommended_steps"] == 4 and 3 in doc["tied_steps"] and 6 not in doc["tied_steps"]
    line = next(x for x in doc["reasoning"] if x.startswith("K=4 is not told apart from K=3"))
    assert "accept lengths and cycles" in line and "either will do" in line
    assert "Recommendation: K = 4 (not told apart from K = " in text
    assert "stays the best with the per-step cycle cost" not in text  # the measured K compare as measured


def test_the_outlier_run_under_nsys_is_named(doc, text):
    # K = 2 under nsys: 8.978 ms attributed against 8.025 at K = 3; the nsys cycle fit is not resolvable, and the
    # predictions do not use it.
    c = doc["cycle"]
    assert c["resolvable"] is False and c["contradicts"] is None
    note = next(n for n in doc["notes"] if n.startswith("cycle: "))
    assert "the K=2 run's mean lies 1.003 ms from the line (8.978 against 7.975 ms)" in note
    assert "not resolvable" in note and "the predictions do not use this fit" in note
    assert doc["basis"] == "cycle_unprofiled" and doc["cycle_unprofiled"]["resolvable"] is True
