"""Per-position acceptance of one speculative run (docs/economics.md, "Per-position acceptance").

From the sidecar's accept counts (one request-round per request and cycle: how many of its K drafts were accepted,
`correct`), per draft position i = 1..K:

    at_least_i = P(at least i drafts accepted) = rounds with correct >= i / rounds
    rate_i     = P(draft i accepted | drafts 1..i-1 accepted) = rounds with correct >= i / rounds with correct >= i - 1

so that accept length = 1 + sum_i at_least_i (the bonus token and the accepted drafts) and at_least_i =
prod_{j <= i} rate_j. Counts and rates are the sweep's (derived/sweep.py `acceptance`); the 95 % intervals are the
accept length's (derived/economics.py `ratio_measure`: the ratio estimator over cycles, a cycle's rounds sharing its
conditions, or the repeated twins' spread where wider). The rounds are those the economics' headline accept length
is over (`Economics.rounds`), so the two agree.

`Acceptance`: steps (K), rounds (request-rounds), accept_len (1 + sum of at_least), group (the batch-size group
and K its cycles are, None for the run's), positions: position, reached,
accepted, at_least, at_least_lo, at_least_hi, rate, rate_lo, rate_hi (the intervals null where a position has too
few cycles for one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from specprof.analyzer.derived.economics import ratio_measure
from specprof.analyzer.derived.sweep import acceptance as position_counts

POSITION_SCHEMA = {"position": pl.Int64, "reached": pl.Int64, "accepted": pl.Int64, "at_least": pl.Float64,
                   "at_least_lo": pl.Float64, "at_least_hi": pl.Float64, "rate": pl.Float64, "rate_lo": pl.Float64,
                   "rate_hi": pl.Float64}


@dataclass(frozen=True)
class Acceptance:
    steps: int
    rounds: int
    accept_len: float
    positions: pl.DataFrame
    group: str | None = None  # the batch-size group and K (None: the run's cycles, one group)

    def rates(self) -> list[float]:
        """The conditional rate at each position 1..K (0 where no round reached it: nothing was accepted there)."""
        return [r if r is not None else 0.0 for r in self.positions["rate"].to_list()]


def _interval(counts, totals, labels) -> tuple[float | None, float | None]:
    keep = totals > 0
    if keep.sum() < 2:
        return None, None
    m = ratio_measure(counts[keep], totals[keep], None if labels is None else [x for x, k in zip(labels, keep) if k])
    if m.half is None or not math.isfinite(m.half):
        return None, None
    return max(0.0, m.lo), min(1.0, m.hi)


def per_position(rounds: pl.DataFrame, steps: int | None, group: str | None = None) -> Acceptance | None:
    """Per-position acceptance of the request-rounds `rounds` (cycle, request, correct, twin: the repeated twin's
    folder, null under the profiler; any subset of a run's cycles, a batch-size group's) of a run of `steps` draft
    steps (K; the most any round accepted where unknown). None without rounds."""
    if rounds is None or not rounds.height:
        return None
    k = max(int(steps or 0), int(rounds["correct"].max() or 0))
    if k < 1:
        return None
    counts = position_counts(rounds.select("correct", steps=pl.lit(k, dtype=pl.Int64)))
    key = rounds.with_columns(twin=pl.col("twin").fill_null(""))
    per_cycle = key.group_by("twin", "cycle", maintain_order=True).agg(
        [pl.len().alias("n")]
        + [(pl.col("correct") >= i).sum().alias(f"a{i}") for i in range(0, k + 1)])
    twins = per_cycle["twin"].to_list()
    labels = twins if len(set(twins)) > 1 else None
    total = per_cycle["n"].to_numpy()
    n = int(total.sum())
    rows = []
    for r in counts.iter_rows(named=True):
        i = r["position"]
        hit = per_cycle[f"a{i}"].to_numpy()
        lo, hi = _interval(hit, total, labels)
        rlo, rhi = _interval(hit, per_cycle[f"a{i - 1}"].to_numpy(), labels)
        rows.append((i, r["reached"], r["accepted"], r["accepted"] / n, lo, hi, r["rate"], rlo, rhi))
    table = pl.DataFrame(rows, schema=POSITION_SCHEMA, orient="row")
    return Acceptance(steps=k, rounds=n, accept_len=1.0 + float(table["at_least"].sum()), positions=table,
                      group=group)
