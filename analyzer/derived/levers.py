"""What to do next: each lever's predicted tokens/s and speedup against plain decode (docs/economics.md, "Levers").

Speculation's speedup is S = L x B / C (derived/economics.py: L the accept length, B the plain-decode step, C the
cycle period). A lever changes C or L and nothing else; every row is that formula on the measured quantities of one
estimate (the economics' headline row, or a batch-size group's):

- a phase cheaper (verify, draft, draft_extend by 1 ms or by 10 %): C' = C - saving, the saving the phase's share
  f of the cycle period times C (10 %: 0.1 x f x C; 1 ms: 1 ms, at most f x C). f is the share without the profiler
  (the phase between its CUDA events in the twin, over the twin's period: the breakdown's `unprofiled_share`) where
  the headline is measured without it and the twin has the phase's events, else its share under nsys (`share`);
  `basis` says which;
- the allreduce share of verify removed (a tensor-parallel capture): f = verify's share x (allreduce / verify time
  under nsys);
- the launch and CPU-wait gaps of the cycle removed (the GPU never idle): f = 1 - (GPU-busy time per cycle under
  nsys) / (the cycle on that basis: the twin's period, else the stream's cycle under nsys);
- accept length + 0.1: L' = L + 0.1;
- the first draft position's acceptance + 5 points: the conditional rates p_i of derived/acceptance.py with p_1 +
  0.05 (at most 1), L' = 1 + sum_i prod_{j <= i} p_j, the later positions' conditional rates held;
- one draft step fewer or more: from the sweep's cost models (specprof sweep): none without one (said).

tokens/s' = L' x batch / C', speedup' = L' x B / C', gain = speedup' / S - 1. Intervals: derived/intervals.py `band`
on the measured relative half-widths: L's (its half-width over L'), B's (read back from the estimate's speedup
interval, which is band(S, rL, rB, rC)), C's (its half-width over C' for a fixed saving; C's own relative width for a
saving proportional to C, the share held). Held fixed: the shares and the other phases; said per row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import polars as pl

from specprof.analyzer.derived.acceptance import Acceptance, per_position
from specprof.analyzer.derived.breakdown import CycleBreakdown
from specprof.analyzer.derived.intervals import band
from specprof.analyzer.derived.sweep import expected_accept_len

MS = 1_000_000
PHASE_LEVERS = ("verify", "draft", "draft_extend")
ACCEPT_STEP = 0.1  # accept length + 0.1
FIRST_POSITION_STEP = 0.05  # the first position's acceptance + 5 points

ROW_SCHEMA = {"lever": pl.Utf8, "kind": pl.Utf8, "cycle_ns": pl.Float64, "accept_len": pl.Float64,
              "tokens_per_s": pl.Float64, "tokens_per_s_lo": pl.Float64, "tokens_per_s_hi": pl.Float64,
              "speedup": pl.Float64, "speedup_lo": pl.Float64, "speedup_hi": pl.Float64, "gain": pl.Float64,
              "held": pl.Utf8}


@dataclass(frozen=True)
class Levers:
    """One estimate's levers: `rows` (ROW_SCHEMA) largest gain first, the rows without a prediction (a sweep needed)
    last; `cycle_ns`, `accept_len`, `speedup`, `tokens_per_s`: the estimate they start from; `basis`: where the
    phases' shares of the cycle come from; `group`: the batch-size group (None: the whole run)."""

    rows: pl.DataFrame
    cycle_ns: float
    accept_len: float
    speedup: float | None
    tokens_per_s: float | None
    basis: str
    source: str
    group: str | None = None
    notes: list[str] = field(default_factory=list)


def _rel(lo, hi, value) -> float | None:
    if lo is None or hi is None or not value:
        return None
    return (hi - lo) / 2 / abs(value)


