"""Compare two analyses: per phase and category, the attributed time per cycle of A and B.

The unit is a cycle: each side's attributed GPU time of the phases that belong to cycles (every range from
one `cycle` range's start to the next one's, accept included; docs/attribution.md) divided by its number of
cycles, so runs of different lengths compare. When either run has no `cycle` ranges, the unit is one instance
of each phase: a phase's attributed time divided by its number of ranges, for the phases both runs have
(a whole run's time would measure the capture's length, not the work). Runs with neither cycles nor a phase in
common cannot be compared: an error says so.

The headline is `total`: the sum over phases per unit (per instance: one instance of each common phase). "B is slower by X%" means B's total exceeds A's by
X% of A's; `specprof compare --fail-if-slower PCT` exits 1 when X > PCT.

`Comparison` holds integer ns (renderers turn them into ms):
- phases: phase, a_ns, b_ns, diff_ns (b - a), ratio (b / a; null when a is 0)
- categories: phase, category, a_ns, b_ns, diff_ns, ratio
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from specprof.analyzer.core.attribution import Attribution
from specprof.analyzer.derived import crosscheck as cc
from specprof.analyzer.derived import views
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.labels import IN_CYCLE, UNATTRIBUTED
from specprof.analyzer.model.sidecars import Sidecars


@dataclass
class Side:
    """One side of a comparison: its label, its number of cycles, its charges (phase, category, cycle (null outside
    cycles), ns) and phase -> instances (its ranges), as an attribution has them or as the results store gives
    them (analyzer/app/store.py)."""

    label: str
    cycles: int
    charges: pl.DataFrame
    instances: dict = field(default_factory=dict)


@dataclass
class Comparison:
    a_path: str
    b_path: str
    unit: str  # "cycle" or "instance"
    a_cycles: int
    b_cycles: int
    a_total_ns: int
    b_total_ns: int
    phases: pl.DataFrame
    categories: pl.DataFrame
    notes: list[str] = field(default_factory=list)

    @property
    def total_diff_ns(self) -> int:
        """B's total less A's."""
        return self.b_total_ns - self.a_total_ns

    @property
    def total_ratio(self) -> float | None:
        """B's total over A's (None when A's is 0)."""
        return None if not self.a_total_ns else self.b_total_ns / self.a_total_ns

    @property
    def change_pct(self) -> float | None:
        """How much slower B is than A, in % of A (negative: faster)."""
        return None if not self.a_total_ns else 100.0 * (self.b_total_ns - self.a_total_ns) / self.a_total_ns

    def slower_than(self, pct: float) -> bool:
        change = self.change_pct
        return change is not None and change > pct


BATCH_TOLERANCE = 0.10  # mean requests per cycle further apart than this: another batch size


def differences(setups: list[tuple[str, dict]]) -> list[str]:
    """What differs between runs that should be one workload: engine, model, tensor-parallel size, batch (mean
    requests per cycle, beyond BATCH_TOLERANCE). `setups`: (run, {"engine", "model", "tp", "batch"}) with None
    for what is unknown (not compared). One phrase per difference, naming the runs' values."""
    out = []
    for key, word in (("engine", "engines"), ("model", "models"), ("tp", "tensor-parallel sizes"),
                      ("topk", "draft tree widths (--speculative-eagle-topk)"),
                      ("continuous_steps", "grouped decode steps (--num-continuous-decode-steps)")):
        seen = {}
        for run, s in setups:
            value = s.get(key)
            if value is not None:
                seen.setdefault(_text(value), []).append(run)
        if len(seen) > 1:
            out.append(f"different {word}: " + ", ".join(f"{v} ({', '.join(r)})" for v, r in seen.items()))
    batches = [(run, s["batch"]) for run, s in setups if s.get("batch")]
    if batches:
        lo, hi = min(b for _, b in batches), max(b for _, b in batches)
        if hi - lo > BATCH_TOLERANCE * lo:
            out.append("different batch sizes: " + ", ".join(f"{b:g} requests per cycle ({r})" for r, b in batches))
    return out


# What a plain-decode run given as another run's baseline shares with it: not the draft (the baseline has none).
_BASELINE_KEYS = ("engine", "model", "tp")
_DRAFT_MODEL = ("speculative-draft-model-path", "draft-error")


def baseline_differences(run: tuple[str, dict | None], baseline: tuple[str, dict | None]) -> list[str]:
    """What differs between a run and the plain-decode run given as its baseline (each: (name, `setup_of`), None
    for unknown): `differences` of the engine, the target model and the tensor-parallel size."""
    def shared(setup: dict) -> dict:
        return {key: {k: v for k, v in setup[key].items() if k not in _DRAFT_MODEL} if key == "model" else setup[key]
                for key in _BASELINE_KEYS if key in setup}

    setups = [(name, shared(setup)) for name, setup in (run, baseline) if setup is not None]
    return differences(setups) if len(setups) == 2 else []


def workload(setup: dict | None) -> dict | None:
    """A run's setup (model/settings.py `RunSettings.setup`) without its draft model: what two runs of one target
    and workload share when they compare two drafters. The draft model's flags are the model flags that name a
    draft."""
    if setup is None:
        return None
    return {**setup, "model": {k: v for k, v in setup["model"].items() if "draft" not in k}}


def _text(value) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in sorted(value.items())) or "(none given)"
    return str(value)


