"""Phase ranges (tracer/ranges.py) through the real wrapping path on the CPU stand-in engine: NVTX push/pop,
sidecar timestamps from a fake clock, record_function under torch.profiler, and exceptions: the wrapped
method's go through untouched with the range popped; the tracer's own never reach the caller."""

from __future__ import annotations

import pytest

import fake_engine
from tracer_helpers import FakeClock, of_type, read_sidecar, traced  # noqa: F401 (fixture)

Batch = fake_engine.Batch


def test_a_cycle_pushes_and_pops_each_phase_in_order(traced):
    session, nvtx = traced(perf_counter_ns=FakeClock())
    worker = fake_engine.ReferenceWorker([[1, 0]])
    fake_engine.ReferenceScheduler(worker).run(Batch(2), cycles=1)
    assert [event for event in nvtx.events if event[0] != "mark"] == [
        ("push", "cycle"),
        ("push", "draft"), ("pop", None),
        ("push", "verify"), ("pop", None),
        ("push", "draft_extend"), ("pop", None),
        ("pop", None),
        ("push", "accept"), ("pop", None),
    ]
    assert worker.calls == ["cycle", "draft", "verify", "draft_extend"]
    assert worker.accepted == [[1, 0]]  # the counts hook hands the call on


def test_sidecar_times_are_the_clock_readings_in_nanoseconds(traced, tmp_path):
    clock = FakeClock(start=1_000, step=10)
    session, _ = traced(perf_counter_ns=clock, sync_every_ns=10**12)
    worker = fake_engine.ReferenceWorker([[2, 1]])
    fake_engine.ReferenceScheduler(worker).run(Batch(2), cycles=1)
    session.close()
    records = read_sidecar(tmp_path)
    # Readings: 1010 recorder start, 1020 and 1030 the clock record at open (before and after its NVTX mark),
    # then one per phase boundary; after cycle 0, a clock record (1120, 1130).
    (cycle,) = of_type(records, "cycle")
    assert cycle["start_ns"] == 1040 and cycle["end_ns"] == 1110
    assert cycle["phases"] == [["draft", 1050, 1060], ["verify", 1070, 1080], ["draft_extend", 1090, 1100]]
    assert cycle["batch_size"] == 2
    assert cycle["accept"] == {"correct_drafts": [2, 1], "accept_len_mean": 2.5}
    (accept,) = of_type(records, "range")
    assert accept == {"type": "range", "name": "accept", "start_ns": 1140, "end_ns": 1150, "cycle": 0}
    assert [(c["perf_counter_ns"], c["mark_done_ns"]) for c in of_type(records, "clock")][:2] == [
        (1020, 1030), (1120, 1130)]
    assert all(type(v) is int for r in records for k, v in r.items() if k.endswith("_ns"))


def test_prefill_outside_a_cycle_is_a_range_with_no_cycle(traced, tmp_path):
    session, _ = traced(perf_counter_ns=FakeClock())
    fake_engine.ReferenceWorker().forward_prefill(Batch(1))
    session.close()
    (prefill,) = of_type(read_sidecar(tmp_path), "range")
    assert prefill["name"] == "prefill" and prefill["cycle"] is None


def test_an_override_calling_super_is_one_range(traced):
    from specprof.tracer.ranges import range_wrapper
    from specprof.tracer.targets import RANGE, patch_method

    session, nvtx = traced()
    make = range_wrapper(session.recorder, "verify")
    assert patch_method(("fake_engine", "SuperCallingWorker", "verify"), RANGE, make, session.patcher)[0]
    worker = fake_engine.SuperCallingWorker()
    worker.verify(Batch(1), "drafts")
    assert worker.calls == ["override", "verify"]  # both methods ran, both wrapped
    assert nvtx.pushed() == ["verify"] and nvtx.depth == 0  # one range


class Boom(Exception):
    pass


