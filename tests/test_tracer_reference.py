"""The `reference` preset against the project's real reference engine (tracer/reference/engine.py), which
exists, so no stand-in is used here: every target resolves and keeps its signature, and a tiny CPU run of the
engine, traced, gives one sidecar cycle per engine cycle with the engine's own accept counts."""

from __future__ import annotations

import inspect

from specprof.tracer import presets
from specprof.tracer.reference import engine
from specprof.tracer.session import TracingSession
from specprof.tracer.targets import is_wrapped
from tracer_helpers import RecordingNvtx, of_type, read_sidecar

PRESET = presets.get("reference")


def test_every_target_resolves_on_the_real_engine_and_keeps_its_signature(tmp_path):
    before = {}
    for target in PRESET.targets:
        for module, cls, method in target.candidates:
            before[(cls, method)] = getattr(getattr(engine, cls), method)
    session = TracingSession(PRESET, str(tmp_path), handle_signals=False)
    session.activate(import_modules=True)
    try:
        assert session.unresolved() == []
        assert all(r.resolved and r.detail == "wrapped" for r in session.resolutions.values())
        for (cls, method), original in before.items():
            current = getattr(getattr(engine, cls), method)
            assert is_wrapped(current, "range") and current.__wrapped__ is original
            assert inspect.signature(current) == inspect.signature(original)
        hook = engine.ReferenceWorker.on_verify_complete_cpu
        assert list(inspect.signature(hook).parameters) == ["self", "num_correct_drafts_per_req_cpu", "batch_size"]
    finally:
        session.deactivate()
    for (cls, method), original in before.items():
        assert getattr(getattr(engine, cls), method) is original


def test_a_traced_cpu_run_of_the_engine_matches_its_own_counts(tmp_path):
    session = TracingSession(PRESET, str(tmp_path), handle_signals=False, nvtx_factory=RecordingNvtx)
    session.activate(import_modules=True)
    try:
        cfg = engine.EngineConfig.tiny(steps=3)
        worker, scheduler, batch = engine.build(cfg)
        worker.forward_prefill(batch)
        scheduler.run(batch, 4)
        session.close()
    finally:
        session.deactivate()
    records = read_sidecar(tmp_path)
    cycles = of_type(records, "cycle")
    assert [c["index"] for c in cycles] == [0, 1, 2, 3]
    assert [c["accept"]["correct_drafts"] for c in cycles] == worker.accepted
    assert all(len(c["accept"]["correct_drafts"]) == cfg.batch == c["batch_size"] for c in cycles)
    assert all([p[0] for p in c["phases"]] == ["draft", "verify", "draft_extend"] for c in cycles)
    assert [(r["name"], r["cycle"]) for r in of_type(records, "range")] == [("prefill", None)] + [
        ("accept", i) for i in range(4)]
    assert session.recorder.nvtx.depth == 0
