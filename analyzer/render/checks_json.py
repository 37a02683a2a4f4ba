"""JSON for the cross-check, the economics (keys `crosscheck` and `economics` of `specprof.analysis/2`), the
sweep (`specprof.sweep/1`) and the comparison (`specprof.compare/1`). Milliseconds here, ns inside.
Keys are documented in docs/json.md, docs/crosscheck.md and docs/economics.md."""

from __future__ import annotations

import json
import math

from analyzer.compare import Comparison
from analyzer.crosscheck import FLOOR_NS, TOLERANCE, CrossCheck
from analyzer.economics import Economics
from analyzer.sweep import Sweep

SWEEP_SCHEMA = "specprof.sweep/1"
COMPARE_SCHEMA = "specprof.compare/1"


def ms(ns) -> float | None:
    return None if _bad(ns) else round(float(ns) / 1e6, 6)


def us(ns) -> float | None:
    return None if _bad(ns) else round(float(ns) / 1e3, 3)


def num(x, digits: int = 6):
    return None if _bad(x) else round(float(x), digits)


def _bad(x) -> bool:
    return x is None or (isinstance(x, float) and not math.isfinite(x))


def crosscheck(c: CrossCheck) -> dict:
    inflation = None
    if c.inflation is not None:
        inflation = {
            "baseline": c.baseline,
            "rows": [
                {"measure": r["measure"], "phase": r["phase"], "cycles_with": r["cycles_with"],
                 "cycles_without": r["cycles_without"], "with_ms": ms(r["with_ns"]), "without_ms": ms(r["without_ns"]),
                 "ratio": num(r["ratio"], 4), "ratio_ci95": [num(r["ratio_lo"], 4), num(r["ratio_hi"], 4)],
                 "inflation_pct": num((r["ratio"] - 1) * 100, 2), "verdict": r["verdict"]}
                for r in c.inflation.iter_rows(named=True)
            ],
        }
    accept = None
    if c.accept is not None:
        a = c.accept
        accept = {"sidecar_accept_len": num(a.sidecar_pooled, 4), "sidecar_per_cycle_mean": num(a.sidecar_per_cycle, 4),
                  "request_rounds": a.request_rounds, "cycles": a.cycles, "log_lines": a.log_lines,
                  "log_mean": num(a.log_mean, 4), "log_weighted": num(a.log_weighted, 4),
                  "log_accept_rate_mean": num(a.log_rate_mean, 4), "gap": num(a.gap, 4),
                  "overlap_bound": num(a.overlap_bound, 4), "verdict": a.verdict, "explanations": a.explanations}
    return {
        "profiler": c.profiler, "tolerance_pct": TOLERANCE * 100, "floor_ms": ms(FLOOR_NS),
        "alignment": [
            {"path": r["path"], "pid": r["pid"], "trace_pid": r["trace_pid"], "method": r["method"],
             "marks": r["marks"], "offset_ns": r["offset_ns"], "drift_ppm": num(r["drift_ppm"], 3),
             "mark_lag_us": us(r["mark_lag_ns"]), "sidecar_cycles": r["sidecar_cycles"],
             "trace_cycles": r["trace_cycles"], "matched_cycles": r["matched_cycles"],
             "first_index": r["first_index"], "last_index": r["last_index"],
             "residual_p50_us": us(r["residual_p50_ns"]), "residual_max_us": us(r["residual_max_ns"])}
            for r in c.alignment.iter_rows(named=True)
        ],
        "consistency": [
            {"phase": r["phase"], "instances": r["instances"], "nsys_ms": ms(r["nsys_ns"]),
             "sidecar_ms": ms(r["sidecar_ns"]), "diff_ms": ms(r["diff_ns"]), "diff_pct": num(r["diff_pct"], 3),
             "abs_diff_p90_us": us(r["abs_diff_p90_ns"]), "abs_diff_max_us": us(r["abs_diff_max_ns"]),
             "tolerance_ms": ms(r["tolerance_ns"]), "verdict": r["verdict"]}
            for r in c.consistency.iter_rows(named=True)
        ],
        "inflation": inflation,
        "accept": accept,
        "notes": c.notes,
    }


def economics(e: Economics) -> dict:
    return {
        "baseline_ms": ms(e.baseline_ns), "baseline_source": e.baseline_source,
        "estimates": [
            {"source": r["source"], "profiled": r["profiled"], "cycles": r["cycles"], "cycle_ms": ms(r["cycle_ns"]),
             "accept_len": num(r["accept_len"], 4), "batch": num(r["batch"], 3),
             "tokens_per_s": num(r["tokens_per_s"], 1), "tokens_per_s_per_request": num(r["tokens_per_s_per_request"], 2),
             "baseline_ms": ms(r["baseline_ns"]), "baseline_tokens_per_s": num(r["baseline_tokens_per_s"], 1),
             "speedup": num(r["speedup"], 4), "break_even_accept_len": num(r["break_even_accept_len"], 4),
             "verdict": r["verdict"]}
            for r in e.estimates.iter_rows(named=True)
        ],
        "verdict": e.verdict,
        "notes": e.notes,
    }


