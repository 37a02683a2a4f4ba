"""Every JSON document specprof writes (docs/json.md): `specprof.analysis/3` (one analysis, with its per-rank,
cross-check and economics keys), `specprof.ranks/1` (several traces side by side), `specprof.sweep/1`,
`specprof.compare/1` and `specprof.runs/1` (the results store's run list). Times in float milliseconds (ns
inside).

Additive keys may appear in later versions; a breaking change bumps `schema`.
"""

from __future__ import annotations

import json
import uuid

import polars as pl

from specprof.analyzer.derived import views
from specprof.analyzer.derived.adaptive_config import AdaptiveConfig
from specprof.analyzer.derived.analysis import Analysis
from specprof.analyzer.derived.compare import Comparison
from specprof.analyzer.derived.crosscheck import FLOOR_NS, GT_FLOOR_NS, GT_TOLERANCE, TOLERANCE, CrossCheck
from specprof.analyzer.derived.economics import Economics
from specprof.analyzer.derived.whole_run import PARTS as WHOLE_RUN_PARTS
from specprof.analyzer.derived.ranks import Ranks
from specprof.analyzer.derived.sweep import UNITS, Sweep, contradicts, negative_fixed
from specprof.analyzer.render.format import ms, ms_or_null, num, us_or_null

SCHEMA = "specprof.analysis/3"
TRACES_SCHEMA = "specprof.ranks/1"
SIDE_BY_SIDE_SCHEMA = "specprof.runs-side-by-side/1"
SWEEP_SCHEMA = "specprof.sweep/1"
ADAPTIVE_CONFIG_SCHEMA = "specprof.adaptive-config/1"
COMPARE_SCHEMA = "specprof.compare/1"
RUNS_SCHEMA = "specprof.runs/1"

def phase_list(rows, categories) -> list[dict]:
    """The `phases` entries (docs/json.md) of a phase table's view (derived/views.py `phase_rows`) and its (phase,
    category, ns) table."""
    cats: dict[str, dict[str, float]] = {}
    for row in categories.iter_rows(named=True):
        cats.setdefault(row["phase"], {})[row["category"]] = ms(row["ns"])
    return [
        {
            "name": r["phase"],
            "instances": r["instances"],
            "ops": r["ops"],
            "cpu_ms": ms(r["cpu"]),
            "gpu_span_ms": ms(r["gpu_span"]),
            "gpu_busy_ms": ms(r["gpu_busy"]),
            "attributed_ms": ms(r["attributed"]),
            "side_busy_ms": ms(r["side_busy"]) if "side_busy" in r else 0.0,
            "categories": cats.get(r["phase"], {}),
            "per_instance_ms": ms_or_null(r["per_instance"]), "share": num(r["share"], 6),
            "busy_ms": ms(r["busy"]), "idle_ms": ms(r["idle"]), "idle_share": num(r["idle_share"], 6),
            "top_busy": [{"category": c["category"], "ms": ms(c["ns"]), "share": num(c["share"], 6)}
                         for c in r["top_busy"] or []],
        }
        for r in rows.iter_rows(named=True)
    ]


def document(a: Analysis) -> dict:
    """The document without its `cycles` (an empty list): everything else, as `to_dict` gives it."""
    return _document(a)


def to_dict(a: Analysis, max_cycles: int | None = None) -> dict:
    return {**_document(a), "cycles": cycle_list(a, max_cycles) if a.traced else []}


def cycle_list(a: Analysis, max_cycles: int | None = None) -> list[dict]:
    """The `cycles` entries: one per cycle, its phases' attributed, busy and CPU time."""
    per_cycle: dict[int, dict] = {}
    # (rows as tuples: a cycle table has one row per cycle and phase, hundreds of thousands at scale)
    for cycle, phase, attributed, busy, cpu in a.cycle_phases.select(
            "cycle", "phase", "attributed", "gpu_busy", "cpu").iter_rows():
        per_cycle.setdefault(cycle, {})[phase] = {
            "attributed_ms": ms(attributed), "gpu_busy_ms": ms(busy), "cpu_ms": ms(cpu),
        }
    cycles_df = a.cycles if max_cycles is None else a.cycles.head(max_cycles)
    return [
        {"index": index, "pid": pid, "start_ns": start, "end_ns": end, "phases": per_cycle.get(cycle, {})}
        for cycle, index, pid, start, end in cycles_df.select("cycle", "index", "pid", "start", "end").iter_rows()
    ]


def _sidecar_document(a: Analysis) -> dict:
    """A run without nsys (its sidecars alone): the same keys, null where a value needs a trace, and `needs_nsys`
    (the one line that says so)."""
    return {
        "schema": SCHEMA,
        "source": {"path": a.data.path, "format": "sidecars", "nsys_version": None, "tool_version": None, "gpus": [],
                   "window": None, "start_ns": None},
        "needs_nsys": a.needs_nsys,
        "cycle_breakdown": cycle_breakdown(a.cycle_breakdown, a.breakdown_summary),
        "category_parents": None, "phases": None, "cycles": [], "unattributed": None, "launch": None, "shown": None,
        "capture_wall_ms": None, "streams": None, "totals": None,
        "notes": a.notes,
        "draft_shape": draft_shape(a.draft_shape),
        "crosscheck": crosscheck(a.crosscheck) if a.crosscheck is not None else None,
        "economics": economics(a.economics) if a.economics is not None else None,
        "sync_timer_estimate": None,
        "sync_calls": None,
        **ranks(None),
    }


