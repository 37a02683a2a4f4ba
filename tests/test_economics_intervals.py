"""Every economic figure carries its 95% interval, and the verdict is worded by it (real captures)."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from specprof.analyzer.derived import economics as econ
from conftest import FIXTURES


def _economics(*args):
    out = CliRunner().invoke(main, ["analyze", *args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)["economics"]


def test_sglang_k4_loses_with_its_interval_and_the_baseline_noise_in_it():
    e = _economics(str(FIXTURES / "sglang-k4"), "--baseline", str(FIXTURES / "sglang-plain"))
    head = e["estimates"][0]
    assert head["speedup"] == pytest.approx(0.90, abs=0.005)
    lo, hi = head["speedup_ci"]
    assert lo < head["speedup"] < hi < 1  # it loses, whatever the noise
    assert head["verdict"].startswith(f"speculation loses: 0.90x ({lo:.2f}-{hi:.2f})")
    # the plain run under nsys (1.630 ms) is faster than without (1.808 ms): that is run-to-run noise, held in
    # the baseline's interval (so the speedup's 0.81 end is the verdict with the other baseline)
    assert any("10% faster than its run without nsys" in n for n in e["verdict"] + e["notes"])
    blo, bhi = e["baseline_ms_ci"]
    assert blo == pytest.approx(1.808 - (1.808 - 1.630), abs=0.002)
    assert lo == pytest.approx(0.81, abs=0.01)
    bl, bh = head["break_even_accept_len_ci"]
    assert bl < head["break_even_accept_len"] < bh


def test_the_intervals_are_the_per_cycle_t_intervals_combined():
    e = _economics(str(FIXTURES / "reference-k4"), "--baseline", str(FIXTURES / "reference-k0"))
    head = e["estimates"][0]
    # the cycle: t interval over the 99 busy periods of the run without nsys, as the sidecar has them
    from specprof.analyzer.readers.sidecar import find, read_sidecars
    s = read_sidecars(find(str(FIXTURES / "reference-k4" / "no-nsys")))
    c = s.cycles.sort("index")
    starts, idx = c["start"].to_list(), c["index"].to_list()
    periods = [b - a for i, (a, b) in enumerate(zip(starts, starts[1:])) if 5 <= idx[i] <= 103]
    periods = [p for p in periods if p <= 3 * statistics.median(periods)]
    half = econ.t975(len(periods) - 1) * statistics.stdev(periods) / math.sqrt(len(periods))
    assert head["cycle_ms_ci"][1] - head["cycle_ms"] == pytest.approx(half / 1e6, abs=2e-6)
    # speedup = L B / C: relative half-widths in quadrature
    rel = lambda v, ci: (ci[1] - ci[0]) / 2 / v  # noqa: E731
    r = math.sqrt(rel(head["accept_len"], head["accept_len_ci"]) ** 2 + rel(head["cycle_ms"], head["cycle_ms_ci"]) ** 2
                  + rel(e["baseline_ms"], e["baseline_ms_ci"]) ** 2)
    assert rel(head["speedup"], head["speedup_ci"]) == pytest.approx(r, rel=1e-2)
    assert head["verdict"].startswith("speculation wins: 1.46x (1.40-1.52)")
    assert head["tokens_per_s_ci"][0] < head["tokens_per_s"] < head["tokens_per_s_ci"][1]
    assert head["runs"] == 1 and head["interval_basis"] == "cycles"
    assert any("run-to-run noise" in n and "--repeat" in n for n in e["notes"])


def test_an_interval_holding_one_is_a_wash():
    # K = 2 under nsys against the derived plain step: 0.99x, and 1 inside its interval
    e = _economics(str(FIXTURES / "reference-k2"), "--baseline-ms", "2.411")
    profiled = e["estimates"][1]
    assert profiled["verdict"].startswith("a wash: 0.99x (0.96-1.02)")
    assert any("the baseline given with --baseline-ms adds no width" in n for n in e["notes"])


def test_repeated_runs_give_the_interval_of_their_means():
    # synthetic: the spread of run means, wider than one run's cycles (no capture has repeats yet)
    import numpy as np
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.normal(3.0e6, 1e4, 100), rng.normal(3.3e6, 1e4, 100), rng.normal(3.1e6, 1e4, 100)])
    runs = ["a"] * 100 + ["b"] * 100 + ["c"] * 100
    m = econ.mean_measure(values, runs)
    means = [values[:100].mean(), values[100:200].mean(), values[200:].mean()]
    assert m.basis == "runs" and m.runs == 3 and m.value == pytest.approx(statistics.fmean(means))
    assert m.half == pytest.approx(4.302653 * statistics.stdev(means) / math.sqrt(3))
    one = econ.mean_measure(values[:100])
    assert one.basis == "cycles" and one.half < m.half / 10


def test_a_sidecar_that_does_not_line_up_feeds_nothing():
    k2 = FIXTURES / "reference-k2"
    e = _economics(str(FIXTURES / "reference-k4" / "run.sqlite"), "--sidecar",
                   str(next(k2.glob("specprof-sidecar.*.jsonl"))), "--baseline-sidecar",
                   str(next((k2 / "no-nsys").glob("specprof-sidecar.*.jsonl"))),
                   "--baseline", str(FIXTURES / "reference-k0"))
    assert [r["source"] for r in e["estimates"]] == ["trace cycle ranges under nsys"]
    # K from the trace's own run directory (its manifest: K = 4), not from the other run's sidecar (K = 2)
    assert e["estimates"][0]["accept_len"] is None and e["estimates"][0]["draft_steps"] == 4
    assert any("feeds nothing" in n for n in e["notes"])
    out = CliRunner().invoke(main, ["analyze", str(FIXTURES / "reference-k4" / "run.sqlite"), "--json", "--sidecar",
                                    str(next(k2.glob("specprof-sidecar.*.jsonl"))), "--baseline-sidecar",
                                    str(next((k2 / "no-nsys").glob("specprof-sidecar.*.jsonl")))])
    check = json.loads(out.output)["crosscheck"]
    assert check["inflation"] is None and any("inflation: not measured" in n for n in check["notes"])
