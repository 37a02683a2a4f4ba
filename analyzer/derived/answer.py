"""The answer first: the few values a person reads before any table (docs/economics.md, "The answer first").

`answer(...)` picks, from results the analysis already made (one number per thing: nothing here is measured a
second way), what the summary at the top of `analyze` shows:

- `cycle`: where a decode cycle goes. Its basis is the run without nsys where the run has one (the phases between
  their in-stream CUDA events, the cycle period start to start), else the capture under nsys; the real phases
  largest first by that basis's share, with their ms per cycle, and the share of the period no phase's events
  cover.
- `pays`: the economics' headline estimate (speedup with its 95 % interval, its outcome, what it was measured
  by), or why there is none.
- `trust`: how far to trust the figures: the attributed time against in-stream CUDA events (the largest
  |difference| of any phase), and how much nsys stretched the cycle period.
- `next`: the next command to run, by what the run lacks: a baseline, a run without nsys, a sweep over K.
"""

from __future__ import annotations

import polars as pl

from specprof.analyzer.derived.breakdown import CycleBreakdown
from specprof.analyzer.derived.crosscheck import CrossCheck
from specprof.analyzer.derived.draft_shape import DraftShape
from specprof.analyzer.derived.economics import Economics
from specprof.analyzer.derived.views import real_phases

TOP_PHASES = 3  # phases named in the summary's first line


def _cycle(breakdown: CycleBreakdown | None, summary: dict | None) -> dict | None:
    if breakdown is None:
        return None
    real = real_phases(breakdown.phases)
    unprofiled = breakdown.unprofiled_mean_ns is not None and bool(real["unprofiled_share"].is_not_null().any())
    share, ns = ("unprofiled_share", "unprofiled_ns_per_cycle") if unprofiled else ("share", "ns_per_cycle")
    top = (real.filter(pl.col(share).is_not_null()).sort(share, descending=True, maintain_order=True)
           .head(TOP_PHASES).select("phase", ns=pl.col(ns), share=pl.col(share)))
    return {"basis": "without nsys" if unprofiled else "under nsys",
            "period_ns": breakdown.unprofiled_mean_ns if unprofiled else breakdown.mean_ns,
            "phases": top.to_dicts(),
            # the part of the period no phase's events cover (views.breakdown_summary), without nsys only
            "untimed_share": summary["untimed_share"] if unprofiled and summary else None}


def _pays(economics: Economics | None) -> dict:
    head = economics.headline if economics is not None else None
    if head is None or head["speedup"] is None:
        why = ("no plain-decode baseline" if economics is None or not economics.baseline_ns
               else "no accept length or cycle period")
        return {"speedup": None, "why": why}
    return {k: head[k] for k in ("speedup", "speedup_lo", "speedup_hi", "outcome", "source", "accept_len",
                                 "cycle_ns", "baseline_ns", "break_even_accept_len")}


def _trust(check: CrossCheck | None) -> dict:
    out: dict = {"ground_truth_pct": None, "ground_truth_within": None, "period_ratio": None,
                 "period_ratio_lo": None, "period_ratio_hi": None}
    if check is None:
        return out
    gt = check.ground_truth
    if gt is not None and gt.height and gt["diff_pct"].is_not_null().any():
        out["ground_truth_pct"] = float(gt["diff_pct"].abs().max())
        out["ground_truth_within"] = bool((gt["verdict"] == "within").all())
    inf = check.inflation
    if inf is not None and inf.height:
        period = inf.filter((pl.col("measure") == "cpu") & (pl.col("phase") == "period"))
        if period.height:
            r = period.row(0, named=True)
            out.update(period_ratio=r["ratio"], period_ratio_lo=r["ratio_lo"], period_ratio_hi=r["ratio_hi"])
    return out


def _next(path: str | None, pays: dict, cycle: dict | None, shape: DraftShape, profiled: bool) -> str:
    run = path or "RUN"
    if pays["speedup"] is None and shape.speculative and pays["why"] == "no plain-decode baseline":
        return f"specprof analyze {run} --baseline PLAIN_RUN  (a plain-decode run of the same workload: does it pay)"
    if profiled and cycle is not None and cycle["basis"] == "under nsys":
        return ("specprof capture --no-nsys --gpu-events -o RUN/no-nsys -- SERVER...  (the same workload without "
                "nsys: the shares to act on, and nsys's inflation)")
    if shape.speculative:
        return (f"specprof sweep RUN_K... --baseline PLAIN_RUN  (runs at other draft step counts: which K pays "
                "most)")
    return f"specprof report {run} -o report.html  (the timeline and every panel in one page)"


def answer(breakdown: CycleBreakdown | None, breakdown_summary: dict | None, economics: Economics | None,
           check: CrossCheck | None, shape: DraftShape, path: str | None, profiled: bool) -> dict:
    """The summary's values (module docstring). `breakdown_summary`: views.breakdown_summary of `breakdown`;
    `path`: the run as the user named it; `profiled`: the trace was recorded under a profiler."""
    cycle = _cycle(breakdown, breakdown_summary)
    pays = _pays(economics)
    return {"cycle": cycle, "pays": pays, "trust": _trust(check), "next": _next(path, pays, cycle, shape, profiled)}
