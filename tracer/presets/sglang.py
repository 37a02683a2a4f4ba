"""SGLang's EAGLE / EAGLE-3 workers, from the v1 workers (0.5.12 and earlier) to the v2 workers (0.5.23).

Names checked against the released wheels (../shared/notes/sglang.md sections 1, 2 and 7; 0.5.10, 0.5.12 and
0.5.23 re-read for this table). One `Target` per phase and worker family (EAGLE, Standalone, MultiLayer); its
candidates are the methods that run the phase in any version. v2 first:

    cycle         EAGLEWorkerV2.forward_batch_generation        v1 EAGLEWorker.forward_batch_generation
    draft         EagleDraftWorker.draft                        v1 EAGLEWorker.draft
    verify        EAGLEWorkerV2.verify                          v1 EAGLEWorker.verify
    draft_extend  EagleDraftWorker._draft_extend_for_decode     v1 EAGLEWorker.forward_draft_extend_after_decode
                  EAGLEWorkerV2._stub_skipped_draft_extend (0.5.16+: what a K = 0 cycle runs in its place with
                  SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1: a few zero-filled tensors, no draft forward)
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

Step count per cycle (`verify_shape`, read as `verify` opens: host ints only). SGLang 0.5.16+ can change K in a
running server (`--speculative-adaptive`, `--speculative-adaptive-config`, keyed by batch size): each decode
cycle, `EAGLEWorkerV2.forward_batch_generation` first calls `activate_step_by_batch(bs)`, whose
`AdaptiveController` swaps the worker's runtime state (`apply_runtime_state`: the Python ints
`speculative_num_steps` and `speculative_num_draft_tokens` on the worker and its draft worker, and the graphs
and backends built for that K); its EMA of the accept counts (`on_verify_complete_cpu`) moves the K of the
batch size's slot. At K = 0 the draft is skipped: `_build_trivial_verify_input` makes a one-token verify input
(the last verified token, so the verify is a plain decode), and `_draft_extend_for_decode` still runs, or
`_stub_skipped_draft_extend` in its place. Either way the verify input the cycle checks (EagleVerifyInput, in
`batch.spec_info` in v2, the `spec_info` argument in v1) carries `spec_steps` and `draft_token_num` as ints:
the K the cycle ran and the tokens per request verified (a chain: K + 1; K = 0: 1). Only EAGLEWorkerV2 has an
adaptive controller in 0.5.16-0.5.23 (Standalone leaves it None, frozen-KV MTP refuses the flag); every
worker's cycles get the same fields.
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


def verify_shape(args: tuple, kwargs: dict) -> "tuple[int | None, int | None] | None":
    """`(steps, draft_tokens)` of the verify about to run: the verify input's `spec_steps` and `draft_token_num`
    (v1 `verify(self, batch, spec_info)`: the argument; v2 `verify(self, batch, ...)`: `batch.spec_info`), else
    the worker's `speculative_num_steps` and `speculative_num_draft_tokens`; ints only, else None."""
    batch = args[1] if len(args) > 1 else kwargs.get("batch")
    for spec in (args[2] if len(args) > 2 else kwargs.get("spec_info"), getattr(batch, "spec_info", None)):
        steps = getattr(spec, "spec_steps", None)
        if type(steps) is int:
            tokens = getattr(spec, "draft_token_num", None)
            return steps, tokens if type(tokens) is int else None
    owner = args[0] if args else None
    steps = int_attribute(owner, "speculative_num_steps")
    tokens = int_attribute(owner, "speculative_num_draft_tokens")
    return None if steps is None and tokens is None else (steps, tokens)


def _family(v2: str, worker: str, draft_worker: str, v1: str, v1_worker: str, target_prefill: bool,
            stub: bool):
    prefill = [(v2, draft_worker, "_draft_extend_for_prefill")]
    if target_prefill:
        prefill.insert(0, (v2, worker, "_forward_prefill_batch"))
    draft_extend = [(v2, draft_worker, "_draft_extend_for_decode"), (v1, v1_worker, "forward_draft_extend_after_decode")]
    if stub:
        draft_extend.insert(1, (v2, worker, "_stub_skipped_draft_extend"))
    return (
        Target("cycle", ((v2, worker, "forward_batch_generation"), (v1, v1_worker, "forward_batch_generation"))),
        Target("draft", ((v2, draft_worker, "draft"), (v1, v1_worker, "draft"))),
        Target("verify", ((v2, worker, "verify"), (v1, v1_worker, "verify")), shape=verify_shape),
        Target("draft_extend", tuple(draft_extend)),
        Target(
            "prefill",
            (*prefill, (v1, v1_worker, "forward_target_extend"), (v1, v1_worker, "forward_draft_extend")),
        ),
    )


TARGETS = (
    *_family(V2, "EAGLEWorkerV2", "EagleDraftWorker", V1, "EAGLEWorker", target_prefill=True, stub=True),
    *_family(
        STANDALONE_V2, "StandaloneWorkerV2", "StandaloneDraftWorker", STANDALONE_V1, "StandaloneWorker",
        target_prefill=True, stub=True,
    ),
    *_family(
        MULTI_LAYER_V2, "MultiLayerEagleWorkerV2", "MultiLayerEagleDraftWorker", MULTI_LAYER_V1,
        "MultiLayerEagleWorker", target_prefill=False, stub=False,
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
