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
from analyzer.derived.ranks import per_rank, sidecar_ranks
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


def baseline_step(path: str) -> tuple[int, str, list[str], float | None]:
    """The plain-decode step time of a non-speculative run: (mean ns per step, where from, notes, mean requests
    per step or None when unknown).

    A sidecar file, a trace file, or a run directory (its `no-nsys/` sidecars first: no profiler; then its
    sidecars; then its trace's `cycle` ranges). A step is one traced decode cycle (SGLang without speculation:
    `cycle` > `decode`; the reference engine at `--steps 0`: one plain decode step), measured start to start,
    over the sidecar's capture window when it has one."""
    notes: list[str] = []
    if path.endswith(".jsonl") and os.path.isfile(path):
        paths, where = [path], "sidecar"
    elif os.path.isdir(path) and sc.find(os.path.join(path, BASELINE_DIR)):
        paths, where = sc.find(os.path.join(path, BASELINE_DIR)), "sidecar without nsys"
    elif os.path.isdir(path) and sc.find(path):
        paths, where = sc.find(path), "sidecar under nsys"
    else:
        trace = load_trace(path)
        cyc = trace.ranges.filter(pl.col("name") == cc.CYCLE).sort("pid", "start").with_columns(
            index=pl.int_range(pl.len()).over("pid"))
        mean, n, _ = econ.mean_period(cyc)
        if mean is None:
            raise SpecprofError(f"{path}: no two consecutive `cycle` ranges: no step time to take as baseline",
                                path)
        return mean, f"{path}: trace cycle ranges under nsys, {n} steps", notes, None
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
                  notes: list[str]) -> econ.Economics | None:
    """Estimates from the unprofiled sidecar (headline), the profiled sidecar, or (no sidecar, a baseline given)
    the trace's cycles with the accept length unknown. None when there is nothing to estimate."""
    rows = []
    under = cc.profiler_name(a.trace)
    if sidecars is not None:
        first, last = _aligned(check)
        window = cc.window_cycles(sidecars, first, last)
        if baseline is not None:
            base = cc.window_cycles(baseline, first, last)
            period, n, _ = econ.mean_period(baseline.cycles, "file", keep=base)
            accept, batch, _ = econ.accept_stats(base)
            rows.append(econ.estimate(f"sidecar without {under}", False, n, period, accept, batch, baseline_ns))
        period, n, _ = econ.mean_period(sidecars.cycles, "file", keep=window)
        accept, batch, _ = econ.accept_stats(window)
        rows.append(econ.estimate(f"sidecar under {under}", True, n, period, accept, batch, baseline_ns))
    elif a.cycles.height and baseline_ns is not None:  # no sidecar: only with a baseline is there anything to say
        period, n, _ = econ.mean_period(a.cycles)
        rows.append(econ.estimate(f"trace cycle ranges under {under}", True, n, period, None, None, baseline_ns))
        notes.append("no sidecar: the accept length is unknown (the sidecar carries the accept counts)")
    if not rows:
        return None
    return econ.economics(rows, baseline_ns, baseline_source, notes)


def enrich(a: Attribution, files: RunFiles, server_log: str | None = None, baseline_run: str | None = None,
           baseline_ms: float | None = None, log_interval: int | None = None) -> Analysis:
    """The Analysis of the attribution `a`: with the per-rank results, and the cross-check and the economics where
    the data for them is present. `log_interval` None: the server's own --decode-log-interval, read from its
    command line in the sidecar's header, else SGLang's default."""
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
        baseline_ns, baseline_source, more, baseline_batch = baseline_step(baseline_run)
        econ_notes.extend(more)
    economics = economics_for(a, sidecars, baseline, check, baseline_ns, baseline_source, econ_notes)
    head = economics.headline if economics is not None else None
    if head is not None and head["batch"] is not None and baseline_batch is not None \
            and abs(baseline_batch - head["batch"]) > 0.01 * head["batch"]:
        economics.notes.append(f"the baseline ran {baseline_batch:g} requests per step, this run {head['batch']:g} "
                               "per cycle: a step time depends on the batch, so the speedup compares unlike runs")
    ranks = per_rank(a, sidecar_ranks(sidecars.files if sidecars is not None else None))
    return Analysis.of(a, crosscheck=check, economics=economics, ranks=ranks)


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
    cycles: pl.DataFrame  # draft_ns, verify_ns, total_ns: attributed GPU time per cycle under nsys
    accepts: pl.DataFrame  # cycle, request, correct: the accept counts of the cycles the capture holds
    accept_len: float | None
    batch: float | None
    periods: pl.DataFrame | None = None  # index, period: cycle periods without nsys (idle ones left out)

    @property
    def period_ns(self) -> int | None:
        if self.periods is None or not self.periods.height:
            return None
        return int(round(self.periods["period"].mean()))