def _document(a: Analysis) -> dict:
    """Everything but the cycles."""
    if not a.traced:
        return _sidecar_document(a)
    meta = a.trace.meta
    phases = phase_list(a.phase_rows, a.categories)
    un = a.unattributed
    tot = a.totals
    return {
        "schema": SCHEMA,
        "source": {
            "path": meta.path,
            "format": meta.format,
            "nsys_version": meta.tool_version if meta.format == "nsys-sqlite" else None,
            "tool_version": meta.tool_version,
            "gpus": meta.gpus,
            "window": meta.extra.get("window"),
            "start_ns": meta.start_ns,
        },
        # Additive: the answer first, the values of the summary at the top of `analyze` (derived/answer.py).
        "summary": summary(a.answer),
        "cycle_breakdown": cycle_breakdown(a.cycle_breakdown, a.breakdown_summary),
        # Category -> its parent (every kind of communication -> `communication`): sum a parent over its kinds.
        "category_parents": dict(sorted(a.category_parents.items())),
        "phases": phases,
        "cycles": [],
        "unattributed": {
            "ops": tot["unattributed_ops"],
            "ms": ms(tot["unattributed_ns"]),
            "by_reason": {r["reason"]: {"ops": r["ops"], "ms": ms(r["ns"])} for r in un.iter_rows(named=True)},
        },
        "launch": [
            {"phase": r["phase"], "launches": r["launches"], "queued": r["queued"], "api_cpu_ms": ms(r["api_ns"]),
             "latency_p50_us": us_or_null(r["latency_p50"]), "latency_p90_us": us_or_null(r["latency_p90"]),
             "latency_max_us": us_or_null(r["latency_max"]), "idle_latency_p50_us": us_or_null(r["idle_latency_p50"]),
             "idle_latency_p90_us": us_or_null(r["idle_latency_p90"]), "queued_share": num(r["queued_share"], 6)}
            for r in views.launch(a.launch).iter_rows(named=True)
        ],
        # Which rank and stream `phases`, `cycles` and `cycle_breakdown` are of (the headline rank's cycle stream).
        "shown": shown(a),
        "capture_wall_ms": ms(views.capture(a.ops, a.streams)["wall"]),
        "streams": [
            {"device": r["device"], "stream": r["stream"], "pid": r["pid"], "role": r["role"], "ops": r["ops"],
             "wall_ms": ms(r["wall"]), "busy_ms": ms(r["busy"]), "cpu_wait_ms": ms(r["cpu_wait"]),
             "launch_ms": ms(r["launch"]), "idle_ms": ms(r["idle"]), "overlapped_ms": ms(r["overlapped"]),
             "busy_share": num(r["busy_share"], 6), "cpu_wait_share": num(r["cpu_wait_share"], 6),
             "launch_share": num(r["launch_share"], 6), "idle_share": num(r["idle_share"], 6)}
            for r in views.streams(a.streams).iter_rows(named=True)
        ],
        # Additive: the sums the header and the report's tiles show (derived/views.py `totals`).
        "totals": totals(tot),
        "notes": a.notes,
        # Additive: the draft's shape, chain or tree (derived/run_economics.py `draft_shape_of`); null without drafts.
        "draft_shape": draft_shape(a.draft_shape),
        # Additive (docs/crosscheck.md, docs/economics.md): null unless sidecars were given.
        "crosscheck": crosscheck(a.crosscheck) if a.crosscheck is not None else None,
        "economics": economics(a.economics) if a.economics is not None else None,
        # Additive (docs/economics.md, "Per-position acceptance" and "Levers"): one entry per batch-size group (the
        # whole run: group null); empty for a run that does not draft or has no accept counts.
        "acceptance": [acceptance(x) for x in getattr(a, "acceptance", None) or []],
        "levers": [levers(x) for x in getattr(a, "levers", None) or []],
        # Additive (docs/economics.md): the workload as its client saw it; null without client records.
        "whole_run": whole_run(a.whole_run) if getattr(a, "whole_run", None) is not None else None,
        "sync_timer_estimate": sync_timers(a.sync_timers) if getattr(a, "sync_timers", None) else None,
        "sync_calls": sync_calls(a.sync_calls) if getattr(a, "sync_calls", None) else None,
        # Additive (docs/multirank.md): one entry per (process, device) with its own phases; skew across ranks.
        **ranks(a.ranks),
    }


def totals(t: dict) -> dict:
    """`totals`: derived/views.py `totals` in ms and shares."""
    return {"attributed_ms": ms(t["attributed"]), "gpu_busy_ms": ms(t["gpu_busy"]), "side_busy_ms": ms(t["side_busy"]),
            "outside_busy_ms": ms(t["outside_busy"]), "outside_share": num(t["outside_share"], 6),
            "unattributed_attributed_ms": ms(t["unattributed_attributed"]),
            "unattributed_share": num(t["unattributed_share"], 6), "device_wall_ms": ms(t["device_wall"]),
            "device_busy_ms": ms(t["device_busy"]), "device_busy_share": num(t["device_busy_share"], 6)}


def summary(ans: dict | None) -> dict | None:
    """`summary`: the values of the summary at the top of `analyze` (derived/answer.py), times in ms."""
    if ans is None:
        return None
    c, p = ans["cycle"], ans["pays"]
    cycle = None if c is None else {
        "basis": c["basis"], "period_ms": ms(c["period_ns"]), "untimed_share": num(c["untimed_share"], 6),
        "phases": [{"phase": r["phase"], "ms": ms(r["ns"]), "share": num(r["share"], 6)} for r in c["phases"]]}
    pays = {"speedup": None, "why": p["why"]} if p["speedup"] is None else {
        # as `economics.estimates` gives the same values
        "speedup": num(p["speedup"], 4), "speedup_ci": _pair(num(p["speedup_lo"], 4), num(p["speedup_hi"], 4)),
        "outcome": p["outcome"], "source": p["source"], "accept_len": num(p["accept_len"], 4),
        "cycle_ms": ms_or_null(p["cycle_ns"]), "baseline_ms": ms_or_null(p["baseline_ns"]),
        "break_even_accept_len": num(p["break_even_accept_len"], 4)}
    t = ans["trust"]
    return {"cycle": cycle, "pays": pays,
            "trust": {"ground_truth_max_diff_pct": num(t["ground_truth_pct"], 6),
                      "ground_truth_within": t["ground_truth_within"], "period_ratio": num(t["period_ratio"], 6),
                      "period_ratio_lo": num(t["period_ratio_lo"], 6), "period_ratio_hi": num(t["period_ratio_hi"], 6)},
            "next": ans["next"]}