def _fit(row: dict, unit: str) -> dict:
    return {
        "fixed_ms": ms(row["fixed_ns"]), f"per_{unit}_ms": ms(row["per_unit_ns"]),
        "ci95": {"fixed_ms": [ms(row["fixed_lo_ns"]), ms(row["fixed_hi_ns"])],
                 f"per_{unit}_ms": [ms(row["per_unit_lo_ns"]), ms(row["per_unit_hi_ns"])]},
        "ci95_runs": {"fixed_ms": [ms(row["fixed_runs_lo_ns"]), ms(row["fixed_runs_hi_ns"])],
                      f"per_{unit}_ms": [ms(row["per_unit_runs_lo_ns"]), ms(row["per_unit_runs_hi_ns"])]},
        "lack_of_fit_ms": ms(row["lack_of_fit_ns"]), "cycles": row["n"], "runs": row["runs"],
        "source": row["source"],
    }


def sweep(s: Sweep) -> dict:
    fits = {r["name"]: r for r in s.fits.iter_rows(named=True)}
    verify = _fit(fits["verify"], "token")
    verify["fixed_share"] = num(s.fixed_share, 4)
    return {
        "schema": SWEEP_SCHEMA,
        "runs": [
            {"path": r["path"], "steps": r["steps"], "tokens": r["tokens"], "cycles": r["cycles"],
             "accept_len": num(r["accept_len"], 4), "batch": num(r["batch"], 3), "draft_ms": ms(r["draft_ns"]),
             "verify_ms": ms(r["verify_ns"]), "rest_ms": ms(r["rest_ns"]), "cycle_ms": ms(r["cycle_ns"]),
             "period_unprofiled_ms": ms(r["period_unprofiled_ns"])}
            for r in s.runs.iter_rows(named=True)
        ],
        "verify": verify,
        "draft": _fit(fits["draft"], "step"),
        "rest": _fit(fits["rest"], "step"),
        "cycle": _fit(fits["cycle"], "step"),
        "cycle_unprofiled": _fit(fits["cycle_unprofiled"], "step") if "cycle_unprofiled" in fits else None,
        "basis": s.basis,
        "acceptance": {"positions": [{"position": r["position"], "reached": r["reached"], "accepted": r["accepted"],
                                      "rate": num(r["rate"], 4)} for r in s.acceptance.iter_rows(named=True)],
                       "pooled_rate": num(s.pooled_rate, 4)},
        "predictions": [
            {"steps": r["steps"], "tokens": r["tokens"], "accept_len": num(r["accept_len"], 4),
             "cycle_ms": ms(r["cycle_ns"]), "tokens_per_s": num(r["tokens_per_s"], 1),
             "tokens_per_s_per_request": num(r["tokens_per_s_per_request"], 2), "measured": r["measured"],
             "extrapolated": r["extrapolated"]}
            for r in s.predictions.iter_rows(named=True)
        ],
        "recommended_steps": s.recommended_steps,
        "reasoning": s.reasoning,
        "notes": s.notes,
    }


def compare(c: Comparison) -> dict:
    return {
        "schema": COMPARE_SCHEMA,
        "unit": c.unit,
        "a": {"path": c.a_path, "cycles": c.a_cycles},
        "b": {"path": c.b_path, "cycles": c.b_cycles},
        "total": {"a_ms": ms(c.a_total_ns), "b_ms": ms(c.b_total_ns), "diff_ms": ms(c.b_total_ns - c.a_total_ns),
                  "ratio": num(c.b_total_ns / c.a_total_ns, 4) if c.a_total_ns else None,
                  "change_pct": num(c.change_pct, 3)},
        "phases": [{"phase": r["phase"], "a_ms": ms(r["a_ns"]), "b_ms": ms(r["b_ns"]), "diff_ms": ms(r["diff_ns"]),
                    "ratio": num(r["ratio"], 4)} for r in c.phases.iter_rows(named=True)],
        "categories": [{"phase": r["phase"], "category": r["category"], "a_ms": ms(r["a_ns"]), "b_ms": ms(r["b_ns"]),
                        "diff_ms": ms(r["diff_ns"]), "ratio": num(r["ratio"], 4)}
                       for r in c.categories.iter_rows(named=True)],
        "notes": c.notes,
    }


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=True)
