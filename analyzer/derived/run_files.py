"""A run's files (readers/inputs.py `RunFiles`: the tracer's sidecars, the run without nsys, ground truth, a
server log, a baseline run) -> what they add to the attribution of its trace: the cross-check, the economics
and the per-rank results (`enrich`, which makes the `Analysis`), and the sweep's inputs (`sweep_run`).

This module reads the files through the readers and calls the pure analyses (crosscheck, economics, ranks);
it prints nothing.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

import polars as pl

from analyzer.core.attribution import Attribution
from analyzer.derived import crosscheck as cc
from analyzer.derived import economics as econ
from analyzer.derived.analysis import Analysis
from analyzer.derived import breakdown as bd
from analyzer.derived.breakdown import CycleBreakdown
from analyzer.derived.ranks import focus, per_rank, sidecar_ranks, unprofiled_events
from analyzer.derived.sweep import Sweep, sweep
from analyzer.errors import SpecprofError
from analyzer.readers import ground_truth as gt
from analyzer.readers import sidecar as sc
from analyzer.readers.inputs import BASELINE_DIR, RunFiles, manifest
from analyzer.readers.load import load_trace
from analyzer.readers.sglang_log import read_server_log


def _sidecars(paths: list[str]) -> sc.Sidecars | None:
    return sc.read_sidecars(paths) if paths else None


def _aligned(check: cc.CrossCheck | None) -> tuple[int | None, int | None]:
    """The sidecar indices of the first and last cycle the capture holds (None, None when not aligned)."""
    if check is not None:
        m = check.alignment.filter(pl.col("matched_cycles") > 0)
        if m.height:
            return int(m["first_index"].min()), int(m["last_index"].max())
    return None, None


def baseline_step(path: str, step_range: str | None = None) -> tuple[int, str, list[str], float | None]:
    """The plain-decode step time of a non-speculative run: (mean ns per step, where from, notes, mean requests
    per step or None when unknown).

    A sidecar file, a trace file, or a run directory (its `no-nsys/` sidecars first: no profiler; then its
    sidecars; then its trace's ranges). A step is one traced decode cycle (SGLang without speculation:
    `cycle` > `decode`; the reference engine at `--steps 0`: one plain decode step), measured start to start,
    over the sidecar's capture window when it has one. In a trace without a sidecar (any nsys or Kineto
    capture), a step is one range named `step_range` (default `cycle`, then `decode`)."""
    notes: list[str] = []
    if path.endswith(".jsonl") and os.path.isfile(path):
        paths, where = [path], "sidecar"
    elif os.path.isdir(path) and sc.find(os.path.join(path, BASELINE_DIR)):
        paths, where = sc.find(os.path.join(path, BASELINE_DIR)), "sidecar without nsys"
    elif os.path.isdir(path) and sc.find(path):
        paths, where = sc.find(path), "sidecar under nsys"
    else:
        trace = load_trace(path)
        names = [step_range] if step_range else [cc.CYCLE, "decode"]
        for name in names:
            steps = trace.ranges.filter(pl.col("name") == name)
            if steps.height >= 2:
                break
        cyc = steps.sort("pid", "tid", "start").with_columns(
            pid=pl.col("pid") * (1 << 32) + pl.col("tid"), index=pl.int_range(pl.len()).over("pid", "tid"))
        mean, n, _ = econ.mean_period(cyc)
        if mean is None:
            tried = " or ".join(f"`{name}`" for name in names)
            raise SpecprofError(f"{path}: no two consecutive {tried} ranges on one thread: no step time to take as "
                                "baseline; name the range that marks one decode step with --baseline-range NAME",
                                path)
        under = cc.profiler_name(trace)
        return mean, f"{path}: trace `{name}` ranges under {under}, {n} steps", notes, None
    sides = sc.read_sidecars(paths)
    window = cc.window_cycles(sides, None, None)
    mean, n, _ = econ.mean_period(sides.cycles, key="file", keep=window)
    if mean is None:
        raise SpecprofError(f"{path}: no two consecutive cycles in the sidecar: no step time to take as baseline",
                            path)
    accept, batch, _ = econ.accept_stats(window)
    if batch is None:  # a plain decode has no accept counts; its cycles still know their batch
        sizes = window.filter(pl.col("decode") & pl.col("batch_size").is_not_null())["batch_size"]
        batch = float(sizes.mean()) if sizes.len() else None
    if cc.capture_windows(sides).height:
        where += ", its capture window"
    if accept is not None and accept > 1.0:
        notes.append(f"the baseline run {path} accepted draft tokens (accept length {accept:.3f}): it is "
                     "speculative, not a plain decode; its cycle is not a plain-decode step")
    source = f"{path}: {where}, {n} steps" + (f" of {batch:g} requests" if batch is not None else "")
    return mean, source, notes, batch


def economics_for(a: Attribution, sidecars: sc.Sidecars | None, baseline: sc.Sidecars | None,
                  check: cc.CrossCheck | None, baseline_ns: int | None, baseline_source: str | None,
                  notes: list[str], steps: int | None = None, breakdown: CycleBreakdown | None = None,
                  run: str | None = None) -> econ.Economics | None:
    """Estimates from the unprofiled sidecar (headline), the profiled sidecar, or (no sidecar, a baseline given)
    the trace's cycles with the accept length unknown. None when there is nothing to estimate. `steps`: the
    draft steps K (the most a cycle can accept is K + 1); `breakdown`: the decode cycle's, for how much of it the
    GPU waited on the host; `run`: the run's path, for the hint of how to measure it without the profiler."""
    rows = []
    under = cc.profiler_name(a.trace)
    if sidecars is not None:
        first, last = _aligned(check)
        window = cc.window_cycles(sidecars, first, last)
        if baseline is not None:
            base = cc.window_cycles(baseline, first, last)
            period, n, _ = econ.mean_period(baseline.cycles, "file", keep=base)
            accept, batch, _ = econ.accept_stats(base)
            rows.append(econ.estimate(f"sidecar without {under}", False, n, period, accept, batch, baseline_ns,
                                      steps))
        period, n, _ = econ.mean_period(sidecars.cycles, "file", keep=window)
        accept, batch, _ = econ.accept_stats(window)
        rows.append(econ.estimate(f"sidecar under {under}", True, n, period, accept, batch, baseline_ns, steps))
    elif a.cycles.height and baseline_ns is not None:  # no sidecar: only with a baseline is there anything to say
        period, n, _ = econ.mean_period(a.cycles)
        rows.append(econ.estimate(f"trace cycle ranges under {under}", True, n, period, None, None, baseline_ns,
                                  steps))
        notes.append("no sidecar: the accept length is unknown (the sidecar carries the accept counts)")
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
            f"analyze {run} again" if run and os.path.isdir(run) else
            "`specprof capture --no-nsys -o RUN/no-nsys -- <the same command>` (docs/capture.md)")
    return econ.economics(rows, baseline_ns, baseline_source, notes, waits, under, twin)