def cycle_breakdown(b, s: dict | None = None) -> dict | None:
    """`cycle_breakdown` (and each `ranks[i].cycle_breakdown`): where one decode cycle of one rank goes on its cycle
    stream (derived/breakdown.py), with the run without the profiler beside it, and its figures beyond its tables
    (`s`: derived/views.py `breakdown_summary` of it; made here when not given); null with fewer than two
    cycles."""
    if b is None:
        return None
    s = s if s is not None else views.breakdown_summary(b)
    largest = s["largest"]
    return {
        "rank": b.rank, "why": b.why, "device": b.device, "stream": b.stream, "cycles": b.cycles,
        "cycle_ms": {"mean": ms_or_null(b.mean_ns), "median": ms_or_null(b.median_ns), "p90": ms_or_null(b.p90_ns),
                     "max": ms_or_null(s["max"]), "unprofiled_mean": ms_or_null(b.unprofiled_mean_ns)},
        "gpu_busy_ms_per_cycle": ms_or_null(s["busy_ns_per_cycle"]), "gpu_busy_share": num(s["busy_share"], 6),
        "ratio": num(s["ratio"], 4), "untimed_unprofiled_ms": ms_or_null(s["untimed_ns"]),
        "untimed_unprofiled_share": num(s["untimed_share"], 6),
        "largest_phase": None if largest is None else {"phase": largest["phase"], "share": num(largest["share"], 6),
                                                       "unprofiled": largest["unprofiled"]},
        "outside_share": num(s["outside_share"], 6),
        "idle_ms": ms_or_null(b.idle_ns), "idle_gaps": b.idle_gaps,
        "phases": [{"phase": r["phase"], "ms_per_cycle": ms_or_null(r["ns_per_cycle"]), "share": num(r["share"], 6),
                    "gpu_busy_ms_per_cycle": ms_or_null(r["busy_ns_per_cycle"]), "gpu_busy_share": num(r["busy_share"], 6),
                    "unprofiled_ms_per_cycle": ms_or_null(r["unprofiled_ns_per_cycle"]),
                    "ratio": num(r["ratio"], 4), "unprofiled_share": num(r["unprofiled_share"], 6)}
                   for r in b.phases.iter_rows(named=True)],
    }


def shown(a: Analysis) -> dict | None:
    """`shown`: the rank (and its device and cycle stream) whose tables the document's top level holds."""
    b = a.cycle_breakdown
    if b is None:
        return None
    return {"rank": b.rank, "device": b.device, "stream": b.stream, "why": b.why,
            "ranks": a.ranks.count if a.ranks is not None else 1}


def _comm_split(r) -> dict:
    return {"ms": ms(r["comm"]), "wait_ms": ms(r["wait"]), "transfer_ms": ms(r["transfer"]),
            "unmatched_ms": ms(r["unmatched"])}


def rank_entries(m: Ranks) -> list[dict]:
    """The `ranks` list: one entry per (process, device), each with its own `phases`."""
    out = []
    by_phase, by_kind = {}, {}
    for r in m.comm_phases.iter_rows(named=True):
        by_phase.setdefault(r["rank"], {})[r["phase"]] = _comm_split(r)
    for r in m.comm_kinds.iter_rows(named=True):
        by_kind.setdefault(r["rank"], {})[r["kind"]] = _comm_split(r)
    v = views.ranks_view(m.ranks, m.comm_kinds, m.collectives)
    for r in v["ranks"].iter_rows(named=True):
        cats = views.of_rank(m.categories, r["rank"])
        out.append({
            "rank": r["rank"], "pid": r["pid"], "os_pid": r["os_pid"], "device": r["device"],
            "rank_source": r["source"], "ops": r["ops"], "streams": r["streams"], "wall_ms": ms(r["wall"]),
            "busy_ms": ms(r["busy"]), "busy_share": num(r["busy_share"], 6), "attributed_ms": ms(r["attributed"]),
            "communication": {"ms": ms(r["comm"]), "wait_ms": ms(r["wait"]), "transfer_ms": ms(r["transfer"]),
                              "unmatched_ms": ms(r["unmatched"]), "by_phase": by_phase.get(r["rank"], {}),
                              "by_kind": by_kind.get(r["rank"], {})},
            "phases": phase_list(views.phase_rows(views.of_rank(m.phases, r["rank"]), cats), cats),
            "cycle_breakdown": cycle_breakdown(m.breakdown_of(r["rank"])),
        })
    return out


def skew_entry(m: Ranks) -> dict | None:
    """`rank_skew`: per phase min/max/skew across ranks, the collectives' split, the stragglers (null with one rank)."""
    if m.count < 2:
        return None
    top = m.straggler()
    v = views.ranks_view(m.ranks, m.comm_kinds, m.collectives)
    worst = views.most_waited_for(m.stragglers)
    return {
        "phases": [{"name": r["phase"], "ranks": r["ranks"], "min_ms": ms(r["min"]), "max_ms": ms(r["max"]),
                    "mean_ms": ms(r["mean"]), "skew_ms": ms(r["skew"]), "skew_pct": num(r["skew_pct"], 3),
                    "min_rank": r["min_rank"], "max_rank": r["max_rank"]} for r in m.skew.iter_rows(named=True)],
        "collectives": [{"name": r["name"], "kind": r["kind"], "ranks": r["ranks"], "instances": r["instances"],
                         "unmatched": r["unmatched"], "ms": ms(r["ns"]), "wait_ms": ms(r["wait"]),
                         "transfer_ms": ms(r["transfer"]), "overlap_pct": num(r["overlap_pct"], 3),
                         "wait_share": num(r["wait_share"], 6),
                         "shifts": r["shifts"]} for r in v["collectives"].iter_rows(named=True)],
        "matched_instances": v["instances"],
        "stragglers": [{"rank": r["rank"], "last": r["last"], "share": num(r["share"], 3),
                        "margin_mean_us": us_or_null(r["margin_mean"]), "margin_max_us": us_or_null(r["margin_max"]),
                        "caused_wait_ms": ms(r["caused"])} for r in m.stragglers.iter_rows(named=True)],
        "straggler": None if top is None else {"rank": top["rank"], "last": top["last"],
        "share": num(top["share"], 3),
                                               "margin_mean_us": us_or_null(top["margin_mean"]),
                                               "caused_wait_ms": ms(top["caused"])},
        "most_waited_for": None if worst is None else {"rank": worst["rank"], "last": worst["last"],
                                                       "margin_mean_us": us_or_null(worst["margin_mean"]),
                                                       "caused_wait_ms": ms(worst["caused"])},
        "notes": list(m.notes),
    }


