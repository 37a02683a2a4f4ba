"""scripts/sglang/: the parts that run without a GPU (argument handling, dry runs, the measurement of the
cycles outside the capture window on the committed captures)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT

SCRIPTS = ROOT / "scripts" / "sglang"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


outside = load("outside_window")


def test_cycles_outside_the_capture_window_are_not_the_unprofiled_speed():
    # docs/sglang.md, "Cycles outside the capture window": measured on the committed K = 4 capture
    rows = {(r["part"], r["measure"]): r for r in outside.compare(str(FIXTURES / "sglang-k4"))}
    before, after = rows[("before", "gpu_cycle")], rows[("after", "gpu_cycle")]
    assert (before["cycles"], after["cycles"]) == (17, 69)
    assert before["lo"] > 1.15 and after["lo"] > 1.5  # slower than the twin, beyond the launch-to-launch noise
    assert round(before["ratio"], 3) == 1.209 and round(rows[("before", "cpu_period")]["ratio"], 3) == 1.197
    inside = rows[("inside", "gpu_cycle")]
    assert before["nsys_ms"] < inside["nsys_ms"] < after["nsys_ms"]


def test_outside_window_needs_a_window(tmp_path):
    run = tmp_path / "run"
    (run / "no-nsys").mkdir(parents=True)
    out = subprocess.run([sys.executable, str(SCRIPTS / "outside_window.py"), str(run)], capture_output=True,
                         text=True)
    assert out.returncode != 0 and "one sidecar" in out.stderr