def enrich(a: Attribution, files: RunFiles, server_log: str | None = None, baseline_run: str | None = None,
           baseline_ms: float | None = None, log_interval: int | None = None, steps: int | None = None,
           baseline_range: str | None = None) -> Analysis:
    """The Analysis of the attribution `a`: with the per-rank results, and the cross-check and the economics where
    the data for them is present. `log_interval` None: the server's own --decode-log-interval, read from its
    command line in the sidecar's header, else SGLang's default. `steps`: the draft steps K, when the traced
    command line does not say; `baseline_range`: the range that marks one decode step in a baseline trace
    without a sidecar."""
    sidecars = _sidecars(files.sidecars)
    baseline = _sidecars(files.baseline)
    found_log = server_log is None and files.server_log is not None and sidecars is not None \
        and sidecars.accepts.height > 0  # a log is compared with accept counts: a speculative run's
    server_log = server_log or (files.server_log if found_log else None)
    log = read_server_log(server_log) if server_log else None
    check = None
    if log is not None and log_interval is None:
        given = [_flag(h.get("argv") or [], _LOG_INTERVAL_FLAGS) for h in sidecars.headers]
        log_interval = next((n for n in given if n), None) or cc.DEFAULT_LOG_INTERVAL
    if sidecars is not None:
        check = cc.crosscheck(
            a.trace, sidecars, baseline,
            gt.read_ground_truth(files.ground_truth) if files.ground_truth and baseline else None,
            gt.read_ground_truth(files.baseline_ground_truth) if files.baseline_ground_truth else None,
            log, log_interval)
        if files.baseline_auto:
            check.notes.insert(0, f"baseline (without nsys) found in {os.path.join(files.path, BASELINE_DIR)}")
        if found_log:
            check.notes.insert(0, f"server log found: {server_log}")
        check.ground_truth = cc.ground_truth_check(a.ops, a.charges, a.cycles, check, sidecars)
    elif log is not None:
        raise SpecprofError(f"{server_log}: the server log is compared with the sidecar's accept counts: give the "
                            "sidecar too (--sidecar FILE, or a run directory)", server_log)
    econ_notes: list[str] = []
    baseline_ns = baseline_source = baseline_batch = None
    if baseline_ms is not None:
        if not 0 < baseline_ms < math.inf:
            raise SpecprofError(f"--baseline-ms must be a positive number of milliseconds, not {baseline_ms}")
        baseline_ns, baseline_source = int(round(baseline_ms * 1e6)), "given with --baseline-ms"
    elif baseline_run is not None:
        baseline_ns, baseline_source, more, baseline_batch = baseline_step(baseline_run, baseline_range)
        econ_notes.extend(more)
    if steps is None:
        steps = steps_of(files, sidecars)[0]
    ranks = per_rank(a, sidecar_ranks(sidecars.files if sidecars is not None else None))
    events, period = unprofiled_events(check.inflation if check is not None else None)
    every = bd.breakdowns(a, ranks.ranks)
    # With several ranks, a phase's events are one rank's only where they come from the reference engine's ground
    # truth (rank 0's file); the sidecars' events are pooled over the ranks, which no rank's breakdown may show.
    # The period without the profiler is every rank's.
    pooled = sidecars is not None and baseline is not None and bool(sidecars.gpu_time.height) \
        and bool(baseline.gpu_time.height)
    per_rank_breakdowns = [bd.with_unprofiled(b, events if len(every) < 2 or (b.rank == 0 and not pooled) else None,
                                              period) for b in every]
    top = ranks.straggler()
    breakdown = bd.headline(per_rank_breakdowns, top["rank"] if top is not None else None)
    ranks.breakdowns = per_rank_breakdowns
    economics = economics_for(a, sidecars, baseline, check, baseline_ns, baseline_source, econ_notes, steps,
                              breakdown, files.path)
    head = economics.headline if economics is not None else None
    if head is not None and head["batch"] is not None and baseline_batch is not None \
            and abs(baseline_batch - head["batch"]) > 0.01 * head["batch"]:
        economics.notes.append(f"the baseline ran {baseline_batch:g} requests per step, this run {head['batch']:g} "
                               "per cycle: a step time depends on the batch, so the speedup compares unlike runs")
    # Several ranks: the tables every renderer shows are the headline rank's (the others are in `ranks`).
    shown = focus(a, ranks, breakdown.rank if breakdown is not None else None)
    return Analysis.of(shown, crosscheck=check, economics=economics, ranks=ranks, cycle_breakdown=breakdown)


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


