"""`Analysis`: the attribution of one trace with what its run's other files add to it: every value a renderer shows
(schema `specprof.analysis/3`, docs/json.md), made once, before anything is rendered (`analyse`).

`analyse(attribution, data)` makes, in this order and each inside its progress step: the cross-check, the per-rank
results with each rank's cycle breakdown, the headline breakdown, the headline rank's attribution (`shown`), the
draft's shape, the economics, the per-position acceptance and the levers, the synchronize-timer estimate, and the views every renderer shows beside the tables
(derived/views.py: the phases' shares and per-instance times, the sums, the breakdown's totals). An `Analysis`
holds these values and computes nothing more: its fields are plain values, and every table and field of the
attribution reads as an attribute of its own (`a.phases`, `a.ops`, `a.trace`, `a.segments`, ...); with several
ranks, the per-phase and per-cycle tables (`phases`, `categories`, `cycles`, `cycle_phases`) are the headline
rank's (derived/ranks.py `focus`).

A command that shows less makes less: `pace` (a comparison: the headline breakdown from the trace alone, no file
of the run read) and `sweep_input` (the sweep: the cross-check, the breakdown and the sweep's inputs, no
economics). app/run.py's `Run` reads a run's files and calls these; `analyse(attribute(trace))` is the analysis
of a trace alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import polars as pl

from specprof.analyzer import progress
from specprof.analyzer.core.attribution import Attribution
from specprof.analyzer.derived import breakdown as bd
from specprof.analyzer.derived import levers as lv
from specprof.analyzer.derived.answer import answer
from specprof.analyzer.derived import views
from specprof.analyzer.derived.acceptance import Acceptance
from specprof.analyzer.derived.breakdown import CycleBreakdown
from specprof.analyzer.derived.crosscheck import (ALIGNMENT_SCHEMA, DEFAULT_LOG_INTERVAL, consistency,
                                                  PAIRS_SCHEMA, CrossCheck, crosscheck_of, profiler_name,
                                                  reconcile_accept, reference_events, unprofiled_times)
from specprof.analyzer.derived.draft_shape import DraftShape
from specprof.analyzer.derived.economics import Economics
from specprof.analyzer.derived.ranks import Ranks, focus, per_rank, sidecar_ranks, unprofiled_events
from specprof.analyzer.derived.run_economics import draft_shape_of, economics_of
from specprof.analyzer.derived.sweep_runs import SweepRun, sweep_run
from specprof.analyzer.derived.sync_calls import SyncCalls, sync_calls
from specprof.analyzer.derived.sync_timers import SyncTimerEstimate, sync_timer_estimate
from specprof.analyzer.derived.whole_run import WholeRun, whole_run_of
from specprof.analyzer.model.run_data import RunData

# The attribution's tables that are one rank's with several ranks (the headline rank's: `shown`).
PER_RANK_TABLES = ("phases", "categories", "cycles", "cycle_phases")


@dataclass(frozen=True, eq=False, repr=False)
class Analysis:
    """One trace's attribution, its run's parsed files, and every result made of them (`analyse`); or a run without
    nsys alone, its sidecars and files and what they give (`analyse_sidecars`): no attribution (None, as `ranks`,
    `shown`, `sync_timers`, `sync_calls`, `phase_rows` and `totals`), the breakdown from its CUDA events, and `needs_nsys`."""

    attribution: Attribution | None
    data: RunData
    # the cross-check against the tracer's sidecar and the profiler's inflation (docs/crosscheck.md): None without a
    # sidecar
    crosscheck: CrossCheck | None
    # per-rank attribution, skew across ranks, the communication wait/transfer split (docs/multirank.md), and each
    # rank's cycle breakdown with the run without the profiler beside it (`breakdowns`)
    ranks: Ranks
    # where one decode cycle goes, phase by phase, on the stream the cycle runs on, of the rank that sets the pace
    # (derived/breakdown.py): None with fewer than two cycles
    cycle_breakdown: CycleBreakdown | None
    shown: Attribution  # the attribution whose per-phase and per-cycle tables are the headline rank's
    # the draft's shape, chain or tree, from the run's settings (derived/run_economics.py `draft_shape_of`);
    # `DraftShape.kind` None for a run that does not draft
    draft_shape: DraftShape
    economics: Economics | None  # does speculation pay (docs/economics.md): None without a sidecar or a baseline
    # per-position acceptance of the economics' headline request-rounds (derived/acceptance.py), one per batch-size
    # group and K where the run spans several: empty for a run that does not draft or has no accept counts
    acceptance: list[Acceptance]
    # what each lever would give (derived/levers.py), from the economics' headline (one per batch-size group and K
    # where the run spans several): empty without a cycle and an accept length, or for a run that does not draft
    levers: list[lv.Levers]
    # what synchronize timers at every phase boundary would add (derived/sync_timers.py): None without two
    # consecutive cycles with phases
    sync_timers: SyncTimerEstimate | None
    # the capture's own synchronize-class calls, per phase, and one call's own cost (derived/sync_calls.py): None
    # without any
    sync_calls: SyncCalls | None
    phase_rows: pl.DataFrame  # the phase table with its per-instance times, shares and top busy categories
    totals: dict  # the sums the header and the report's tiles show (views.totals)
    breakdown_summary: dict | None  # the headline breakdown's figures beyond its tables: None without one
    notes: list[str]  # the attribution's notes, then the run's settings' (a value in its files not taken)
    # the workload as its client saw it, beside the economics' steady state (derived/whole_run.py): None without the
    # run's client records
    whole_run: WholeRun | None = None
    # the answer first: what the summary at the top shows, picked from the results above (derived/answer.py)
    answer: dict | None = None
    # a run without nsys: the one line that says what needs a capture under nsys (None: a trace was analysed)
    needs_nsys: str | None = None

    @property
    def traced(self) -> bool:
        """Whether a trace was analysed (else a run without nsys alone: its sidecars)."""
        return self.attribution is not None


def analyse(attribution: Attribution, data: RunData | None = None,
            sync_timers: Callable[[Attribution], SyncTimerEstimate | None] | None = None) -> Analysis:
    """Every result of the attribution `attribution` with its run's parsed files `data` (none: a trace alone);
    `sync_timers`: how the synchronize-timer estimate is made (app/analyze.py's keeps it in the cache), else here."""
    data = data if data is not None else RunData()
    check = checked(attribution, data)
    ranks = ranked(attribution, data, check)
    breakdown = headline(ranks)
    shown = focus(attribution, ranks, breakdown.rank if breakdown is not None else None)
    shape = draft_shape_of(attribution, data, check)
    with progress.step("the economics"):
        economics = economics_of(attribution, data, check, breakdown)
    drafts = economics is not None and shape.kind is not None
    acceptance, levers = lv.of_economics(economics, breakdown, shape.steps, profiler_name(attribution.trace)) \
        if drafts else ([], [])
    sync = (sync_timers or estimate_sync_timers)(attribution)
    bsum = None if breakdown is None else views.breakdown_summary(breakdown)
    return Analysis(attribution=attribution, data=data, crosscheck=check, ranks=ranks, cycle_breakdown=breakdown,
                    shown=shown, draft_shape=shape, economics=economics, acceptance=acceptance, levers=levers,
                    sync_timers=sync, sync_calls=synchronize_calls(attribution),
                    phase_rows=views.phase_rows(shown.phases, shown.categories),
                    totals=views.totals(shown.phases, shown.unattributed, shown.devices),
                    breakdown_summary=bsum,
                    notes=attribution.notes + list(data.settings.notes),
                    whole_run=whole_run_of(data, economics),
                    answer=answer(breakdown, bsum, economics, check, shape, data.path or attribution.trace.meta.path,
                                  profiled=True))


# What a run without nsys cannot show: what only a trace holds.
NEEDS_NSYS = ("kernels, categories, launch overhead, streams, synchronize calls, per-rank skew and allreduce, the "
              "cross-check against the trace and its projection need a capture under nsys (`specprof capture --gpu-events -o RUN -- "
              "<the same command>`): this run has its sidecars only")


def analyse_sidecars(data: RunData) -> Analysis:
    """Every result of a run made without nsys (`specprof capture --no-nsys --gpu-events`), from its files `data`
    alone (its sidecars: `data.sidecars`): the cycle breakdown from its CUDA events and its period, the accept length
    against its server log, the draft's shape and the economics, each the very number its capture under nsys
    shows for it as its run without nsys (crosscheck.py `unprofiled_times`, run_economics.py `economics_of`)."""
    sidecars = data.sidecars
    notes = list(data.found) + list(sidecars.notes)
    events = sidecars
    if not events.gpu_time.height and data.ground_truth is not None:
        # the reference engine's own in-stream CUDA events, when the tracer recorded none
        recorded = reference_events(data.ground_truth, events)
        if recorded is not None:
            events = replace(events, gpu_time=recorded)
            notes.append(f"CUDA events: the reference engine's ground truth ({data.ground_truth_file})")
    with progress.step("breaking the cycles down"):
        times, period, n = unprofiled_times(events)
        breakdown = bd.from_events(times, period, n)
    if breakdown is None:
        notes.append("no CUDA events in the sidecar: the cycle is not broken down by phase (capture with "
                     "--gpu-events)")
    check = None
    if data.server_log is not None:
        pairs = pl.DataFrame(schema=PAIRS_SCHEMA)
        check = CrossCheck(alignment=pl.DataFrame(schema=ALIGNMENT_SCHEMA), pairs=pairs, consistency=consistency(pairs),
                           notes=[])
        check.accept = reconcile_accept(sidecars.cycles, data.server_log, data.log_interval or DEFAULT_LOG_INTERVAL)
        if check.accept is None:
            check.notes.append("accept length: the sidecar has no accept counts to compare with the server log")
    shape = draft_shape_of(None, data, None)
    with progress.step("the economics"):
        economics = economics_of(None, data, None, None)
    acceptance, levers = lv.of_economics(economics, breakdown, shape.steps) \
        if economics is not None and shape.kind is not None else ([], [])
    bsum = None if breakdown is None else views.breakdown_summary(breakdown)
    return Analysis(attribution=None, data=data, crosscheck=check, ranks=None, cycle_breakdown=breakdown, shown=None,
                    draft_shape=shape, economics=economics, acceptance=acceptance, levers=levers, sync_timers=None, sync_calls=None, phase_rows=None,
                    totals=None,
                    breakdown_summary=bsum, notes=notes + list(data.settings.notes),
                    whole_run=whole_run_of(data, economics),
                    answer=answer(breakdown, bsum, economics, check, shape, data.path, profiled=False),
                    needs_nsys=NEEDS_NSYS)


def checked(attribution: Attribution, data: RunData) -> CrossCheck | None:
    """The cross-check against the run's sidecar (derived/crosscheck.py `crosscheck_of`): None without one."""
    with progress.step("cross-checking with the sidecar"):
        return crosscheck_of(attribution, data)


def ranked(attribution: Attribution, data: RunData, check: CrossCheck | None) -> Ranks:
    """The per-rank results (derived/ranks.py), each rank's cycle breakdown with the run without the profiler beside
    it (`check`'s inflation: its events and period)."""
    sidecars, baseline = data.sidecars, data.baseline
    with progress.step("per-rank results"):
        m = per_rank(attribution, sidecar_ranks(sidecars.files if sidecars is not None else None))
    events, period = unprofiled_events(check.inflation if check is not None else None)
    with progress.step("breaking the cycles down"):
        every = bd.breakdowns(attribution, m.ranks)
    # With several ranks, a phase's events are one rank's only where they come from the reference engine's ground
    # truth (rank 0's file); the sidecars' events are pooled over the ranks, which no rank's breakdown may show. The
    # period without the profiler is every rank's.
    pooled = sidecars is not None and baseline is not None and bool(sidecars.gpu_time.height) \
        and bool(baseline.gpu_time.height)
    m.breakdowns = [bd.with_unprofiled(b, events if len(every) < 2 or (b.rank == 0 and not pooled) else None, period)
                    for b in every]
    return m


def headline(ranks: Ranks) -> CycleBreakdown | None:
    """The cycle breakdown of the rank that sets the pace (the straggler): None with fewer than two cycles."""
    top = ranks.straggler()
    return bd.headline(ranks.breakdowns, top["rank"] if top is not None else None)


def synchronize_calls(a: Attribution) -> SyncCalls | None:
    """The capture's own synchronize-class calls per phase (derived/sync_calls.py)."""
    return sync_calls(a.trace.syncs, a.ops, a.ranges, a.grouping)


def estimate_sync_timers(a: Attribution) -> SyncTimerEstimate | None:
    """What synchronize timers at every phase boundary would add to the capture (derived/sync_timers.py), each
    synchronize call's own cost measured from the capture's own calls."""
    with progress.step("estimating synchronize timers"):
        own = synchronize_calls(a)
        return sync_timer_estimate(a.ops, a.ranges, a.cycles, a.trace.api, a.grouping,
                                   own.own_ns if own is not None else None)


def pace(attribution: Attribution) -> CycleBreakdown | None:
    """The headline breakdown's rank, cycles and stream from the trace alone (no file of the run read, no column
    without the profiler): what a comparison needs. Ranks numbered in device order."""
    m = per_rank(attribution)
    top = m.straggler()
    return bd.headline(bd.breakdowns(attribution, m.ranks), top["rank"] if top is not None else None)


def sweep_input(attribution: Attribution, data: RunData) -> SweepRun:
    """The run's inputs to the sweep's fit (derived/sweep_runs.py) over the headline breakdown's decode cycles: the
    cross-check and the breakdown made for it, and no economics."""
    check = checked(attribution, data)
    ranks = ranked(attribution, data, check)
    breakdown = headline(ranks)
    shown = focus(attribution, ranks, breakdown.rank if breakdown is not None else None)
    with progress.step("the sweep's inputs"):
        return sweep_run(shown, data, check, breakdown)


def sweep_input_of(a: Analysis) -> SweepRun:
    """`sweep_input` of a made analysis, from its own cross-check and breakdown (the results store's rows)."""
    with progress.step("the sweep's inputs"):
        return sweep_run(a.shown, a.data, a.crosscheck, a.cycle_breakdown)


def _attribution_field(name: str) -> property:
    return property(lambda self: getattr(self.attribution, name), doc=f"The attribution's `{name}`.")


def _shown_field(name: str) -> property:
    return property(lambda self: getattr(self.shown, name),
                    doc=f"The attribution's `{name}`, of the headline rank with several ranks.")


for _name in [f.name for f in fields(Attribution) if not f.name.startswith("_")] + ["segments", "home_charges"]:
    if _name != "notes":
        setattr(Analysis, _name, _shown_field(_name) if _name in PER_RANK_TABLES else _attribution_field(_name))
