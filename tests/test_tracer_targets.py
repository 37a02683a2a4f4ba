"""The target table machinery (tracer/targets.py): wrapping once, on the concrete class, keeping signatures,
never raising, undoing exactly; and the start-up report of targets that did not resolve."""

from __future__ import annotations

import inspect
import logging
import sys
import types

import pytest

import fake_engine
from specprof.tracer.presets import Preset
from specprof.tracer.targets import COUNTS, NOT_FOUND, RANGE, Patcher, Target, is_wrapped, patch_method
from tracer_helpers import traced  # noqa: F401 (fixture)


def _module(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


def _marking(tag: str):
    """A make_wrapper that records the calls it wraps, and marks itself as a `range` wrapper."""
    calls = []

    def make(method):
        import functools

        @functools.wraps(method)
        def wrapper(*args, **kwargs):
            calls.append(tag)
            return method(*args, **kwargs)

        wrapper.__specprof__ = RANGE
        return wrapper

    return make, calls


class Base:
    def step(self, batch, *, with_topology: bool = False) -> int:
        """Base step."""
        return 1

    @staticmethod
    def helper(x: int) -> int:
        return x + 1

    @classmethod
    def build(cls, n: int = 2) -> str:
        return f"{cls.__name__}:{n}"

    @property
    def size(self) -> int:
        return 3


class Child(Base):
    pass


class Override(Base):
    def step(self, batch, *, with_topology: bool = False) -> int:
        return 10 + super().step(batch, with_topology=with_topology)


@pytest.fixture
def fake_module(monkeypatch):
    module = _module("specprof_test_targets", Base=Base, Child=Child, Override=Override)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    patcher = Patcher()
    yield module.__name__, patcher
    patcher.undo()


def test_wraps_once_and_keeps_signature(fake_module):
    name, patcher = fake_module
    original = Base.__dict__["step"]
    make, calls = _marking("step")
    assert patch_method((name, "Base", "step"), RANGE, make, patcher) == (True, "wrapped")
    assert patch_method((name, "Base", "step"), RANGE, make, patcher) == (True, "already wrapped")
    wrapped = Base.__dict__["step"]
    assert wrapped is not original and wrapped.__wrapped__ is original
    assert not is_wrapped(original, RANGE)
    assert inspect.signature(wrapped) == inspect.signature(original)
    assert (wrapped.__name__, wrapped.__qualname__, wrapped.__doc__) == ("step", "Base.step", "Base step.")
    assert Base().step(None) == 1 and calls == ["step"]  # one wrapper: one call recorded


def test_inherited_method_is_patched_on_the_named_class_only(fake_module):
    name, patcher = fake_module
    make, calls = _marking("child")
    assert patch_method((name, "Child", "step"), RANGE, make, patcher) == (True, "wrapped")
    assert "step" in Child.__dict__ and not is_wrapped(Base.__dict__["step"], RANGE)
    Base().step(None)
    assert calls == []
    Child().step(None)
    assert calls == ["child"]


def test_subclass_of_a_patched_base_reuses_the_inherited_wrapper(fake_module):
    name, patcher = fake_module
    make, calls = _marking("base")
    patch_method((name, "Base", "step"), RANGE, make, patcher)
    assert patch_method((name, "Child", "step"), RANGE, make, patcher) == (True, "inherited wrapper")
    assert "step" not in Child.__dict__
    Child().step(None)
    assert calls == ["base"]


def test_an_override_gets_its_own_wrapper(fake_module):
    name, patcher = fake_module
    make, calls = _marking("x")
    patch_method((name, "Base", "step"), RANGE, make, patcher)
    assert patch_method((name, "Override", "step"), RANGE, make, patcher) == (True, "wrapped")
    assert Override().step(None) == 11
    assert calls == ["x", "x"]  # the override and the super() call: one range, see test_tracer_ranges


def test_static_and_class_methods_keep_their_kind(fake_module):
    name, patcher = fake_module
    make, _ = _marking("x")
    assert patch_method((name, "Base", "helper"), RANGE, make, patcher)[0]
    assert patch_method((name, "Child", "build"), RANGE, make, patcher)[0]
    assert isinstance(Base.__dict__["helper"], staticmethod) and Base.helper(1) == 2
    assert isinstance(Child.__dict__["build"], classmethod) and Child.build() == "Child:2"


def test_kinds_are_independent(fake_module):
    name, patcher = fake_module
    make, _ = _marking("x")

    def make_counts(method):
        def counts(*args, **kwargs):
            return method(*args, **kwargs)

        counts.__wrapped__ = method
        counts.__specprof__ = COUNTS
        return counts

    patch_method((name, "Base", "step"), RANGE, make, patcher)
    assert patch_method((name, "Base", "step"), COUNTS, make_counts, patcher) == (True, "wrapped")
    assert patch_method((name, "Base", "step"), RANGE, make, patcher) == (True, "already wrapped")
    assert patch_method((name, "Base", "step"), COUNTS, make_counts, patcher) == (True, "already wrapped")


@pytest.mark.parametrize(
    "candidate, detail",
    [
        (("specprof_test_targets", "Missing", "step"), "no class Missing"),
        (("specprof_test_targets", "Base", "missing"), "no method missing"),
        (("specprof_test_targets", "Base", "size"), "size is not a plain method (property)"),
        (("specprof_no_such_module", "Base", "step"), "module not imported"),
    ],
)
def test_what_does_not_resolve_says_why(fake_module, candidate, detail):
    _, patcher = fake_module
    make, _ = _marking("x")
    assert patch_method(candidate, RANGE, make, patcher) == (False, detail)
    assert len(patcher) == 0


def test_a_module_that_cannot_be_imported_is_not_an_error():
    make, _ = _marking("x")
    ok, detail = patch_method(("specprof_no_such_module", "A", "b"), RANGE, make, Patcher(), import_module=True)
    assert (ok, detail) == (False, NOT_FOUND)


def test_never_raises_on_a_class_that_refuses_patching(monkeypatch):
    class Frozen(type):
        def __setattr__(cls, name, value):
            raise TypeError("frozen class")

    class Worker(metaclass=Frozen):
        def step(self):
            return 1

    monkeypatch.setitem(sys.modules, "specprof_test_frozen", _module("specprof_test_frozen", Worker=Worker))
    make, _ = _marking("x")
    ok, detail = patch_method(("specprof_test_frozen", "Worker", "step"), RANGE, make, Patcher())
    assert not ok and detail == "failed: TypeError: frozen class"
    assert Worker().step() == 1


def test_undo_restores_every_class_exactly(fake_module):
    name, patcher = fake_module
    before = {cls: dict(cls.__dict__) for cls in (Base, Child, Override)}
    make, _ = _marking("x")
    for cls in ("Base", "Child", "Override"):
        for method in ("step", "helper", "build"):
            patch_method((name, cls, method), RANGE, make, patcher)
    patcher.undo()
    for cls, attrs in before.items():
        assert dict(cls.__dict__) == attrs


def test_unresolved_targets_are_logged_once_with_the_engine_version(traced, caplog):
    preset = fake_engine.preset_for("fake_engine")
    broken = Preset(
        name="reference",
        targets=preset.targets + (Target("verify", (("fake_engine", "ReferenceWorker", "verify_v9"),)),),
        counts=preset.counts,
        batch_size=preset.batch_size,
        rank=preset.rank,
        engine="pytest",  # a distribution that is installed, so the report names its version
    )
    session, _ = traced(preset=broken)
    worker = fake_engine.ReferenceWorker()
    with caplog.at_level(logging.WARNING, logger="specprof.tracer"):
        worker.forward_batch_generation(fake_engine.Batch(1))
        worker.forward_batch_generation(fake_engine.Batch(1))
    import pytest as pytest_module

    lines = [r.getMessage() for r in caplog.records if r.name == "specprof.tracer"]
    assert lines == [
        f"specprof: pytest {pytest_module.__version__}: phase 'verify': no target resolved: "
        "fake_engine.ReferenceWorker.verify_v9: no method verify_v9"
    ]
    header = session.header()
    assert {"phase": "verify", "kind": "range", "target": "fake_engine.ReferenceWorker.verify_v9",
            "resolved": False, "detail": "no method verify_v9"} in header["targets"]


def test_eager_activation_reports_at_once(caplog, tmp_path):
    # A worker family whose module does not exist in this engine version is not in use: one DEBUG line, no
    # warning. A module that exists but lacks the class is a version the table does not know: a WARNING.
    from specprof.tracer.session import TracingSession

    preset = fake_engine.preset_for("fake_engine")
    targets = (Target("draft", (("specprof_no_such_module", "W", "draft"),)),
               Target("verify", (("specprof_no_such_module", "W", "verify"),)),
               Target("prefill", (("fake_engine", "NoSuchWorker", "prefill"),)))
    broken = Preset(name="reference", targets=targets, counts=(), batch_size=preset.batch_size,
                    rank=preset.rank, engine="pytest")
    session = TracingSession(broken, str(tmp_path), handle_signals=False)
    with caplog.at_level(logging.DEBUG, logger="specprof.tracer"):
        session.activate(import_modules=True)
    try:
        records = [r for r in caplog.records if r.name == "specprof.tracer"]
        warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
        debug = [r.getMessage() for r in records if r.levelno == logging.DEBUG]
        assert len(warnings) == 1 and "phase 'prefill': no target resolved: " in warnings[0]
        assert "fake_engine.NoSuchWorker.prefill: no class NoSuchWorker" in warnings[0]
        assert len(debug) == 1 and "not in use" in debug[0] and "specprof_no_such_module" in debug[0]
    finally:
        session.deactivate()
