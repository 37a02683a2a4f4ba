"""A tiny, CPU-only engine with the reference engine's class and method names (tracer/presets/reference.py).

Used by the tracer tests as a stand-in: it records what it is called with and touches no device. Tests install
it in `sys.modules` under `specprof.tracer.reference.engine`'s name only when they test the `reference` preset
verbatim and say so; the other tests use `preset_for(module)`, the same table pointed at this module.
"""

from __future__ import annotations

import dataclasses

from specprof.tracer.presets import reference
from specprof.tracer.targets import CountsHook


class Batch:
    def __init__(self, size: int):
        self.size = size

    def batch_size(self) -> int:
        return self.size


class Result:
    def __init__(self, correct_drafts: list[int]):
        self.correct_drafts = correct_drafts


class ReferenceDraftWorker:
    def __init__(self, calls: list):
        self.calls = calls

    def draft(self, batch: Batch) -> str:
        self.calls.append("draft")
        return "drafts"

    def draft_extend(self, batch: Batch, result: Result) -> None:
        self.calls.append("draft_extend")


class ReferenceWorker:
    """`correct_drafts` gives each cycle's counts in turn (one int per request); `verify_error` is raised by
    verify when given."""

    tp_rank = 0

    def __init__(self, correct_drafts: list[list[int]] | None = None, verify_error: Exception | None = None):
        self.calls: list = []
        self.draft_worker = ReferenceDraftWorker(self.calls)
        self.accepted: list = []
        self._counts = list(correct_drafts or [])
        self._verify_error = verify_error

    def forward_prefill(self, batch: Batch) -> None:
        self.calls.append("prefill")

    def verify(self, batch: Batch, drafts: str) -> Result:
        self.calls.append("verify")
        if self._verify_error is not None:
            raise self._verify_error
        counts = self._counts.pop(0) if self._counts else [0] * batch.batch_size()
        return Result(counts)

    def forward_batch_generation(self, batch: Batch) -> Result:
        self.calls.append("cycle")
        drafts = self.draft_worker.draft(batch)
        result = self.verify(batch, drafts)
        self.draft_worker.draft_extend(batch, result)
        return result

    def on_verify_complete_cpu(self, num_correct_drafts_per_req_cpu: list[int], batch_size: int) -> None:
        self.accepted.append(num_correct_drafts_per_req_cpu)


class SuperCallingWorker(ReferenceWorker):
    """An override that calls the method it overrides, as a subclass in a later engine version might."""

    def verify(self, batch: Batch, drafts: str) -> Result:
        self.calls.append("override")
        return super().verify(batch, drafts)


class ReferenceScheduler:
    def __init__(self, worker: ReferenceWorker):
        self.worker = worker

    def process_batch_result(self, batch: Batch, result: Result) -> None:
        self.worker.on_verify_complete_cpu(result.correct_drafts, batch_size=batch.batch_size())

    def run(self, batch: Batch, cycles: int, overlap: bool = False) -> None:
        """Like SGLang's scheduler: results processed after each cycle, or one cycle later with `overlap`."""
        previous = None
        for _ in range(cycles):
            result = self.worker.forward_batch_generation(batch)
            if overlap:
                if previous is not None:
                    self.process_batch_result(batch, previous)
                previous = result
            else:
                self.process_batch_result(batch, result)
        if previous is not None:
            self.process_batch_result(batch, previous)


def preset_for(module: str):
    """The reference preset's table with every candidate's module replaced by `module`."""
    preset = reference.PRESET

    def moved(candidates):
        return tuple((module, cls, method) for _, cls, method in candidates)

    return dataclasses.replace(
        preset,
        name="reference",
        targets=tuple(dataclasses.replace(t, candidates=moved(t.candidates)) for t in preset.targets),
        counts=tuple(CountsHook(moved(h.candidates), h.read) for h in preset.counts),
    )
