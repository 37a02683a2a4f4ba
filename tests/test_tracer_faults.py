"""One fault of the tracer's own, anywhere, on the CPU stand-in engine (tests/fake_engine.py) and on the
plain-decode step target: the NVTX backend, the clock and the CUDA-event recorder are fakes that raise once, at
the k-th call, for every k the run reaches. Whatever fails: the engine's calls all run, the fault is counted
(`footer.tracer_faults`, exactly once), the sidecar is written, every NVTX range pushed is popped, and every
cycle after the faulty one is recorded whole. (A pop that fails leaves its one range open in the backend: the
tracer cannot know whether it took effect, and never pops twice.)"""

from __future__ import annotations

import dataclasses
import json
import sys
import types

import pytest

import fake_engine
from specprof.tracer.presets import sglang as sglang_preset
from specprof.tracer.targets import Target
from specprof.tracer.session import TracingSession
from test_tracer_steps_window_events import PlainBatch, PlainWorker
from tracer_helpers import FakeClock, RecordingNvtx, of_type, read_sidecar, sidecar_files

CYCLES = 6


class Fault(RuntimeError):
    pass


class FaultyNvtx(RecordingNvtx):
    """Its k-th call of `kind` (push, pop or mark) raises, and does nothing."""

    def __init__(self, kind: str, k: int):
        super().__init__()
        self.kind, self.k, self.n = kind, k, 0

    def _maybe(self, kind):
        if kind == self.kind:
            self.n += 1
            if self.n == self.k:
                raise Fault(f"nvtx {kind} failed")

    def push(self, phase):
        self._maybe("push")
        super().push(phase)

    def pop(self):
        self._maybe("pop")
        super().pop()

    def mark(self, message):
        self._maybe("mark")
        super().mark(message)


class FaultyClock(FakeClock):
    def __init__(self, k: int):
        super().__init__()
        self.k, self.n = k, 0

    def __call__(self) -> int:
        self.n += 1
        if self.n == self.k:
            raise Fault("clock failed")
        return super().__call__()


class FaultyEvents:
    """Stands in for specprof.tracer.gpu_events.GpuEvents: `record` returns a token, and raises at its k-th call."""

    def __init__(self, k: int):
        self.k, self.n, self.closed = k, 0, []

    def record(self):
        return self.fire(self.prepare())

    def prepare(self):
        self.n += 1
        if self.n == self.k:
            raise Fault("event record failed")
        return object()

    def fire(self, prepared):
        return prepared

    def cycle_closed(self, index, pairs):
        self.closed.append(index)

    def close(self) -> dict:
        return {}

    def reset(self) -> None:
        pass


