"""The benchmark harness covers every step of `specprof analyze`: every piece of work the analysis of a run does
runs inside a progress step (analyzer/progress.py), which benchmarks/stages.py times; stages.py runs what the
command runs. Nothing here times anything (timings are never asserted): it checks where the work runs."""

from __future__ import annotations

import functools
import importlib.util
import sys

import pytest

from specprof.analyzer import progress
from specprof.analyzer.app import run as run_module
from specprof.analyzer.app.analyze import Options
from specprof.analyzer.app.run import Run
from specprof.analyzer.core import accounting, categories, projection, summary
from specprof.analyzer.derived import analysis, breakdown
from specprof.analyzer.readers.nsys import read as nsys_read
from specprof.analyzer.render import json as json_render
from conftest import FIXTURES, ROOT

RUN = FIXTURES / "reference-k4"  # a run directory: its sidecar, CUDA events and baseline run add their steps

# The work of an analysis, by where its modules call it from.
WORK = [
    (nsys_read, "read_ops"), (nsys_read, "read_api"), (nsys_read, "read_nvtx"),
    (projection, "project"), (categories, "categorize"),
    (accounting, "with_prev_end"), (accounting, "cpu_waits"), (accounting, "charges"),
    (summary, "cycle_table"), (summary, "phase_table"), (summary, "category_table"),
    (run_module, "read_run_data"), (analysis, "crosscheck_of"), (breakdown, "breakdowns"),
    (analysis, "economics_of"), (analysis, "per_rank"),
]


def test_every_piece_of_an_analysis_runs_inside_a_progress_step(monkeypatch):
    seen = {}

    def watched(name, fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            seen.setdefault(name, []).append([s.name for s in progress._current])
            return fn(*args, **kwargs)
        return run

    for module, name in WORK:
        monkeypatch.setattr(module, name, watched(f"{module.__name__}.{name}", getattr(module, name)))
    json_render.render(Run.load(str(RUN), Options(cache=False)).analysis())  # what `specprof analyze --json` computes
    ran = {f"{m.__name__}.{n}" for m, n in WORK}
    assert ran <= set(seen), ran - set(seen)
    outside = {name for name, stacks in seen.items() if any(not stack for stack in stacks)}
    assert not outside, f"work outside every progress step (benchmarks/stages.py cannot time it): {outside}"


@pytest.fixture
def stages():
    spec = importlib.util.spec_from_file_location("stages", ROOT / "benchmarks" / "stages.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["stages"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("stages", None)


def test_the_harness_runs_what_the_command_runs(stages):
    out = stages.measure(str(RUN), cache=False, tracer_only=True)
    names = {s["step"] for s in out["steps"]}
    for step in ("reading GPU ops", "projecting ranges onto GPU ops", "accounting every nanosecond", "summarising",
                 "cross-checking with the sidecar", "breaking the cycles down", "the economics",
                 "per-rank results", "rendering JSON"):
        assert step in names
    assert set(out["outside_steps"]) == {"wall_s", "cpu_s"}
