"""The tracer's plain-decode step target, its capture window in decode cycles, and its CUDA-event ground truth.

Run on the CPU stand-in engine (tests/fake_engine.py). The window's profiler and the events' CUDA are fakes
that record what is asked of them: this machine has no GPU, and what these tests check is what the tracer
asks for and when (never a wait, never a synchronize); the real calls are exercised on the H200 by
scripts/sglang/gpu_runs.sh (fixtures/sglang-*).
"""

from __future__ import annotations

import dataclasses
import sys
import types

import pytest

import fake_engine
from specprof.tracer.gpu_events import GpuEvents
from specprof.tracer.presets import sglang as sglang_preset
from specprof.tracer.targets import Target
from specprof.tracer.window import CaptureWindow, parse
from tracer_helpers import of_type, read_sidecar, traced  # noqa: F401  (fixture)


class Mode:
    def __init__(self, name: str):
        self.name = name

    def is_decode(self) -> bool:
        return self.name == "decode"

    def is_extend(self) -> bool:
        return self.name == "extend"


class PlainBatch(fake_engine.Batch):
    def __init__(self, size: int, mode: str):
        super().__init__(size)
        self.forward_mode = Mode(mode)


class PlainWorker:
    """SGLang's TpModelWorker shape: forward_batch_generation(batch) for a whole step."""

    def __init__(self):
        self.calls = []

    def forward_batch_generation(self, batch, **kwargs):
        self.calls.append(batch.forward_mode.name if batch is not None else None)


class SpeculativeWorker(fake_engine.ReferenceWorker):
    """A speculative worker whose verify runs the plain worker's forward, as EAGLEWorkerV2's does."""

    def __init__(self, target: PlainWorker, **kwargs):
        super().__init__(**kwargs)
        self.target = target

    def verify(self, batch, drafts):
        self.target.forward_batch_generation(None, is_verify=True)
        self.target.forward_batch_generation(PlainBatch(batch.batch_size(), "decode"))
        return super().verify(batch, drafts)


@pytest.fixture
def plain_module(monkeypatch):
    module = types.ModuleType("specprof_test_plain")
    module.PlainWorker = PlainWorker
    module.SpeculativeWorker = SpeculativeWorker
    monkeypatch.setitem(sys.modules, "specprof_test_plain", module)
    base = fake_engine.preset_for("fake_engine")
    step = Target("decode", (("specprof_test_plain", "PlainWorker", "forward_batch_generation"),),
                  step=sglang_preset.plain_step)
    cycle = Target("cycle", (("specprof_test_plain", "SpeculativeWorker", "forward_batch_generation"),))
    verify = Target("verify", (("specprof_test_plain", "SpeculativeWorker", "verify"),))
    return dataclasses.replace(base, targets=base.targets + (step, cycle, verify))


# ------------------------------------------------------------------------------------------- the step target


def test_a_plain_decode_step_is_a_cycle_holding_a_decode_phase(traced, plain_module, tmp_path):  # noqa: F811
    session, nvtx = traced(preset=plain_module)
    worker = PlainWorker()
    worker.forward_batch_generation(PlainBatch(4, "extend"))
    for _ in range(3):
        worker.forward_batch_generation(PlainBatch(4, "decode"))
    worker.forward_batch_generation(PlainBatch(0, "idle"))  # an idle batch: no range at all
    session.close()
    assert worker.calls == ["extend", "decode", "decode", "decode", "idle"]
    assert nvtx.pushed() == ["cycle", "prefill"] + ["cycle", "decode"] * 3
    cycles = of_type(read_sidecar(tmp_path), "cycle")
    assert [[p[0] for p in c["phases"]] for c in cycles] == [["prefill"], ["decode"], ["decode"], ["decode"]]
    assert [c["batch_size"] for c in cycles] == [4, 4, 4, 4]
    assert all(c["accept"] is None for c in cycles)  # nothing speculative: no counts awaited


def test_inside_a_speculative_cycle_the_plain_forward_is_not_traced(traced, plain_module, tmp_path):  # noqa: F811
    session, nvtx = traced(preset=plain_module)
    worker = SpeculativeWorker(PlainWorker())
    scheduler = fake_engine.ReferenceScheduler(worker)
    scheduler.run(fake_engine.Batch(2), cycles=2)
    session.close()
    assert worker.target.calls == [None, "decode", None, "decode"]  # it ran, untraced
    assert "decode" not in nvtx.pushed()
    cycles = of_type(read_sidecar(tmp_path), "cycle")
    assert [[p[0] for p in c["phases"]] for c in cycles] == [["draft", "verify", "draft_extend"]] * 2


# ----------------------------------------------------------------------------------------- the capture window


class FakeProfiler:
    def __init__(self, fail: bool = False):
        self.calls = []
        self.fail = fail

    def __call__(self):
        def call(name):
            def run():
                if self.fail:
                    raise RuntimeError("cudaErrorProfilerDisabled")
                self.calls.append(name)
            return run
        return call("start"), call("stop")


