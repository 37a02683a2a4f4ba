"""The project's own EAGLE-shaped reference engine (`specprof.tracer.reference.engine`, tracer/reference/engine.py).

The engine is written to this table, which mirrors SGLang's v2 worker:

    cycle         ReferenceWorker.forward_batch_generation
    draft         ReferenceDraftWorker.draft
    verify        ReferenceWorker.verify
    draft_extend  ReferenceDraftWorker.draft_extend
    prefill       ReferenceWorker.forward_prefill
    accept        ReferenceScheduler.process_batch_result

Accept counts: `ReferenceWorker.on_verify_complete_cpu(self, num_correct_drafts_per_req_cpu, batch_size)`, a
host list of correct drafts per request, as in SGLang v2. Batch size: `batch.batch_size()`, which the engine
keeps host-only. Rank: the worker's `tp_rank` attribute when it has one.
"""

from __future__ import annotations

from typing import Any

from specprof.tracer.presets import Preset, host_int_list, int_attribute
from specprof.tracer.targets import CountsHook, Target

ENGINE = "specprof.tracer.reference.engine"

TARGETS = (
    Target("cycle", ((ENGINE, "ReferenceWorker", "forward_batch_generation"),)),
    Target("draft", ((ENGINE, "ReferenceDraftWorker", "draft"),)),
    Target("verify", ((ENGINE, "ReferenceWorker", "verify"),)),
    Target("draft_extend", ((ENGINE, "ReferenceDraftWorker", "draft_extend"),)),
    Target("prefill", ((ENGINE, "ReferenceWorker", "forward_prefill"),)),
    Target("accept", ((ENGINE, "ReferenceScheduler", "process_batch_result"),)),
)


def counts_from_argument(args: tuple, kwargs: dict, returned: Any) -> "list[int] | None":
    if len(args) > 1:
        return host_int_list(args[1])
    return host_int_list(kwargs.get("num_correct_drafts_per_req_cpu"))


COUNTS = (CountsHook(((ENGINE, "ReferenceWorker", "on_verify_complete_cpu"),), counts_from_argument),)


def batch_size(batch: Any) -> "int | None":
    size = batch.batch_size() if batch is not None and hasattr(batch, "batch_size") else None
    return size if type(size) is int else None


def rank(owner: Any) -> "int | None":
    return int_attribute(owner, "tp_rank")


PRESET = Preset(
    name="reference",
    targets=TARGETS,
    counts=COUNTS,
    batch_size=batch_size,
    rank=rank,
    engine="specprof",
)