def _per_unit(charges: pl.DataFrame, cycles: int, unit: str, instances: dict | None = None
              ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(phase -> ns, (phase, category) -> ns) per unit for one side's charges: per cycle (the charges inside
    cycles over their number), or per instance of each phase in `instances` (phase -> ranges)."""
    if unit == "cycle":
        seg = charges.filter(pl.col("cycle").is_not_null()).with_columns(n=pl.lit(cycles, dtype=pl.Float64))
    else:
        n = pl.DataFrame({"phase": list(instances), "n": [float(v) for v in instances.values()]},
                         schema={"phase": pl.Utf8, "n": pl.Float64})
        seg = charges.with_columns(pl.col("phase").cast(pl.Utf8)).join(n, on="phase", how="inner")
    seg = seg.with_columns(phase=pl.col("phase").cast(pl.Utf8), category=pl.col("category").cast(pl.Utf8))
    # (n is one number per phase: integer sums first, then one division, so that equal runs give equal numbers)
    phases = seg.group_by("phase").agg(ns=pl.col("ns").sum() / pl.col("n").first())
    cats = seg.group_by("phase", "category").agg(ns=pl.col("ns").sum() / pl.col("n").first())
    return phases, cats


def _instances(side: Side) -> dict:
    """phase -> number of ranges, of the named phases with ranges (not the pseudo-phases)."""
    return {p: n for p, n in side.instances.items() if n and p not in (IN_CYCLE, UNATTRIBUTED)}


def _side_by_side(a: pl.DataFrame, b: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    out = a.rename({"ns": "a_ns"}).join(b.rename({"ns": "b_ns"}), on=keys, how="full", coalesce=True).with_columns(
        pl.col("a_ns").fill_null(0.0), pl.col("b_ns").fill_null(0.0))
    return out.with_columns(
        diff_ns=(pl.col("b_ns") - pl.col("a_ns")).round(0).cast(pl.Int64),
        ratio=pl.when(pl.col("a_ns") > 0).then(pl.col("b_ns") / pl.col("a_ns")),
    ).with_columns(pl.col("a_ns").round(0).cast(pl.Int64), pl.col("b_ns").round(0).cast(pl.Int64)).sort(
        pl.max_horizontal("a_ns", "b_ns"), descending=True)


def compare(a: Attribution, b: Attribution) -> Comparison:
    """Per phase and category, A and B per cycle (or per phase instance when either has no cycles)."""
    return compare_charges(side_of(a), side_of(b))


def side_of(a: Attribution, breakdown=None) -> Side:
    """One side of a comparison from an attribution, or an analysis. Per cycle, the charges and cycles of its
    headline breakdown (`breakdown`, else the analysis's: one rank's decode cycles on its cycle stream,
    views.cycle_charges), so that compare's figures are the breakdown's."""
    base = getattr(a, "attribution", a)
    charges, cycles = views.cycle_charges(base, breakdown if breakdown is not None else
                                          getattr(a, "cycle_breakdown", None))
    return Side(base.trace.meta.path, cycles, charges, dict(base.phases.select("phase", "instances").iter_rows()))


EVENTS = "(CUDA events)"  # the one category of a run without nsys: its phases' GPU time between their events


def events_side(label: str, sidecars: Sidecars) -> Side:
    """One side of a comparison from a run made without nsys (its sidecars alone): per cycle, each phase's GPU time
    between its CUDA events (the cycles of the sidecar's own capture window, crosscheck.py `events_per_cycle`), as
    charges of the one category `(CUDA events)`; the period is no phase's and is not in it, and a prefill is no part
    of decoding (as in `analyze`'s breakdown: breakdown.py `from_events`)."""
    ev = cc.events_per_cycle(sidecars, None, None).filter(~pl.col("phase").is_in([cc.CYCLE, "prefill"]))
    charges = ev.select(pl.col("phase").cast(pl.Utf8), category=pl.lit(EVENTS), cycle=pl.col("index"),
                        ns=pl.col("ns").cast(pl.Int64))
    instances = dict(ev.group_by("phase").agg(n=pl.len()).select("phase", "n").iter_rows())
    return Side(label, ev["index"].n_unique(), charges, instances)


def compare_charges(a: Side, b: Side) -> Comparison:
    """`compare` from each side's charges."""
    notes = []
    if a.cycles and b.cycles:
        unit, ia, ib = "cycle", None, None
    else:
        unit = "instance"
        ia, ib = _instances(a), _instances(b)
        common = sorted(set(ia) & set(ib))
        without = " and ".join(x.label for x in (a, b) if not x.cycles)
        if not common:
            raise SpecprofError(
                f"{without}: no `cycle` ranges, and no phase range that both runs have: their totals would measure "
                "how long each capture ran, not the work, so compare cannot say which is slower; capture both "
                "with `specprof capture` (or name the ranges that group a cycle with --group-range)")
        only = sorted(set(ia) ^ set(ib))
        notes.append(f"no `cycle` ranges in {without}: compared per instance of each phase both runs have "
                     f"({', '.join(common)}: attributed time / ranges), not per cycle"
                     + (f"; left out, in one run only: {', '.join(only)}" if only else ""))
        ia = {p: ia[p] for p in common}
        ib = {p: ib[p] for p in common}
    pa, ca = _per_unit(a.charges, a.cycles, unit, ia)
    pb, cb = _per_unit(b.charges, b.cycles, unit, ib)
    phases = _side_by_side(pa, pb, ["phase"])
    cats = _side_by_side(ca, cb, ["phase", "category"])
    return Comparison(
        a_path=a.label, b_path=b.label, unit=unit,
        a_cycles=a.cycles, b_cycles=b.cycles,
        a_total_ns=int(phases["a_ns"].sum()), b_total_ns=int(phases["b_ns"].sum()),
        phases=phases, categories=cats, notes=notes)