def shares(b: CycleBreakdown | None, unprofiled: bool, profiler: str = "nsys") -> tuple[dict, str]:
    """phase -> its share of the cycle period, for the levers of phases, allreduce and gaps (see the module
    docstring), and the basis in words. `unprofiled`: the estimate is measured without the profiler (`profiler`)."""
    if b is None:
        return {}, "no cycle breakdown"
    out, twin = {}, unprofiled and b.unprofiled_mean_ns
    under = f"shares under {profiler}"
    basis = under
    for r in b.phases.iter_rows(named=True):
        if twin and r["unprofiled_share"] is not None:
            out[r["phase"]] = r["unprofiled_share"]
            basis = f"shares without {profiler} (the phases' CUDA events in the twin, over its period)"
        else:
            out[r["phase"]] = r["share"] or 0.0
    if twin and basis == under:
        basis = f"{under} (the twin has no CUDA events per phase)"
    busy = float(b.phases["busy_ns_per_cycle"].sum() or 0)
    cycle = b.unprofiled_mean_ns if twin else b.mean_ns
    if busy and cycle:  # (a breakdown from CUDA events alone, without nsys, has no GPU-busy time: no gaps lever)
        out["(gaps)"] = max(0.0, 1.0 - busy / cycle)
    cats = b.categories
    if cats is not None and "verify" in out:
        v = cats.filter(pl.col("phase") == "verify")
        total, ar = int(v["ns_per_cycle"].sum()), int(v.filter(pl.col("category") == "allreduce")["ns_per_cycle"].sum())
        if total and ar:
            out["(allreduce of verify)"] = out["verify"] * ar / total
    return out, basis


def levers(head: dict, b: CycleBreakdown | None, acceptance: Acceptance | None, group: str | None = None,
           profiler: str = "nsys") -> Levers | None:
    """The levers of the estimate `head` (an `Economics.estimates` row: cycle_ns, accept_len, batch, baseline_ns,
    speedup and their intervals) with the cycle breakdown `b` and the per-position acceptance of the same cycles.
    None without a cycle and an accept length."""
    C, L = head.get("cycle_ns"), head.get("accept_len")
    if not C or L is None:
        return None
    B, batch, S = head.get("baseline_ns"), head.get("batch"), head.get("speedup")
    rc = _rel(head.get("cycle_lo_ns"), head.get("cycle_hi_ns"), C)
    rl = _rel(head.get("accept_len_lo"), head.get("accept_len_hi"), L)
    rs = _rel(head.get("speedup_lo"), head.get("speedup_hi"), S)
    rb = math.sqrt(max(0.0, rs * rs - rl * rl - rc * rc)) if None not in (rs, rl, rc) else None
    hc = None if rc is None else rc * C  # C's half-width
    hl = None if rl is None else rl * L
    k = head.get("draft_steps") or (acceptance.steps if acceptance is not None else None)
    f, basis = shares(b, not head.get("profiled", True), profiler)
    T = head.get("tokens_per_s")
    rows = []

    def add(name, kind, c2, l2, rc2, rl2, held):
        tps = l2 * batch / (c2 / 1e9) if batch else None
        sp = l2 * B / c2 if B else None
        tlo, thi = band(tps, rl2, rc2)
        slo, shi = band(sp, rl2, rb, rc2)
        gain = sp / S - 1 if sp is not None and S else (tps / T - 1 if tps is not None and T else None)
        rows.append((name, kind, c2, l2, tps, tlo, thi, sp, slo, shi, gain, held))

    for phase in PHASE_LEVERS:
        share = f.get(phase)
        if not share:
            continue
        t = share * C
        cut = min(MS, t)
        add(f"{phase} 1 ms cheaper" if cut == MS else f"{phase} removed ({t / MS:.3f} ms, less than 1 ms)", "cycle",
            C - cut, L, None if hc is None else hc / (C - cut), rl,
            f"{phase} is {100 * share:.1f}% of the cycle ({basis}); the rest of the cycle and the accept length held")
        add(f"{phase} 10% cheaper", "cycle", C - 0.1 * t, L, rc, rl,
            f"{phase}'s share of the cycle ({100 * share:.1f}%, {basis}) and the accept length held")
    if f.get("(allreduce of verify)"):
        s = f["(allreduce of verify)"]
        add("allreduce of verify removed", "cycle", C * (1 - s), L, rc, rl,
            f"the allreduce kernels are {100 * s:.1f}% of the cycle (their part of verify under {profiler}, times verify's "
            f"share); the accept length held")
    if f.get("(gaps)"):
        s = f["(gaps)"]
        add("launch and CPU-wait gaps removed", "cycle", C * (1 - s), L, rc, rl,
            f"the GPU idles {100 * s:.1f}% of the cycle (1 - GPU-busy time under {profiler} over the cycle, "
            f"{'the twin' if basis.startswith('shares without') else 'under ' + profiler}); the accept length held")
    if k is None or L + ACCEPT_STEP <= k + 1:
        add(f"accept length +{ACCEPT_STEP:g}", "accept", C, L + ACCEPT_STEP, rc,
            None if hl is None else hl / (L + ACCEPT_STEP), "the cycle held")
    if acceptance is not None and acceptance.positions.height:
        p = acceptance.rates()
        p2 = [min(1.0, p[0] + FIRST_POSITION_STEP)] + p[1:]
        l2 = L + expected_accept_len(p2, len(p2)) - expected_accept_len(p, len(p))
        add(f"first position's acceptance +{100 * FIRST_POSITION_STEP:g} points ({100 * p[0]:.1f}% -> "
            f"{100 * p2[0]:.1f}%)", "accept", C, l2, rc, None if hl is None else hl / l2,
            "the later positions' conditional rates and the cycle held")
    for d, word in ((-1, "one draft step fewer"), (1, "one draft step more")):
        if k is not None and k + d < 1 and d < 0:
            continue
        target = f" (K={k + d})" if k is not None else ""
        rows.append((word + target, "steps", None, None, None, None, None, None, None, None, None,
                     "needs a sweep: `specprof sweep` over runs at K-1, K and K+1 fits the verify and draft cost "
                     "models this row is predicted from"))
    table = pl.DataFrame(rows, schema=ROW_SCHEMA, orient="row").with_row_index("order").sort(
        [pl.col("gain").is_null(), pl.col("gain"), pl.col("order")], descending=[False, True, False],
        nulls_last=True).drop("order")
    return Levers(rows=table, cycle_ns=float(C), accept_len=float(L), speedup=S, tokens_per_s=T, basis=basis,
                  source=head.get("source") or "", group=group)