def ranks(m: Ranks | None) -> dict:
    """The additive keys of `specprof.analysis/3`: `ranks` and `rank_skew` (null when not computed)."""
    if m is None:
        return {"ranks": None, "rank_skew": None}
    return {"ranks": rank_entries(m), "rank_skew": skew_entry(m)}


def crosscheck(c: CrossCheck) -> dict:
    inflation = None
    if c.inflation is not None:
        inflation = {
            "baseline": c.baseline,
            "rows": [
                {"measure": r["measure"], "phase": r["phase"], "cycles_with": r["cycles_with"],
                 "cycles_without": r["cycles_without"], "with_ms": ms_or_null(r["with_ns"]),
                 "without_ms": ms_or_null(r["without_ns"]),
                 "ratio": num(r["ratio"], 4), "ratio_ci95": [num(r["ratio_lo"], 4), num(r["ratio_hi"], 4)],
                 "inflation_pct": num(r["inflation_pct"], 2), "verdict": r["verdict"],
                 "noise_pct": num(r["noise_pct"], 2)}
                for r in views.inflation_rows(c.inflation).iter_rows(named=True)
            ],
        }
    accept = None
    if c.accept is not None:
        a = c.accept
        accept = {"sidecar_accept_len": num(a.sidecar_pooled, 4),
        "sidecar_per_cycle_mean": num(a.sidecar_per_cycle, 4),
                  "request_rounds": a.request_rounds, "cycles": a.cycles, "log_lines": a.log_lines,
                  "log_mean": num(a.log_mean, 4), "log_weighted": num(a.log_weighted, 4),
                  "log_accept_len": num(a.log_accept_len, 4),
                  "log_accept_rate_mean": num(a.log_rate_mean, 4), "gap": num(a.gap, 4),
                  "overlap_bound": num(a.overlap_bound, 4), "verdict": a.verdict, "explanations": a.explanations}
    return {
        "profiler": c.profiler, "tolerance_pct": TOLERANCE * 100, "floor_ms": ms_or_null(FLOOR_NS),
        "alignment": [
            {"path": r["path"], "pid": r["pid"], "trace_pid": r["trace_pid"], "method": r["method"],
             "marks": r["marks"], "offset_ns": r["offset_ns"], "drift_ppm": num(r["drift_ppm"], 3),
             "mark_lag_us": us_or_null(r["mark_lag_ns"]), "sidecar_cycles": r["sidecar_cycles"],
             "trace_cycles": r["trace_cycles"], "matched_cycles": r["matched_cycles"],
             "first_index": r["first_index"], "last_index": r["last_index"],
             "residual_p50_us": us_or_null(r["residual_p50_ns"]), "residual_max_us": us_or_null(r["residual_max_ns"])}
            for r in c.alignment.iter_rows(named=True)
        ],
        "consistency": [
            {"phase": r["phase"], "instances": r["instances"], "nsys_ms": ms_or_null(r["nsys_ns"]),
             "sidecar_ms": ms_or_null(r["sidecar_ns"]), "diff_ms": ms_or_null(r["diff_ns"]),
             "diff_pct": num(r["diff_pct"], 3),
             "abs_diff_p90_us": us_or_null(r["abs_diff_p90_ns"]), "abs_diff_max_us": us_or_null(r["abs_diff_max_ns"]),
             "tolerance_ms": ms_or_null(r["tolerance_ns"]), "verdict": r["verdict"]}
            for r in c.consistency.iter_rows(named=True)
        ],
        "inflation": inflation,
        "accept": accept,
        "ground_truth": None if c.ground_truth is None else {
            "tolerance_pct": GT_TOLERANCE * 100, "floor_ms": ms_or_null(GT_FLOOR_NS),
            "rows": [
                {"phase": r["phase"], "instances": r["instances"], "stream": r["stream"],
                 "attributed_ms": ms_or_null(r["attributed_ns"]), "events_ms": ms_or_null(r["events_ns"]),
                 "diff_ms": ms_or_null(r["diff_ns"]), "diff_pct": num(r["diff_pct"], 3),
                 "abs_diff_max_us": us_or_null(r["abs_diff_max_ns"]), "tolerance_ms": ms_or_null(r["tolerance_ns"]),
                 "verdict": r["verdict"]}
                for r in c.ground_truth.iter_rows(named=True)
            ]},
        "notes": c.notes,
    }


def sync_timers(t) -> dict:
    """derived/sync_timers.py SyncTimerEstimate."""
    return {"cycle_ms": ms_or_null(t.cycle_ns), "synced_cycle_ms": ms_or_null(t.synced_cycle_ns),
            "cycle_inflation_pct": num(t.cycle_inflation_pct, 2), "sync_ms": ms_or_null(t.sync_ns),
            "syncs_per_cycle": num(t.syncs_per_cycle, 2), "cycles": t.cycles, "bound_ms": ms_or_null(t.bound_ns),
            "per_phase": [{"phase": r["phase"], "instances": r["instances"], "events_ms": ms_or_null(r["events_ns"]),
                           "timer_ms": ms_or_null(r["timer_ns"]), "inflation_pct": num(r["inflation_pct"], 2)}
                          for r in t.phases.iter_rows(named=True)],
            "notes": t.notes}


