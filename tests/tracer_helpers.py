"""Helpers for the tracer tests: a recording NVTX backend, a fake clock, sidecar reading, and a traced session
on the CPU stand-in engine (tests/fake_engine.py)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fake_engine
from specprof.tracer import plugin
from specprof.tracer.session import TracingSession

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


class RecordingNvtx:
    """Stands in for NvtxRanges: remembers every push, pop and mark, in order."""

    def __init__(self):
        self.events: list[tuple[str, str | None]] = []

    def push(self, phase):
        self.events.append(("push", phase))

    def pop(self):
        self.events.append(("pop", None))

    def mark(self, message):
        self.events.append(("mark", message))

    @property
    def depth(self) -> int:
        return sum(1 if kind == "push" else -1 for kind, _ in self.events if kind != "mark")

    def pushed(self) -> list[str]:
        return [name for kind, name in self.events if kind == "push"]


class FakeClock:
    """perf_counter_ns that advances by `step` ns at every read: deterministic timestamps."""

    def __init__(self, start: int = 1_000_000, step: int = 10):
        self.now = start
        self.step = step

    def __call__(self) -> int:
        self.now += self.step
        return self.now


def sidecar_files(directory) -> list[str]:
    return sorted(glob.glob(os.path.join(str(directory), "specprof-sidecar.*.jsonl")))


def read_sidecar(directory) -> list[dict]:
    files = sidecar_files(directory)
    assert len(files) == 1, files
    with open(files[0], encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def of_type(records: list[dict], kind: str) -> list[dict]:
    return [r for r in records if r["type"] == kind]


@pytest.fixture
def traced(tmp_path):
    """A factory: traced(**session options) -> (session, nvtx) on fake_engine, deactivated after the test."""
    sessions = []

    def make(preset=None, **options):
        nvtx = RecordingNvtx()
        options.setdefault("nvtx_factory", lambda: nvtx)
        options.setdefault("handle_signals", False)
        session = TracingSession(preset or fake_engine.preset_for("fake_engine"), str(tmp_path), **options)
        session.activate()
        sessions.append(session)
        return session, nvtx

    yield make
    for session in sessions:
        session.deactivate()


@pytest.fixture
def no_global_session():
    """Makes sure a test that uses specprof.tracer.plugin leaves no session behind."""
    plugin.uninstall()
    yield
    plugin.uninstall()


def run_python(code: str, env: dict | None = None, cwd=None, timeout: float = 240) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with tests/ and the checkout on PYTHONPATH."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SPECPROF_")}
    full_env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT)])
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code], env=full_env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
