"""The ramp captures: real SGLang 0.5.16 servers whose load rises in one launch, levels of 1, 2, 4, 8 and 16
concurrent requests one after another (fixtures/sglang-ramp-*, fixtures/README.md, docs/sglang.md "A rising
load, and the adaptive step count"), on one H100.

The dense and the MoE target, each at K = 2 and adaptive (`--speculative-adaptive` with
scripts/sglang/adaptive_ramp.json: K = 3 at batches 1-2, 2 at 3-8, 0 at 9-16), and the dense target in plain
decoding, each under nsys with its twin in no-nsys/. What is checked: the tracer's per-cycle step count (the
sidecar's `steps` and `draft_tokens`, the cycles table's columns) against the server's own log of its switches,
the adaptive config, and the sidecar's other records of the same cycles; the count per K.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from specprof.analyzer.readers import sglang_log
from specprof.analyzer.readers.sidecar import find, read_sidecars
from conftest import FIXTURES, ROOT

ADAPTIVE = ["sglang-ramp-dense-adaptive", "sglang-ramp-moe-adaptive"]
K2 = ["sglang-ramp-dense-k2", "sglang-ramp-moe-k2"]
PLAIN = "sglang-ramp-dense-plain"
LEVELS = [1, 2, 4, 8, 16]


def runs(names: list[str]) -> list[str]:
    return [r for name in names for r in (name, f"{name}/no-nsys")]


def sidecars(run: str):
    return read_sidecars(find(str(FIXTURES / run)))


def k_runs(steps: list) -> list:
    """The step counts of consecutive cycles with each repeat left out: [3, 3, 2, 2, 3] -> [3, 2, 3]."""
    return [k for i, k in enumerate(steps) if i == 0 or k != steps[i - 1]]


def config_steps(batch_size: int) -> int:
    """scripts/sglang/adaptive_ramp.json as SGLang routes it: the batch padded to the next CUDA-graph batch size
    (1, 2, 4, 8, 16), then the slot of the largest key at or below it."""
    config = json.loads((ROOT / "scripts" / "sglang" / "adaptive_ramp.json").read_text())
    padded = next(bs for bs in (1, 2, 4, 8, 16) if bs >= batch_size)
    key = max(int(k) for k in config if int(k) <= padded)
    return config[str(key)]["candidate_steps"][0]


@pytest.mark.parametrize("run", runs(ADAPTIVE))
def test_adaptive_cycles_split_by_k_as_the_server_log_says(run):
    s = sidecars(run)
    cycles = s.cycles.sort("index").filter(pl.col("verify"))
    # the count per K, K = 0 included: every verify cycle has its K
    assert s.step_counts().select("steps", "draft_tokens", "cycles").rows() == [(0, 1, 32), (2, 3, 34), (3, 4, 35)]
    assert cycles["steps"].null_count() == 0 and cycles.height == 101
    # the server log's switches (SGLang's `Switch adaptive runtime state` lines), from the K it started at
    # (--speculative-num-steps 3): in order, exactly the K the cycles ran
    switches = sglang_log.read_step_switches(str(FIXTURES / run / "server.log"))
    assert switches["from_steps"].to_list()[1:] == switches["to_steps"].to_list()[:-1]
    logged = [3, *switches["to_steps"]]
    assert switches["from_steps"][0] == 3 and logged == k_runs(cycles["steps"].to_list()) == [3, 2, 3, 2, 3, 0]
    assert (switches["to_draft_tokens"] == switches["to_steps"] + 1).all()
    # each cycle's K is the one the config gives its batch size, with the batch size the tracer recorded
    by_size = cycles.group_by("batch_size", "steps").agg(pl.len()).sort("batch_size").rows()
    assert by_size == [(1, 3, 18), (2, 3, 17), (3, 2, 1), (4, 2, 18), (8, 2, 15), (16, 0, 32)]
    assert all(steps == config_steps(size) for size, steps, _ in by_size)


@pytest.mark.parametrize("run", runs(ADAPTIVE))
def test_the_sidecars_other_records_agree_with_each_cycles_k(run):
    s = sidecars(run)
    cycles = s.cycles.filter(pl.col("verify"))
    drafts = s.phases.filter(pl.col("in_cycle") & (pl.col("name") == "draft")).group_by(cycle="cycle").agg(
        drafts=pl.len())
    both = cycles.join(drafts.rename({"cycle": "index"}), on="index", how="left").with_columns(
        pl.col("drafts").fill_null(0))
    # a K = 0 cycle skipped the draft (no draft range); every other cycle drafted once
    assert both.filter(pl.col("steps") == 0)["drafts"].to_list() == [0] * 32
    assert set(both.filter(pl.col("steps") > 0)["drafts"]) == {1}
    # a chain verifies K + 1 tokens per request, and no request accepts more than K drafts (none at K = 0)
    assert (both["draft_tokens"] == both["steps"] + 1).all()
    accepts = s.accepts.join(cycles.select(cycle="index", steps="steps"), on="cycle")
    assert accepts.height == int(cycles["batch_size"].sum())
    assert (accepts["correct"] <= accepts["steps"]).all()
    assert accepts.filter(pl.col("steps") == 0)["correct"].max() == 0
    # cycles without verify (prefill batches) have no K
    assert s.cycles.filter(~pl.col("verify"))["steps"].null_count() == s.cycles.filter(~pl.col("verify")).height


@pytest.mark.parametrize("run", runs(K2))
def test_a_fixed_k_server_writes_its_k_on_every_cycle_and_logs_no_switch(run):
    s = sidecars(run)
    assert s.step_counts().select("steps", "draft_tokens").rows() == [(2, 3)]
    assert sglang_log.read_step_switches(str(FIXTURES / run / "server.log")).is_empty()


@pytest.mark.parametrize("run", runs([PLAIN]))
def test_plain_decoding_has_no_k(run):
    s = sidecars(run)
    assert s.step_counts().is_empty() and s.cycles["steps"].null_count() == s.cycles.height
    assert s.cycles.filter(pl.col("decode"))["batch_size"].unique().sort().to_list() == LEVELS


def test_older_sidecars_read_their_k_as_null():
    s = sidecars("sglang-k4")
    assert s.cycles["steps"].null_count() == s.cycles.height == s.cycles["draft_tokens"].null_count()
    assert s.step_counts().select("steps", "cycles").rows() == [(None, s.cycles["verify"].sum())]


@pytest.mark.parametrize("run", runs(ADAPTIVE + K2 + [PLAIN]))
def test_what_each_window_holds_of_the_ramp(run):
    # W = 0: the capture opened at the first traced call and closed after N decode cycles (N = 80 adaptive, 68
    # at K = 2, 150 plain), before the ramp's end: the adaptive and plain windows reach into the last level (11
    # of its 32 cycles; 21 of 32), the K = 2 windows end with the level of 8 (K = 2 ran 92-93 decode cycles,
    # not the 75 the plan reckoned with); no window was left open (window_fill)
    s, client = sidecars(run), json.loads((FIXTURES / run / "client.json").read_text())
    (start, stop), argv = s.capture.sort("ns")["event"].to_list(), client["argv"]
    assert (start, stop) == ("start", "stop") and client["window_fill"] == 0
    assert argv[argv.index("--capture-cycles") + 1] == f"0:{s.capture['decode_cycles'].max()}"
    last = s.capture.filter(pl.col("event") == "stop")["after_cycle"][0]
    decode = s.cycles.filter(pl.col("decode"))
    inside = decode.filter(pl.col("index") <= last)
    top = {"sglang-ramp-dense-k2": 8, "sglang-ramp-moe-k2": 8}.get(run.split("/")[0], 16)
    assert max(inside["batch_size"]) == top and set(inside["batch_size"]) >= {x for x in LEVELS if x <= top}
    assert set(decode["batch_size"]) >= set(LEVELS)
    assert [level["concurrency"] for level in client["levels"]] == LEVELS
