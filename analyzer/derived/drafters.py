"""Two drafters compared (docs/economics.md, "Two drafters compared"): runs of one target and workload with
different draft models, side by side from each run's own analysis.

Per side: the economics' headline (accept length, cycle period, tokens/s, speedup against plain where a baseline is
given, each with its 95 % interval), the draft's cost per cycle (draft and draft_extend from the cycle breakdown:
without nsys where the twin has the phases' CUDA events, else under nsys) and the per-position acceptance
(derived/acceptance.py). The verdict is B's tokens/s over A's, T_b / T_a = (L_b / L_a) x (C_a / C_b) at one batch
size, with the interval `band` of the two independent tokens/s intervals; "why" splits it into the accept length's
factor, per position (L_b - L_a = sum_i of the difference of P(at least i accepted)), and the cycle's, with the
draft's share of it.

`DrafterComparison`: a, b (dict per side: path, draft_model, accept_len, accept_len_lo/hi, cycle_ns, cycle_lo/hi_ns,
tokens_per_s, tokens_per_s_lo/hi, speedup, speedup_lo/hi, draft_ns, draft_basis, source), positions (position,
a_at_least, a_at_least_lo, a_at_least_hi, b_..., a_rate, a_rate_lo, a_rate_hi, b_..., a_drafted, b_drafted (the side's K
reaches the position; P(at least i) is 0 where it does not), at_least_diff: B's less A's),
ratio, ratio_lo, ratio_hi (B's tokens/s over A's), faster ("a", "b" or None: the interval holds 1), verdict (sentences).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from specprof.analyzer.derived.acceptance import per_position
from specprof.analyzer.derived.intervals import band

DRAFT_PHASES = ("draft", "draft_extend")


@dataclass(frozen=True)
class DrafterComparison:
    a: dict
    b: dict
    positions: pl.DataFrame
    ratio: float | None
    ratio_lo: float | None
    ratio_hi: float | None
    faster: str | None
    verdict: list[str] = field(default_factory=list)


def _rel(lo, hi, value):
    return None if lo is None or hi is None or not value else (hi - lo) / 2 / abs(value)


def side(analysis, path: str, draft_model: str | None) -> dict:
    """One side: the analysis' headline economics, draft cost and acceptance."""
    e = analysis.economics.headline if analysis.economics is not None else None
    if e is None or e["accept_len"] is None or not e["cycle_ns"]:
        return {"path": path, "draft_model": draft_model, "accept_len": None}
    b = analysis.cycle_breakdown
    draft, basis = 0, "no cycle breakdown"
    if b is not None:
        twin = not e["profiled"] and b.unprofiled_mean_ns is not None
        rows = b.phases.filter(pl.col("phase").is_in(DRAFT_PHASES))
        if twin and rows.height and rows["unprofiled_ns_per_cycle"].null_count() == 0:
            draft, basis = int(rows["unprofiled_ns_per_cycle"].sum()), "without nsys (the twin's CUDA events)"
        else:
            draft, basis = int(rows["ns_per_cycle"].sum()), "under nsys"
    return {"path": path, "draft_model": draft_model, "source": e["source"],
            **{k: e[k] for k in ("accept_len", "accept_len_lo", "accept_len_hi", "cycle_ns", "cycle_lo_ns",
                                 "cycle_hi_ns", "tokens_per_s", "tokens_per_s_lo", "tokens_per_s_hi", "speedup",
                                 "speedup_lo", "speedup_hi", "batch")},
            "draft_ns": draft, "draft_basis": basis,
            # the headline's request-rounds, as one group's (a run over several batch sizes is compared pooled)
            "acceptance": per_position(analysis.economics.rounds, analysis.draft_shape.steps)}


