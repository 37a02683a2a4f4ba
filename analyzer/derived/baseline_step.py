"""The plain-decode step a speculative run is set against (model/run_data.py `BaselineStep`), from a plain run's
files: its sidecars (`sidecar_step`), its trace alone (`trace_step`), or given in ms (`given_step`). Pure functions
of tables: app/run.py reads the files.
"""

from __future__ import annotations

import math

import polars as pl

from specprof.analyzer.derived import crosscheck as cc
from specprof.analyzer.derived import economics as econ
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.run_data import BaselineStep
from specprof.analyzer.model.sidecars import Sidecars
from specprof.analyzer.model.trace import Trace


def trace_step(trace: Trace, path: str, step_range: str | None = None) -> BaselineStep:
    """The plain-decode step time of a non-speculative run's trace without a sidecar (any nsys or Kineto
    capture at `path`): a step is one range named `step_range` (default `cycle`, then `decode`), measured start
    to start on its thread."""
    names = [step_range] if step_range else [cc.CYCLE, "decode"]
    for name in names:
        steps = trace.ranges.filter(pl.col("name") == name)
        if steps.height >= 2:
            break
    cyc = steps.sort("pid", "tid", "start").with_columns(
        pid=pl.col("pid") * (1 << 32) + pl.col("tid"), index=pl.int_range(pl.len()).over("pid", "tid"))
    m = econ.period_measure(cyc)
    if m is None:
        tried = " or ".join(f"`{name}`" for name in names)
        raise SpecprofError(f"{path}: no two consecutive {tried} ranges on one thread: no step time to take as "
                            "baseline; name the range that marks one decode step with --baseline-range NAME",
                            path)
    under = cc.profiler_name(trace)
    return BaselineStep(int(round(m.value)), f"{path}: trace `{name}` ranges under {under}, {m.n} steps", [], None,
                        m)


def sidecar_step(sides: Sidecars, path: str, where: str, profiled: Sidecars | None = None) -> BaselineStep:
    """The plain-decode step time of a non-speculative run from its sidecars (read from `path`; `where`: which
    ones, in the user's words), with its 95 % interval: a step is one traced decode cycle (SGLang without
    speculation: `cycle` > `decode`; the reference engine at `--steps 0`: one plain decode step), measured start
    to start, over the sidecar's capture window when it has one; repeated twins (one folder each) give the
    interval of their means where wider. A run that accepted draft tokens is speculative: refused. `profiled`:
    the run's own sidecars under the profiler, when `sides` are its twins without it: a profiled run that is
    faster shows the runs' noise, and the interval is widened to hold it."""
    notes: list[str] = []
    window = cc.window_cycles(sides, None, None)
    m = econ.period_measure(sides.cycles, key="file", keep=window, runs=econ.run_of(sides.files))
    if m is None:
        raise SpecprofError(f"{path}: no two consecutive cycles in the sidecar: no step time to take as baseline",
                            path)
    accept, batch, _ = econ.accept_stats(window)
    if batch is None:  # a plain decode has no accept counts; its cycles still know their batch
        sizes = window.filter(pl.col("decode") & pl.col("batch_size").is_not_null())["batch_size"]
        batch = float(sizes.mean()) if sizes.len() else None
    if cc.capture_windows(sides).height:
        where += ", its capture window"
    if accept is not None and accept > 1.0:
        raise SpecprofError(f"{path}: the baseline accepted draft tokens (accept length {accept:.3f}): it is a "
                            "speculative run, not a plain decode, and its cycle is not a plain-decode step; give a "
                            "run without speculation (SGLang without --speculative-algorithm, the reference "
                            "engine with --steps 0) or --baseline-ms", path)
    if m.runs > 1:
        where += f", {m.runs} repeated runs"
    if profiled is not None:
        # the profiler cannot make a run faster: a profiled twin that is faster shows the runs' own noise
        t = econ.period_measure(profiled.cycles, key="file", keep=cc.window_cycles(profiled, None, None))
        if t is not None and m.half is not None and t.value < m.value - m.half - (t.half or 0):
            gap = (m.value - t.value) / m.value
            notes.append(f"the baseline's own run under nsys steps in {t.value / 1e6:.3f} ms, {gap:.0%} faster than "
                         f"its run without nsys ({m.value / 1e6:.3f} ms): a profiler cannot make a run faster, so "
                         "the two launches differ by that much run to run; the baseline's interval is widened to "
                         "hold it (repeat the baseline without nsys to measure its noise)")
            m = econ.Measure(m.value, max(m.half, m.value - t.value), m.n, max(m.runs, 2), "runs")
    source = f"{path}: {where}, {m.n} steps" + (f" of {batch:g} requests" if batch is not None else "")
    return BaselineStep(int(round(m.value)), source, notes, batch, m, sides)


def given_step(baseline_ms: float) -> BaselineStep:
    """The plain-decode step time given in ms (--baseline-ms)."""
    if not 0 < baseline_ms < math.inf:
        raise SpecprofError(f"--baseline-ms must be a positive number of milliseconds, not {baseline_ms}")
    ns = int(round(baseline_ms * 1e6))
    return BaselineStep(ns, "given with --baseline-ms", [], None, econ.Measure(ns, None, 0, basis="given"))