def test_the_methods_exception_goes_through_untouched_and_the_range_is_popped(traced, tmp_path):
    session, nvtx = traced(perf_counter_ns=FakeClock())
    error = Boom("verify failed")
    worker = fake_engine.ReferenceWorker(verify_error=error)
    with pytest.raises(Boom) as raised:
        worker.forward_batch_generation(Batch(1))
    assert raised.value is error
    assert raised.traceback[-1].name == "verify"  # the traceback still ends where it was raised
    pushes_and_pops = [event for event in nvtx.events if event[0] != "mark"]
    assert pushes_and_pops == [("push", "cycle"), ("push", "draft"), ("pop", None), ("push", "verify"),
                               ("pop", None), ("pop", None)]
    session.close()
    (cycle,) = of_type(read_sidecar(tmp_path), "cycle")
    assert [p[0] for p in cycle["phases"]] == ["draft", "verify"]
    assert all(type(p[2]) is int for p in cycle["phases"]) and type(cycle["end_ns"]) is int
    assert cycle["accept"] is None


class ExplodingNvtx:
    def push(self, phase):
        raise RuntimeError("nvtx push broke")

    def pop(self):
        raise RuntimeError("nvtx pop broke")

    def mark(self, message):
        raise RuntimeError("nvtx mark broke")


def _exploding_clock():
    raise RuntimeError("clock broke")


@pytest.mark.parametrize(
    "options",
    [
        {"nvtx_factory": ExplodingNvtx},
        {"perf_counter_ns": _exploding_clock},
        {"nvtx_factory": lambda: (_ for _ in ()).throw(RuntimeError("no nvtx"))},
    ],
    ids=["nvtx raises", "clock raises", "nvtx import fails"],
)
def test_the_tracers_own_exceptions_never_reach_the_caller(traced, options):
    session, _ = traced(**options)
    worker = fake_engine.ReferenceWorker([[3]])
    scheduler = fake_engine.ReferenceScheduler(worker)
    scheduler.run(Batch(1), cycles=2)
    worker.forward_prefill(Batch(1))
    assert worker.calls == ["cycle", "draft", "verify", "draft_extend"] * 2 + ["prefill"]
    assert worker.accepted == [[3], [0]]


def test_broken_preset_functions_never_reach_the_caller(traced, tmp_path):
    import dataclasses

    def bad_batch_size(batch):
        raise ValueError("no size")

    def bad_rank(owner):
        raise ValueError("no rank")

    def bad_read(args, kwargs, returned):
        raise ValueError("no counts")

    base = fake_engine.preset_for("fake_engine")
    preset = dataclasses.replace(
        base,
        batch_size=bad_batch_size,
        rank=bad_rank,
        counts=tuple(dataclasses.replace(h, read=bad_read) for h in base.counts),
    )
    session, _ = traced(preset=preset)
    worker = fake_engine.ReferenceWorker([[1]])
    fake_engine.ReferenceScheduler(worker).run(Batch(1), cycles=1)
    assert worker.accepted == [[1]]
    session.close()
    records = read_sidecar(tmp_path)
    assert records[0]["rank"] is None
    (cycle,) = of_type(records, "cycle")
    assert cycle["batch_size"] is None and cycle["accept"] is None


def test_record_function_ranges_appear_only_while_the_torch_profiler_runs(traced, monkeypatch):
    import torch  # installed by scripts/test (requirements/sglang-cpu.txt)

    opened = []
    real = torch.autograd.profiler.record_function

    def recording(name, *args, **kwargs):
        opened.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(torch.autograd.profiler, "record_function", recording)
    session, _ = traced()
    worker = fake_engine.ReferenceWorker([[1], [1]])
    scheduler = fake_engine.ReferenceScheduler(worker)
    scheduler.run(Batch(1), cycles=1)
    assert opened == []  # profiler off: not even a record_function object
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        scheduler.run(Batch(1), cycles=1)
    assert opened == ["cycle", "draft", "verify", "draft_extend", "accept"]
    names = [event.name for event in profile.events()]
    for phase in ("cycle", "draft", "verify", "draft_extend", "accept"):
        assert names.count(phase) == 1, (phase, names)
    cycle = next(e for e in profile.events() if e.name == "cycle")
    verify = next(e for e in profile.events() if e.name == "verify")
    assert cycle.time_range.start <= verify.time_range.start <= verify.time_range.end <= cycle.time_range.end
