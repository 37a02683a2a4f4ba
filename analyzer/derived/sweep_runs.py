"""The sweep's inputs and fit: each run's inputs to the cost model over K (`SweepRun`, made from its attribution and
files by `sweep_run`; the results store keeps them), and the fit over several runs (`fit_sweep`, derived/sweep.py),
with a K = 0 run among them as the plain-decode baseline (`plain_baseline`). Pure functions of tables.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import polars as pl

from specprof.analyzer.core.attribution import Attribution
from specprof.analyzer.derived import crosscheck as cc
from specprof.analyzer.derived import economics as econ
from specprof.analyzer.derived.baseline_step import sidecar_step
from specprof.analyzer.derived.breakdown import CycleBreakdown
from specprof.analyzer.derived.run_economics import aligned_cycles, foreign_sidecar, settings_of, window_measured
from specprof.analyzer.derived.sweep import Sweep, sweep
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.run_data import BaselineStep, RunData


def draft_forwards(setup: dict | None, steps: int) -> int | None:
    """The draft forward passes a cycle of K draft steps runs, where the engine is known (None where not).
    SGLang's EAGLE worker takes the first draft token from the draft re-extend before it and breaks out of its
    loop before the last step's forward (`EagleDraftWorker.draft_forward`, 0.5.16 and 0.5.23 alike, and the v1
    `EAGLEWorker` before them): K - 1. The reference engine runs one per step: K."""
    engine = (setup or {}).get("engine") or ""
    if "sglang" in engine:
        return max(steps - 1, 0)
    return steps if engine == "reference" else None


@dataclass
class SweepRun:
    """One run's inputs to the sweep fit; the results store keeps them (analyzer/app/store.py), so that
    `specprof sweep @ID` needs no files."""

    path: str
    steps: int | None  # draft steps, as the run's settings say (None when they do not)
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
    setup: dict | None = None  # engine, model, tp, draft shape (model/settings.py `RunSettings.setup`)
    unaligned: bool = False  # its sidecar did not line up with its trace, so it gave nothing
    plain_step: BaselineStep | None = None  # a K = 0 run's plain-decode step, as `analyze --baseline` takes it
    # cycle, request, correct, twin (its folder): the accept counts of the twin's cycles `periods` are over
    # (None without a twin)
    twin_accepts: pl.DataFrame | None = None
    # a run made without nsys alone (`unprofiled_sweep_run`): `cycles` are its CUDA events and periods, not a trace's
    without_nsys: bool = False

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
    k, tokens = data.settings.steps, data.settings.tokens
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
    unaligned = foreign_sidecar(a, data, check)
    if sidecars is None or unaligned:  # (a sidecar of another run feeds nothing)
        settings = settings_of(a, data, check)
        return SweepRun(path=data.path, steps=settings.steps, tokens=settings.tokens, cycles=cycles,
                        accepts=pl.DataFrame(schema={"cycle": pl.Int64, "request": pl.Int64, "correct": pl.Int64}),
                        accept_len=None, batch=None, setup=settings.setup, unaligned=unaligned,
                        plain_step=None if unaligned else plain)
    first, last = aligned_cycles(check)
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
                    setup=data.settings.setup, plain_step=plain, twin_accepts=twin_accepts)


def unprofiled_sweep_run(data: RunData) -> SweepRun:
    """The sweep's inputs of a run made without nsys, from its sidecars alone (`data.sidecars`), measured as a run
    under nsys measures its twin without nsys (`sweep_run`'s `periods`, `events`, `twin_accepts`, over the cycles of
    the sidecar's own capture window): per cycle with CUDA events, its draft and verify between their events and
    its period (`cycles`: draft_ns, verify_ns, total_ns the period; the busy columns the events')."""
    sides = data.sidecars
    k, tokens = data.settings.steps, data.settings.tokens
    twin = window_measured(sides, None, None, True)
    keep = twin.cycles.select("file", "index")
    periods = econ.cycle_periods(sides.cycles, key="file").join(keep, on=["file", "index"], how="semi") \
        .filter(~pl.col("idle")).join(twin.runs, on="file", how="left").select("file", "index", "period", twin="run")
    ev = sides.gpu_time.rename({"cycle": "index"}).join(keep, on=["file", "index"], how="semi")
    wide = ev.group_by("file", "index", maintain_order=True).agg(
        draft_ns=pl.col("ns").filter(pl.col("phase") == "draft").sum(),
        verify_ns=pl.col("ns").filter(pl.col("phase") == "verify").sum(),
        extend_ns=pl.col("ns").filter(pl.col("phase") == "draft_extend").sum()).filter(pl.col("verify_ns") > 0)
    wide = wide.join(periods.select("file", "index", "period"), on=["file", "index"], how="inner")
    cycles = wide.select("draft_ns", "verify_ns", total_ns="period", draft_busy_ns="draft_ns",
                         verify_busy_ns="verify_ns", extend_busy_ns="extend_ns")
    plain = sidecar_step(sides, data.path, "sidecar without nsys") if k == 0 else None
    return SweepRun(path=data.path, steps=k, tokens=tokens, cycles=cycles,
                    accepts=twin.rounds.select("cycle", "request", "correct"), accept_len=twin.accept_len,
                    batch=twin.batch, periods=periods.select("index", "period", "twin"),
                    events=wide.select("draft_ns", "verify_ns", "extend_ns") if wide.height else None,
                    accept_source="sidecar without nsys" if twin.accept_len is not None else None,
                    setup=data.settings.setup, plain_step=plain, twin_accepts=twin.rounds, without_nsys=True)


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
    alone = [sr.without_nsys for _, sr in runs]
    if any(alone) and not all(alone):
        raise SpecprofError("runs made without nsys and captures under nsys in one sweep: their cycles measure "
                            "different things; give the runs without nsys (RUN/no-nsys) or the captures alone")
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
                 tree_topk=tree, cycle_source="CUDA events and cycle period without nsys" if all(alone) else None)
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
