"""The sweep refuses what is not physical, and states the best K against plain decoding (real captures)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from specprof.analyzer.app.commands import load_sweep
from specprof.analyzer.cli import main
from conftest import FIXTURES

SGLANG = [str(FIXTURES / "sglang-k2"), str(FIXTURES / "sglang-k4")]
REFERENCE = [str(FIXTURES / f"reference-k{k}") for k in (2, 4, 6)]


def _sweep(*args):
    out = CliRunner().invoke(main, ["sweep", *args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def test_sglang_negative_fits_and_drift_predict_nothing():
    # Two server launches: verify fits at -0.151 ms per token and the cycle without nsys at -0.158 ms per step, and
    # draft_extend, the same work at both K, moved. Nothing may be predicted from that, even with --extrapolate.
    for extra in ((), ("--extrapolate",)):
        d = _sweep(*SGLANG, *extra)
        assert d["model_ok"] is False
        assert {"verify", "cycle_unprofiled"} <= set(d["contradictions"])
        assert [r["steps"] for r in d["predictions"]] == [2, 4] and all(r["measured"] for r in d["predictions"])
        assert d["recommended_steps"] == 4
        # draft_extend does the same work at both K (the same accept length), yet moved: drift, not cost
        assert "0.420 ms at K=2 and 0.311 ms at K=4" in d["drift"]
        assert any("nothing is predicted from them" in n for n in d["notes"])
        assert not any("K=5" in line or "K=6" in line for line in d["reasoning"])
    # at the measured K the cycle is the run's own (no fit)
    k4 = next(r for r in d["predictions"] if r["steps"] == 4)
    assert k4["cycle_ms"] == pytest.approx(3.018, abs=0.001)


def test_never_reached_positions_are_marked_assumed():
    d = _sweep(*SGLANG)
    pos = {p["position"]: p for p in d["acceptance"]["positions"]}
    assert pos[1]["assumed"] is False and pos[2]["assumed"] is False
    assert pos[3]["assumed"] is True and pos[4]["assumed"] is True and pos[3]["reached"] == 0
    assert any("p3=0.333 (assumed), p4=0.333 (assumed)" in line for line in d["reasoning"])
    text = CliRunner().invoke(main, ["sweep", *SGLANG]).output
    assert "assumed 0.333" in text
    # beyond the largest drafted K (reference runs): predictions that use assumed rates say so
    r = _sweep(*REFERENCE)
    assert [p["steps"] for p in r["predictions"] if p["assumed"]] == [7, 8]


def test_the_best_k_against_plain_decoding_with_its_interval():
    d = _sweep(*SGLANG, "--baseline", str(FIXTURES / "sglang-plain"))
    k4 = next(r for r in d["predictions"] if r["steps"] == 4)
    analyzed = json.loads(CliRunner().invoke(main, ["analyze", SGLANG[1], "--baseline", str(FIXTURES / "sglang-plain"),
                                                    "--json"]).output)["economics"]["estimates"][0]
    assert k4["speedup"] == pytest.approx(analyzed["speedup"], abs=1e-4)  # one number per thing
    assert k4["speedup_ci"] == pytest.approx(analyzed["speedup_ci"], abs=2e-3)
    assert d["beats_plain"] is False and k4["speedup_ci"][1] < 1
    text = CliRunner().invoke(main, ["sweep", *SGLANG, "--baseline", str(FIXTURES / "sglang-plain")]).output
    assert "Recommendation: plain decoding (the best step count, K = 4, loses to it)" in text
    assert "at the best K=4, speculation loses against plain decoding: 0.90x (0.81-0.99)" in text


def test_a_k0_run_among_the_runs_is_the_baseline():
    d = _sweep(str(FIXTURES / "reference-k0"), *REFERENCE)
    assert [r["steps"] for r in d["runs"]] == [2, 4, 6] and d["recommended_steps"] == 4
    k4 = next(r for r in d["predictions"] if r["steps"] == 4)
    assert k4["speedup"] == pytest.approx(1.46, abs=0.005) and k4["speedup_ci"][0] > 1
    assert d["beats_plain"] is True and d["baseline_ms"] == pytest.approx(2.533, abs=0.001)
    assert any("at the best K=4, speculation wins against plain decoding: 1.46x (1.40-1.52)" in line
               for line in d["reasoning"])
    both = CliRunner().invoke(main, ["sweep", str(FIXTURES / "reference-k0"), *REFERENCE, "--baseline",
                                     str(FIXTURES / "reference-k0")])
    assert both.exit_code == 2 and "more than one plain-decode baseline" in both.output


def test_verify_cost_in_words_with_its_fixed_share():
    # K = 2 and 6: the per-cycle interval is the honest one (two runs) and lies above zero
    d = _sweep(REFERENCE[0], REFERENCE[2])
    assert d["verify"]["resolvable"] is True and d["verify"]["fixed_share"] > 0.98
    assert f"verify is {d['verify']['fixed_share']:.0%} fixed cost at 3 tokens: cutting draft tokens barely changes it" \
        in d["reasoning"]
    # three runs: the runs' interval reaches zero, and the words give the least fixed share it allows
    r = _sweep(*REFERENCE)
    assert any(line.startswith("verify is at least 89% fixed cost at 5 tokens") for line in r["reasoning"])


def test_runs_of_different_setups_are_refused_in_sweep_and_compare():
    runner = CliRunner()
    mixed = runner.invoke(main, ["sweep", SGLANG[0], REFERENCE[1], REFERENCE[2]])
    assert mixed.exit_code == 2 and len(mixed.output.strip().splitlines()) == 1
    assert "different engines: sglang (" in mixed.output and "reference (" in mixed.output
    assert runner.invoke(main, ["sweep", SGLANG[0], REFERENCE[1], REFERENCE[2], "--allow-mixed"]).exit_code == 0
    tp = runner.invoke(main, ["sweep", REFERENCE[0], str(FIXTURES / "reference-k4-tp2")])
    assert tp.exit_code == 2 and "different tensor-parallel sizes: 1" in tp.output
    cmp = runner.invoke(main, ["compare", SGLANG[1], REFERENCE[1]])
    assert cmp.exit_code == 2 and "not one workload" in cmp.output and "different engines" in cmp.output
    assert runner.invoke(main, ["compare", SGLANG[1], REFERENCE[1], "--allow-mixed"]).exit_code == 0
    assert runner.invoke(main, ["compare", REFERENCE[1], REFERENCE[2]]).exit_code == 0


def test_differences_name_batch_sizes():
    # synthetic setups: no two captures here differ only in batch size
    from specprof.analyzer.derived.compare import differences
    same = {"engine": "sglang", "model": {"model-path": "m"}, "tp": 8}
    assert differences([("a", {**same, "batch": 8.0}), ("b", {**same, "batch": 8.2})]) == []
    out = differences([("a", {**same, "batch": 8.0}), ("b", {**same, "batch": 16.0})])
    assert out == ["different batch sizes: 8 requests per cycle (a), 16 requests per cycle (b)"]
    assert load_sweep(REFERENCE).model_ok is True


def test_a_run_whose_sidecar_does_not_line_up_gives_the_sweep_nothing_of_it(tmp_path):
    # K = 4's trace and manifest with K = 2's sidecar (another run): its accept counts must not enter the fit
    import os
    run = tmp_path / "k4"
    run.mkdir()
    for name in ("run.sqlite", "manifest.json"):
        os.symlink(FIXTURES / "reference-k4" / name, run / name)
    side = next((FIXTURES / "reference-k2").glob("specprof-sidecar.*.jsonl"))
    os.symlink(side, run / side.name)
    d = _sweep(REFERENCE[0], str(run), REFERENCE[2])
    k4 = next(r for r in d["runs"] if r["steps"] == 4)
    assert k4["accept_len"] is None and k4["accept_source"] is None
    assert any("does not line up with its trace" in n for n in d["notes"])
    # the acceptance counts are the K = 2 and K = 6 runs' alone
    assert d["acceptance"]["positions"][0]["reached"] == 1600


def test_a_sweep_of_stored_runs_checks_what_a_sweep_of_their_folders_does(tmp_path):
    # `sweep @ID` used to have no setup and no draft_extend times: it fitted SGLang and reference runs together,
    # and never saw the drift between two SGLang launches that the folders' sweep refuses to predict from.
    db = str(tmp_path / "r.db")
    for run in (*SGLANG, *REFERENCE[1:]):  # @1 sglang-k2, @2 sglang-k4, @3 reference-k4, @4 reference-k6
        out = CliRunner().invoke(main, ["analyze", run, "--db", db, "-q"])
        assert out.exit_code == 0, out.output
    stored = _sweep("@1", "@2", "--db", db)
    files = _sweep(*SGLANG)
    assert stored["drift"] == files["drift"] and "0.420 ms at K=2 and 0.311 ms at K=4" in stored["drift"]
    assert stored["contradictions"] == files["contradictions"] and stored["model_ok"] is False
    assert [r["draft_forwards"] for r in stored["runs"]] == [1, 3] and stored["draft"]["unit"] == "forward"
    mixed = CliRunner().invoke(main, ["sweep", "@1", "@3", "@4", "--db", db])
    assert mixed.exit_code == 2 and "different engines: sglang (@1" in mixed.output
    assert CliRunner().invoke(main, ["sweep", "@1", "@3", "@4", "--db", db, "--allow-mixed"]).exit_code == 0
