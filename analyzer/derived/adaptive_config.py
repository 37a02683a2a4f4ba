"""The adaptive config SGLang reads (`--speculative-adaptive-config`), chosen from measured economics per batch size
and K (docs/economics.md, "The adaptive config").

Input: the per-(batch-size group, K) economics of one or more runs (groups.py `BatchGroups`, each run's headline
source: its sidecars without the profiler where it has them), all measured against the same plain run. A run
that rotated K inside one launch (`specprof capture --sweep-steps`) gives every K at every batch size alone;
several runs at different K give one K each.

Per batch-size group (the rows of every run whose group starts at the same batch size; a group with no plain step at
its sizes has no speedup and is left out), among its measured Ks:
- 0 (plain decoding) where every K's speedup interval lies below 1: plain decoding wins there;
- else the K of the best tokens/s, or the smallest K whose tokens/s interval overlaps the best one's (a K whose
  interval does not reach the best's is beaten; among those it is not told from, the fewest draft steps).
Where one K was measured at one batch-size group in several runs, the run with the most cycles there gives it.

SGLang's format (sglang/srt/speculative/adaptive_spec_params.py `_load_adaptive_config`, 0.5.16-0.5.23): an object
keyed by batch size as a decimal string, each `{"candidate_steps": [K, ...]}`; a batch routes to the largest key
not above it (the first key below the smallest), so each row's key is its group's lowest batch size. One candidate
per row: the slot keeps that K (its EMA has nothing to move between). The server's --speculative-num-steps must be
one of the candidates (SGLang refuses it otherwise): `server_steps`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

ROW_SCHEMA = {"batch_group": pl.Utf8, "batch_lo": pl.Int64, "batch_hi": pl.Int64, "steps": pl.Int64,
              "run": pl.Utf8, "cycles": pl.Int64, "tokens_per_s": pl.Float64, "tokens_per_s_lo": pl.Float64,
              "tokens_per_s_hi": pl.Float64, "speedup": pl.Float64, "speedup_lo": pl.Float64,
              "speedup_hi": pl.Float64, "cycle_ns": pl.Int64, "baseline_ns": pl.Int64, "chosen": pl.Boolean}
CHOICE_SCHEMA = {"batch_group": pl.Utf8, "threshold": pl.Int64, "steps": pl.Int64, "measured_steps": pl.Int64,
                 "speedup": pl.Float64, "speedup_lo": pl.Float64, "speedup_hi": pl.Float64, "why": pl.Utf8}


@dataclass
class AdaptiveConfig:
    """`config`: the JSON object SGLang reads; `choices`: one row per batch-size threshold (CHOICE_SCHEMA: the
    K written, `measured_steps` the K whose speedup is shown (the best measured K where 0 is written), why);
    `candidates`: every measured (group, K) considered (ROW_SCHEMA, `chosen` marks the K written);
    `server_steps`: a --speculative-num-steps the server accepts with this config; `notes`."""
    config: dict
    choices: pl.DataFrame
    candidates: pl.DataFrame
    server_steps: int
    notes: list[str] = field(default_factory=list)


def _candidates(runs: list[tuple[str, object]]) -> list[dict]:
    best: dict = {}
    for name, groups in runs:
        if groups is None or not groups.rows.height:
            continue
        rows = groups.rows.filter(pl.col("source") == groups.rows["source"][0])
        for r in rows.iter_rows(named=True):
            if r["speedup"] is None or r["steps"] is None or r["tokens_per_s"] is None:
                continue
            key = (r["batch_lo"], r["steps"])
            if key in best and best[key]["cycles"] >= r["cycles"]:
                continue
            best[key] = {"batch_group": r["batch_group"], "batch_lo": r["batch_lo"], "batch_hi": r["batch_hi"],
                         "steps": r["steps"], "run": name, "cycles": r["cycles"],
                         "tokens_per_s": r["tokens_per_s"], "tokens_per_s_lo": r["tokens_per_s_lo"],
                         "tokens_per_s_hi": r["tokens_per_s_hi"], "speedup": r["speedup"],
                         "speedup_lo": r["speedup_lo"], "speedup_hi": r["speedup_hi"], "cycle_ns": r["cycle_ns"],
                         "baseline_ns": r["baseline_ns"], "chosen": False}
    return sorted(best.values(), key=lambda r: (r["batch_lo"], r["steps"]))


def _lo(r: dict, name: str) -> float:
    v = r[f"{name}_lo"]
    return r[name] if v is None else v


def _hi(r: dict, name: str) -> float:
    v = r[f"{name}_hi"]
    return r[name] if v is None else v


def choose(rows: list[dict]) -> tuple[dict, int, str]:
    """(the row whose K is written or whose speedup is shown, the K written, why) for one batch-size group's
    measured Ks."""
    best = max(rows, key=lambda r: (r["tokens_per_s"], -r["steps"]))
    if all(_hi(r, "speedup") < 1 for r in rows):
        return best, 0, "plain decoding wins: every K's speedup interval is below 1"
    tied = [r for r in rows if _hi(r, "tokens_per_s") >= _lo(best, "tokens_per_s")]
    pick = min(tied, key=lambda r: r["steps"])
    if pick is best:
        why = "best tokens/s" if len(rows) > 1 else "the only K measured"
    else:
        why = f"its tokens/s interval overlaps K={best['steps']}'s (the best): the fewer draft steps"
    return pick, pick["steps"], why


def adaptive_config(runs: list[tuple[str, object]]) -> AdaptiveConfig | None:
    """The adaptive config from `runs`: (name, BatchGroups or None) each, measured against one plain run. None
    where no (group, K) has a speedup (no baseline at any batch size)."""
    cands = _candidates(runs)
    if not cands:
        return None
    by_group: dict = {}
    for r in cands:
        by_group.setdefault(r["batch_lo"], []).append(r)
    config, choices, notes = {}, [], []
    for lo, rows in sorted(by_group.items()):
        row, k, why = choose(rows)
        if k == row["steps"]:
            row["chosen"] = True
        config[str(lo)] = {"candidate_steps": [k]}
        choices.append({"batch_group": row["batch_group"], "threshold": lo, "steps": k,
                        "measured_steps": row["steps"], "speedup": row["speedup"], "speedup_lo": row["speedup_lo"],
                        "speedup_hi": row["speedup_hi"], "why": why})
    steps = sorted({c["steps"] for c in choices})
    server = steps[len(steps) // 2]  # SGLang's own default where --speculative-num-steps is not given
    zero = [r for r in cands if r["steps"] == 0 and r["cycle_ns"] and r["baseline_ns"]]
    if zero:
        notes.append("K = 0 inside the speculative worker is not a plain decode step (it still runs the verify and "
                     "the draft's extend): its cycle against the plain step at " + "; ".join(
                         f"batch {r['batch_group']}: {r['cycle_ns'] / 1e6:.3f} ms against {r['baseline_ns'] / 1e6:.3f}"
                         f" ms ({r['cycle_ns'] / r['baseline_ns']:.2f}x)" for r in zero)
                     + "; a 0 written runs this K = 0 (SGLang's adaptive config cannot switch speculation off)")
    for lo, rows in sorted(by_group.items()):
        k0 = next((r for r in rows if r["steps"] == 0), None)
        better = [r for r in rows if r["steps"] > 0 and k0 is not None
                  and _lo(r, "tokens_per_s") > _hi(k0, "tokens_per_s")]
        if config[str(lo)]["candidate_steps"] == [0] and better:
            b = max(better, key=lambda r: r["tokens_per_s"])
            notes.append(f"batch {b['batch_group']}: plain decoding wins, and 0 is written, but K = {b['steps']} "
                         f"measured above K = 0 there ({b['speedup']:.2f}x against {k0['speedup']:.2f}x of plain): "
                         "where the server must stay speculative, K = " + str(b["steps"]) + " serves this size better")
    unlike = sorted(lo for lo, rows in by_group.items() if len({r["batch_hi"] for r in rows}) > 1)
    if unlike:
        notes.append("the runs grouped batch sizes differently from batch " + ", ".join(map(str, unlike))
                     + ": their groups starting there are compared as one row")
    first = min(by_group)
    if first > 1:
        notes.append(f"no group below batch {first}: smaller batches route to the first row (SGLang's rule)")
    return AdaptiveConfig(config, pl.DataFrame(choices, schema=CHOICE_SCHEMA, orient="row"),
                          pl.DataFrame(cands, schema=ROW_SCHEMA, orient="row"), server, notes)
