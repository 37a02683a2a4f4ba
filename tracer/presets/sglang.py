"""SGLang's EAGLE / EAGLE-3 workers, from the v1 workers (0.5.12 and earlier) to the v2 workers (0.5.23).

Names checked against the released wheels (../shared/notes/sglang.md sections 1, 2 and 7; 0.5.10, 0.5.12 and
0.5.23 re-read for this table). One `Target` per phase and worker family (EAGLE, Standalone, MultiLayer); its
candidates are the methods that run the phase in any version. v2 first:

    cycle         EAGLEWorkerV2.forward_batch_generation        v1 EAGLEWorker.forward_batch_generation
    draft         EagleDraftWorker.draft                        v1 EAGLEWorker.draft
    verify        EAGLEWorkerV2.verify                          v1 EAGLEWorker.verify
    draft_extend  EagleDraftWorker._draft_extend_for_decode     v1 EAGLEWorker.forward_draft_extend_after_decode
    prefill       EAGLEWorkerV2._forward_prefill_batch (0.5.22+) and EagleDraftWorker._draft_extend_for_prefill
                                                                v1 EAGLEWorker.forward_target_extend and
                                                                   EAGLEWorker.forward_draft_extend
    accept        Scheduler.process_batch_result (every version): where the scheduler waits for the accept
                  counts of a batch on the host and processes them.
    decode        TpModelWorker.forward_batch_generation (every version), a step target: a server without
                  speculation runs each batch there; a decode batch becomes `cycle` > `decode`, a prefill batch
                  `cycle` > `prefill`. Inside a speculative cycle (the EAGLE worker's target forward for verify
                  and prefill) it is left untraced.

In 0.5.23 the Standalone classes (StandaloneWorkerV2, StandaloneDraftWorker) inherit every phase method from the
EAGLE classes; they are listed so that an override in a later version gets its own wrapper. The MultiLayer
classes (MultiLayerEagleWorkerV2, MultiLayerEagleDraftWorker, --enable-multi-layer-eagle) are not subclasses of
the EAGLE ones and define their own methods; MultiLayerEagleWorkerV2 runs the target prefill inline, so its
prefill phase is the draft side (`_draft_extend_for_prefill`) only.

Accept counts (no synchronisation: values already on the host):
- v2 (0.5.12+): `on_verify_complete_cpu(self, num_correct_drafts_per_req: list[int], batch_size: int = 0)`
  (0.5.23; 0.5.12 has no batch_size). The scheduler calls it from `_resolve_spec_v2_tokens` after its own
  `copy_done.synchronize()`; MultiLayerEagleWorkerV2 inherits BaseSpecWorker's no-op, patched on the class.
- v1: `verify` returns `(logits_output, verify_output, ...)`; `verify_output` holds the host list
  `num_correct_drafts_per_req_cpu` (0.5.12), `num_accepted_drafts_per_req_cpu` (0.5.11) or
  `accept_length_per_req_cpu` (0.5.10 and earlier), all without the bonus token. v1's verify already did its
  own blocking `.cpu()`; the tracer only reads the list it produced.
- v2 before 0.5.12 has no such hook: its cycles are written without counts.
"""

from __future__ import annotations

import sys
from typing import Any

from specprof.tracer.presets import Preset, host_int_list, int_attribute
from specprof.tracer.targets import CountsHook, Target

_SPEC = "sglang.srt.speculative."
V2 = _SPEC + "eagle_worker_v2"
STANDALONE_V2 = _SPEC + "standalone_worker_v2"
MULTI_LAYER_V2 = _SPEC + "multi_layer_eagle_worker_v2"
V1 = _SPEC + "eagle_worker"
STANDALONE_V1 = _SPEC + "standalone_worker"
MULTI_LAYER_V1 = _SPEC + "multi_layer_eagle_worker"
SCHEDULER = "sglang.srt.managers.scheduler"
TP_WORKER = "sglang.srt.managers.tp_worker"


def plain_step(args: tuple, kwargs: dict) -> "str | None":
    """`TpModelWorker.forward_batch_generation(self, batch, ...)`: `decode` or `prefill` by the batch's forward
    mode (an enum on the host), None for anything else (idle batches; the verify path passes batch=None)."""
    batch = args[1] if len(args) > 1 else kwargs.get("batch", kwargs.get("model_worker_batch"))
    mode = getattr(batch, "forward_mode", None)
    if mode is None:
        return None
    if mode.is_decode():
        return "decode"
    if mode.is_extend():
        return "prefill"
    return None