def steps_of(files: RunFiles, sidecars: sc.Sidecars | None) -> tuple[int | None, int | None]:
    """(draft steps, verify tokens) from the traced command line: the sidecar header's argv, else the run's
    manifest.json. Tokens default to steps + 1 (a chain draft); SGLang's --speculative-num-draft-tokens wins."""
    argvs = [h.get("argv") for h in (sidecars.headers if sidecars else [])]
    recorded = manifest(files.path) if os.path.isdir(files.path) else None
    if recorded is not None:
        argvs.append(recorded.get("command"))
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
    accept_len: float | None
    batch: float | None
    periods: pl.DataFrame | None = None  # index, period: cycle periods without nsys (idle ones left out)
    # draft_ns, verify_ns per cycle of the run without nsys: GPU time between the tracer's CUDA events
    events: pl.DataFrame | None = None
    accept_source: str | None = None  # where accept_len came from

    @property
    def period_ns(self) -> int | None:
        if self.periods is None or not self.periods.height:
            return None
        return int(round(self.periods["period"].mean()))


def sweep_run(files: RunFiles, a: Attribution, sidecars: sc.Sidecars | None,
              check: cc.CrossCheck | None = None) -> SweepRun:
    """The sweep's inputs from an analysed run and its sidecars (`check`: the run's cross-check, when made). A
    run without a sidecar gives its phase times alone: no accept counts, no cycles of a run without nsys."""
    baseline = _sidecars(files.baseline)
    k, tokens = steps_of(files, sidecars)
    # (in the cycles' order: the fit's sums then come out the same every time, and equal to a stored run's; over the
    # headline breakdown's decode cycles, when there is one: the sweep's cycle is the breakdown's)
    b = getattr(a, "cycle_breakdown", None)
    per_cycle = a.cycle_phases if b is None or b.per_cycle is None else a.cycle_phases.join(
        b.per_cycle.select("cycle"), on="cycle", how="semi")
    wide = per_cycle.group_by("cycle", maintain_order=True).agg(
        draft_ns=pl.col("attributed").filter(pl.col("phase") == "draft").sum(),
        verify_ns=pl.col("attributed").filter(pl.col("phase") == "verify").sum(),
        total_ns=pl.col("attributed").sum(),
        draft_busy_ns=pl.col("gpu_busy").filter(pl.col("phase") == "draft").sum(),
        verify_busy_ns=pl.col("gpu_busy").filter(pl.col("phase") == "verify").sum())
    cycles = wide.select("draft_ns", "verify_ns", "total_ns", "draft_busy_ns", "verify_busy_ns")
    if sidecars is None:
        return SweepRun(path=files.path, steps=k, tokens=tokens, cycles=cycles,
                        accepts=pl.DataFrame(schema={"cycle": pl.Int64, "request": pl.Int64, "correct": pl.Int64}),
                        accept_len=None, batch=None)
    check = check if check is not None else cc.crosscheck(a.trace, sidecars)
    first, last = _aligned(check)
    window = cc.window_cycles(sidecars, first, last)
    seen = sidecars.accepts.join(window.select("file", cycle="index"), on=["file", "cycle"], how="semi")
    accept, batch, _ = econ.accept_stats(window)
    periods = events = None
    if baseline is not None:
        keep = cc.window_cycles(baseline, window["index"].min(), window["index"].max()).select("file", "index")
        periods = econ.cycle_periods(baseline.cycles, key="file").join(keep, on=["file", "index"], how="semi") \
            .filter(~pl.col("idle")).select("index", "period")
        ev = baseline.gpu_time.rename({"cycle": "index"}).join(keep, on=["file", "index"], how="semi")
        if not ev.height and files.baseline_ground_truth:
            # the reference engine's own CUDA events of its run without nsys (its measured cycles)
            ev = gt.read_ground_truth(files.baseline_ground_truth).with_columns(file=pl.lit(0, pl.Int64))
        if ev.height:
            events = ev.group_by("file", "index", maintain_order=True).agg(
                draft_ns=pl.col("ns").filter(pl.col("phase") == "draft").sum(),
                verify_ns=pl.col("ns").filter(pl.col("phase") == "verify").sum()).filter(
                pl.col("verify_ns") > 0).select("draft_ns", "verify_ns")
    return SweepRun(path=files.path, steps=k, tokens=tokens, cycles=cycles,
                    accepts=seen.select("cycle", "request", "correct"), accept_len=accept, batch=batch,
                    periods=periods, events=events, accept_source="sidecar" if accept is not None else None)


