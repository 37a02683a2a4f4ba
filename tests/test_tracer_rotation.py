"""The step rotation (`--sweep-steps`, tracer/rotation.py) on the real SGLang 0.5.23 adaptive worker and its
controller, on the CPU, driven as tests/test_tracer_sglang.py drives it (the same process, only the GPU methods
stood in): decode batches of changing size through the real `forward_batch_generation`, its
`activate_step_by_batch`, the real `AdaptiveController` and `AdaptiveSpeculativeParams` built from an adaptive
config whose candidate steps are the swept ones (what `specprof capture --sweep-steps` starts the server with),
and the real `on_verify_complete_cpu` (whose EMA would move K: all drafts accepted here). The stood-in draft,
verify and draft_extend each note the worker's K when they run, so a switch in the middle of a cycle would show."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import polars as pl
import pytest

from specprof.analyzer.readers.sidecar import find as find_sidecars
from specprof.analyzer.readers.sidecar import read_sidecars
from specprof.tracer import rotation
from test_tracer_sglang import ADAPTIVE_PROCESS
from tracer_helpers import ROOT

SWEPT = [0, 1, 2, 4]
BLOCK = 5
CYCLES = 47
CONFIG = {"1": {"candidate_steps": SWEPT}}  # as tracer/capture.py writes it for --sweep-steps 0,1,2,4

PROCESS = ADAPTIVE_PROCESS.replace(
    "speculative_num_steps=3, speculative_eagle_topk=1,", "speculative_num_steps=2, speculative_eagle_topk=1,",
).replace(
    "speculative_num_draft_tokens=4, speculative_adaptive=True", "speculative_num_draft_tokens=3, speculative_adaptive=True",
).replace(
    "worker.__dict__.update(server_args=args, topk=1, speculative_num_steps=3, speculative_num_draft_tokens=4,",
    "worker.__dict__.update(server_args=args, topk=1, speculative_num_steps=2, speculative_num_draft_tokens=3,",
).replace(
    "draft_worker.__dict__.update(server_args=args, topk=1, speculative_num_steps=3, speculative_num_draft_tokens=4,",
    "draft_worker.__dict__.update(server_args=args, topk=1, speculative_num_steps=2, speculative_num_draft_tokens=3,",
).replace(
    "AdaptiveSpeculativeParams(initial_steps=3, cfg_path=config)",
    "AdaptiveSpeculativeParams(initial_steps=2, cfg_path=config)",
).replace(
    "    verified.append([batch.spec_info.spec_steps, batch.spec_info.draft_token_num])",
    "    verified.append([batch.spec_info.spec_steps, batch.spec_info.draft_token_num])\n"
    "    at_verify.append(self.speculative_num_steps)",
).replace(
    "\nverified = []\n",
    "\nverified = []\nat_verify = []\nat_draft = []\n",
).replace(
    "\ndef draft(self, batch):\n",
    "\ndef draft(self, batch):\n    at_draft.append(self.speculative_num_steps)\n",
).replace(
    "session = TracingSession(presets.get(\"sglang\"), out, handle_signals=False)",
    "session = TracingSession(presets.get(\"sglang\"), out, handle_signals=False, sweep_steps=sys.argv[4])",
).replace(
    "\nworker.adaptive_controller = controller\n",
    "\nworker.adaptive_controller = None if sys.argv[5] == 'off' else controller\n",
).replace(
    "\nfor size, cycles in [(1, 12), (2, 12), (4, 8), (8, 4), (16, 8), (16, 4)]:",
    f"\nfor size, cycles in [(1 + i % 5, 1) for i in range({CYCLES})]:",
).replace(
    "print(json.dumps({\"verified\": verified, \"extended\": extended, \"log\": log}))",
    "print(json.dumps({\"verified\": verified, \"extended\": extended, \"log\": log, \"at_verify\": at_verify,"
    " \"at_draft\": at_draft}))",
)


def drive(tmp_path, mode: str):
    config = tmp_path / "adaptive.json"
    config.write_text(json.dumps(CONFIG))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECPROF_", "SGLANG_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", PROCESS, str(ROOT / "tests" / "data" / "sglang_config"),
                           str(config), str(tmp_path), f"{','.join(map(str, SWEPT))}:{BLOCK}", mode],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    driver = json.loads(done.stdout.strip().splitlines()[-1])
    paths = find_sidecars(str(tmp_path))
    records = [json.loads(line) for line in open(paths[0])]
    return driver, read_sidecars(paths), records, done.stderr


def test_the_process_is_the_one_test_tracer_sglang_drives():
    assert PROCESS.count("speculative_num_steps=2") == 3 and "sys.argv[4]" in PROCESS and "sys.argv[5]" in PROCESS
    assert f"range({CYCLES})" in PROCESS and "at_draft.append" in PROCESS and "at_verify.append" in PROCESS


@pytest.fixture(scope="module")
def rotated(tmp_path_factory):
    return drive(tmp_path_factory.mktemp("rotation"), "on")


def test_each_cycles_k_follows_the_rotation_in_blocks(rotated):
    driver, sidecars, records, _ = rotated
    cycles = sidecars.cycles.sort("index")
    assert cycles.height == CYCLES
    expected = [SWEPT[(i // BLOCK) % len(SWEPT)] for i in range(CYCLES)]
    assert cycles["steps"].to_list() == expected  # round-robin, BLOCK cycles a K, whatever the batch size
    assert cycles["draft_tokens"].to_list() == [k + 1 if k else 1 for k in expected]
    assert cycles["batch_size"].to_list() == [1 + i % 5 for i in range(CYCLES)]
    # the EMA (every draft accepted) did not move K: the rotation answered every verify with no switch
    assert [v[0] for v in driver["verified"]] == expected


def test_no_cycle_switches_in_its_middle(rotated):
    driver, sidecars, _, _ = rotated
    # the worker's K when the verify ran is the K the cycle's draft built its verify input with, and the draft
    # ran (K > 0) with that same K
    assert driver["at_verify"] == [v[0] for v in driver["verified"]]
    assert driver["at_draft"] == [k for k in driver["at_verify"] if k > 0]
    phases = sidecars.phases.filter(pl.col("in_cycle")).group_by("cycle").agg(pl.col("name"))
    for index, names in zip(phases["cycle"].to_list(), phases["name"].to_list()):
        k = sidecars.cycles.filter(pl.col("index") == index)["steps"][0]
        assert names == (["verify", "draft_extend"] if k == 0 else ["draft", "verify", "draft_extend"])


def test_the_header_and_footer_say_what_was_asked_and_done(rotated):
    _, sidecars, records, _ = rotated
    header, footer = records[0], records[-1]
    assert header["step_rotation"] == {"steps": SWEPT, "block": BLOCK}
    summary = footer["step_rotation"]
    assert summary["installed"] and summary["decode_cycles"] == CYCLES
    assert summary["switches"] == (CYCLES - 1) // BLOCK
    assert footer["tracer_faults"] == 0 and sidecars.files["dropped"].to_list() == [0]


def test_a_worker_without_its_adaptive_runtime_is_refused_in_one_line(tmp_path):
    driver, sidecars, records, stderr = drive(tmp_path, "off")
    refused = [line for line in stderr.splitlines() if "--sweep-steps refused" in line]
    assert len(refused) == 1 and "adaptive runtime is off" in refused[0]
    assert records[-1]["step_rotation"]["installed"] is False
    assert "adaptive runtime is off" in records[-1]["step_rotation"]["refused"]
    assert set(sidecars.cycles["steps"].to_list()) == {2}  # the server ran as started


class _Owner:
    pass


def test_refusals_and_parsing_without_sglang():
    r = rotation.Rotation([0, 2], 3)
    r.cycle_starting(_Owner())  # synthetic: a worker class with no adaptive controller at all (before 0.5.16)
    assert "has no adaptive controller" in r.refused
    owner = _Owner()
    owner.adaptive_controller = type("C", (), {})()
    owner.adaptive_controller.params = type("P", (), {"get_steps_for_batch": lambda self, b: 1})()
    owner.adaptive_controller._states = {1: None, 2: None}
    r = rotation.Rotation([0, 2], 3)
    r.cycle_starting(owner)  # synthetic: a swept K the server built no runtime state for
    assert "no state for K = 0" in r.refused
    assert rotation.parse("0,1,2,4:40") == ([0, 1, 2, 4], 40)
    for bad in ("0,1", "2:40", "0,0:5", "a,b:3", "0,1:0"):
        with pytest.raises(ValueError):
            rotation.parse(bad)