def test_window_text():
    assert parse("30:120") == (30, 120)
    assert parse("0:1") == (0, 1)
    for bad in ("30", "a:b", "-1:5", "3:0", "1:2:3", ""):
        with pytest.raises(ValueError):
            parse(bad)


def test_the_window_starts_after_w_decode_cycles_and_stops_after_n_more(traced, plain_module, tmp_path):  # noqa: F811
    profiler = FakeProfiler()
    session, _ = traced(preset=plain_module, capture_cycles="2:3", profiler=profiler)
    worker = PlainWorker()
    worker.forward_batch_generation(PlainBatch(2, "extend"))  # cycle 0: prefill, not a decode cycle
    seen = []
    for _ in range(7):  # cycles 1..7
        worker.forward_batch_generation(PlainBatch(2, "decode"))
        seen.append(list(profiler.calls))
    session.close()
    assert seen == [[], ["start"], ["start"], ["start"], ["start", "stop"], ["start", "stop"], ["start", "stop"]]
    records = of_type(read_sidecar(tmp_path), "capture")
    assert [(r["event"], r["after_cycle"], r["decode_cycles"]) for r in records] == [("start", 2, 2), ("stop", 5, 5)]
    header = read_sidecar(tmp_path)[0]
    assert header["capture_cycles"] == [2, 3]


def test_a_window_that_skips_nothing_opens_at_the_first_traced_call(traced, plain_module, tmp_path):  # noqa: F811
    profiler = FakeProfiler()
    session, _ = traced(preset=plain_module, capture_cycles="0:2", profiler=profiler)
    worker = PlainWorker()
    worker.forward_batch_generation(PlainBatch(2, "extend"))
    assert profiler.calls == ["start"]
    worker.forward_batch_generation(PlainBatch(2, "decode"))
    worker.forward_batch_generation(PlainBatch(2, "decode"))
    assert profiler.calls == ["start", "stop"]
    session.close()
    records = of_type(read_sidecar(tmp_path), "capture")
    assert [(r["event"], r["after_cycle"]) for r in records] == [("start", None), ("stop", 2)]


def test_speculative_cycles_count_as_decode_cycles(traced, tmp_path):  # noqa: F811
    profiler = FakeProfiler()
    session, _ = traced(capture_cycles="1:1", profiler=profiler)
    fake_engine.ReferenceScheduler(fake_engine.ReferenceWorker()).run(fake_engine.Batch(2), cycles=3)
    session.close()
    records = of_type(read_sidecar(tmp_path), "capture")
    assert [(r["event"], r["after_cycle"]) for r in records] == [("start", 0), ("stop", 1)]


def test_a_failing_profiler_call_turns_the_window_off_and_the_engine_goes_on(traced, plain_module, tmp_path,  # noqa: F811
                                                                             caplog):
    profiler = FakeProfiler(fail=True)
    session, _ = traced(preset=plain_module, capture_cycles="1:1", profiler=profiler)
    worker = PlainWorker()
    with caplog.at_level("WARNING", logger="specprof.tracer"):
        for _ in range(3):
            worker.forward_batch_generation(PlainBatch(2, "decode"))
    session.close()
    assert worker.calls == ["decode"] * 3
    assert session.recorder.window.state == "off"
    assert [r.getMessage() for r in caplog.records if "capture window off" in r.getMessage()] == [
        "specprof: capture window off: cudaProfilerStart failed (RuntimeError: cudaErrorProfilerDisabled)"]
    assert of_type(read_sidecar(tmp_path), "capture") == []


def test_a_window_without_torch_says_so(monkeypatch, caplog):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    window = CaptureWindow(0, 1, emit=lambda record: None)
    with caplog.at_level("WARNING", logger="specprof.tracer"):
        window.process_started()
    assert window.state == "off"
    assert "torch is not imported" in caplog.records[-1].getMessage()


# ------------------------------------------------------------------------------------------ the CUDA events


class FakeGpu:
    """A stream's worth of GPU: each recorded event completes once the test says the GPU reached it."""

    def __init__(self):
        self.capturing = False
        self.created = 0
        self.reached = 0  # events recorded up to this sequence number have completed
        self.seq = 0
        self.gpu_ns = 0
        self.calls: list | None = None  # a list shared with the NVTX fake: the host calls in order

    def is_current_stream_capturing(self):
        self._call("is_current_stream_capturing")
        return self.capturing

    def current_stream(self):
        self._call("current_stream")
        return "stream"

    def _call(self, name):
        if self.calls is not None:
            self.calls.append((name, None))

    def Event(self, enable_timing=False):  # noqa: N802 (torch's name)
        assert enable_timing
        self.created += 1
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, gpu: FakeGpu):
        self.gpu = gpu
        self.seq = None
        self.at_ns = None

    def record(self, stream=None):
        assert stream == "stream"  # the stream prepare() found: no current_stream() after the pop
        self.gpu._call("record")
        self.gpu.seq += 1
        self.gpu.gpu_ns += 250_000  # each event 0.25 ms of GPU work after the one before
        self.seq, self.at_ns = self.gpu.seq, self.gpu.gpu_ns

    def query(self):
        return self.seq is not None and self.seq <= self.gpu.reached

    def elapsed_time(self, end):
        assert self.query() and end.query(), "elapsed_time on an event that has not completed"
        return (end.at_ns - self.at_ns) / 1e6

    def synchronize(self):
        raise AssertionError("the tracer must never wait for an event")

    wait = synchronize