def _family(v2: str, worker: str, draft_worker: str, v1: str, v1_worker: str, target_prefill: bool):
    prefill = [(v2, draft_worker, "_draft_extend_for_prefill")]
    if target_prefill:
        prefill.insert(0, (v2, worker, "_forward_prefill_batch"))
    return (
        Target("cycle", ((v2, worker, "forward_batch_generation"), (v1, v1_worker, "forward_batch_generation"))),
        Target("draft", ((v2, draft_worker, "draft"), (v1, v1_worker, "draft"))),
        Target("verify", ((v2, worker, "verify"), (v1, v1_worker, "verify"))),
        Target(
            "draft_extend",
            ((v2, draft_worker, "_draft_extend_for_decode"), (v1, v1_worker, "forward_draft_extend_after_decode")),
        ),
        Target(
            "prefill",
            (*prefill, (v1, v1_worker, "forward_target_extend"), (v1, v1_worker, "forward_draft_extend")),
        ),
    )


TARGETS = (
    *_family(V2, "EAGLEWorkerV2", "EagleDraftWorker", V1, "EAGLEWorker", target_prefill=True),
    *_family(
        STANDALONE_V2, "StandaloneWorkerV2", "StandaloneDraftWorker", STANDALONE_V1, "StandaloneWorker",
        target_prefill=True,
    ),
    *_family(
        MULTI_LAYER_V2, "MultiLayerEagleWorkerV2", "MultiLayerEagleDraftWorker", MULTI_LAYER_V1,
        "MultiLayerEagleWorker", target_prefill=False,
    ),
    Target("accept", ((SCHEDULER, "Scheduler", "process_batch_result"),)),
    Target("decode", ((TP_WORKER, "TpModelWorker", "forward_batch_generation"),), step=plain_step),
)


def counts_from_argument(args: tuple, kwargs: dict, returned: Any) -> "list[int] | None":
    """v2: `on_verify_complete_cpu(self, num_correct_drafts_per_req, batch_size=...)`."""
    if len(args) > 1:
        return host_int_list(args[1])
    for name in ("num_correct_drafts_per_req", "num_correct_drafts_per_req_cpu"):
        if name in kwargs:
            return host_int_list(kwargs[name])
    return None


V1_COUNT_FIELDS = ("num_correct_drafts_per_req_cpu", "num_accepted_drafts_per_req_cpu", "accept_length_per_req_cpu")


def counts_from_verify_output(args: tuple, kwargs: dict, returned: Any) -> "list[int] | None":
    """v1: the host list in `verify(...)[1]` (the EagleVerifyOutput)."""
    if not isinstance(returned, tuple) or len(returned) < 2:
        return None
    output = returned[1]
    for name in V1_COUNT_FIELDS:
        value = getattr(output, name, None)
        if value is not None:
            return host_int_list(value)
    return None


COUNTS = (
    CountsHook(
        (
            (V2, "EAGLEWorkerV2", "on_verify_complete_cpu"),
            (STANDALONE_V2, "StandaloneWorkerV2", "on_verify_complete_cpu"),
            (MULTI_LAYER_V2, "MultiLayerEagleWorkerV2", "on_verify_complete_cpu"),
        ),
        counts_from_argument,
    ),
    CountsHook(
        (
            (V1, "EAGLEWorker", "verify"),
            (STANDALONE_V1, "StandaloneWorker", "verify"),
            (MULTI_LAYER_V1, "MultiLayerEagleWorker", "verify"),
        ),
        counts_from_verify_output,
    ),
)


def batch_size(batch: Any) -> "int | None":
    """ScheduleBatch.batch_size() is `len(self.reqs)` (0.5.10-0.5.23): a host list. A ModelWorkerBatch (v2 up
    to 0.5.12) has no reqs; its `seq_lens.shape[0]` is tensor metadata, also on the host."""
    if type(batch).__name__ == "ScheduleBatch":
        return batch.batch_size()
    shape = getattr(getattr(batch, "seq_lens", None), "shape", None)
    if isinstance(shape, tuple) and shape and type(shape[0]) is int:
        return shape[0]
    return None


def rank(owner: Any) -> "int | None":
    """v1 workers (TpModelWorker) carry `tp_rank`; in 0.5.13+ the rank lives in the runtime context."""
    value = int_attribute(owner, "tp_rank")
    if value is not None:
        return value
    context = sys.modules.get("sglang.srt.runtime_context")
    if context is not None:
        try:
            value = context.get_parallel().tp_rank
        except Exception:
            return None
        return value if type(value) is int else None
    return None


PRESET = Preset(
    name="sglang",
    targets=TARGETS,
    counts=COUNTS,
    batch_size=batch_size,
    rank=rank,
    engine="sglang",
)
