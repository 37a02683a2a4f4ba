"""The tracer never synchronises: a traced run where every blocking call raises (and is recorded) still passes.

Real SGLang 0.5.23 classes, with their phase methods replaced by small CPU stand-ins (the real ones need a
GPU), wrapped by the real `sglang` preset through the real resolution path; the accept-count hook is SGLang's
own `EAGLEWorkerV2.on_verify_complete_cpu`, and the batch is a real `ScheduleBatch`. The run is in SGLang's
overlap shape (counts one iteration late), under torch.profiler (so record_function ranges open too), with the
real nvtx package, and it includes closing the sidecar.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2, EagleDraftWorker
from specprof.tracer import presets
from specprof.tracer.session import TracingSession
from tracer_helpers import of_type, read_sidecar

CALLS: list[str] = []


def draft(self, batch, *, with_topology: bool = False):
    CALLS.append("draft")
    return torch.arange(len(batch.reqs) * 3, dtype=torch.float32).reshape(len(batch.reqs), 3)


def verify(self, batch, pp_proxy_tensors=None, grammar_barrier=None):
    CALLS.append("verify")
    drafts = batch.spec_info
    accept_lens = (drafts > 2).sum(dim=1) + 1  # stays a tensor, as SGLang's does on the device
    # What SGLang's scheduler later has on the host after its own copy_done.synchronize():
    host_counts = [2, 0, 1][: len(batch.reqs)]
    return SimpleNamespace(accept_lens=accept_lens, host_counts=host_counts)


def draft_extend_for_decode(self, batch, batch_result, *, kv_loc_plan=None):
    CALLS.append("draft_extend")
    batch.spec_info = batch_result.accept_lens * 2


def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None):
    CALLS.append("cycle")
    batch.spec_info = self.draft_worker.draft(batch)
    result = self.verify(batch, grammar_barrier=grammar_barrier)
    self.draft_worker._draft_extend_for_decode(batch, result)
    return result


def process_batch_result(self, batch, result):
    CALLS.append("accept")
    self.model_worker.on_verify_complete_cpu(result.host_counts, batch_size=len(batch.reqs))


BLOCKING = [
    (torch.cuda, "synchronize"),
    (torch.cuda.Event, "synchronize"),
    (torch.cuda.Event, "elapsed_time"),
    (torch.cuda.Stream, "synchronize"),
    (torch.Tensor, "item"),
    (torch.Tensor, "cpu"),
    (torch.Tensor, "tolist"),
    (torch.Tensor, "numpy"),
    (torch.Tensor, "to"),
    (torch.Tensor, "__bool__"),
    (torch.Tensor, "__int__"),
    (torch.Tensor, "__float__"),
    (torch.Tensor, "__repr__"),
]


@contextlib.contextmanager
def blocking_calls_raise(monkeypatch, called: list[str]):
    def refuse(name):
        def refused(*args, **kwargs):
            called.append(name)
            raise AssertionError(f"{name} called while tracing")

        return refused

    class Stream:
        synchronize = staticmethod(refuse("torch.cuda.current_stream().synchronize"))

    with monkeypatch.context() as patch:
        for owner, name in BLOCKING:
            patch.setattr(owner, name, refuse(f"{getattr(owner, '__name__', owner)}.{name}"))
        patch.setattr(torch.cuda, "current_stream", lambda *a, **k: Stream())
        yield


@pytest.fixture
def sglang_with_stand_ins(monkeypatch):
    CALLS.clear()
    monkeypatch.setattr(EagleDraftWorker, "draft", draft)
    monkeypatch.setattr(EagleDraftWorker, "_draft_extend_for_decode", draft_extend_for_decode)
    monkeypatch.setattr(EAGLEWorkerV2, "verify", verify)
    monkeypatch.setattr(EAGLEWorkerV2, "forward_batch_generation", forward_batch_generation)
    monkeypatch.setattr(Scheduler, "process_batch_result", process_batch_result)
    worker = object.__new__(EAGLEWorkerV2)
    worker._draft_worker = object.__new__(EagleDraftWorker)
    worker.adaptive_controller = None  # SGLang's on_verify_complete_cpu reads it
    scheduler = object.__new__(Scheduler)
    scheduler.model_worker = worker
    batch = object.__new__(ScheduleBatch)
    batch.reqs = ["req-a", "req-b", "req-c"]
    batch.seq_lens = torch.zeros(3, dtype=torch.int64)
    return worker, scheduler, batch


def test_a_traced_overlap_run_never_synchronises(sglang_with_stand_ins, monkeypatch, tmp_path):
    worker, scheduler, batch = sglang_with_stand_ins
    session = TracingSession(presets.get("sglang"), str(tmp_path), handle_signals=False)
    session.activate(import_modules=True)
    assert EAGLEWorkerV2.verify.__wrapped__ is verify  # the stand-ins are what got wrapped
    called: list[str] = []
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            with blocking_calls_raise(monkeypatch, called):
                previous = None
                for _ in range(3):  # SGLang's overlap loop: run batch i, then process batch i-1's result
                    result = worker.forward_batch_generation(batch)
                    if previous is not None:
                        scheduler.process_batch_result(batch, previous)
                    previous = result
                scheduler.process_batch_result(batch, previous)
                session.close()
    finally:
        session.deactivate()
    assert called == []
    assert CALLS == ["cycle", "draft", "verify", "draft_extend"] * 2 + ["accept", "cycle", "draft", "verify",
                                                                        "draft_extend", "accept", "accept"]
    records = read_sidecar(tmp_path)
    cycles = of_type(records, "cycle")
    assert [c["batch_size"] for c in cycles] == [3, 3, 3]  # ScheduleBatch.batch_size(): len(reqs)
    assert [c["accept"]["correct_drafts"] for c in cycles] == [[2, 0, 1]] * 3
    assert [[p[0] for p in c["phases"]] for c in cycles] == [["draft", "verify", "draft_extend"]] * 3
    assert [r["name"] for r in of_type(records, "range")] == ["accept"] * 3
    assert records[-1]["type"] == "footer" and records[-1]["dropped"] == 0
    names = [event.name for event in profile.events()]
    assert names.count("cycle") == 3 and names.count("verify") == 3 and names.count("accept") == 3
