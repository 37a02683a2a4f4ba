"""What a run's other files add to the attribution of its trace, from their parsed tables (model/run_data.py
`RunData`: the tracer's sidecars, the run without nsys, ground truth, a server log, a baseline step): the
cross-check (`crosscheck_of`), the economics (`economics_of`), the draft steps of the traced command line
(`steps_of`), a baseline's step time (`sidecar_step`, `trace_step`) and the sweep's inputs (`sweep_run`,
`fit_sweep`). Pure functions of tables: the files are read by app/run.py.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, replace

import polars as pl

from specprof.analyzer.core.attribution import Attribution
from specprof.analyzer.derived import crosscheck as cc
from specprof.analyzer.derived import economics as econ
from specprof.analyzer.derived import groups as gr
from specprof.analyzer.derived.breakdown import CycleBreakdown
from specprof.analyzer.derived.economics import shape_notes
from specprof.analyzer.derived.sweep import Sweep, sweep
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.run_data import BASELINE_DIR, BaselineStep, RunData
from specprof.analyzer.model.sidecars import Sidecars
from specprof.analyzer.model.trace import Trace


def _aligned(check: cc.CrossCheck | None) -> tuple[int | None, int | None]:
    """The sidecar indices of the first and last cycle the capture holds (None, None when not aligned)."""
    if check is not None:
        m = check.alignment.filter(pl.col("matched_cycles") > 0)
        if m.height:
            return int(m["first_index"].min()), int(m["last_index"].max())
    return None, None


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


@dataclass
class Measured:
    """One measurement of a run over the sidecar cycles it is compared on (`window_measured`): the run under the
    profiler (its capture's cycles) or its twin without it (the same window; its repeated twins pooled). The
    economics' estimate of that source, and the sweep's accept length and cycle for the run, are these."""

    cycles: pl.DataFrame  # the sidecar cycles kept (`crosscheck.window_cycles`)
    runs: pl.DataFrame | None  # file, run: the repeated twin of each sidecar file (None under the profiler)
    period: econ.Measure | None  # the busy cycle period, start to start
    accept_len: float | None  # per request-round, the bonus token included (None without accept counts)
    accept: econ.Measure | None  # the same with its 95 % interval
    batch: float | None  # mean requests per cycle
    accepts: pl.DataFrame  # the sidecars' accept counts (file, cycle, request, correct), every cycle's

    @property
    def rounds(self) -> pl.DataFrame:
        """The request-rounds of the cycles kept: cycle, request, correct, twin (the repeated twin's folder;
        null under the profiler)."""
        schema = {"cycle": pl.Int64, "request": pl.Int64, "correct": pl.Int64, "twin": pl.Utf8}
        if not self.accepts.height:
            return pl.DataFrame(schema=schema)
        seen = self.accepts.join(self.cycles.select("file", cycle="index"), on=["file", "cycle"], how="semi")
        seen = seen.join(self.runs, on="file", how="left").rename({"run": "twin"}) if self.runs is not None \
            else seen.with_columns(twin=pl.lit(None, dtype=pl.Utf8))
        return seen.select("cycle", "request", "correct", "twin")


def window_measured(sides: Sidecars, first: int | None, last: int | None, twin: bool) -> Measured:
    """The period and accept length of `sides` over the cycles compared: a sidecar's own capture window, else
    the sidecar indices [first, last] the trace holds (`_aligned`); `twin`: the sidecars are the run's twins
    without the profiler (their repeats each a run of the intervals). The one place both `analyze`'s economics
    and `sweep` take a run's accept length and cycle from."""
    window = cc.window_cycles(sides, first, last)
    runs = econ.run_of(sides.files) if twin else None
    m = econ.period_measure(sides.cycles, "file", keep=window, runs=runs)
    _, batch, _ = econ.accept_stats(window)
    accept = econ.accept_measure(window, runs)
    return Measured(window, runs, m, accept.value if accept else None, accept, batch, sides.accepts)


def _estimate(source: str, profiled: bool, x: Measured, baseline_ns: int | None, steps: int | None,
              base_m: econ.Measure | None) -> dict:
    m = x.period
    return econ.estimate(source, profiled, m.n if m else 0, int(round(m.value)) if m else None, x.accept_len,
                         x.batch, baseline_ns, steps, m, x.accept, base_m)


def economics_for(a: Attribution, sidecars: Sidecars | None, baseline: Sidecars | None,
                  check: cc.CrossCheck | None, baseline_ns: int | None, baseline_source: str | None,
                  notes: list[str], steps: int | None = None, breakdown: CycleBreakdown | None = None,
                  run: str | None = None, baseline_measure: econ.Measure | None = None) -> econ.Economics | None:
    """Estimates from the unprofiled sidecar (headline), the profiled sidecar, or (no sidecar, a baseline given)
    the trace's cycles with the accept length unknown. None when there is nothing to estimate. `steps`: the
    draft steps K (the most a cycle can accept is K + 1); `breakdown`: the decode cycle's, for how much of it the
    GPU waited on the host; `run`: the run's directory (None: a trace file alone), for the hint of how to measure
    it without the profiler."""
    rows = []
    under = cc.profiler_name(a.trace)
    base_m = baseline_measure if baseline_measure is not None else (
        econ.Measure(baseline_ns, None, 0, basis="given") if baseline_ns else None)
    if sidecars is not None:
        first, last = _aligned(check)
        if baseline is not None:
            rows.append(_estimate(f"sidecar without {under}", False, window_measured(baseline, first, last, True),
                                  baseline_ns, steps, base_m))
        rows.append(_estimate(f"sidecar under {under}", True, window_measured(sidecars, first, last, False),
                              baseline_ns, steps, base_m))
    elif a.cycles.height and baseline_ns is not None:  # no sidecar: only with a baseline is there anything to say
        m = econ.period_measure(a.cycles)
        rows.append(econ.estimate(f"trace cycle ranges under {under}", True, m.n if m else 0,
                                  int(round(m.value)) if m else None, None, None, baseline_ns, steps, m, None, base_m))
        notes.append("no sidecar of this run: the accept length is unknown (the sidecar carries the accept "
                     "counts)")
    if not rows:
        return None
    if steps is None:
        notes.append("the number of draft steps is unknown (not on the traced command line; give --steps K): "
                     "whether the break-even is within reach (at most K + 1 tokens per cycle) is not checked")
    waits = None
    if breakdown is not None:
        waits = breakdown.phases.filter(pl.col("busy_share").is_not_null()).select(
            "phase", share_of_cycle="share", wait_share=1 - pl.col("busy_share"))
    twin = (f"`specprof capture --no-nsys ... -o {os.path.join(run, BASELINE_DIR)} -- <the same command>`, then "
            f"analyze {run} again" if run else
            "`specprof capture --no-nsys -o RUN/no-nsys -- <the same command>` (docs/capture.md)")
    return econ.economics(rows, baseline_ns, baseline_source, notes, waits, under, twin, base_m)


def crosscheck_of(a: Attribution, data: RunData) -> cc.CrossCheck | None:
    """The cross-check of the attribution `a` against its run's sidecars (and the run without nsys, ground truth
    and the server log, where `data` has them); None without a sidecar. The files the loader found without
    being given are said first in its notes."""
    if data.sidecars is None:
        return None
    truth = data.ground_truth
    check = cc.crosscheck(a.trace, data.sidecars, data.baseline, truth if data.baseline is not None else None,
                          data.baseline_ground_truth, data.server_log, data.log_interval)
    check.notes[:0] = data.found
    events = data.sidecars
    if not events.gpu_time.height and truth is not None:
        # the reference engine's own in-stream CUDA events of this run, when the tracer recorded none
        recorded = cc.reference_events(truth, events)
        if recorded is not None:
            events = replace(events, gpu_time=recorded)
            check.notes.append(f"ground truth: the reference engine's CUDA events ({data.ground_truth_file})")
    check.ground_truth = cc.ground_truth_check(a.ops, a.charges, a.cycles, check, events)
    return check


def economics_of(a: Attribution, data: RunData, check: cc.CrossCheck | None, breakdown: CycleBreakdown | None
                 ) -> econ.Economics | None:
    """Does speculation pay, for the attribution `a` of the run whose files `data` holds (`check`: its
    cross-check; `breakdown`: its decode cycle's breakdown): `economics_for` with the baseline step and the
    draft steps (given, else from the traced command line)."""
    step = data.baseline_step
    notes = list(step.notes) if step else []
    feeding = data.sidecars
    if _foreign_sidecar(a, data, check):
        feeding = None  # a sidecar of another run: its accept counts and cycles are not this trace's
        notes.append("the sidecar does not line up with the trace (see the cross-check): it feeds nothing here, "
                     "neither the accept length nor the cycle time")
    shape = draft_shape_of(a, data, check)
    economics = economics_for(a, feeding, data.baseline if feeding is not None else None, check,
                              step.ns if step else None, step.source if step else None, notes, shape.steps, breakdown,
                              data.folder, step.measure if step else None)
    if economics is not None:
        economics.draft_tree = shape.as_tree()
        economics.notes.extend(shape_notes(shape))
    if economics is not None and feeding is not None:
        economics.groups = gr.economics_groups(economics, feeding, data.baseline, *_aligned(check), step, shape.steps,
                                               cc.profiler_name(a.trace))
    head = economics.headline if economics is not None else None
    batch = step.batch if step else None
    if economics is not None and economics.groups is not None and economics.groups.several:
        batch = None  # the per-batch-size table compares like with like
    if head is not None and head["batch"] is not None and batch is not None \
            and abs(batch - head["batch"]) > 0.01 * head["batch"]:
        economics.notes.append(f"the baseline ran {batch:g} requests per step, this run {head['batch']:g} "
                               "per cycle: a step time depends on the batch, so the speedup compares unlike runs")
    return economics


# -- sweep --------------------------------------------------------------------------------------------------------

_LOG_INTERVAL_FLAGS = ("--decode-log-interval", "--decode_log_interval")
_STEP_FLAGS = ("--steps", "-k", "--speculative-num-steps", "--speculative_num_steps")
_TOKEN_FLAGS = ("--speculative-num-draft-tokens", "--speculative_num_draft_tokens")


def _flag(argv: list[str], names: tuple[str, ...]) -> int | None:
    for i, arg in enumerate(argv):
        for name in names:
            value = None
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg[len(name) + 1:]
            if value is not None:
                try:
                    return int(value)
                except ValueError:
                    return None
    return None


def log_interval(data: RunData) -> int:
    """The server's --decode-log-interval: from its command line in the sidecar's headers, else SGLang's."""
    headers = data.sidecars.headers if data.sidecars else []
    given = [_flag(h.get("argv") or [], _LOG_INTERVAL_FLAGS) for h in headers]
    return next((n for n in given if n), None) or cc.DEFAULT_LOG_INTERVAL


_TOPK_FLAGS = ("--speculative-eagle-topk", "--speculative_eagle_topk")
_CONTINUOUS_FLAGS = ("--num-continuous-decode-steps", "--num_continuous_decode_steps")
_MODEL_FLAGS = ("--model-path", "--model", "--speculative-draft-model-path", "--hidden", "--target-layers",
                "--draft-error")
_TP_FLAGS = ("--tp", "--tp-size", "--tensor-parallel-size")


def _text_flag(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg[len(name) + 1:]
    return None


def _command(data: RunData) -> tuple[list[str] | None, str | None, str | None]:
    """(the traced command line, the tracer's preset, the engine's version): the sidecar header's, else the
    run's manifest's."""
    argv = preset = version = None
    if data.sidecars is not None and data.sidecars.headers:
        head = data.sidecars.headers[0]
        argv, version = head.get("argv"), (head.get("versions") or {}).get("sglang")
        preset = data.sidecars.files["preset"][0] if data.sidecars.files.height else None
    if data.manifest is not None:
        argv = argv or data.manifest.get("command")
        preset = preset or data.manifest.get("preset")
        version = version or (data.manifest.get("versions") or {}).get("sglang")
    if isinstance(argv, str):
        argv = shlex.split(argv)
    if not isinstance(argv, list) or not all(isinstance(x, str) for x in argv):
        argv = None
    return argv, preset, version if isinstance(version, str) else None


def _resolved(data: RunData, name: str, argv: list[str] | None, flags: tuple[str, ...]) -> int | None:
    """A setting as the server ran it: its own log's resolved value (`server_args`: also the ones SGLang chose
    itself, where the command line left them out), else the traced command line's flag."""
    given = (data.server_args or {}).get(name)
    if given is not None:
        return given
    return _flag(argv, flags) if argv is not None else None


def shape_of(data: RunData) -> econ.DraftShape:
    """The draft's shape: K, SGLang's --speculative-eagle-topk and --speculative-num-draft-tokens,
    --num-continuous-decode-steps (as the server's log says it ran them, else from the traced command line), and
    the engine's version."""
    argv, _, version = _command(data)
    if argv is None and not data.server_args:
        return econ.DraftShape()
    logged = data.server_args or {}
    from_log = any(logged.get(name) is not None for name in ("speculative_num_steps", "speculative_eagle_topk"))
    return econ.DraftShape(steps=_resolved(data, "speculative_num_steps", argv, _STEP_FLAGS),
                           topk=_resolved(data, "speculative_eagle_topk", argv, _TOPK_FLAGS) or 1,
                           num_draft_tokens=_resolved(data, "speculative_num_draft_tokens", argv, _TOKEN_FLAGS),
                           continuous_steps=_resolved(data, "num_continuous_decode_steps", argv,
                                                      _CONTINUOUS_FLAGS) or 1, version=version,
                           source=econ.SHAPE_FROM_LOG if from_log else econ.SHAPE_FROM_COMMAND)


def draft_shape_of(a: Attribution, data: RunData, check: cc.CrossCheck | None) -> econ.DraftShape:
    """The draft's shape of the run whose trace `a` is (`shape_of`), from its files `data`; from its manifest alone
    when its sidecar is of another run (the cross-check `check` does not line it up with the trace). K given with
    --steps (`data.steps`) wins."""
    shape = shape_of(RunData(manifest=data.manifest) if _foreign_sidecar(a, data, check) else data)
    if data.steps is not None and data.steps != shape.steps:
        shape = replace(shape, steps=data.steps, source="--steps")
    return shape


def _foreign_sidecar(a: Attribution, data: RunData, check: cc.CrossCheck | None) -> bool:
    """The run's sidecar is of another run: the cross-check `check` does not line it up with the trace's cycles."""
    return data.sidecars is not None and check is not None and bool(a.cycles.height) and not cc.aligned(check)


def setup_of(data: RunData) -> dict | None:
    """What makes runs one workload, from the traced command line: engine (the tracer's preset, else the
    program), model (the target and draft model flags), tp (tensor-parallel size, 1 when not given), topk and
    continuous_steps (the draft's shape). None when no command line is known."""
    argv, preset, _ = _command(data)
    if argv is None:
        return None
    engine = preset or next((a for a in argv if "sglang" in a or a == "reference"),
                            os.path.basename(argv[0]) if argv else None)
    model = {name.lstrip("-"): _text_flag(argv, name) for name in _MODEL_FLAGS if _text_flag(argv, name)}
    return {"engine": engine, "model": model, "tp": _resolved(data, "tp_size", argv, _TP_FLAGS) or 1,
            "topk": _resolved(data, "speculative_eagle_topk", argv, _TOPK_FLAGS) or 1,
            "continuous_steps": _resolved(data, "num_continuous_decode_steps", argv, _CONTINUOUS_FLAGS) or 1}


def draft_forwards(setup: dict | None, steps: int) -> int | None:
    """The draft forward passes a cycle of K draft steps runs, where the engine is known (None where not).
    SGLang's EAGLE worker takes the first draft token from the draft re-extend before it and breaks out of its
    loop before the last step's forward (`EagleDraftWorker.draft_forward`, 0.5.16 and 0.5.23 alike, and the v1
    `EAGLEWorker` before them): K - 1. The reference engine runs one per step: K."""
    engine = (setup or {}).get("engine") or ""
    if "sglang" in engine:
        return max(steps - 1, 0)
    return steps if engine == "reference" else None


def steps_of(data: RunData) -> tuple[int | None, int | None]:
    """(draft steps, verify tokens): as the server's log says it ran them (`server_args`: SGLang's resolved
    settings, also where it chose them itself), else from the traced command line (the sidecar header's argv,
    else the run's manifest). Tokens default to steps + 1 (a chain draft); SGLang's
    --speculative-num-draft-tokens wins."""
    logged = data.server_args or {}
    if logged.get("speculative_num_steps") is not None:
        steps = logged["speculative_num_steps"]
        tokens = logged.get("speculative_num_draft_tokens")
        return steps, tokens if tokens is not None else steps + 1
    argvs = [h.get("argv") for h in (data.sidecars.headers if data.sidecars else [])]
    if data.manifest is not None:
        argvs.append(data.manifest.get("command"))
    for argv in argvs:
        if isinstance(argv, str):
            argv = shlex.split(argv)
        if not isinstance(argv, list) or not all(isinstance(x, str) for x in argv):
            continue
        steps = _flag(argv, _STEP_FLAGS)
        if steps is not None:
            tokens = _flag(argv, _TOKEN_FLAGS)
            return steps, tokens if tokens is not None else steps + 1
    return None, None


@dataclass
class SweepRun:
    """One run's inputs to the sweep fit; the results store keeps them (analyzer/app/store.py), so that
    `specprof sweep @ID` needs no files."""

    path: str
    steps: int | None  # draft steps from the traced command line (None when it does not say)
    tokens: int | None
    # draft_ns, verify_ns, total_ns: attributed GPU time per cycle under nsys; draft_busy_ns, verify_busy_ns:
    # the phases' GPU-busy time per cycle
    cycles: pl.DataFrame
    accepts: pl.DataFrame  # cycle, request, correct: the accept counts of the cycles the capture holds
    # the accept length `analyze` pairs with the cycle it heads with: its twin's without nsys where it has one
    # (over `twin_accepts`), else the run's under nsys (over `accepts`); or given
    accept_len: float | None
    batch: float | None
    periods: pl.DataFrame | None = None  # index, period: cycle periods without nsys (idle ones left out)
    # draft_ns, verify_ns per cycle of the run without nsys: GPU time between the tracer's CUDA events
    events: pl.DataFrame | None = None
    accept_source: str | None = None  # where accept_len came from
    setup: dict | None = None  # engine, model, tp, draft shape from the traced command line (`setup_of`)
    unaligned: bool = False  # its sidecar did not line up with its trace, so it gave nothing
    plain_step: BaselineStep | None = None  # a K = 0 run's plain-decode step, as `analyze --baseline` takes it
    # cycle, request, correct, twin (its folder): the accept counts of the twin's cycles `periods` are over
    # (None without a twin)
    twin_accepts: pl.DataFrame | None = None

    @property
    def period_ns(self) -> int | None:
        if self.periods is None or not self.periods.height:
            return None
        twins = self.periods["twin"].to_list() if "twin" in self.periods.columns else None
        return int(round(econ.mean_measure(self.periods["period"].to_numpy(), twins).value))


def sweep_run(a: Attribution, data: RunData, check: cc.CrossCheck | None,
              breakdown: CycleBreakdown | None = None) -> SweepRun:
    """The sweep's inputs from the attribution `a` of the run whose files `data` holds (`check`: its
    cross-check, made when it has sidecars; `breakdown`: its headline cycle breakdown, whose decode cycles are
    the sweep's cycles). A run without a sidecar gives its phase times alone: no accept counts, no cycles of a
    run without nsys."""
    sidecars, baseline = data.sidecars, data.baseline
    k, tokens = steps_of(data)
    # (in the cycles' order: the fit's sums then come out the same every time, and equal to a stored run's; over the
    # headline breakdown's decode cycles, when there is one: the sweep's cycle is the breakdown's)
    per_cycle = a.cycle_phases if breakdown is None or breakdown.per_cycle is None else a.cycle_phases.join(
        breakdown.per_cycle.select("cycle"), on="cycle", how="semi")
    wide = per_cycle.group_by("cycle", maintain_order=True).agg(
        draft_ns=pl.col("attributed").filter(pl.col("phase") == "draft").sum(),
        verify_ns=pl.col("attributed").filter(pl.col("phase") == "verify").sum(),
        total_ns=pl.col("attributed").sum(),
        draft_busy_ns=pl.col("gpu_busy").filter(pl.col("phase") == "draft").sum(),
        verify_busy_ns=pl.col("gpu_busy").filter(pl.col("phase") == "verify").sum(),
        extend_busy_ns=pl.col("gpu_busy").filter(pl.col("phase") == "draft_extend").sum())
    if breakdown is not None and breakdown.idle_cycles is not None and breakdown.idle_cycles.height:
        # the idle after a cycle while no request ran is in no cycle (derived/breakdown.py)
        wide = wide.join(breakdown.idle_cycles.rename({"ns": "_idle"}), on="cycle", how="left",
                         maintain_order="left").with_columns(
            total_ns=pl.col("total_ns") - pl.col("_idle").fill_null(0)).drop("_idle")
    cycles = wide.select("draft_ns", "verify_ns", "total_ns", "draft_busy_ns", "verify_busy_ns", "extend_busy_ns")
    plain = None
    if k == 0 and (baseline is not None or sidecars is not None):  # plain decoding: a sweep's baseline
        plain = sidecar_step(baseline, data.path, "sidecar without nsys", sidecars) if baseline is not None \
            else sidecar_step(sidecars, data.path, "sidecar under nsys")
    unaligned = sidecars is not None and bool(a.cycles.height) and check is not None and not cc.aligned(check)
    if sidecars is None or unaligned:  # (a sidecar of another run feeds nothing)
        if unaligned:
            k, tokens = steps_of(RunData(manifest=data.manifest))
        return SweepRun(path=data.path, steps=k, tokens=tokens, cycles=cycles,
                        accepts=pl.DataFrame(schema={"cycle": pl.Int64, "request": pl.Int64, "correct": pl.Int64}),
                        accept_len=None, batch=None, setup=setup_of(RunData(manifest=data.manifest)
                                                                     if unaligned else data),
                        unaligned=unaligned, plain_step=None if unaligned else plain)
    first, last = _aligned(check)
    under = window_measured(sidecars, first, last, False)
    accept_len, batch, source = under.accept_len, under.batch, "sidecar under nsys"
    periods = events = twin_accepts = None
    if baseline is not None:
        # the twin's cycles and accept counts: the measurement `analyze` heads its economics with
        twin = window_measured(baseline, first, last, True)
        keep = twin.cycles.select("file", "index")
        periods = econ.cycle_periods(baseline.cycles, key="file").join(keep, on=["file", "index"], how="semi") \
            .filter(~pl.col("idle")).join(twin.runs, on="file", how="left") \
            .select("index", "period", twin="run")  # twin: the repeated run (RUN/no-nsys, RUN/no-nsys-2, ...)
        twin_accepts = twin.rounds
        accept_len, batch, source = twin.accept_len, twin.batch, "sidecar without nsys"
        ev = baseline.gpu_time.rename({"cycle": "index"}).join(keep, on=["file", "index"], how="semi")
        if not ev.height and data.baseline_ground_truth is not None:
            # the reference engine's own CUDA events of its run without nsys (its measured cycles)
            ev = data.baseline_ground_truth.with_columns(file=pl.lit(0, pl.Int64))
        if ev.height:
            events = ev.group_by("file", "index", maintain_order=True).agg(
                draft_ns=pl.col("ns").filter(pl.col("phase") == "draft").sum(),
                verify_ns=pl.col("ns").filter(pl.col("phase") == "verify").sum(),
                extend_ns=pl.col("ns").filter(pl.col("phase") == "draft_extend").sum()).filter(
                pl.col("verify_ns") > 0).select("draft_ns", "verify_ns", "extend_ns")
    return SweepRun(path=data.path, steps=k, tokens=tokens, cycles=cycles,
                    accepts=under.rounds.select("cycle", "request", "correct"), accept_len=accept_len, batch=batch,
                    periods=periods, events=events, accept_source=source if accept_len is not None else None,
                    setup=setup_of(data), plain_step=plain, twin_accepts=twin_accepts)


def fit_sweep(runs: Iterable[tuple[str, SweepRun]], steps: list[int] = (), max_steps: int | None = None,
              accept: list[float] = (), extrapolate: bool = False, baseline: BaselineStep | None = None,
              allow_mixed: bool = False) -> Sweep:
    """Fit the cost model (derived/sweep.py) over the runs' inputs: `runs` gives (the run as the user named it,
    its inputs), in order; `steps`: the draft steps of each run when the command line does not say; `accept`:
    each run's mean accept length, when its sidecar has no counts (given by the user, or from a server log);
    `extrapolate`: recommend among unmeasured step counts too; `baseline`: the plain-decode step (`--baseline`;
    a K = 0 run among `runs` is one too); `allow_mixed`: fit runs of different setups anyway."""
    run_rows, cycle_rows, count_rows, period_rows, event_rows, extend_rows = [], [], [], [], [], []
    plain, setups = [], []
    run = 0
    unaligned = []
    runs = list(runs)
    # the cycle the sweep pairs each accept length with: the period without nsys when every speculative run has
    # its twin's (as `sweep` fits it), else the attributed cycle under nsys; the accept length and the acceptance
    # per position are then over the same cycles: the twins' or the captures'
    unprofiled = all(sr.periods is not None and sr.periods.height for i, (_, sr) in enumerate(runs)
                     if ((steps[i] if steps else sr.steps) or 0) > 0)
    for i, (path, sr) in enumerate(runs):
        if sr.unaligned:
            unaligned.append(path)
        k, tokens = (steps[i], steps[i] + 1) if steps else (sr.steps, sr.tokens)
        if k is None:
            raise SpecprofError(f"{path}: cannot tell the number of draft steps from the traced command line; "
                                "give --steps K once per run", path)
        if sr.setup is not None:
            setups.append((path, {**sr.setup, "batch": sr.batch}))
        if k == 0:  # plain decoding: the baseline, not a point of the fit
            plain.append((path, sr))
            continue
        if accept and accept[i] is not None:
            sr = SweepRun(**{**sr.__dict__, "accept_len": accept[i], "accept_source": "given"})
        for seen in (sr.accepts, sr.twin_accepts):
            if seen is not None and seen.height and int(seen["correct"].max()) > k:
                raise SpecprofError(f"{path}: a request accepted {int(seen['correct'].max())} draft tokens in one "
                                    f"cycle, more than the {k} draft steps given for this run", path)
        seen = sr.twin_accepts if unprofiled and sr.twin_accepts is not None else \
            sr.accepts.with_columns(twin=pl.lit(None, dtype=pl.Utf8))
        wide = sr.cycles
        if wide.is_empty():
            raise SpecprofError(f"{path}: no `cycle` ranges in the trace: nothing to fit", path)
        cycle_rows.append(wide.select(pl.lit(run, dtype=pl.Int64).alias("run"), "draft_ns", "verify_ns", "total_ns",
                                      "draft_busy_ns", "verify_busy_ns"))
        if sr.events is not None and sr.events.height:
            event_rows.append(sr.events.select(pl.lit(run, dtype=pl.Int64).alias("run"), "draft_ns", "verify_ns"))
            if "extend_ns" in sr.events.columns and sr.events["extend_ns"].null_count() == 0:
                extend_rows.append(sr.events.select(pl.lit(run, dtype=pl.Int64).alias("run"), ns="extend_ns"))
        elif "extend_busy_ns" in wide.columns:
            extend_rows.append(wide.select(pl.lit(run, dtype=pl.Int64).alias("run"), ns="extend_busy_ns"))
        accept_len, accept_source = sr.accept_len, sr.accept_source
        if accept_source == "given":
            if accept_len > k + 1:
                raise SpecprofError(f"{path}: accept length {accept_len} given for K={k}: a cycle accepts at most "
                                    f"K + 1 = {k + 1} tokens per request", path)
        elif seen.height:  # the accept counts of the cycles paired with this run's cycle (`window_measured`'s)
            accept_len = econ.rounds_accept(seen).value
            accept_source = "sidecar without nsys" if unprofiled and sr.twin_accepts is not None else \
                "sidecar under nsys"
        count_rows.append(seen.select(pl.lit(run, dtype=pl.Int64).alias("run"),
                                      pl.lit(k, dtype=pl.Int64).alias("steps"), "cycle", "correct", "twin"))
        if sr.periods is not None:
            twin = pl.col("twin") if "twin" in sr.periods.columns else pl.lit(None, dtype=pl.Utf8)
            period_rows.append(sr.periods.select(pl.lit(run, dtype=pl.Int64).alias("run"), period_ns="period",
                                                 twin=twin))
        means = wide.mean()
        run_rows.append({"run": run, "path": sr.path, "steps": k, "tokens": tokens,
                         "forwards": draft_forwards(sr.setup, k), "cycles": wide.height,
                         "accept_len": accept_len, "accept_source": accept_source, "batch": sr.batch,
                         "rest_ns": int(means["total_ns"][0] - means["draft_ns"][0] - means["verify_ns"][0]),
                         "cycle_ns": int(means["total_ns"][0]), "period_unprofiled_ns": sr.period_ns})
        run += 1
    if setups and not allow_mixed:
        from specprof.analyzer.derived.compare import differences
        differ = differences(setups)
        if differ:
            raise SpecprofError("the runs are not one workload: " + "; ".join(differ) + " (a sweep fits one "
                                "setup at several K; --allow-mixed fits them anyway)")
    if plain:
        if baseline is not None or len(plain) > 1:
            raise SpecprofError("more than one plain-decode baseline: " + ", ".join(
                [p for p, _ in plain] + ([baseline.source] if baseline is not None else [])) + "; give one")
        baseline = plain_baseline(*plain[0])
    # (draft_ns and verify_ns per run come from the sweep, on the basis it fits them on)
    table = pl.DataFrame(run_rows, schema={
        "run": pl.Int64, "path": pl.Utf8, "steps": pl.Int64, "tokens": pl.Int64, "forwards": pl.Int64,
        "cycles": pl.Int64,
        "accept_len": pl.Float64, "accept_source": pl.Utf8, "batch": pl.Float64, "rest_ns": pl.Int64,
        "cycle_ns": pl.Int64, "period_unprofiled_ns": pl.Int64})
    if not run_rows:
        raise SpecprofError("specprof sweep needs speculative runs at two or more step counts; the runs given are "
                            "all plain decoding (K = 0)")
    tree = max((s.get("topk") or 1 for _, s in setups), default=1)
    result = sweep(table, pl.concat(cycle_rows), pl.concat(count_rows), pl.concat(period_rows) if period_rows else None,
                 max_steps, pl.concat(event_rows) if event_rows else None, extrapolate,
                 pl.concat(extend_rows) if len(extend_rows) == len(run_rows) else None,
                 baseline.measure if baseline is not None else None, baseline.source if baseline else None,
                 tree_topk=tree)
    result.notes += [f"{path}: its sidecar does not line up with its trace (the sidecar of another run?): its "
                     "accept counts and cycles feed nothing here" for path in unaligned]
    return result


def plain_baseline(path: str, sr: SweepRun) -> BaselineStep:
    """A K = 0 run among a sweep's runs as its plain-decode baseline: the step `analyze --baseline` takes from its
    files (`SweepRun.plain_step`), else its attributed cycle under nsys (said)."""
    if sr.accept_len is not None and sr.accept_len > 1.0:
        raise SpecprofError(f"{path}: given as K = 0, but its requests accepted draft tokens (accept length "
                            f"{sr.accept_len:.3f}): not a plain decode", path)
    if sr.plain_step is not None:
        return sr.plain_step
    m = econ.mean_measure(sr.cycles["total_ns"].to_numpy())
    where = "attributed GPU time per step under nsys (no sidecar beside it)"
    return BaselineStep(int(round(m.value)), f"{path}: {where}, {m.n} steps", [], sr.batch, m)