@pytest.fixture
def fake_torch(monkeypatch):
    gpu = FakeGpu()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=gpu))
    return gpu


def test_events_are_read_once_completed_and_never_waited_for(traced, fake_torch, tmp_path):  # noqa: F811
    session, _ = traced(gpu_time=True)
    worker = fake_engine.ReferenceWorker()
    scheduler = fake_engine.ReferenceScheduler(worker)
    scheduler.run(fake_engine.Batch(2), cycles=2)
    assert session.recorder.events.read == 0  # the GPU has not reached any event yet: nothing read, no wait
    fake_torch.reached = fake_torch.seq
    scheduler.run(fake_engine.Batch(2), cycles=1)  # the next cycle's close reads what has completed
    assert session.recorder.events.read == 2
    session.close()
    records = of_type(read_sidecar(tmp_path), "gpu_time")
    assert [r["cycle"] for r in records] == [0, 1]
    # Per cycle: cycle start, draft (2 events), verify (2), draft_extend (2), cycle end: 8 events, 0.25 ms apart.
    assert records[0]["phases"] == [["cycle", 1_750_000], ["draft", 250_000], ["verify", 250_000],
                                    ["draft_extend", 250_000]]
    footer = read_sidecar(tmp_path)[-1]
    assert footer["gpu_time_cycles"] == 2 and footer["gpu_time_dropped"] == 1  # cycle 2 never completed
    # Cycles 0 and 1 were read at cycle 2's close, after cycle 2 had recorded 8 events of its own: 24 made.
    assert fake_torch.created == 24


def test_only_the_record_call_is_between_a_range_boundary_and_its_event(traced, fake_torch, tmp_path):  # noqa: F811
    # Each event's checks (graph capture, the current stream) come before the boundary it marks: at the start
    # before the push, at the end before the pop; so the push follows the record call, and the pop is followed
    # by the record call, with nothing of the tracer's between them at either end (tracer/gpu_events.py).
    session, nvtx = traced(gpu_time=True)
    fake_torch.calls = nvtx.events
    fake_engine.ReferenceScheduler(fake_engine.ReferenceWorker()).run(fake_engine.Batch(2), cycles=1)
    session.close()
    calls = [kind for kind, _ in nvtx.events if kind != "mark"]
    records = [i for i, kind in enumerate(calls) if kind == "record"]
    ends = [i for i in records if calls[i - 1] == "pop"]
    starts = [i for i in records if i not in ends]
    assert len(starts) == len(ends) == 4  # 4 timed ranges: cycle, draft, verify, draft_extend
    for i in starts:
        assert calls[i + 1] == "push" and calls[i - 2:i] == ["is_current_stream_capturing", "current_stream"]
    for i in ends:
        assert calls[i - 3:i - 1] == ["is_current_stream_capturing", "current_stream"]


def test_read_events_are_recorded_again(traced, fake_torch, tmp_path):  # noqa: F811
    session, _ = traced(gpu_time=True)
    scheduler = fake_engine.ReferenceScheduler(fake_engine.ReferenceWorker())
    for _ in range(5):
        scheduler.run(fake_engine.Batch(2), cycles=1)
        fake_torch.reached = fake_torch.seq
    session.close()
    assert fake_torch.created == 16  # 8 per cycle: each cycle reuses the events read at the one before's close
    assert [r["cycle"] for r in of_type(read_sidecar(tmp_path), "gpu_time")] == [0, 1, 2, 3, 4]


def test_nothing_is_recorded_while_a_graph_is_captured(fake_torch):
    events = GpuEvents(emit=lambda record: None)
    fake_torch.capturing = True
    assert events.record() is None
    fake_torch.capturing = False
    assert events.record() is not None
    assert fake_torch.created == 1


def test_waiting_cycles_beyond_the_bound_are_given_up_and_counted(fake_torch):
    emitted = []
    events = GpuEvents(emit=emitted.append, max_pending=3)
    for index in range(5):
        events.cycle_closed(index, [("cycle", events.record(), events.record())])
    assert events.dropped == 2 and emitted == []
    fake_torch.reached = fake_torch.seq
    assert events.close() == {"gpu_time_cycles": 3, "gpu_time_dropped": 2}
    assert [r["cycle"] for r in emitted] == [2, 3, 4]


def test_without_torch_or_a_gpu_events_are_off(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    events = GpuEvents(emit=lambda record: None)
    assert events.record() is None and events.failed is None
    broken = types.SimpleNamespace(cuda=types.SimpleNamespace(
        is_current_stream_capturing=lambda: (_ for _ in ()).throw(RuntimeError("no CUDA GPUs are available"))))
    monkeypatch.setitem(sys.modules, "torch", broken)
    assert events.record() is None
    assert events.failed == "RuntimeError: no CUDA GPUs are available"
    assert events.close()["gpu_time_failed"] == "RuntimeError: no CUDA GPUs are available"
