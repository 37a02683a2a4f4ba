"""The `sglang` preset against the real SGLang 0.5.23 (installed by scripts/test; never skipped).

Every v2 target resolves, is wrapped once, on the class the table names, and keeps its signature; the v1
modules are gone in 0.5.23. Also the facts about SGLang the preset relies on, so that a new SGLang that breaks
them fails here rather than in a profile.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
import textwrap

import polars as pl
import pytest

import sglang
from specprof.analyzer.readers import sglang_log
from specprof.analyzer.readers.sidecar import find as find_sidecars
from specprof.analyzer.readers.sidecar import read_sidecars
from specprof.tracer import presets
from specprof.tracer.presets import sglang as preset_module
from specprof.tracer.session import TracingSession
from specprof.tracer.targets import COUNTS, NOT_FOUND, RANGE, is_wrapped
from tracer_helpers import ROOT

PRESET = presets.get("sglang")
V1_MODULES = {preset_module.V1, preset_module.STANDALONE_V1, preset_module.MULTI_LAYER_V1}
V2_CANDIDATES = [
    (kind, phase, candidate)
    for kind, phase, candidates in [(RANGE, t.phase, t.candidates) for t in PRESET.targets]
    + [(COUNTS, None, h.candidates) for h in PRESET.counts]
    for candidate in candidates
    if candidate[0] not in V1_MODULES
]


def _originals() -> dict:
    out = {}
    for _, _, (module, cls, method) in V2_CANDIDATES:
        klass = getattr(importlib.import_module(module), cls)
        out[(module, cls, method)] = (klass, dict(klass.__dict__).get(method), getattr(klass, method))
    return out


def test_deactivate_restores_every_method(tmp_path):
    # First in this file: it runs before the module fixture below patches SGLang for the other tests.
    originals = _originals()
    assert not any(is_wrapped(resolved, kind) for (kind, _, c) in V2_CANDIDATES
                   for resolved in [originals[c][2]])
    session = TracingSession(PRESET, str(tmp_path), handle_signals=False)
    session.activate(import_modules=True)
    assert len(session.patcher) > 0
    session.deactivate()
    for (module, cls, method), (klass, own_before, _) in originals.items():
        assert klass.__dict__.get(method) is own_before, (cls, method)


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    originals = _originals()
    session = TracingSession(PRESET, str(tmp_path_factory.mktemp("sidecar")), handle_signals=False)
    session.activate(import_modules=True)
    yield session, originals
    session.deactivate()


def test_this_is_sglang_0_5_23():
    assert sglang.__version__ == "0.5.23"


def test_the_table_has_every_v2_phase_and_worker():
    phases = {(t.phase, c[1]) for t in PRESET.targets for c in t.candidates if c[0] not in V1_MODULES}
    for worker, draft_worker in [("EAGLEWorkerV2", "EagleDraftWorker"), ("StandaloneWorkerV2", "StandaloneDraftWorker"),
                                 ("MultiLayerEagleWorkerV2", "MultiLayerEagleDraftWorker")]:
        assert {("cycle", worker), ("verify", worker), ("draft", draft_worker), ("draft_extend", draft_worker),
                ("prefill", draft_worker)} <= phases
    assert {("prefill", "EAGLEWorkerV2"), ("prefill", "StandaloneWorkerV2"), ("accept", "Scheduler")} <= phases


def test_every_v2_target_resolves(patched):
    session, _ = patched
    for kind, phase, candidate in V2_CANDIDATES:
        resolution = session.resolutions[(kind, phase, candidate)]
        assert resolution.resolved, resolution
    assert session.unresolved() == []


def test_the_v1_modules_are_gone_in_0_5_23(patched):
    session, _ = patched
    v1 = [r for r in session.resolutions.values() if r.candidate[0] in V1_MODULES]
    assert v1 and all(not r.resolved and r.detail == NOT_FOUND for r in v1)


@pytest.mark.parametrize("kind, phase, candidate", V2_CANDIDATES, ids=lambda v: ".".join(v) if isinstance(v, tuple) else str(v))
def test_each_v2_target_is_wrapped_once_and_keeps_its_signature(patched, kind, phase, candidate):
    _, originals = patched
    module, cls, method = candidate
    klass, own_before, resolved_before = originals[candidate]
    current = getattr(klass, method)
    assert is_wrapped(current, kind)
    assert inspect.signature(current) == inspect.signature(resolved_before)
    assert (current.__name__, current.__qualname__, current.__doc__) == (
        resolved_before.__name__, resolved_before.__qualname__, resolved_before.__doc__)
    # Exactly one wrapper of this kind between the class attribute and the original function.
    chain, function = [], current
    while function is not None:
        chain.append(getattr(function, "__specprof__", None))
        function = getattr(function, "__wrapped__", None)
    assert chain.count(kind) == 1
    assert chain[-1] is None and inspect.unwrap(current) is inspect.unwrap(resolved_before)


def test_inherited_methods_are_patched_on_the_concrete_class(patched):
    from sglang.srt.speculative.base_spec_worker import BaseSpecWorker
    from sglang.srt.speculative.multi_layer_eagle_worker_v2 import MultiLayerEagleWorkerV2
    from sglang.srt.speculative.standalone_worker_v2 import StandaloneWorkerV2

    # MultiLayerEagleWorkerV2 inherits BaseSpecWorker's no-op hook: the wrapper goes on MultiLayer only.
    assert is_wrapped(MultiLayerEagleWorkerV2.__dict__["on_verify_complete_cpu"], COUNTS)
    assert not is_wrapped(BaseSpecWorker.__dict__["on_verify_complete_cpu"], COUNTS)
    # StandaloneWorkerV2 inherits from EAGLEWorkerV2, which is patched: no second wrapper of its own.
    assert "verify" not in StandaloneWorkerV2.__dict__ and is_wrapped(StandaloneWorkerV2.verify, RANGE)


# -- the SGLang facts the preset relies on ---------------------------------------------------------------------
def test_schedule_batch_size_is_a_host_list_length():
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    source = inspect.getsource(ScheduleBatch.batch_size)
    assert source.strip().splitlines()[-1].strip() == "return len(self.reqs)"


def test_the_accept_count_hook_has_the_shape_the_preset_reads():
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    parameters = list(inspect.signature(EAGLEWorkerV2.on_verify_complete_cpu).parameters)
    assert parameters == ["self", "num_correct_drafts_per_req", "batch_size"]
    assert preset_module.counts_from_argument((None, [1, 2]), {"batch_size": 2}, None) == [1, 2]
    assert preset_module.counts_from_argument((None,), {"num_correct_drafts_per_req": [3]}, None) == [3]


def test_the_scheduler_hands_host_counts_to_the_hook_after_its_own_wait():
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor

    source = inspect.getsource(SchedulerBatchResultProcessor._resolve_spec_v2_tokens)
    assert "result.accept_lens.tolist()" in source
    assert "self.model_worker.on_verify_complete_cpu(" in source


def test_counts_that_are_not_host_ints_are_ignored():
    import torch

    assert preset_module.counts_from_argument((None, torch.tensor([1, 2])), {}, None) is None
    assert preset_module.counts_from_argument((None, [torch.tensor(1)]), {}, None) is None


def test_v1_counts_are_read_from_verify_output_in_every_name():
    for name in preset_module.V1_COUNT_FIELDS:
        output = type("VerifyOutput", (), {name: [1, 0]})()
        assert preset_module.counts_from_verify_output((), {}, ("logits", output, True)) == [1, 0]
    assert preset_module.counts_from_verify_output((), {}, None) is None


def test_batch_size_and_rank_read_host_data_only():
    import torch
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    batch = object.__new__(ScheduleBatch)
    batch.reqs = [1, 2, 3, 4]
    assert preset_module.batch_size(batch) == 4
    worker_batch = type("ModelWorkerBatch", (), {"seq_lens": torch.zeros(5)})()
    assert preset_module.batch_size(worker_batch) == 5
    assert preset_module.batch_size(None) is None
    assert preset_module.rank(type("V1Worker", (), {"tp_rank": 2})()) == 2
    # 0.5.23: the rank lives in the runtime context, unpublished outside a scheduler: None, no exception.
    import sglang.srt.runtime_context  # noqa: F401

    assert preset_module.rank(object()) is None


# -- the step count per cycle, on SGLang's adaptive worker ------------------------------------------------------
# One fresh interpreter (SGLang's runtime context is process-wide) publishes a real ServerArgs with
# `speculative_adaptive` and an adaptive config of the ramp's kind (candidate steps by batch size, K = 0 at the
# largest), builds the real EAGLEWorkerV2 and EagleDraftWorker without a model (object.__new__), with SGLang's
# own AdaptiveController and AdaptiveSpeculativeParams reading that config, and runs decode batches of 1, 2, 4, 8
# and 16 requests through the real `forward_batch_generation`: its `activate_step_by_batch` and the controller's
# `apply_runtime_state` (the K for the batch size), the K = 0 branch (`_build_trivial_verify_input`, real, on
# the CPU), `_stub_skipped_draft_extend` (real, with SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 for the last
# batches), and `on_verify_complete_cpu` (real: the EMA that moves K). The GPU work is stood in on the classes
# before the tracer wraps them: `draft` returns the verify input SGLang's draft builds (its K, K + 1 tokens:
# build_eagle_verify_input, checked below), `verify` notes the verify input it got, `_draft_extend_for_decode`
# does nothing. The accept counts are 0 at batches 1 and 8 and all correct otherwise: the EMA takes K from 3
# down to 1 at batch 1, back up to 3 at batch 2, and from 2 to 1 after the last batch of 8, which then never
# runs, the next batch of 16 choosing K = 0. torch.distributed (gloo, one rank) is up so that SGLang logs its switches as a server does.
ADAPTIVE_CONFIG = {"ema_alpha": 0.5, "warmup_batches": 2, "update_interval": 2,
                   "1": {"candidate_steps": [1, 3]}, "3": {"candidate_steps": [1, 2]}, "9": {"candidate_steps": [0]}}
ADAPTIVE_PROCESS = textwrap.dedent(
    """
    import json, logging, os, sys, types
    import torch
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.server_args import ServerArgs
    model, config, out = sys.argv[1:4]
    torch.distributed.init_process_group("gloo", init_method="file://" + os.path.join(out, "store"), rank=0,
                                         world_size=1)
    args = ServerArgs(model_path=model, device="cpu", skip_tokenizer_init=True, speculative_algorithm="EAGLE3",
                      speculative_draft_model_path=model, speculative_num_steps=3, speculative_eagle_topk=1,
                      speculative_num_draft_tokens=4, speculative_adaptive=True, speculative_adaptive_config=config)
    publish(args, role="scheduler", ranks=SpawnRanks(world_rank=0, gpu_id=0))
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.adaptive_runtime_state import AdaptiveController, SpecRuntimeState
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams
    from sglang.srt.speculative.eagle_info import EagleDraftInput, EagleVerifyInput
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2, EagleDraftWorker
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    log = []
    handler = logging.Handler()
    handler.emit = lambda record: log.append(record.getMessage())
    logging.getLogger("sglang.srt.speculative.eagle_worker_v2").addHandler(handler)
    logging.getLogger("sglang.srt.speculative.eagle_worker_v2").setLevel(logging.INFO)
    verified = []
    def draft(self, batch):
        return EagleVerifyInput.create_idle_input(topk=1, spec_steps=self.speculative_num_steps,
                                                  num_verify_tokens=self.speculative_num_draft_tokens, device="cpu")
    def verify(self, batch, pp_proxy_tensors=None, grammar_barrier=None):
        verified.append([batch.spec_info.spec_steps, batch.spec_info.draft_token_num])
        return types.SimpleNamespace(new_seq_lens=batch.seq_lens, next_draft_input=EagleDraftInput())
    EagleDraftWorker.draft = draft
    EAGLEWorkerV2.verify = verify
    extended = []
    EagleDraftWorker._draft_extend_for_decode = lambda self, batch, batch_output, kv_loc_plan=None: extended.append(
        len(verified) - 1)

    from specprof.tracer import presets
    from specprof.tracer.session import TracingSession
    session = TracingSession(presets.get("sglang"), out, handle_signals=False)
    session.activate(import_modules=True)

    algorithm = SpeculativeAlgorithm.from_string("EAGLE3")
    worker = object.__new__(EAGLEWorkerV2)
    worker.__dict__.update(server_args=args, topk=1, speculative_num_steps=3, speculative_num_draft_tokens=4,
                           device="cpu", speculative_algorithm=algorithm, enable_dp_spec_prefill_coordination=False,
                           _hosts_draft=True)
    draft_worker = object.__new__(EagleDraftWorker)
    draft_worker.__dict__.update(server_args=args, topk=1, speculative_num_steps=3, speculative_num_draft_tokens=4,
                                 device="cpu", parallel_layout=types.SimpleNamespace(tp_group=None))
    draft_worker.draft_runner = types.SimpleNamespace(
        model_config=types.SimpleNamespace(spec_hidden_size=8, dtype=torch.float32), spec_algorithm=algorithm,
        draft_attn_backend=None, attn_backend=None)
    worker._draft_worker = draft_worker
    backend = types.SimpleNamespace(verify_mask=None, max_context_len=64)
    worker._target_worker = types.SimpleNamespace(
        model_runner=types.SimpleNamespace(attn_backend=backend, decode_cuda_graph_runner=None))
    controller = AdaptiveController(worker, AdaptiveSpeculativeParams(initial_steps=3, cfg_path=config))
    for k in controller.candidate_steps:
        controller.register(SpecRuntimeState(k, k + 1, None, None, backend, None, None, None))
    controller.init_states(cuda_graph_bs=[1, 2, 4, 8, 16])
    worker.adaptive_controller = controller

    for size, cycles in [(1, 12), (2, 12), (4, 8), (8, 4), (16, 8), (16, 4)]:
        if len(verified) == 44:
            os.environ["SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND"] = "1"
        for _ in range(cycles):
            batch = object.__new__(ScheduleBatch)
            batch.__dict__.update(reqs=[object()] * size, forward_mode=ForwardMode.DECODE, is_extend_in_batch=False,
                                  seq_lens=torch.full((size,), 50), seq_lens_sum=50 * size,
                                  spec_info=EagleDraftInput(bonus_tokens=torch.zeros(size, dtype=torch.long)))
            worker.forward_batch_generation(batch)
            steps = verified[-1][0]
            worker.on_verify_complete_cpu([0 if size in (1, 8) else steps] * size, batch_size=size)
    session.close()
    print(json.dumps({"verified": verified, "extended": extended, "log": log}))
    """
)


def k_runs(steps: list) -> list:
    """The step counts of consecutive cycles with each repeat left out: [3, 3, 1, 1, 3] -> [3, 1, 3]."""
    return [k for i, k in enumerate(steps) if i == 0 or k != steps[i - 1]]


def is_subsequence(short: list, long: list) -> bool:
    it = iter(long)
    return all(any(k == x for x in it) for k in short)


@pytest.fixture(scope="module")
def adaptive_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("adaptive")
    config = out / "adaptive.json"
    config.write_text(json.dumps(ADAPTIVE_CONFIG))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECPROF_", "SGLANG_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", ADAPTIVE_PROCESS, str(ROOT / "tests" / "data" / "sglang_config"),
                           str(config), str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    driver = json.loads(done.stdout.strip().splitlines()[-1])
    sidecars = read_sidecars(find_sidecars(str(out)))
    return driver, sidecars


def test_each_cycle_records_the_k_its_verify_checked(adaptive_run):
    driver, sidecars = adaptive_run
    cycles = sidecars.cycles.sort("index")
    assert cycles.height == len(driver["verified"]) == 48
    assert cycles.select("steps", "draft_tokens").rows() == [tuple(v) for v in driver["verified"]]
    assert cycles["batch_size"].to_list() == [1] * 12 + [2] * 12 + [4] * 8 + [8] * 4 + [16] * 12
    # the EMA moved K within a batch size (3 -> 1 at batch 1, 1 -> 3 at batch 2), the batch size moved it
    # (2 at 4 and 8, 0 at 16)
    assert k_runs(cycles["steps"].to_list()) == [3, 1, 3, 2, 0]
    assert (cycles["draft_tokens"] == cycles["steps"] + 1).all()
    assert sidecars.files["dropped"].to_list() == [0]


def test_k0_cycles_have_no_draft_and_the_stub_is_their_draft_extend(adaptive_run):
    driver, sidecars = adaptive_run
    names = sidecars.phases.filter(pl.col("in_cycle")).group_by("cycle").agg(pl.col("name"))
    phases = dict(zip(names["cycle"].to_list(), names["name"].to_list()))
    for index, steps in sidecars.cycles.select("index", "steps").rows():
        expected = ["verify", "draft_extend"] if steps == 0 else ["draft", "verify", "draft_extend"]
        assert phases[index] == expected, (index, steps)
    # the last four K = 0 cycles ran SGLang's stub in draft_extend's place (SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND):
    # the real draft_extend ran in the other 44, and all 48 have a draft_extend range
    assert driver["extended"] == list(range(44))
    assert sidecars.cycles.filter(pl.col("index") >= 44)["steps"].to_list() == [0] * 4


def test_the_count_per_k_is_the_drivers_and_follows_the_logged_switches(adaptive_run):
    driver, sidecars = adaptive_run
    counts = sidecars.step_counts()
    expected = {}
    for steps, tokens in driver["verified"]:
        expected[(steps, tokens)] = expected.get((steps, tokens), 0) + 1
    assert {(s, t): n for _, s, t, n in counts.rows()} == expected
    assert counts.filter(pl.col("steps") == 0)["cycles"].to_list() == [12]
    switches = sglang_log.step_switches(driver["log"])
    assert switches.height == len([m for m in driver["log"] if m.startswith("Switch adaptive runtime state")])
    logged = [switches["from_steps"][0], *switches["to_steps"]]
    assert switches["from_steps"].to_list()[1:] == switches["to_steps"].to_list()[:-1]
    # every K the cycles ran, in order, is a K the server switched to; a K it left before any cycle ran is the
    # one kind of logged switch without cycles (here the EMA's move to 1 after the last batch of 8)
    ran = k_runs(sidecars.cycles.sort("index")["steps"].to_list())
    assert is_subsequence(ran, logged)
    assert (ran, logged) == ([3, 1, 3, 2, 0], [3, 1, 3, 2, 1, 0])


def test_verify_shape_reads_the_verify_input_v1_v2_and_the_worker():
    import torch
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    spec = EagleVerifyInput.create_idle_input(topk=1, spec_steps=0, num_verify_tokens=1, device="cpu")
    batch = type("ScheduleBatch", (), {"spec_info": spec})()
    assert preset_module.verify_shape((None, batch), {}) == (0, 1)
    tree = EagleVerifyInput.create_idle_input(topk=4, spec_steps=3, num_verify_tokens=8, device="cpu")
    assert preset_module.verify_shape((None, batch, tree), {}) == (3, 8)  # v1: verify(self, batch, spec_info)
    assert preset_module.verify_shape((None, batch), {"pp_proxy_tensors": None}) == (0, 1)
    worker = type("Worker", (), {"speculative_num_steps": 2, "speculative_num_draft_tokens": 3})()
    assert preset_module.verify_shape((worker, None), {}) == (2, 3)
    # tensors and other non-ints are never read
    odd = type("Input", (), {"spec_steps": torch.tensor(2), "draft_token_num": 3})()
    assert preset_module.verify_shape((object(), type("B", (), {"spec_info": odd})()), {}) is None


def test_the_verify_inputs_carry_the_k_that_the_draft_or_the_k0_branch_built():
    from sglang.srt.speculative import eagle_worker_common
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2, EagleDraftWorker

    build = inspect.getsource(eagle_worker_common.build_eagle_verify_input)
    assert "spec_steps=num_steps" in build and "draft_token_num=num_draft_tokens" in build
    draft = inspect.getsource(EagleDraftWorker.draft)
    assert "num_steps=self.speculative_num_steps" in draft
    trivial = inspect.getsource(EAGLEWorkerV2._build_trivial_verify_input)
    assert "spec_steps=0" in trivial and "draft_token_num=1" in trivial
    # the K is chosen before the draft and the verify of each decode cycle
    cycle = inspect.getsource(EAGLEWorkerV2.forward_batch_generation)
    assert cycle.index("self.activate_step_by_batch(") < cycle.index("self.draft_worker.draft(batch)") < cycle.index(
        "self.verify(")
