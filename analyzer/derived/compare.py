"""Compare two analyses: per phase and category, the attributed time per cycle of A and B.

The unit is a cycle: each side's attributed GPU time of the phases that belong to cycles (every range from
one `cycle` range's start to the next one's, accept included; docs/attribution.md) divided by its number of
cycles, so runs of different lengths compare. When either run has no `cycle` ranges, the unit is the whole
run (every phase's attributed time, prefill included) and a note says so.

The headline is `total`: the sum over phases per unit. "B is slower by X%" means B's total exceeds A's by
X% of A's; `specprof compare --fail-if-slower PCT` exits 1 when X > PCT.

`Comparison` holds integer ns (renderers turn them into ms):
- phases: phase, a_ns, b_ns, diff_ns (b - a), ratio (b / a; null when a is 0)
- categories: phase, category, a_ns, b_ns, diff_ns, ratio
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from analyzer.core.attribution import Attribution


@dataclass
class Comparison:
    a_path: str
    b_path: str
    unit: str  # "cycle" or "run"
    a_cycles: int
    b_cycles: int
    a_total_ns: int
    b_total_ns: int
    phases: pl.DataFrame
    categories: pl.DataFrame
    notes: list[str] = field(default_factory=list)

    @property
    def change_pct(self) -> float | None:
        """How much slower B is than A, in % of A (negative: faster)."""
        return None if not self.a_total_ns else 100.0 * (self.b_total_ns - self.a_total_ns) / self.a_total_ns

    def slower_than(self, pct: float) -> bool:
        change = self.change_pct
        return change is not None and change > pct


def _per_unit(charges: pl.DataFrame, cycles: int, unit: str) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """(phase -> ns, (phase, category) -> ns, divisor) for one side's charges."""
    if unit == "cycle":
        n = cycles
        segs = charges.filter(pl.col("cycle").is_not_null())
    else:
        n = 1
        segs = charges
    seg = segs.with_columns(phase=pl.col("phase").cast(pl.Utf8), category=pl.col("category").cast(pl.Utf8))
    phases = seg.group_by("phase").agg(ns=pl.col("ns").sum() / n)
    cats = seg.group_by("phase", "category").agg(ns=pl.col("ns").sum() / n)
    return phases, cats, n


def _side_by_side(a: pl.DataFrame, b: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    out = a.rename({"ns": "a_ns"}).join(b.rename({"ns": "b_ns"}), on=keys, how="full", coalesce=True).with_columns(
        pl.col("a_ns").fill_null(0.0), pl.col("b_ns").fill_null(0.0))
    return out.with_columns(
        diff_ns=(pl.col("b_ns") - pl.col("a_ns")).round(0).cast(pl.Int64),
        ratio=pl.when(pl.col("a_ns") > 0).then(pl.col("b_ns") / pl.col("a_ns")),
    ).with_columns(pl.col("a_ns").round(0).cast(pl.Int64), pl.col("b_ns").round(0).cast(pl.Int64)).sort(
        pl.max_horizontal("a_ns", "b_ns"), descending=True)


def compare(a: Attribution, b: Attribution) -> Comparison:
    """Per phase and category, A and B per cycle (or per run when either has no cycles)."""
    return compare_charges((a.trace.meta.path, a.cycles.height, a.charges),
                           (b.trace.meta.path, b.cycles.height, b.charges))


def compare_charges(a: tuple[str, int, pl.DataFrame], b: tuple[str, int, pl.DataFrame]) -> Comparison:
    """`compare` from each side's (label, cycles, charges): charges with phase, category, cycle (null outside
    cycles) and ns, as an attribution has them or as the results store gives them (analyzer/app/store.py)."""
    notes = []
    unit = "cycle" if a[1] and b[1] else "run"
    if unit == "run":
        notes.append("no `cycle` ranges in " + " and ".join(x[0] for x in (a, b) if not x[1])
                     + ": compared per run (totals, prefill included), not per cycle")
    pa, ca, na = _per_unit(a[2], a[1], unit)
    pb, cb, nb = _per_unit(b[2], b[1], unit)
    phases = _side_by_side(pa, pb, ["phase"])
    cats = _side_by_side(ca, cb, ["phase", "category"])
    return Comparison(
        a_path=a[0], b_path=b[0], unit=unit,
        a_cycles=a[1], b_cycles=b[1],
        a_total_ns=int(phases["a_ns"].sum()), b_total_ns=int(phases["b_ns"].sum()),
        phases=phases, categories=cats, notes=notes)