def compare_drafters(a: dict, b: dict) -> DrafterComparison:
    """A's and B's sides (`side`) compared."""
    pos = _positions(a.get("acceptance"), b.get("acceptance"))
    if a.get("accept_len") is None or b.get("accept_len") is None:
        return DrafterComparison(a, b, pos, None, None, None, None,
                                 ["no accept length on one side (no sidecar with accept counts): the drafters are not "
                                  "compared"])
    use = "tokens_per_s" if a.get("tokens_per_s") and b.get("tokens_per_s") else None
    if use:
        ratio = b["tokens_per_s"] / a["tokens_per_s"]
        rels = (_rel(a["tokens_per_s_lo"], a["tokens_per_s_hi"], a["tokens_per_s"]),
                _rel(b["tokens_per_s_lo"], b["tokens_per_s_hi"], b["tokens_per_s"]))
    else:  # tokens/s per request: L / C
        ratio = (b["accept_len"] / b["cycle_ns"]) / (a["accept_len"] / a["cycle_ns"])
        rels = tuple(x for s in (a, b) for x in (_rel(s["accept_len_lo"], s["accept_len_hi"], s["accept_len"]),
                                                 _rel(s["cycle_lo_ns"], s["cycle_hi_ns"], s["cycle_ns"])))
    lo, hi = band(ratio, *rels)
    faster = None if lo is not None and lo <= 1 <= hi else ("b" if ratio > 1 else "a")
    return DrafterComparison(a, b, pos, ratio, lo, hi, faster, _verdict(a, b, pos, ratio, lo, hi, faster))


def _positions(a, b) -> pl.DataFrame:
    cols = ("at_least", "at_least_lo", "at_least_hi", "rate", "rate_lo", "rate_hi")
    schema = {"position": pl.Int64, **{f"{s}_{c}": pl.Float64 for s in "ab" for c in cols},
              "a_drafted": pl.Boolean, "b_drafted": pl.Boolean, "at_least_diff": pl.Float64}
    k = max(a.steps if a is not None else 0, b.steps if b is not None else 0)
    rows = []
    for i in range(1, k + 1):
        row = {"position": i}
        for s, acc in (("a", a), ("b", b)):
            r = acc.positions.filter(pl.col("position") == i).rows(named=True) if acc is not None else []
            for c in cols:
                row[f"{s}_{c}"] = r[0][c] if r else (0.0 if c == "at_least" and acc is not None else None)
            row[f"{s}_drafted"] = bool(r)
        row["at_least_diff"] = None if a is None or b is None else row["b_at_least"] - row["a_at_least"]
        rows.append(row)
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)


def _verdict(a, b, pos, ratio, lo, hi, faster) -> list[str]:
    what = "tokens/s" if a.get("tokens_per_s") and b.get("tokens_per_s") else "tokens/s per request"
    ci = "" if lo is None else f" ({lo:.2f}-{hi:.2f})"
    if faster is None:
        head = (f"the drafters are not told apart: B gives {ratio:.2f}x{ci} A's {what}; the 95% interval holds 1")
    else:
        win, lose, x = ("B", "A", ratio) if faster == "b" else ("A", "B", 1 / ratio)
        xci = ci if faster == "b" else ("" if lo is None else f" ({1 / hi:.2f}-{1 / lo:.2f})")
        head = f"{win}'s drafter is faster: {x:.2f}x{xci} {lose}'s {what} ({(x - 1) * 100:.0f}% more)"
    la, lb, ca, cb = a["accept_len"], b["accept_len"], a["cycle_ns"], b["cycle_ns"]
    parts = []
    if pos.height and pos["at_least_diff"].null_count() == 0:
        parts.append(", ".join(f"position {r['position']} {100 * (r['a_at_least'] or 0):.1f}% -> "
                               f"{100 * (r['b_at_least'] or 0):.1f}% ({100 * r['at_least_diff']:+.1f} points)"
                               for r in pos.iter_rows(named=True)))
    why = (f"why: accept length {la:.3f} (A) against {lb:.3f} (B), x{lb / la:.3f}"
           + (f" (P(at least i accepted): {parts[0]}; their sum is the accept length's difference)" if parts else "")
           + f"; cycle {ca / 1e6:.3f} against {cb / 1e6:.3f} ms, x{ca / cb:.3f} on tokens/s "
           f"(draft and draft_extend {a['draft_ns'] / 1e6:.3f} against {b['draft_ns'] / 1e6:.3f} ms per cycle, "
           f"{a['draft_basis']} / {b['draft_basis']})")
    out = [head, why]
    if a.get("speedup") is not None and b.get("speedup") is not None:
        out.append(f"against plain decode: A {a['speedup']:.2f}x, B {b['speedup']:.2f}x")
    return out