def group_label(batch_group: str, steps: int | None) -> str:
    """A batch-size group and K in words: "batch 8, K=2"."""
    return f"batch {batch_group}" + ("" if steps is None else f", K={steps}")


def of_economics(e, b: CycleBreakdown | None, steps: int | None, profiler: str = "nsys"
                 ) -> tuple[list[Acceptance], list[Levers]]:
    """Per-position acceptance and levers of a run's economics `e` (derived/economics.py, with its headline
    request-rounds `e.rounds` and its batch-size groups `e.groups`): one of each per batch-size group and K where the
    run spans several (derived/groups.py: each group's estimate row and cycles, the headline source's; a group of K = 0,
    the draft skipped, has none), else one for
    the run (its headline). `b`: the run's cycle breakdown, whose shares every group's levers take (the breakdown is
    the capture's, not a group's: said in their `basis`)."""
    rounds = e.rounds
    g = e.groups
    if g is not None and g.several and g.members is not None and rounds is not None:
        accs, levs = [], []
        head = g.rows.filter(pl.col("source") == g.rows["source"][0])
        for row in head.iter_rows(named=True):
            if row["steps"] == 0:  # cycles whose draft was skipped (SGLang's adaptive K = 0): no drafter to act on
                continue
            label = group_label(row["batch_group"], row["steps"])
            cyc = g.members.filter((pl.col("batch_group") == row["batch_group"])
                                   & pl.col("steps").eq_missing(row["steps"]))
            mine = e.every_round.join(cyc.select("file", cycle="index"), on=["file", "cycle"], how="semi")
            acc = per_position(mine, row["steps"] if row["steps"] is not None else steps, label)
            if acc is not None:
                accs.append(acc)
            lv = levers(row, b, acc, label, profiler)
            if lv is not None:
                levs.append(replace(lv, basis=lv.basis + ", the whole capture's breakdown"))
        return accs, levs
    acc = per_position(rounds, steps)
    lv = levers(e.headline, b, acc, None, profiler) if e.headline else None
    return ([acc] if acc is not None else []), ([lv] if lv is not None else [])