def fit_sweep(runs: Iterable[tuple[str, SweepRun]], steps: list[int] = (), max_steps: int | None = None,
              accept: list[float] = (), extrapolate: bool = False) -> Sweep:
    """Fit the cost model (derived/sweep.py) over the runs' inputs: `runs` gives (the run as the user named it,
    its inputs), in order; `steps`: the draft steps of each run when the command line does not say; `accept`:
    each run's mean accept length, when its sidecar has no counts (given by the user, or from a server log);
    `extrapolate`: recommend among unmeasured step counts too."""
    run_rows, cycle_rows, count_rows, period_rows, event_rows = [], [], [], [], []
    for run, (path, sr) in enumerate(runs):
        k, tokens = (steps[run], steps[run] + 1) if steps else (sr.steps, sr.tokens)
        if k is None:
            raise SpecprofError(f"{path}: cannot tell the number of draft steps from the traced command line; "
                                "give --steps K once per run", path)
        seen = sr.accepts
        if seen.height and int(seen["correct"].max()) > k:
            raise SpecprofError(f"{path}: a request accepted {int(seen['correct'].max())} draft tokens in one cycle, "
                                f"more than the {k} draft steps given for this run", path)
        wide = sr.cycles
        if wide.is_empty():
            raise SpecprofError(f"{path}: no `cycle` ranges in the trace: nothing to fit", path)
        cycle_rows.append(wide.select(pl.lit(run, dtype=pl.Int64).alias("run"), "draft_ns", "verify_ns", "total_ns",
                                      "draft_busy_ns", "verify_busy_ns"))
        if sr.events is not None and sr.events.height:
            event_rows.append(sr.events.select(pl.lit(run, dtype=pl.Int64).alias("run"), "draft_ns", "verify_ns"))
        accept_len, accept_source = sr.accept_len, sr.accept_source
        if accept:
            accept_len, accept_source = accept[run], "given"
            if accept_len > k + 1:
                raise SpecprofError(f"{path}: accept length {accept_len} given for K={k}: a cycle accepts at most "
                                    f"K + 1 = {k + 1} tokens per request", path)
        count_rows.append(seen.select(pl.lit(run, dtype=pl.Int64).alias("run"),
                                      pl.lit(k, dtype=pl.Int64).alias("steps"), "correct"))
        if sr.periods is not None:
            period_rows.append(sr.periods.select(pl.lit(run, dtype=pl.Int64).alias("run"), period_ns="period"))
        means = wide.mean()
        run_rows.append({"run": run, "path": sr.path, "steps": k, "tokens": tokens, "cycles": wide.height,
                         "accept_len": accept_len, "accept_source": accept_source, "batch": sr.batch,
                         "rest_ns": int(means["total_ns"][0] - means["draft_ns"][0] - means["verify_ns"][0]),
                         "cycle_ns": int(means["total_ns"][0]), "period_unprofiled_ns": sr.period_ns})
    # (draft_ns and verify_ns per run come from the sweep, on the basis it fits them on)
    table = pl.DataFrame(run_rows, schema={
        "run": pl.Int64, "path": pl.Utf8, "steps": pl.Int64, "tokens": pl.Int64, "cycles": pl.Int64,
        "accept_len": pl.Float64, "accept_source": pl.Utf8, "batch": pl.Float64, "rest_ns": pl.Int64,
        "cycle_ns": pl.Int64, "period_unprofiled_ns": pl.Int64})
    return sweep(table, pl.concat(cycle_rows), pl.concat(count_rows), pl.concat(period_rows) if period_rows else None,
                 max_steps, pl.concat(event_rows) if event_rows else None, extrapolate)