def _run(folder, fault: str, k: int, plain_preset=None):
    """(records, nvtx, engine calls, the faulty fake) of CYCLES cycles, with one fault of kind `fault` at its
    k-th chance (k = 0: none), the sidecar written into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    nvtx = FaultyNvtx(fault.split()[1], k) if fault.startswith("nvtx") else RecordingNvtx()
    clock = FaultyClock(k) if fault == "clock" else FakeClock()
    session = TracingSession(plain_preset or fake_engine.preset_for("fake_engine"), str(folder),
                             nvtx_factory=lambda: nvtx, perf_counter_ns=clock, sync_every_ns=50,
                             handle_signals=False)
    events = FaultyEvents(k) if fault == "events" else None
    session.recorder.events = events
    session.activate()
    try:
        if plain_preset is None:
            worker = fake_engine.ReferenceWorker()
            fake_engine.ReferenceScheduler(worker).run(fake_engine.Batch(2), cycles=CYCLES)
            calls = worker.calls.count("cycle")
        else:
            worker = PlainWorker()
            for _ in range(CYCLES):
                worker.forward_batch_generation(PlainBatch(2, "decode"))
            calls = len(worker.calls)
    finally:
        session.deactivate()
    faulty = clock if fault == "clock" else events if fault == "events" else nvtx
    return read_sidecar(folder), nvtx, calls, faulty


def _chances(tmp_path, fault, plain_preset=None):
    """How many calls of that kind a run without faults makes."""
    return _run(tmp_path / "count", fault, 0, plain_preset)[3].n


@pytest.fixture
def plain_preset(monkeypatch):
    module = types.ModuleType("specprof_test_plain_faults")
    module.PlainWorker = PlainWorker
    monkeypatch.setitem(sys.modules, "specprof_test_plain_faults", module)
    base = fake_engine.preset_for("fake_engine")
    step = Target("decode", (("specprof_test_plain_faults", "PlainWorker", "forward_batch_generation"),),
                  step=sglang_preset.plain_step)
    return dataclasses.replace(base, targets=base.targets + (step,))


FAULTS = ["nvtx push", "nvtx pop", "nvtx mark", "clock", "events"]


def _check(records, nvtx, calls, k, fault):
    where = f"{fault} fault at call {k}"
    assert calls == CYCLES, where  # the engine's calls all ran
    assert records[0]["type"] == "header" and records[-1]["type"] == "footer", where  # a sidecar, whole
    assert records[-1]["tracer_faults"] == 1, where
    # every range pushed was popped (but the one whose pop failed), none popped twice
    assert nvtx.depth == (1 if fault == "nvtx pop" else 0), where
    cycles = of_type(records, "cycle")
    indices = [c["index"] for c in cycles]
    # At most the cycle the fault hit is missing, or lacks its end (the clock failed there): every other is whole.
    assert indices == sorted(indices) and all(c["start_ns"] is not None for c in cycles), where
    assert CYCLES - len(cycles) + sum(c["end_ns"] is None for c in cycles) <= 1, where


@pytest.mark.parametrize("fault", FAULTS)
def test_one_fault_anywhere_in_a_speculative_run_is_counted_and_stops_nothing(tmp_path, fault):
    chances = _chances(tmp_path, fault)
    assert chances >= CYCLES  # the fault gets a chance in every cycle
    for k in range(1, chances + 1):
        records, nvtx, calls, _ = _run(tmp_path / f"{k}", fault, k)
        _check(records, nvtx, calls, k, fault)
        if fault == "nvtx push":  # a range whose push failed keeps its times in the sidecar
            assert len(of_type(records, "cycle")) == CYCLES


@pytest.mark.parametrize("fault", FAULTS)
def test_one_fault_on_the_plain_decode_step_target_stops_no_later_step(tmp_path, plain_preset, fault):
    chances = _chances(tmp_path, fault, plain_preset)
    assert chances >= CYCLES or fault in ("events", "nvtx mark")
    for k in range(1, chances + 1):
        records, nvtx, calls, _ = _run(tmp_path / f"{k}", fault, k, plain_preset)
        _check(records, nvtx, calls, k, fault)
        phases = [[p[0] for p in c["phases"]] for c in of_type(records, "cycle")]
        assert sum(p != ["decode"] for p in phases) + CYCLES - len(phases) <= 1, f"{fault} fault at call {k}"


def test_a_clock_fault_at_the_session_start_still_writes_the_sidecar(tmp_path):
    for k in (1, 2):  # the recorder's first reading, then the session's first clock record
        records, nvtx, calls, _ = _run(tmp_path / f"{k}", "clock", k)
        assert records[0]["type"] == "header" and len(of_type(records, "cycle")) == CYCLES
        assert records[-1]["tracer_faults"] == 1


# -- a sidecar write that fails: a real file-size limit (RLIMIT_FSIZE), then lifted -------------------------------
_FSIZE_CHILD = '''
import json, os, resource, signal, sys
import fake_engine
from specprof.tracer.session import TracingSession

assert signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN  # Python's: a write past the limit fails with EFBIG
# The flusher never runs on its own: each write is a flush the test makes.
session = TracingSession(fake_engine.preset_for("fake_engine"), sys.argv[1], flush_interval_s=3600)
session.activate()
scheduler = fake_engine.ReferenceScheduler(fake_engine.ReferenceWorker())
scheduler.run(fake_engine.Batch(2), cycles=3)
session.flush()
path = session.sidecar.path
size = os.path.getsize(path)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, hard))  # the next write is cut by the limit
scheduler.run(fake_engine.Batch(2), cycles=20)
session.flush()
failed = dict(dropped=session.sidecar.dropped, failed_writes=getattr(session.sidecar, "failed_writes", None),
              size=os.path.getsize(path), limit=size + 100, header=open(path).readline())
if sys.argv[2] == "killed":  # the process ends without its footer while writes still fail
    print(json.dumps(failed), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # writes work again
scheduler.run(fake_engine.Batch(2), cycles=3)
session.close()
print(json.dumps(failed))
'''


def _fsize_run(tmp_path, how: str):
    from tracer_helpers import run_python

    done = run_python(_FSIZE_CHILD.replace("sys.argv[1]", repr(str(tmp_path))).replace("sys.argv[2]", repr(how)))
    if how == "killed":
        assert done.returncode == -9, done.stderr
    else:
        assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_a_failed_sidecar_write_loses_only_its_records_and_recording_goes_on(tmp_path):
    # Before: one failed write (disk full, a file-size limit) turned the sidecar off for the rest of the process,
    # the file ended in a cut line without a footer, and the count of what was lost stayed in memory.
    from specprof.analyzer.readers.sidecar import read_sidecars

    failed, stderr = _fsize_run(tmp_path, "normal")
    records = read_sidecar(tmp_path)  # every line whole JSON
    assert records[0]["type"] == "header" and records[-1]["type"] == "footer"
    assert failed["failed_writes"] == 1 and failed["dropped"] > 0
    assert failed["size"] < failed["limit"]  # what the write managed before the limit was cut off again
    assert "sidecar write failed" in stderr and "sidecar writes work again" in stderr
    footer = records[-1]
    assert footer["dropped"] == failed["dropped"] == records[0]["dropped"]  # the header's count, rewritten in place
    assert footer["failed_writes"] == 1 and footer["reason"] == "exit"
    indices = [c["index"] for c in of_type(records, "cycle")]
    assert indices[:3] == [0, 1, 2] and indices[-3:] == [23, 24, 25]  # recording resumed after the failure
    assert footer["cycles"] == len(indices) < 26
    sidecars = read_sidecars(sidecar_files(tmp_path))
    assert sidecars.files["dropped"].to_list() == [failed["dropped"]]
    assert f"the tracer dropped {failed['dropped']} records (1 writes of the sidecar failed: a full disk or a " \
           "file-size limit; or its queue was full)" in " ".join(sidecars.notes)


def test_a_process_killed_while_writes_fail_leaves_its_count_of_dropped_records(tmp_path):
    from specprof.analyzer.readers.sidecar import read_sidecars

    failed, _ = _fsize_run(tmp_path, "killed")
    records = read_sidecar(tmp_path)
    assert records[0]["type"] == "header" and records[-1]["type"] != "footer"
    # the header's count was rewritten in place, within the file's size: the limit did not stop it
    assert records[0]["dropped"] == failed["dropped"] > 0
    sidecars = read_sidecars(sidecar_files(tmp_path))
    assert sidecars.files["dropped"].to_list() == [failed["dropped"]]
    assert any(f"the tracer had dropped {failed['dropped']} records by its last flush" in n for n in sidecars.notes)
