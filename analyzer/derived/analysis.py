"""`Analysis`: the attribution of one trace with what its run's other files add to it, the result that every
renderer takes (schema `specprof.analysis/2`, docs/json.md).

It holds the `Attribution` and the run's parsed files (model/run_data.py `RunData`) and computes each further
result on first use, once: the cross-check, the economics, the per-rank results, the cycle breakdown and the
sweep's inputs. Every table and field of the attribution reads as an attribute of its own (`a.phases`,
`a.ops`, `a.trace`, `a.segments`, ...). app/run.py's `Run` is an Analysis that reads its trace and files on
first use.
"""

from __future__ import annotations

from dataclasses import fields
from functools import cached_property

from analyzer import progress
from analyzer.core.attribution import Attribution
from analyzer.derived import run_files
from analyzer.derived.breakdown import CycleBreakdown, cycle_breakdown
from analyzer.derived.crosscheck import CrossCheck
from analyzer.derived.economics import Economics, SyncTimerEstimate, sync_timer_estimate
from analyzer.derived.ranks import Ranks, per_rank, sidecar_ranks
from analyzer.model.run_data import RunData


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
            return run_files.crosscheck_of(self.attribution, self.data)

    @cached_property
    def cycle_breakdown(self) -> CycleBreakdown | None:
        """Where one decode cycle goes, phase by phase, on the stream the cycle runs on (derived/breakdown.py):
        None with fewer than two cycles."""
        with progress.step("breaking the cycles down"):
            return cycle_breakdown(self.attribution)

    @cached_property
    def economics(self) -> Economics | None:
        """Does speculation pay (docs/economics.md): None without a sidecar or a baseline step time."""
        check, breakdown = self.crosscheck, self.cycle_breakdown  # (each its own step)
        with progress.step("the economics"):
            return run_files.economics_of(self.attribution, self.data, check, breakdown)

    @cached_property
    def ranks(self) -> Ranks:
        """Per-rank attribution, skew across ranks, the communication wait/transfer split (docs/multirank.md)."""
        sidecars = self.data.sidecars
        with progress.step("per-rank results"):
            return per_rank(self.attribution, sidecar_ranks(sidecars.files if sidecars is not None else None))

    @cached_property
    def sync_timers(self) -> SyncTimerEstimate | None:
        """What synchronize timers at every phase boundary would add to this capture (derived/economics.py):
        None without two consecutive cycles with phases."""
        a = self.attribution
        return sync_timer_estimate(a.ops, a.ranges, a.cycles, a.trace.api, a.grouping)

    @cached_property
    def sweep_input(self) -> run_files.SweepRun:
        """This run's inputs to the sweep's fit (derived/sweep.py)."""
        check = self.crosscheck
        with progress.step("the sweep's inputs"):
            return run_files.sweep_run(self.attribution, self.data, check)


def _attribution_field(name: str) -> property:
    return property(lambda self: getattr(self.attribution, name), doc=f"The attribution's `{name}`.")


for _name in [f.name for f in fields(Attribution) if not f.name.startswith("_")] + ["segments"]:
    setattr(Analysis, _name, _attribution_field(_name))
