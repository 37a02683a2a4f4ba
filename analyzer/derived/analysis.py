"""`Analysis`: the attribution of one trace with what the run's other files add to it, the result that every
command renders (schema `specprof.analysis/3`, docs/json.md)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from analyzer.core.attribution import Attribution
from analyzer.derived.breakdown import CycleBreakdown
from analyzer.derived.crosscheck import CrossCheck
from analyzer.derived.economics import Economics
from analyzer.derived.ranks import Ranks


@dataclass
class Analysis(Attribution):
    # The cross-check against the tracer's sidecar and the profiler's inflation (docs/crosscheck.md): None
    # without a sidecar.
    crosscheck: CrossCheck | None = None
    # Does speculation pay (docs/economics.md): None without a sidecar or a baseline step time.
    economics: Economics | None = None
    # Per-rank attribution, skew across ranks, the communication wait/transfer split (docs/multirank.md).
    ranks: Ranks | None = None
    # Where one decode cycle goes, phase by phase, on the stream the cycle runs on (derived/breakdown.py): None
    # with fewer than two cycles.
    cycle_breakdown: CycleBreakdown | None = None

    @classmethod
    def of(cls, a: Attribution, crosscheck: CrossCheck | None = None, economics: Economics | None = None,
           ranks: Ranks | None = None, cycle_breakdown: CycleBreakdown | None = None) -> Analysis:
        """An Analysis of the attribution `a` (its tables shared, not copied)."""
        base = {f.name: getattr(a, f.name) for f in fields(Attribution)}
        return cls(**base, crosscheck=crosscheck, economics=economics, ranks=ranks,
                   cycle_breakdown=cycle_breakdown)