def sync_calls(c) -> dict:
    """derived/sync_calls.py SyncCalls."""
    return {"calls": c.calls, "total_ms": ms_or_null(c.total_ns),
            "own_us": None if c.own_ns is None else num(c.own_ns / 1e3, 3),
            "per_phase": [{"phase": r["phase"], "call": r["call"], "calls": r["calls"],
                           "total_ms": ms_or_null(r["total_ns"]), "mean_ms": ms_or_null(r["mean_ns"]),
                           "own_us": None if r["own_ns"] is None else num(r["own_ns"] / 1e3, 3)}
                          for r in c.phases.iter_rows(named=True)],
            "warning": c.warning}


def _pair(lo, hi):
    """A 95 % interval [lo, hi], or null when unknown."""
    return None if lo is None or hi is None else [lo, hi]


def draft_shape(shape) -> dict | None:
    """`draft_shape`: derived/draft_shape.py DraftShape of a run that drafts; null for one that does not."""
    if shape.kind is None:
        return None
    return {"kind": shape.kind, "steps": shape.steps, "topk": shape.topk, "num_draft_tokens": shape.num_draft_tokens,
            "verify_tokens": shape.verify_tokens, "max_accept_len": shape.max_accept_len, "source": shape.source,
            "description": shape.description}


def acceptance(acc) -> dict:
    """An entry of `acceptance`: derived/acceptance.py Acceptance."""
    return {"group": acc.group, "steps": acc.steps, "rounds": acc.rounds, "accept_len": num(acc.accept_len, 4),
            "positions": [{"position": r["position"], "reached": r["reached"], "accepted": r["accepted"],
                           "at_least": num(r["at_least"], 4),
                           "at_least_ci": _pair(num(r["at_least_lo"], 4), num(r["at_least_hi"], 4)),
                           "rate": num(r["rate"], 4), "rate_ci": _pair(num(r["rate_lo"], 4), num(r["rate_hi"], 4))}
                          for r in acc.positions.iter_rows(named=True)]}


def levers(lv) -> dict:
    """An entry of `levers`: derived/levers.py Levers."""
    return {"group": lv.group, "source": lv.source, "basis": lv.basis, "cycle_ms": ms_or_null(lv.cycle_ns),
            "accept_len": num(lv.accept_len, 4), "speedup": num(lv.speedup, 4),
            "tokens_per_s": num(lv.tokens_per_s, 1),
            "rows": [{"lever": r["lever"], "kind": r["kind"], "cycle_ms": ms_or_null(r["cycle_ns"]),
                      "accept_len": num(r["accept_len"], 4), "tokens_per_s": num(r["tokens_per_s"], 1),
                      "tokens_per_s_ci": _pair(num(r["tokens_per_s_lo"], 1), num(r["tokens_per_s_hi"], 1)),
                      "speedup": num(r["speedup"], 4), "speedup_ci": _pair(num(r["speedup_lo"], 4),
                                                                           num(r["speedup_hi"], 4)),
                      "gain": num(r["gain"], 4), "held": r["held"]}
                     for r in lv.rows.iter_rows(named=True)]}


def whole_run(w) -> dict:
    """`whole_run`: derived/whole_run.py `WholeRun`, times in ms."""
    def one(r) -> dict:
        split = None if r.split is None else {
            "parts_ms": {p: ms(r.split.parts[p]) for p in WHOLE_RUN_PARTS}, "cycles": r.split.cycles,
            "stall_cycles": r.split.stalls, "steady_period_ms": ms(r.split.steady_ns), "aligned": r.split.aligned}
        return {"client_records": r.path, "under_nsys": r.profiled, "requests": r.requests, "tokens": r.tokens,
                "wall_ms": ms(r.wall_ns), "tokens_per_s": num(r.tokens_per_s, 3), "split": split}
    return {"runs": [one(r) for r in w.runs], "baseline": [one(r) for r in w.baseline],
            "tokens_per_s": num(w.tokens_per_s.value, 3),
            "baseline_tokens_per_s": num(w.baseline_tokens_per_s.value, 3) if w.baseline_tokens_per_s else None,
            "speedup": num(w.speedup, 6), "speedup_lo": num(w.speedup_lo, 6), "speedup_hi": num(w.speedup_hi, 6),
            "steady_speedup": num(w.steady_speedup, 6), "decode_speedup": num(w.decode_speedup, 6),
            "lines": w.lines}


def economics(e: Economics) -> dict:
    return {
        "baseline_ms": ms_or_null(e.baseline_ns), "baseline_source": e.baseline_source,
        "estimates": [
            {"source": r["source"], "profiled": r["profiled"], "cycles": r["cycles"],
             "cycle_ms": ms_or_null(r["cycle_ns"]),
             "accept_len": num(r["accept_len"], 4), "batch": num(r["batch"], 3),
             "tokens_per_s": num(r["tokens_per_s"], 1),
             "tokens_per_s_per_request": num(r["tokens_per_s_per_request"], 2),
             "baseline_ms": ms_or_null(r["baseline_ns"]), "baseline_tokens_per_s": num(r["baseline_tokens_per_s"], 1),
             "speedup": num(r["speedup"], 4), "break_even_accept_len": num(r["break_even_accept_len"], 4),
             "draft_steps": r["draft_steps"], "max_accept_len": r["max_accept_len"],
             "break_even_reachable": r["break_even_reachable"],
             "can_pay": r["break_even_reachable"],  # the same, under its former name (docs/json.md)
             "verdict": r["verdict"],
             "cycle_ms_ci": _pair(ms_or_null(r["cycle_lo_ns"]), ms_or_null(r["cycle_hi_ns"])),
             "accept_len_ci": _pair(num(r["accept_len_lo"], 4), num(r["accept_len_hi"], 4)),
             "tokens_per_s_ci": _pair(num(r["tokens_per_s_lo"], 1), num(r["tokens_per_s_hi"], 1)),
             "speedup_ci": _pair(num(r["speedup_lo"], 4), num(r["speedup_hi"], 4)),
             "break_even_accept_len_ci": _pair(num(r["break_even_lo"], 4), num(r["break_even_hi"], 4)),
             "runs": r["runs"], "interval_basis": r["interval_basis"]}
            for r in e.estimates.iter_rows(named=True)
        ],
        "baseline_ms_ci": _pair(ms_or_null(e.baseline_lo_ns), ms_or_null(e.baseline_hi_ns)),
        "draft_tree": e.draft_tree,
        "profiled_only": e.profiled_only,
        "gpu_waits_on_host": None if e.waits is None else [
            {"phase": r["phase"], "share_of_cycle": num(r["share_of_cycle"], 6), "wait_share": num(r["wait_share"], 6)}
            for r in e.waits.iter_rows(named=True)],
        "verdict": e.verdict,
        "notes": e.notes,
        "batch_groups": None if e.groups is None else batch_groups(e.groups),
    }