def sweep_run(files: RunFiles, a: Attribution, sidecars: sc.Sidecars, check: cc.CrossCheck | None = None) -> SweepRun:
    """The sweep's inputs from an analysed run and its sidecars (`check`: the run's cross-check, when made)."""
    baseline = _sidecars(files.baseline)
    check = check if check is not None else cc.crosscheck(a.trace, sidecars)
    k, tokens = steps_of(files, sidecars)
    first, last = _aligned(check)
    window = cc.window_cycles(sidecars, first, last)
    seen = sidecars.accepts.join(window.select("file", cycle="index"), on=["file", "cycle"], how="semi")
    accept, batch, _ = econ.accept_stats(window)
    # (in the cycles' order: the fit's sums then come out the same every time, and equal to a stored run's)
    wide = a.cycle_phases.group_by("cycle", maintain_order=True).agg(
        draft_ns=pl.col("attributed").filter(pl.col("phase") == "draft").sum(),
        verify_ns=pl.col("attributed").filter(pl.col("phase") == "verify").sum(),
        total_ns=pl.col("attributed").sum())
    periods = None
    if baseline is not None:
        keep = cc.window_cycles(baseline, window["index"].min(), window["index"].max()).select("file", "index")
        periods = econ.cycle_periods(baseline.cycles, key="file").join(keep, on=["file", "index"], how="semi") \
            .filter(~pl.col("idle")).select("index", "period")
    return SweepRun(path=files.path, steps=k, tokens=tokens,
                    cycles=wide.select("draft_ns", "verify_ns", "total_ns"),
                    accepts=seen.select("cycle", "request", "correct"), accept_len=accept, batch=batch,
                    periods=periods)


def fit_sweep(runs: Iterable[tuple[str, SweepRun]], steps: list[int] = (), max_steps: int | None = None) -> Sweep:
    """Fit the cost model (derived/sweep.py) over the runs' inputs: `runs` gives (the run as the user named it,
    its inputs), in order; `steps`: the draft steps of each run when the command line does not say."""
    run_rows, cycle_rows, count_rows, period_rows = [], [], [], []
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
        cycle_rows.append(wide.select(pl.lit(run, dtype=pl.Int64).alias("run"), "draft_ns", "verify_ns", "total_ns"))
        count_rows.append(seen.select(pl.lit(run, dtype=pl.Int64).alias("run"),
                                      pl.lit(k, dtype=pl.Int64).alias("steps"), "correct"))
        if sr.periods is not None:
            period_rows.append(sr.periods.select(pl.lit(run, dtype=pl.Int64).alias("run"), period_ns="period"))
        means = wide.mean()
        run_rows.append({"run": run, "path": sr.path, "steps": k, "tokens": tokens, "cycles": wide.height,
                         "accept_len": sr.accept_len, "batch": sr.batch, "draft_ns": int(means["draft_ns"][0]),
                         "verify_ns": int(means["verify_ns"][0]), "rest_ns": int(means["total_ns"][0]
                                                                                  - means["draft_ns"][0]
                                                                                  - means["verify_ns"][0]),
                         "cycle_ns": int(means["total_ns"][0]), "period_unprofiled_ns": sr.period_ns})
    table = pl.DataFrame(run_rows, schema={
        "run": pl.Int64, "path": pl.Utf8, "steps": pl.Int64, "tokens": pl.Int64, "cycles": pl.Int64,
        "accept_len": pl.Float64, "batch": pl.Float64, "draft_ns": pl.Int64, "verify_ns": pl.Int64,
        "rest_ns": pl.Int64, "cycle_ns": pl.Int64, "period_unprofiled_ns": pl.Int64})
    return sweep(table, pl.concat(cycle_rows), pl.concat(count_rows), pl.concat(period_rows) if period_rows else None,
                 max_steps)
