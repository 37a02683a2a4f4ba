"""The `sglang` preset against the real SGLang 0.5.23 (installed by scripts/test; never skipped).

Every v2 target resolves, is wrapped once, on the class the table names, and keeps its signature; the v1
modules are gone in 0.5.23. Also the facts about SGLang the preset relies on, so that a new SGLang that breaks
them fails here rather than in a profile.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

import sglang
from specprof.tracer import presets
from specprof.tracer.presets import sglang as preset_module
from specprof.tracer.session import TracingSession
from specprof.tracer.targets import COUNTS, NOT_FOUND, RANGE, is_wrapped

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