def batch_groups(g) -> dict:
    """`economics.batch_groups`: derived/groups.py BatchGroups (docs/json.md)."""
    return {
        "several": g.several,
        "groups": [
            {"source": r["source"], "profiled": r["profiled"], "batch_group": r["batch_group"],
             "batch_lo": r["batch_lo"], "batch_hi": r["batch_hi"], "exact": r["exact"], "steps": r["steps"],
             "cycles": r["cycles"], "cycle_ms": ms_or_null(r["cycle_ns"]),
             "cycle_ms_ci": _pair(ms_or_null(r["cycle_lo_ns"]), ms_or_null(r["cycle_hi_ns"])),
             "accept_len": num(r["accept_len"], 4),
             "accept_len_ci": _pair(num(r["accept_len_lo"], 4), num(r["accept_len_hi"], 4)),
             "batch": num(r["batch"], 3), "tokens_per_s": num(r["tokens_per_s"], 1),
             "tokens_per_s_ci": _pair(num(r["tokens_per_s_lo"], 1), num(r["tokens_per_s_hi"], 1)),
             "baseline_ms": ms_or_null(r["baseline_ns"]), "baseline_steps": r["baseline_steps"],
             "speedup": num(r["speedup"], 4), "speedup_ci": _pair(num(r["speedup_lo"], 4), num(r["speedup_hi"], 4)),
             "break_even_accept_len": num(r["break_even_accept_len"], 4),
             "break_even_accept_len_ci": _pair(num(r["break_even_lo"], 4), num(r["break_even_hi"], 4)),
             "outcome": r["outcome"], "time_share": num(r["time_share"], 4), "runs": r["runs"],
             "interval_basis": r["interval_basis"]}
            for r in g.rows.iter_rows(named=True)],
        "phases": [
            {"source": r["source"], "profiled": r["profiled"], "batch_group": r["batch_group"], "steps": r["steps"],
             "phase": r["phase"], "instances": r["instances"], "ms_per_cycle": ms_or_null(r["ns_per_cycle"]),
             "ms_per_cycle_ci": _pair(ms_or_null(r["lo_ns"]), ms_or_null(r["hi_ns"]))}
            for r in g.phases.iter_rows(named=True)],
        "crossover": g.crossover,
        "traffic_weighted_speedup": num(g.weighted_speedup, 4),
        "idle_ms": ms_or_null(g.idle_ns), "idle_gaps": g.idle_gaps,
        "notes": g.notes,
    }


def _fit(row: dict, unit: str) -> dict:
    return {
        "fixed_ms": ms_or_null(row["fixed_ns"]), f"per_{unit}_ms": ms_or_null(row["per_unit_ns"]),
        "ci95": {"fixed_ms": [ms_or_null(row["fixed_lo_ns"]), ms_or_null(row["fixed_hi_ns"])],
                 f"per_{unit}_ms": [ms_or_null(row["per_unit_lo_ns"]), ms_or_null(row["per_unit_hi_ns"])]},
        "ci95_runs": {"fixed_ms": [ms_or_null(row["fixed_runs_lo_ns"]), ms_or_null(row["fixed_runs_hi_ns"])],
                      f"per_{unit}_ms": [ms_or_null(row["per_unit_runs_lo_ns"]),
                                         ms_or_null(row["per_unit_runs_hi_ns"])]},
        "lack_of_fit_ms": ms_or_null(row["lack_of_fit_ns"]), "cycles": row["n"], "runs": row["runs"],
        "source": row["source"], "resolvable": row["resolvable"],
        "contradicts": ("fixed" if negative_fixed(row) else "per_unit") if contradicts(row) else None,
    }


def sweep(s: Sweep) -> dict:
    fits = {r["name"]: r for r in s.fits.iter_rows(named=True)}
    verify = _fit(fits["verify"], "token")
    verify["fixed_share"] = num(s.fixed_share, 4)
    return {
        "schema": SWEEP_SCHEMA,
        "runs": [
            {"path": r["path"], "steps": r["steps"], "tokens": r["tokens"], "draft_forwards": r["forwards"],
             "cycles": r["cycles"],
             "accept_len": num(r["accept_len"], 4), "accept_source": r["accept_source"], "batch": num(r["batch"], 3),
             "draft_ms": ms_or_null(r["draft_ns"]),
             "verify_ms": ms_or_null(r["verify_ns"]), "rest_ms": ms_or_null(r["rest_ns"]),
             "cycle_ms": ms_or_null(r["cycle_ns"]),
             "period_unprofiled_ms": ms_or_null(r["period_unprofiled_ns"])}
            for r in s.runs.iter_rows(named=True)
        ],
        "verify": verify,
        "draft": {"unit": UNITS[fits["draft"]["x"]], **_fit(fits["draft"], UNITS[fits["draft"]["x"]])},
        "rest": _fit(fits["rest"], "step"),
        "cycle": _fit(fits["cycle"], "step"),
        "cycle_unprofiled": _fit(fits["cycle_unprofiled"], "step") if "cycle_unprofiled" in fits else None,
        "basis": s.basis,
        "phase_basis": s.phase_basis,
        "extrapolate": s.extrapolate,
        "model_ok": s.model_ok, "contradictions": s.contradictions, "drift": s.drift,
        "baseline_ms": ms_or_null(s.baseline_ns), "baseline_source": s.baseline_source,
        "beats_plain": s.beats_plain,
        "acceptance": {"positions": [{"position": r["position"], "reached": r["reached"], "accepted": r["accepted"],
                                      "rate": num(r["rate"], 4), "assumed": r["assumed"]}
                                     for r in s.acceptance.iter_rows(named=True)],
                       "pooled_rate": num(s.pooled_rate, 4)},
        "predictions": [
            {"steps": r["steps"], "tokens": r["tokens"], "accept_len": num(r["accept_len"], 4),
             "predicted_accept_len": num(r["predicted_accept_len"], 4),
             "measured_accept_len": num(r["measured_accept_len"], 4), "cycle_ms": ms_or_null(r["cycle_ns"]),
             "fit_cycle_ms": ms_or_null(r["fit_cycle_ns"]), "tokens_per_s": num(r["tokens_per_s"], 1),
             "tokens_per_s_per_request": num(r["tokens_per_s_per_request"], 2),
             "tokens_per_s_per_request_ci": _pair(num(r["tokens_per_s_per_request_lo"], 2),
                                                  num(r["tokens_per_s_per_request_hi"], 2)),
             "measured": r["measured"],
             "extrapolated": r["extrapolated"], "assumed": r["assumed"], "speedup": num(r["speedup"], 4),
             "speedup_ci": _pair(num(r["speedup_lo"], 4), num(r["speedup_hi"], 4))}
            for r in s.predictions.iter_rows(named=True)
        ],
        "recommended_steps": s.recommended_steps, "tied_steps": s.tied_steps,
        "reasoning": s.reasoning,
        "notes": s.notes,
    }


