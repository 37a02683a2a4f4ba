"""Run-to-run noise: repeated twins without nsys (`capture --no-nsys --repeat N`, RUN/no-nsys-2, ...), used by the
cross-check, the economics and the sweep; a difference within noise is never called inflation or cost.

The repeated twin of the real SGLang K = 4 run is fixtures/sglang-k4-noevents: the same command, run without
nsys a few minutes later (without --gpu-events); it is set beside fixtures/sglang-k4 as RUN/no-nsys-2."""

from __future__ import annotations

import json
import math
import os
import statistics
import sys

import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from specprof.analyzer.derived import economics as econ
from specprof.analyzer.readers.sidecar import find, read_sidecars
from conftest import FIXTURES


@pytest.fixture(scope="module")
def repeated(tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "sglang-k4"
    run.mkdir()
    for name in os.listdir(FIXTURES / "sglang-k4"):
        os.symlink(FIXTURES / "sglang-k4" / name, run / name)
    (run / "no-nsys-2").mkdir()
    for path in find(str(FIXTURES / "sglang-k4-noevents")):
        os.symlink(path, run / "no-nsys-2" / os.path.basename(path))
    return run


def _json(*args):
    out = CliRunner().invoke(main, [*args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def _run_mean(folder):
    s = read_sidecars(find(str(folder)))
    from specprof.analyzer.derived.crosscheck import window_cycles
    m = econ.period_measure(s.cycles, "file", keep=window_cycles(s, None, None))
    return m.value


def test_a_faster_run_under_the_profiler_is_noise_not_a_shorter_phase():
    # the plain SGLang run: its period under nsys is 1.630 ms, without 1.808 ms; it used to read "shorter -10%"
    d = _json("analyze", str(FIXTURES / "sglang-plain"))["crosscheck"]
    rows = {(r["measure"], r["phase"]): r for r in d["inflation"]["rows"]}
    assert rows[("cpu", "period")]["verdict"] == "noise"
    # every difference up to those 10% is within noise: the +4% on the GPU is not called inflation
    assert rows[("gpu", "decode")]["verdict"] == "within noise"
    assert rows[("cpu", "cycle")]["verdict"] == "within noise"
    assert rows[("cpu", "accept")]["verdict"] == "shorter"  # -22%: beyond the noise, and the host can wait less
    assert any("which a profiler cannot make it" in n and "--repeat" in n for n in d["notes"])
    text = CliRunner().invoke(main, ["analyze", str(FIXTURES / "sglang-plain")]).output
    assert "noise -10% (faster under the profiler: run-to-run)" in text and "shorter -10%" not in text


def test_repeated_twins_are_found_and_their_spread_is_in_the_interval(repeated):
    e = _json("analyze", str(repeated), "--baseline", str(FIXTURES / "sglang-plain"))
    head = e["economics"]["estimates"][0]
    assert head["runs"] == 2 and head["interval_basis"] == "runs"
    means = [_run_mean(FIXTURES / "sglang-k4" / "no-nsys"), _run_mean(FIXTURES / "sglang-k4-noevents")]
    assert head["cycle_ms"] == pytest.approx(statistics.fmean(means) / 1e6, abs=1e-3)
    half = 12.706205 * statistics.stdev(means) / math.sqrt(2)
    assert head["cycle_ms_ci"][1] - head["cycle_ms"] == pytest.approx(half / 1e6, abs=2e-3)
    # two launches are 7% apart: with two repeats the verdict is not told apart from plain decoding. The twins'
    # drain (their last requests finishing, 14 cycles at batch 1) makes a second batch-size group, so the verdict
    # is per batch size (derived/groups.py): at batch 8, where the run spends its time, a wash
    groups = e["economics"]["batch_groups"]
    assert groups["several"] and head["speedup"] is None
    (at8,) = [g for g in groups["groups"] if g["source"] == "sidecar without nsys" and g["batch_group"] == "8"]
    assert at8["outcome"] == "wash" and at8["speedup_ci"][0] < 1 < at8["speedup_ci"][1] and at8["runs"] == 2
    assert any("over 2 repeated runs" in n for n in e["economics"]["notes"])
    rows = {(r["measure"], r["phase"]): r for r in e["crosscheck"]["inflation"]["rows"]}
    assert rows[("cpu", "period")]["noise_pct"] > 5 and rows[("cpu", "period")]["verdict"] == "within noise"
    assert rows[("gpu", "verify")]["noise_pct"] is None  # only one twin has CUDA events
    assert len(e["crosscheck"]["inflation"]["baseline"]) == 2


def test_the_sweep_uses_the_repeats(repeated):
    d = _json("sweep", str(FIXTURES / "sglang-k2"), str(repeated), "--baseline", str(FIXTURES / "sglang-plain"))
    k4 = next(r for r in d["runs"] if r["steps"] == 4)
    e = _json("analyze", str(repeated), "--baseline", str(FIXTURES / "sglang-plain"))["economics"]["estimates"][0]
    assert k4["period_unprofiled_ms"] == pytest.approx(e["cycle_ms"], abs=1e-3)
    p4 = next(r for r in d["predictions"] if r["steps"] == 4)
    # the sweep pools the run's batch sizes; analyze, whose run spans two batch-size groups (the twins' drain),
    # gives no pooled speedup (test above)
    assert p4["speedup_ci"] is not None and e["speedup_ci"] is None
    # each twin is a run of the cycle fit: the two K = 4 launches 7% apart make its negative slope (-0.16 ms per
    # step from one twin each) noise, not a contradiction
    c = d["cycle_unprofiled"]
    assert c["runs"] == 3 and c["ci95_runs"]["per_step_ms"][0] < 0 < c["ci95_runs"]["per_step_ms"][1]
    assert "cycle_unprofiled" not in d["contradictions"] and d["model_ok"] is False  # (verify still contradicts)
    single = _json("sweep", str(FIXTURES / "sglang-k2"), str(FIXTURES / "sglang-k4"))
    assert "cycle_unprofiled" in single["contradictions"]


def test_capture_repeat_writes_numbered_twins(tmp_path):
    out = CliRunner().invoke(main, ["capture", "--no-nsys", "--no-tracer", "--repeat", "3", "-o",
                                    str(tmp_path / "run" / "no-nsys"), "--", sys.executable, "-c", "print(1)"])
    assert out.exit_code == 0, out.output
    for name in ("no-nsys", "no-nsys-2", "no-nsys-3"):
        assert (tmp_path / "run" / name / "manifest.json").is_file()
    from specprof.analyzer.readers.inputs import twin_dirs
    assert [os.path.basename(d) for d in twin_dirs(str(tmp_path / "run"))] == ["no-nsys", "no-nsys-2", "no-nsys-3"]
    refused = CliRunner().invoke(main, ["capture", "--repeat", "2", "-o", str(tmp_path / "x"), "--", sys.executable,
                                        "-c", "print(1)"])
    assert refused.exit_code == 2 and "--no-nsys" in refused.output
