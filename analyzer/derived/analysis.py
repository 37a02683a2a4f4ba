"""`Analysis`: the attribution of one trace with what its run's other files add to it, the result that every
renderer takes (schema `specprof.analysis/3`, docs/json.md).

It holds the `Attribution` and the run's parsed files (model/run_data.py `RunData`) and computes each further
result on first use, once: the cross-check, the draft's shape, the economics, the per-rank results with each rank's cycle
breakdown, the headline breakdown and the sweep's inputs, and the views every renderer shows (derived/views.py: the
phases' shares and per-instance times, the sums, the breakdown's totals and picks). Every table and field of the attribution reads as an
attribute of its own (`a.phases`, `a.ops`, `a.trace`, `a.segments`, ...); with several ranks, the per-phase and
per-cycle tables (`phases`, `categories`, `cycles`, `cycle_phases`) are the headline rank's (derived/ranks.py
`focus`). app/run.py's `Run` is an Analysis that reads its trace and files on first use.
"""

from __future__ import annotations

from dataclasses import fields
from functools import cached_property

from specprof.analyzer import progress
from specprof.analyzer.core.attribution import Attribution
from specprof.analyzer.derived import breakdown as bd
from specprof.analyzer.derived import run_economics, sweep_runs, views
from specprof.analyzer.derived.crosscheck import crosscheck_of
from specprof.analyzer.derived.breakdown import CycleBreakdown
from specprof.analyzer.derived.crosscheck import CrossCheck
from specprof.analyzer.derived.draft_shape import DraftShape
from specprof.analyzer.derived.economics import Economics
from specprof.analyzer.derived.sync_timers import SyncTimerEstimate, sync_timer_estimate
from specprof.analyzer.derived.ranks import Ranks, focus, per_rank, sidecar_ranks, unprofiled_events
from specprof.analyzer.model.run_data import RunData

# The attribution's tables that are one rank's with several ranks (the headline rank's: `shown`).
PER_RANK_TABLES = ("phases", "categories", "cycles", "cycle_phases")


class Analysis:
    """The attribution `attribution` of one trace and the parsed files `data` of its run (none: a trace
    alone)."""

    def __init__(self, attribution: Attribution, data: RunData | None = None):
        self.attribution = attribution
        self.data = data if data is not None else RunData()

    @cached_property
    def crosscheck(self) -> CrossCheck | None:
        """The cross-check against the tracer's sidecar and the profiler's inflation (docs/crosscheck.md): None
        without a sidecar."""
        with progress.step("cross-checking with the sidecar"):
            return crosscheck_of(self.attribution, self.data)

    @cached_property
    def ranks(self) -> Ranks:
        """Per-rank attribution, skew across ranks, the communication wait/transfer split (docs/multirank.md), and
        each rank's cycle breakdown with the run without the profiler beside it (`breakdowns`)."""
        sidecars, baseline = self.data.sidecars, self.data.baseline
        with progress.step("per-rank results"):
            m = per_rank(self.attribution, sidecar_ranks(sidecars.files if sidecars is not None else None))
        check = self.crosscheck
        events, period = unprofiled_events(check.inflation if check is not None else None)
        with progress.step("breaking the cycles down"):
            every = bd.breakdowns(self.attribution, m.ranks)
        # With several ranks, a phase's events are one rank's only where they come from the reference engine's
        # ground truth (rank 0's file); the sidecars' events are pooled over the ranks, which no rank's breakdown
        # may show. The period without the profiler is every rank's.
        pooled = sidecars is not None and baseline is not None and bool(sidecars.gpu_time.height) \
            and bool(baseline.gpu_time.height)
        m.breakdowns = [bd.with_unprofiled(b, events if len(every) < 2 or (b.rank == 0 and not pooled) else None,
                                           period) for b in every]
        return m

    @cached_property
    def cycle_breakdown(self) -> CycleBreakdown | None:
        """Where one decode cycle goes, phase by phase, on the stream the cycle runs on, of the rank that sets the
        pace (derived/breakdown.py): None with fewer than two cycles."""
        top = self.ranks.straggler()
        return bd.headline(self.ranks.breakdowns, top["rank"] if top is not None else None)

    @cached_property
    def pace(self) -> CycleBreakdown | None:
        """The headline breakdown's rank, cycles and stream from the trace alone (no file of the run read, no column
        without the profiler): what a comparison needs. Ranks numbered in device order."""
        if "cycle_breakdown" in self.__dict__:
            return self.cycle_breakdown
        m = per_rank(self.attribution)
        top = m.straggler()
        return bd.headline(bd.breakdowns(self.attribution, m.ranks), top["rank"] if top is not None else None)

    @cached_property
    def shown(self) -> Attribution:
        """The attribution whose per-phase and per-cycle tables are the headline rank's (all of it with one rank)."""
        b = self.cycle_breakdown
        return focus(self.attribution, self.ranks, b.rank if b is not None else None)

    @cached_property
    def draft_shape(self) -> DraftShape:
        """The draft's shape, chain or tree (derived/run_economics.py `draft_shape_of`: the server log's resolved
        settings, else the traced command line); `DraftShape.kind` None for a run that does not draft."""
        return run_economics.draft_shape_of(self.attribution, self.data, self.crosscheck)

    @cached_property
    def economics(self) -> Economics | None:
        """Does speculation pay (docs/economics.md): None without a sidecar or a baseline step time."""
        check, breakdown = self.crosscheck, self.cycle_breakdown  # (each its own step)
        with progress.step("the economics"):
            return run_economics.economics_of(self.attribution, self.data, check, breakdown)

    @cached_property
    def sync_timers(self) -> SyncTimerEstimate | None:
        """What synchronize timers at every phase boundary would add to this capture (derived/sync_timers.py):
        None without two consecutive cycles with phases."""
        a = self.attribution
        with progress.step("estimating synchronize timers"):
            return sync_timer_estimate(a.ops, a.ranges, a.cycles, a.trace.api, a.grouping)

    # What every renderer shows beside the tables (derived/views.py), computed once per analysis.

    @cached_property
    def phase_rows(self):
        """The phase table with each phase's per-instance time, shares, busy and idle time and top busy categories
        (views.phase_rows), of the headline rank."""
        return views.phase_rows(self.phases, self.categories)

    @cached_property
    def totals(self) -> dict:
        """The sums the header and the report's tiles show (views.totals)."""
        return views.totals(self.phases, self.unattributed, self.devices)

    @cached_property
    def breakdown_summary(self) -> dict | None:
        """The headline breakdown's figures beyond its tables (views.breakdown_summary): None without one."""
        b = self.cycle_breakdown
        return None if b is None else views.breakdown_summary(b)

    @cached_property
    def sweep_input(self) -> sweep_runs.SweepRun:
        """This run's inputs to the sweep's fit (derived/sweep.py): over the headline breakdown's decode cycles."""
        check, breakdown = self.crosscheck, self.cycle_breakdown
        with progress.step("the sweep's inputs"):
            return sweep_runs.sweep_run(self.shown, self.data, check, breakdown)


def _attribution_field(name: str) -> property:
    return property(lambda self: getattr(self.attribution, name), doc=f"The attribution's `{name}`.")


def _shown_field(name: str) -> property:
    return property(lambda self: getattr(self.shown, name),
                    doc=f"The attribution's `{name}`, of the headline rank with several ranks.")


for _name in [f.name for f in fields(Attribution) if not f.name.startswith("_")] + ["segments", "home_charges"]:
    setattr(Analysis, _name, _shown_field(_name) if _name in PER_RANK_TABLES else _attribution_field(_name))