def compare(c: Comparison, drafters=None) -> dict:
    return {
        "schema": COMPARE_SCHEMA,
        "unit": c.unit,
        "a": {"path": c.a_path, "cycles": c.a_cycles},
        "b": {"path": c.b_path, "cycles": c.b_cycles},
        "total": {"a_ms": ms_or_null(c.a_total_ns), "b_ms": ms_or_null(c.b_total_ns),
                  "diff_ms": ms_or_null(c.total_diff_ns), "ratio": num(c.total_ratio, 4),
                  "change_pct": num(c.change_pct, 3)},
        "phases": [{"phase": r["phase"], "a_ms": ms_or_null(r["a_ns"]), "b_ms": ms_or_null(r["b_ns"]),
                    "diff_ms": ms_or_null(r["diff_ns"]),
                    "ratio": num(r["ratio"], 4)} for r in c.phases.iter_rows(named=True)],
        "categories": [{"phase": r["phase"], "category": r["category"], "a_ms": ms_or_null(r["a_ns"]),
                        "b_ms": ms_or_null(r["b_ns"]),
                        "diff_ms": ms_or_null(r["diff_ns"]), "ratio": num(r["ratio"], 4)}
                       for r in c.categories.iter_rows(named=True)],
        "notes": c.notes,
        # Additive: two drafters of one target and workload (derived/drafters.py); null otherwise.
        "drafters": None if drafters is None else _drafters(drafters),
    }


def _drafter_side(s: dict) -> dict:
    return {"path": s["path"], "draft_model": s["draft_model"], "source": s.get("source"),
            "accept_len": num(s.get("accept_len"), 4),
            "accept_len_ci": _pair(num(s.get("accept_len_lo"), 4), num(s.get("accept_len_hi"), 4)),
            "cycle_ms": ms_or_null(s.get("cycle_ns")),
            "cycle_ms_ci": _pair(ms_or_null(s.get("cycle_lo_ns")), ms_or_null(s.get("cycle_hi_ns"))),
            "draft_ms": ms_or_null(s.get("draft_ns")), "draft_basis": s.get("draft_basis"),
            "tokens_per_s": num(s.get("tokens_per_s"), 1),
            "tokens_per_s_ci": _pair(num(s.get("tokens_per_s_lo"), 1), num(s.get("tokens_per_s_hi"), 1)),
            "speedup": num(s.get("speedup"), 4), "speedup_ci": _pair(num(s.get("speedup_lo"), 4),
                                                                     num(s.get("speedup_hi"), 4))}


def _drafters(d) -> dict:
    return {"a": _drafter_side(d.a), "b": _drafter_side(d.b),
            "positions": [{"position": r["position"],
                           **{f"{s}_{c}": num(r[f"{s}_{c}"], 4) for s in "ab" for c in ("at_least", "rate")},
                           **{f"{s}_{c}_ci": _pair(num(r[f"{s}_{c}_lo"], 4), num(r[f"{s}_{c}_hi"], 4))
                              for s in "ab" for c in ("at_least", "rate")},
                           "a_drafted": r["a_drafted"], "b_drafted": r["b_drafted"],
                           "at_least_diff": num(r["at_least_diff"], 4)} for r in d.positions.iter_rows(named=True)],
            "ratio": num(d.ratio, 4), "ratio_ci": _pair(num(d.ratio_lo, 4), num(d.ratio_hi, 4)),
            "faster": d.faster, "verdict": d.verdict}


def render(a: Analysis) -> str:
    """The JSON text: indented, except that each cycle is one line.

    The cycles (51,200 at 10 M kernels, each with its phases) are written by polars as text, one line
    each, not built as Python dicts: their numbers are made from the integer nanoseconds (decimal
    milliseconds, exact), so they parse to the very floats `to_dict` gives (tests/test_cli_analyze.py)."""
    doc = _document(a)
    lines = _cycle_lines(a) if a.traced else None
    if lines is None:
        return json.dumps(doc, indent=1, ensure_ascii=True)
    # A placeholder no trace can contain (a fresh random token), replaced once.
    token = f"specprof-cycles-{uuid.uuid4().hex}"
    text = json.dumps({**doc, "cycles": token}, indent=1, ensure_ascii=True)
    return text.replace(f'"{token}"', "[\n  " + lines + "\n ]", 1)


def _ms_text(col: str) -> pl.Expr:
    """Integer nanoseconds (null: 0) as milliseconds in JSON: q.rrrrrr, trailing zeros dropped."""
    ns = pl.col(col).fill_null(0).cast(pl.Int64)
    sign = pl.when(ns < 0).then(pl.lit("-")).otherwise(pl.lit(""))
    q, r = ns.abs() // 1_000_000, ns.abs() % 1_000_000
    text = (q.cast(pl.Utf8) + "." + r.cast(pl.Utf8).str.zfill(6)).str.strip_chars_end("0")
    return sign + pl.when(text.str.ends_with(".")).then(text + "0").otherwise(text)


