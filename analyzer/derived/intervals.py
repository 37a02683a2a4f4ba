"""95 % intervals: Student t quantiles, a measured mean with its half-width (`Measure`), the mean of repeated
runs, and the delta-method band of a product or quotient of independent means (docs/economics.md,
"Intervals"). Pure numbers: no tables, no files."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specprof.analyzer.model.numeric import np

# t quantiles at 0.975 for 1..30 degrees of freedom; beyond, a Cornish-Fisher expansion (error < 1e-4).
_T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
         2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
         2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272)
_Z975 = 1.959963984540054


def t975(dof: int) -> float:
    """The 0.975 quantile of Student's t with `dof` degrees of freedom."""
    if dof < 1:
        return math.inf
    if dof <= len(_T975):
        return _T975[dof - 1]
    z, v = _Z975, float(dof)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3))


@dataclass(frozen=True)
class Measure:
    """A measured mean with its 95 % half-width: from the per-cycle scatter (t, n - 1 degrees of freedom), or,
    where repeated runs exist and their means spread wider, from the run means (t, runs - 1); `half` None for a
    number given by the user (no interval)."""

    value: float
    half: float | None
    n: int
    runs: int = 1
    basis: str = "cycles"  # "cycles" | "runs" | "given"

    @property
    def rel(self) -> float:
        return 0.0 if not self.half or not self.value else abs(self.half / self.value)

    @property
    def lo(self) -> float | None:
        return None if self.half is None else self.value - self.half

    @property
    def hi(self) -> float | None:
        return None if self.half is None else self.value + self.half


def mean_measure(values, runs=None) -> Measure | None:
    """The mean of `values` with its 95 % interval; `runs` (one label per value): the repeated run each value
    belongs to. With two runs or more the mean is the mean of the run means and the interval the wider of the
    per-value one and the run means' (run-to-run noise is what a single run's cycles cannot show)."""
    v = np.asarray(values, dtype=float)
    if not len(v):
        return None
    half = t975(len(v) - 1) * float(v.std(ddof=1)) / math.sqrt(len(v)) if len(v) > 1 else math.inf
    if runs is not None:
        labels = np.asarray(runs)
        names = list(dict.fromkeys(labels.tolist()))
        if len(names) > 1:
            means = np.array([v[labels == r].mean() for r in names])
            between = t975(len(means) - 1) * float(means.std(ddof=1)) / math.sqrt(len(means))
            value = float(means.mean())
            if between > half:
                return Measure(value, between, len(v), len(names), "runs")
            return Measure(value, half, len(v), len(names), "cycles")
    return Measure(float(v.mean()), half, len(v))


def band(value: float | None, *rels: float | None) -> tuple[float | None, float | None]:
    """value x (1 -+ r), r the components' relative 95 % half-widths added in quadrature (delta method for a
    product or quotient of independent means); (None, None) when the value or a component's interval is unknown."""
    if value is None or any(r is None or not math.isfinite(r) for r in rels):
        return None, None
    r = math.sqrt(sum(x * x for x in rels))
    return max(0.0, value * (1 - r)), value * (1 + r)
