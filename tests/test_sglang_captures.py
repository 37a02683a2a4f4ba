"""Real SGLang 0.5.16 EAGLE-3 servers on an H200, profiled by specprof (fixtures/sglang-*, fixtures/README.md).

Each capture was made by `specprof capture --capture-cycles 30:120 --gpu-events --nvidia-stats` around
`python3 -m sglang.launch_server` (scripts/sglang/gpu_runs.sh), with the same server again without nsys in
RUN/no-nsys. The model's greedy choices are known in advance (scripts/sglang/make_model.py): the draft's first
token is right when the token before the last verified one is 0 or 1 mod 3, so the accept length is 1.5.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from specprof.analyzer.app.analyze import Options, RunInputs
from specprof.analyzer.app.run import Run
from specprof.analyzer.derived.crosscheck import GT_FLOOR_NS, GT_TOLERANCE
from specprof.analyzer.model.labels import IN_CYCLE, UNATTRIBUTED
from specprof.analyzer.readers import sglang_log
from specprof.analyzer.readers.sidecar import find, read_sidecars
from conftest import FIXTURES

SPECULATIVE = ["sglang-k4", "sglang-k2", "sglang-k4-nooverlap"]
WITH_EVENTS = SPECULATIVE + ["sglang-plain"]


@pytest.fixture(scope="module")
def analysed():
    cache = {}

    def get(name: str, **options):
        key = (name, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = Run.load(str(FIXTURES / name), Options(cache=False), RunInputs(**options)).analysis()
        return cache[key]

    return get


def client(name: str) -> dict:
    return json.loads((FIXTURES / name / "client.json").read_text())


def test_the_captures_are_of_real_sglang_0_5_16_eagle3():
    for name in WITH_EVENTS:
        manifest = json.loads((FIXTURES / name / "manifest.json").read_text())
        assert manifest["versions"]["sglang"] == "0.5.16"
        assert manifest["command"][1:3] == ["-m", "sglang.launch_server"]
        header = read_sidecars(find(str(FIXTURES / name))).headers[0]
        assert header["versions"]["sglang"] == "0.5.16" and header["preset"] == "sglang"
        assert header["capture_cycles"] == [30, 120] and header["gpu_time"] is True
        speculative = "--speculative-algorithm" in manifest["command"]
        assert speculative == (name != "sglang-plain")


@pytest.mark.parametrize("name", SPECULATIVE)
def test_analyze_shows_the_speculative_phases_and_little_gpu_work_outside_them(analysed, name):
    a = analysed(name)
    assert {"draft", "verify", "draft_extend", "accept"} <= set(a.phases["phase"])
    assert a.cycles.height == 120  # the capture window: 120 decode cycles after the first 30
    busy = a.phases.select(pl.col("gpu_busy").sum()).item()
    outside = a.phases.filter(pl.col("phase").is_in([UNATTRIBUTED, IN_CYCLE]))["gpu_busy"].sum()
    # GPU work launched outside every phase: the scheduler's own kernels between cycles (measured: 1.6 % on
    # K = 4, 2.0 % on K = 2, 0.6 % without the overlap scheduler).
    assert outside / busy < 0.025, (outside, busy)


def test_a_plain_server_is_cycle_over_decode(analysed):
    a = analysed("sglang-plain")
    assert {"decode", "accept"} <= set(a.phases["phase"])
    assert not {"draft", "verify"} & set(a.phases["phase"])
    assert a.cycles.height == 120


@pytest.mark.parametrize("name", WITH_EVENTS)
def test_attributed_time_per_phase_instance_matches_the_cuda_events(analysed, name):
    truth = analysed(name).crosscheck.ground_truth
    phases = {"decode"} if name == "sglang-plain" else {"draft", "verify", "draft_extend"}
    assert set(truth["phase"]) == phases
    for r in truth.iter_rows(named=True):
        assert r["instances"] >= 118, r  # the window's cycles, less those cut by its edges
        assert abs(r["diff_ns"]) <= max(GT_TOLERANCE * r["events_ns"], GT_FLOOR_NS), r
        assert r["verdict"] == "within"


def test_the_check_is_tighter_than_its_tolerance_on_verify(analysed):
    # Measured (docs/sglang.md): verify within 0.1 %, draft_extend 0.2 %, draft 1.8 % on K = 4.
    truth = analysed("sglang-k4").crosscheck.ground_truth
    row = truth.filter(pl.col("phase") == "verify").row(0, named=True)
    assert abs(row["diff_pct"]) < 0.5


@pytest.mark.parametrize("name", SPECULATIVE)
def test_the_sidecar_accept_length_is_sglangs_own(analysed, name):
    # The server log's `accept len` counts every request of each verified batch, as the sidecar does.
    accept = analysed(name).crosscheck.accept
    assert accept.verdict == "agree"
    assert abs(accept.gap) <= 0.005
    # The responses' meta_info counts only requests not yet finished (SGLang's batch_result_processor skips
    # `req.finished()`), so it holds a few request-rounds fewer than the worker verified; the same rounds
    # less those gives the same correct drafts per round to 0.1 %.
    meta = [r["meta_info"] for r in client(name)["responses"]]
    rounds = sum(m["spec_verify_ct"] for m in meta)
    sglang = (sum(m["spec_num_correct_drafts"] for m in meta) + rounds) / rounds
    assert abs(accept.sidecar_pooled - sglang) / sglang < 0.001
    assert accept.request_rounds - rounds in range(0, 2 * len(meta) + 1)


def test_the_accept_length_is_the_one_the_weights_were_made_for(analysed):
    model = json.loads((FIXTURES / "sglang-k4" / "model.json").read_text())
    assert model["expected_accept_length"] == 1.5
    for name in SPECULATIVE:
        window = analysed(name).economics.headline
        assert window["accept_len"] == pytest.approx(1.5, abs=0.002)


def test_the_plain_capture_is_the_baseline_of_the_speculative_one(analysed):
    a = analysed("sglang-k4", baseline_run=str(FIXTURES / "sglang-plain"))
    e = a.economics
    assert "sglang-plain: sidecar without nsys, its capture window, 120 steps of 8 requests" in e.baseline_source
    head = e.headline
    assert head["source"] == "sidecar without nsys" and head["batch"] == 8.0
    # break-even: the accept length at which K = 4's cycle makes as many tokens per second as plain decoding
    assert head["break_even_accept_len"] == pytest.approx(head["cycle_ns"] / e.baseline_ns, rel=1e-9)
    assert head["speedup"] == pytest.approx(head["accept_len"] * e.baseline_ns / head["cycle_ns"], rel=1e-9)


def test_the_server_log_is_parsed_from_the_real_log():
    log = sglang_log.read_server_log(str(FIXTURES / "sglang-k4" / "server.log"))
    assert log.height == 22  # --decode-log-interval 10 over about 220 decode iterations
    assert set(log["running"].to_list()) <= {1, 8}
    steady = log.filter(pl.col("running") == 8)
    assert steady["accept_len"].is_between(1.45, 1.58).all()
    assert steady["accept_rate"].is_between(0.11, 0.16).all()  # (accept len - 1) / 4 draft tokens
    assert log["time"].null_count() == 0 and log["tp"].null_count() == log.height  # 0.5.16 at TP 1: no TP tag


def test_the_log_interval_comes_from_the_servers_command_line(analysed):
    # The server ran with --decode-log-interval 10 (its argv is in the sidecar's header): 22 lines cover the
    # 221 decode cycles. Told 40, the check says the windows differ.
    window = [line for line in analysed("sglang-k4").crosscheck.accept.explanations if line.startswith("windows")]
    assert window == []
    told = analysed("sglang-k4", log_interval=40).crosscheck.accept.explanations
    assert any(line.startswith("windows: the log's lines cover about 880 iterations") for line in told)


def test_the_inflation_compares_each_run_over_its_own_window(analysed):
    a = analysed("sglang-k4")
    assert any("the baseline's own capture window (cycles 35..154" in n for n in a.crosscheck.notes)
    gpu = a.crosscheck.inflation.filter(pl.col("measure") == "gpu")
    assert set(gpu["phase"]) == {"cycle", "verify", "draft", "draft_extend"}
    assert (gpu["cycles_with"] >= 119).all() and (gpu["cycles_without"] == 120).all()