def _int_text(col: str) -> pl.Expr:
    return pl.col(col).cast(pl.Utf8).fill_null("null")


def _cycle_lines(a: Analysis) -> str | None:
    """The cycles' JSON, one cycle per line (joined by ",\n  "), or None when there are none."""
    if a.cycles.is_empty():
        return None
    cp = a.cycle_phases.select("cycle", "phase", "attributed", "gpu_busy", "cpu")
    # Phase names come from the trace: each distinct one is encoded by Python's encoder, then looked up.
    names = cp.get_column("phase").cast(pl.Utf8).unique().drop_nulls()
    keys = pl.Series([json.dumps(n, ensure_ascii=True) for n in names.to_list()], dtype=pl.Utf8)
    entries = cp.select(
        "cycle",
        text=pl.col("phase").cast(pl.Utf8).replace_strict(names, keys, default="null")
        + pl.lit(': {"attributed_ms": ') + _ms_text("attributed") + pl.lit(', "gpu_busy_ms": ')
        + _ms_text("gpu_busy") + pl.lit(', "cpu_ms": ') + _ms_text("cpu") + pl.lit("}"),
    ).group_by("cycle", maintain_order=True).agg(pl.col("text").str.join(", "))
    lines = a.cycles.select("cycle", "index", "pid", "start", "end").join(
        entries, on="cycle", how="left", maintain_order="left").select(
        pl.lit('{"index": ') + _int_text("index") + pl.lit(', "pid": ') + _int_text("pid")
        + pl.lit(', "start_ns": ') + _int_text("start") + pl.lit(', "end_ns": ') + _int_text("end")
        + pl.lit(', "phases": {') + pl.col("text").fill_null("") + pl.lit("}}"))
    return lines.to_series().str.join(",\n  ").item()


def traces(digests, skew: pl.DataFrame | None, why: str = "") -> str:
    """Ranks of one run (`skew` not None): {"schema": "specprof.ranks/1", "ranks_of_one_run": true, "why",
    "ranks": [{"rank", "path", "analysis": specprof.analysis/3}], "skew"}; several runs: {"schema":
    "specprof.runs-side-by-side/1", "ranks_of_one_run": false, "why", "runs": [{"index", "rank", "path",
    "analysis"}]}. `digests`: each trace's rank, path and `doc` (`to_dict`), in order; `skew`: app/traces.py's
    skew across them; `why`: why they are (or are not) ranks of one run."""
    if skew is None:
        return json.dumps({"schema": SIDE_BY_SIDE_SCHEMA, "ranks_of_one_run": False, "why": why,
                           "runs": [{"index": i + 1, "rank": d.rank, "path": d.path, "analysis": d.doc}
                                    for i, d in enumerate(digests)]}, indent=1)
    doc = {"schema": TRACES_SCHEMA, "ranks_of_one_run": True, "why": why,
           "ranks": [{"rank": d.rank, "path": d.path, "analysis": d.doc} for d in digests],
           # additive: per phase across the traces (`min_trace`/`max_trace`: positions in `ranks`)
           "skew": [{"name": r["phase"], "traces": r["ranks"], "min_ms": ms(r["min"]), "max_ms": ms(r["max"]),
                     "skew_ms": ms(r["skew"]), "skew_pct": round(r["skew_pct"], 3), "min_trace": r["min_rank"],
                     "max_trace": r["max_rank"]} for r in skew.iter_rows(named=True)]}
    return json.dumps(doc, indent=1)


def runs(listed: pl.DataFrame) -> str:
    """{"schema": "specprof.runs/1", "runs": [{"id", "ref", "imported_at", "path", "format", "ranks", "cycles",
    "wall_ms", "per_cycle_ms", "steps", "accept_len", "speedup", "captured_at", "key"}]}."""
    out = []
    for r in views.runs_view(listed).iter_rows(named=True):
        out.append({"id": r["id"], "ref": f"@{r['id']}", "imported_at": r["imported_at"], "path": r["path"],
                    "format": r["format"], "ranks": r["ranks"], "cycles": r["cycles"], "wall_ms": ms(r["wall_ns"]),
                    "per_cycle_ms": ms_or_null(r["per_cycle_ns"]),
                    "steps": r["steps"], "accept_len": r["accept_len"], "speedup": r["speedup"],
                    "captured_at": r["captured_at"], "key": r["key"]})
    return json.dumps({"schema": RUNS_SCHEMA, "runs": out}, indent=1)


def adaptive_config(c: AdaptiveConfig, path: str) -> dict:
    return {
        "schema": ADAPTIVE_CONFIG_SCHEMA,
        "path": path,
        "config": c.config,
        "server_steps": c.server_steps,
        "rows": [{"batch_group": r["batch_group"], "threshold": r["threshold"], "steps": r["steps"],
                  "measured_steps": r["measured_steps"], "speedup": num(r["speedup"], 4),
                  "speedup_lo": num(r["speedup_lo"], 4), "speedup_hi": num(r["speedup_hi"], 4), "why": r["why"]}
                 for r in c.choices.iter_rows(named=True)],
        "candidates": [{"batch_group": r["batch_group"], "steps": r["steps"], "run": r["run"], "cycles": r["cycles"],
                        "tokens_per_s": num(r["tokens_per_s"], 2), "tokens_per_s_lo": num(r["tokens_per_s_lo"], 2),
                        "tokens_per_s_hi": num(r["tokens_per_s_hi"], 2), "speedup": num(r["speedup"], 4),
                        "speedup_lo": num(r["speedup_lo"], 4), "speedup_hi": num(r["speedup_hi"], 4),
                        "chosen": r["chosen"]}
                       for r in c.candidates.iter_rows(named=True)],
        "notes": list(c.notes),
    }


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=True)
