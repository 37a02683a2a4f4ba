"""Does speculation pay? Cycle time, accept length, tokens/s, speedup and break-even (docs/economics.md).

A speculative cycle of mean duration C produces, per request, L tokens on average (L = mean accept length,
the bonus token included). A plain decode step of duration B produces one token per request. So:

    tokens/s per request = L / C          speedup = (L / C) / (1 / B) = L x B / C
    break-even accept length = C / B      (speculation pays when L > C / B)

With K draft steps a cycle accepts at most K + 1 tokens per request (every draft and the bonus): when the
break-even is above K + 1, speculation cannot pay at any acceptance.

Times are integer nanoseconds here; only renderers turn them into milliseconds.

`Economics` (what `Analysis.economics` holds; the HTML report reads it):
- `estimates`: one row per measurement of the cycle, the first one is the headline. Columns:
  `source` (where the cycle time was measured: "sidecar without nsys", "sidecar under nsys" or
  "trace cycle ranges under nsys"), `profiled` (bool: measured under nsys), `cycles` (periods averaged),
  `cycle_ns` (mean cycle period), `accept_len` (null when unknown), `batch` (mean requests per cycle, null
  when unknown), `tokens_per_s` (all requests together), `tokens_per_s_per_request`, `baseline_ns`,
  `baseline_tokens_per_s`, `speedup`, `break_even_accept_len`, `draft_steps` (K, null when unknown),
  `max_accept_len` (K + 1), `break_even_reachable` (break-even <= K + 1: the break-even accept length is one a
  cycle can reach at all; it says nothing of whether this run's accept length reaches it; null when either is
  unknown), `verdict` (one sentence); 95 % intervals `cycle_lo_ns`/`cycle_hi_ns`, `accept_len_lo`/`_hi`,
  `tokens_per_s_lo`/`_hi`, `speedup_lo`/`_hi`, `break_even_lo`/`_hi` (null when unknown), `runs` (repeated runs
  the cycle is measured over) and `interval_basis` ("cycles": the per-cycle scatter of one run; "runs": the
  repeated runs' means, where they are wider); `outcome` the verdict in one word, by the speedup's interval:
  "wins" (above 1), "loses" (below), "wash" (it holds 1), null without a speedup.
- `baseline_lo_ns`, `baseline_hi_ns`: the baseline step's 95 % interval (null for a given number).
- `baseline_ns`, `baseline_source`: the plain-decode step time and where it came from (null when not given).
- `verdict`: plain sentences about the headline row, and the profiled row when its verdict differs.
- `notes`: what was missing or assumed.
- `profiled_only`: every estimate was measured under the profiler; `waits`: then, per phase of the decode
  cycle, the share of its time the GPU waited for the host (derived/breakdown.py): what the profiler's CUDA
  tracing stretches most.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import polars as pl

from specprof.analyzer.derived.intervals import Measure, band, mean_measure, t975  # noqa: F401 (the economics' API)
from specprof.analyzer.model.numeric import np

# A gap between two cycles longer than this many median periods is idle time (no batch to run, a prefill
# of new requests), not part of a cycle's cost: such periods are left out and counted.
IDLE_GAP_FACTOR = 3.0

ESTIMATE_SCHEMA = {
    "source": pl.Utf8, "profiled": pl.Boolean, "cycles": pl.Int64, "cycle_ns": pl.Int64,
    "accept_len": pl.Float64, "batch": pl.Float64, "tokens_per_s": pl.Float64,
    "tokens_per_s_per_request": pl.Float64, "baseline_ns": pl.Int64, "baseline_tokens_per_s": pl.Float64,
    "speedup": pl.Float64, "break_even_accept_len": pl.Float64, "draft_steps": pl.Int64,
    "max_accept_len": pl.Int64, "break_even_reachable": pl.Boolean, "verdict": pl.Utf8,
    "cycle_lo_ns": pl.Int64, "cycle_hi_ns": pl.Int64, "accept_len_lo": pl.Float64, "accept_len_hi": pl.Float64,
    "tokens_per_s_lo": pl.Float64, "tokens_per_s_hi": pl.Float64, "speedup_lo": pl.Float64,
    "speedup_hi": pl.Float64, "break_even_lo": pl.Float64, "break_even_hi": pl.Float64, "runs": pl.Int64,
    "interval_basis": pl.Utf8, "outcome": pl.Utf8,
}


def run_of(files: pl.DataFrame) -> pl.DataFrame:
    """file -> run: a sidecar's folder is one run (the ranks of one run share it; a repeated twin has a folder of
    its own, RUN/no-nsys, RUN/no-nsys-2, ...). `files`: the sidecars' `files` table (file, path)."""
    return files.select("file", run=pl.col("path").map_elements(
        lambda p: os.path.dirname(os.path.abspath(p)), return_dtype=pl.Utf8))


def period_measure(cycles: pl.DataFrame, key: str = "pid", keep: pl.DataFrame | None = None,
                   runs: pl.DataFrame | None = None) -> Measure | None:
    """The busy cycle period (as `mean_period`) with its 95 % interval; `runs` (key, run): the repeated run of
    each `key`, when there are several."""
    p = cycle_periods(cycles, key)
    if keep is not None:
        p = p.join(keep.select(key, "index"), on=[key, "index"], how="semi")
    busy = p.filter(~pl.col("idle"))
    if busy.is_empty():
        return None
    if runs is not None:
        busy = busy.join(runs.rename({"file": key}) if key != "file" else runs, on=key, how="left")
    return mean_measure(busy["period"].to_numpy(), busy["run"].to_list() if runs is not None else None)


def accept_measure(cycles: pl.DataFrame, runs: pl.DataFrame | None = None) -> Measure | None:
    """The pooled accept length (as `accept_stats`) with its 95 % interval: the ratio estimator's standard error
    over cycles (correct drafts and request-rounds per cycle), or the repeated runs' spread where wider."""
    known = cycles.filter(pl.col("requests").is_not_null() & (pl.col("requests") > 0))
    if known.is_empty():
        return None
    labels = known.join(runs, on="file", how="left")["run"].to_list() \
        if runs is not None and "file" in known.columns else None
    m = ratio_measure(known["correct"].to_numpy(), known["requests"].to_numpy(), labels)
    return Measure(m.value + 1.0, m.half, m.n, m.runs, m.basis)


def ratio_measure(counts, totals, labels=None) -> Measure:
    """sum(counts) / sum(totals) over clusters (a cycle each: its request-rounds share the cycle's conditions) with
    its 95 % interval: the ratio estimator's standard error over the clusters, or, with `labels` (the repeated run
    of each cluster) naming two runs or more, the run ratios' spread where wider. The accept length is this plus 1
    (the bonus token); per-position acceptance (derived/acceptance.py) is this per position."""
    c = np.asarray(counts, dtype=float)
    r = np.asarray(totals, dtype=float)
    ratio = c.sum() / r.sum()
    n = len(c)
    half = (t975(n - 1) * math.sqrt(((c - ratio * r) ** 2).sum() / (n * (n - 1))) / r.mean()) if n > 1 else math.inf
    out = Measure(ratio, half, n)
    if labels is not None:
        names = list(dict.fromkeys(labels))
        if len(names) > 1:
            lab = np.asarray(labels)
            means = np.array([c[lab == x].sum() / r[lab == x].sum() for x in names])
            between = t975(len(names) - 1) * float(means.std(ddof=1)) / math.sqrt(len(names))
            out = Measure(out.value, max(half, between), n, len(names), "runs" if between > half else "cycles")
    return out


def rounds_accept(rounds: pl.DataFrame) -> Measure | None:
    """`accept_measure` over request-rounds (cycle, correct, and twin: the repeated twin, null for the run under
    the profiler), as the sweep and the results store keep them: the same accept length and interval as over the
    sidecar cycles they come from."""
    twins = "twin" in rounds.columns and rounds.height and rounds["twin"].null_count() == 0
    per = rounds.group_by(["twin", "cycle"] if twins else ["cycle"], maintain_order=True).agg(
        requests=pl.len(), correct=pl.col("correct").sum())
    if not twins:
        return accept_measure(per)
    return accept_measure(per.rename({"twin": "file"}), per.select(file="twin", run="twin").unique())


@dataclass
class Economics:
    estimates: pl.DataFrame
    baseline_ns: int | None
    baseline_source: str | None
    verdict: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    profiled_only: bool = False
    waits: pl.DataFrame | None = None  # phase, share_of_cycle, wait_share: the GPU waiting on the host
    baseline_lo_ns: int | None = None  # the baseline step's 95 % interval (None for a given number)
    baseline_hi_ns: int | None = None
    draft_tree: dict | None = None  # DraftShape.as_tree(): a tree draft's topk and tokens; None for a chain
    # the headline estimate's request-rounds (file, cycle, request, correct, twin): what its accept length is the mean of,
    # and per-position acceptance (derived/acceptance.py) is read from; None without accept counts
    rounds: pl.DataFrame | None = None
    every_round: pl.DataFrame | None = None  # the same source's request-rounds of every cycle, what groups select from
    groups: object = None  # derived/groups.py BatchGroups: the economics per batch size and K; None without sidecar

    @property
    def headline(self) -> dict | None:
        return self.estimates.row(0, named=True) if self.estimates.height else None


def cycle_periods(cycles: pl.DataFrame, key: str = "pid") -> pl.DataFrame:
    """Start-to-start periods of consecutive cycles (per `key`), with `idle` marking gaps to leave out.

    `cycles` needs `key`, `index` and `start`. A period belongs to the earlier cycle (`index`). Periods longer
    than IDLE_GAP_FACTOR x the median are idle gaps (`idle` true). With a `decode` column (sidecar cycles), only
    the periods of decode cycles (`verify`, or a plain `decode` step) are kept: a prefill batch run as a cycle
    is not one."""
    p = (
        cycles.sort(key, "start")
        .with_columns(period=pl.col("start").shift(-1).over(key) - pl.col("start"))
        .filter(pl.col("period").is_not_null())
    )
    if "decode" in p.columns:
        p = p.filter(pl.col("decode"))
    p = p.select(key, "index", "period")
    if p.is_empty():
        return p.with_columns(idle=pl.lit(False))
    median = p["period"].median()
    return p.with_columns(idle=pl.col("period") > IDLE_GAP_FACTOR * median)


def mean_period(cycles: pl.DataFrame, key: str = "pid", first: int | None = None,
                last: int | None = None, keep: pl.DataFrame | None = None) -> tuple[int | None, int, int]:
    """(mean busy period ns, periods averaged, idle gaps left out), over cycles with index in [first, last],
    or over the (key, index) rows of `keep` (the period of the last one reaches the next cycle even when that
    one is outside)."""
    p = cycle_periods(cycles, key)
    if keep is not None:
        p = p.join(keep.select(key, "index"), on=[key, "index"], how="semi")
    elif first is not None:
        p = p.filter(pl.col("index").is_between(first, last))
    busy = p.filter(~pl.col("idle"))
    if busy.is_empty():
        return None, 0, p.height
    return int(round(busy["period"].mean())), busy.height, p.height - busy.height


def accept_stats(cycles: pl.DataFrame) -> tuple[float | None, float | None, int]:
    """(mean accept length per request-round with the bonus token, mean requests per cycle, request-rounds)
    from sidecar cycles (`requests`, `correct`); (None, None, 0) when no cycle has accept counts."""
    known = cycles.filter(pl.col("requests").is_not_null() & (pl.col("requests") > 0))
    if known.is_empty():
        return None, None, 0
    requests = int(known["requests"].sum())
    correct = int(known["correct"].sum())
    return correct / requests + 1.0, requests / known.height, requests


def estimate(source: str, profiled: bool, cycles: int, cycle_ns: int | None, accept_len: float | None,
             batch: float | None, baseline_ns: int | None, draft_steps: int | None = None,
             cycle: Measure | None = None, accept: Measure | None = None, baseline: Measure | None = None) -> dict:
    """One row of `Economics.estimates` (see the module docstring). `cycle`, `accept`, `baseline`: the
    measurements with their intervals (a baseline given as a number has none and adds no width)."""
    row = {"source": source, "profiled": profiled, "cycles": cycles, "cycle_ns": cycle_ns,
           "accept_len": accept_len, "batch": batch, "tokens_per_s": None, "tokens_per_s_per_request": None,
           "baseline_ns": baseline_ns, "baseline_tokens_per_s": None, "speedup": None,
           "break_even_accept_len": None, "draft_steps": draft_steps,
           "max_accept_len": None if draft_steps is None else draft_steps + 1, "break_even_reachable": None, "verdict": None,
           **{k: None for k in ("cycle_lo_ns", "cycle_hi_ns", "accept_len_lo", "accept_len_hi", "tokens_per_s_lo",
                                "tokens_per_s_hi", "speedup_lo", "speedup_hi", "break_even_lo", "break_even_hi")},
           "runs": cycle.runs if cycle is not None else 1,
           "interval_basis": "runs" if any(m is not None and m.basis == "runs" for m in (cycle, accept, baseline))
           else "cycles"}
    rc = cycle.rel if cycle is not None and cycle.half is not None and math.isfinite(cycle.half) else None
    rl = accept.rel if accept is not None and accept.half is not None and math.isfinite(accept.half) else None
    rb = 0.0 if baseline is None or baseline.half is None else (
        baseline.rel if math.isfinite(baseline.half) else None)
    if cycle is not None and rc is not None:
        row["cycle_lo_ns"], row["cycle_hi_ns"] = int(round(cycle.lo)), int(round(cycle.hi))
    if accept is not None and rl is not None:
        row["accept_len_lo"], row["accept_len_hi"] = accept.lo, accept.hi
    if cycle_ns:
        if accept_len is not None:
            row["tokens_per_s_per_request"] = accept_len / (cycle_ns / 1e9)
            if batch is not None:
                row["tokens_per_s"] = row["tokens_per_s_per_request"] * batch
        if baseline_ns:
            row["break_even_accept_len"] = cycle_ns / baseline_ns
            if draft_steps is not None:
                row["break_even_reachable"] = row["break_even_accept_len"] <= draft_steps + 1
            if batch is not None:
                row["baseline_tokens_per_s"] = batch / (baseline_ns / 1e9)
            if accept_len is not None:
                row["speedup"] = accept_len * baseline_ns / cycle_ns
        if row["tokens_per_s"] is not None:
            row["tokens_per_s_lo"], row["tokens_per_s_hi"] = band(row["tokens_per_s"], rl, rc)
        row["speedup_lo"], row["speedup_hi"] = band(row["speedup"], rl, rb, rc)
        row["break_even_lo"], row["break_even_hi"] = band(row["break_even_accept_len"], rb, rc)
    row["verdict"] = verdict_sentence(row)
    wins = _wins(row)
    row["outcome"] = None if row["speedup"] is None else ("wash" if wins is None else ("wins" if wins else "loses"))
    return row


def _ci(lo, hi, digits: int = 2) -> str:
    return "" if lo is None or hi is None else f" ({lo:.{digits}f}-{hi:.{digits}f})"


def verdict_sentence(row: dict) -> str:
    """Plain words for one estimate: does speculation win, by how much, what would break even."""
    c, L, b = row["cycle_ns"], row["accept_len"], row["baseline_ns"]
    if not c:
        return "no cycle time: the run has fewer than two consecutive cycles"
    if not b:
        if L is None:
            return (f"cycle {c / 1e6:.3f} ms; accept length unknown (no accept counts) and no baseline step "
                    "time: whether speculation pays cannot be said")
        return (f"cycle {c / 1e6:.3f} ms, accept length {L:.3f}: {L / (c / 1e6):.3f} tokens/ms per request; "
                "no baseline step time (--baseline-ms or --baseline RUN), so no speedup")
    be = c / b
    if row.get("break_even_reachable") is False:
        k = row["draft_steps"]
        s = f" (now {L * b / c:.2f}x the plain-decode throughput)" if L is not None else ""
        return (f"speculation cannot pay at any acceptance: the cycle ({c / 1e6:.3f} ms) is {be:.2f} plain-decode "
                f"steps ({b / 1e6:.3f} ms), more than the {k + 1} tokens per request a cycle of K={k} draft steps can "
                f"yield at most (every draft and the bonus accepted){s}; to pay, the cycle must shrink below "
                f"{(k + 1) * b / 1e6:.3f} ms")
    if L is None:
        return (f"accept length unknown (no accept counts in the sidecar, or no sidecar): speculation pays "
                f"only if it exceeds {be:.3f} (cycle {c / 1e6:.3f} ms / baseline step {b / 1e6:.3f} ms)")
    s = L * b / c
    lo, hi = row.get("speedup_lo"), row.get("speedup_hi")
    ci = _ci(lo, hi)
    be_ci = _ci(row.get("break_even_lo"), row.get("break_even_hi"), 3)
    if lo is not None and lo <= 1 <= hi:
        return (f"a wash: {s:.2f}x{ci} the plain-decode throughput; the 95% interval holds 1, so these runs do not "
                f"tell whether speculation pays (break-even accept length {be:.3f}{be_ci}, now {L:.3f})")
    if s > 1:
        slack_c = L * b - c
        return (f"speculation wins: {s:.2f}x{ci} the plain-decode throughput ({(s - 1) * 100:.0f}% more tokens/s); "
                f"it stays ahead while the accept length is above {be:.3f}{be_ci} (now {L:.3f}, "
                f"{(1 - be / L) * 100:.0f}% of margin) or the cycle below {L * b / 1e6:.3f} ms "
                f"(now {c / 1e6:.3f}, {slack_c / 1e6:.3f} ms of margin)")
    if s < 1:
        return (f"speculation loses: {s:.2f}x{ci} the plain-decode throughput ({(1 - s) * 100:.0f}% fewer tokens/s); "
                f"to break even the accept length must grow from {L:.3f} to {be:.3f}{be_ci} (+{(be / L - 1) * 100:.0f}%) "
                f"or the cycle shrink from {c / 1e6:.3f} ms to {L * b / 1e6:.3f} ms "
                f"(-{(1 - L * b / c) * 100:.0f}%)")
    return f"break-even: speculation and plain decode give the same throughput (accept length {L:.3f} = {be:.3f})"


def economics(estimates: list[dict], baseline_ns: int | None, baseline_source: str | None,
              notes: list[str] | None = None, waits: pl.DataFrame | None = None, profiler: str = "nsys",
              twin_hint: str | None = None, baseline: Measure | None = None) -> Economics:
    """Assemble `Economics` from estimate rows (headline first). `waits` (phase, share_of_cycle, wait_share:
    the decode cycle's breakdown) says, when every estimate was measured under the profiler, how much of the
    cycle is the GPU waiting on the host, which the profiler stretches; `twin_hint` how to measure without it."""
    table = pl.DataFrame(estimates, schema=ESTIMATE_SCHEMA, orient="row") if estimates else \
        pl.DataFrame(schema=ESTIMATE_SCHEMA)
    profiled_only = bool(table.height) and bool(table["profiled"].all())
    verdict = []
    if table.height:
        head = table.row(0, named=True)
        verdict.append(f"cycle measured by the {head['source']}: {head['verdict']}")
        for other in table.iter_rows(named=True):
            if other is head or other["source"] == head["source"]:
                continue
            if _wins(other) != _wins(head):
                verdict.append(f"beware: the verdict flips with the cycle measured by the {other['source']}: "
                               f"{other['verdict']}")
            elif other["speedup"] is not None and head["speedup"] is not None:
                verdict.append(f"with the cycle measured by the {other['source']}: speedup {other['speedup']:.2f}x "
                               f"(cycle {other['cycle_ns'] / 1e6:.3f} ms)")
    if profiled_only:
        line = (f"measured under {profiler} only: its CUDA tracing slows every launch, so the cycle above is "
                "longer than the server's own")
        if waits is not None and waits.height:
            total = float(waits.select((pl.col("share_of_cycle") * pl.col("wait_share")).sum()).item())
            worst = waits.filter(pl.col("share_of_cycle") >= 0.05).sort("wait_share", descending=True)
            parts = ", ".join(f"{r['phase']} {100 * r['wait_share']:.0f}% of its time"
                              for r in worst.head(3).iter_rows(named=True))
            line += (f"; in this capture the GPU waited for the host {100 * total:.0f}% of the decode cycle ("
                     f"{parts}): that launch-bound part is what {profiler} stretches, a graph-replayed part "
                     "barely moves (docs/crosscheck.md)")
        if twin_hint:
            line += f"; measure the cycle without the profiler: {twin_hint}"
        verdict.append(line)
    notes = list(notes or [])
    if table.height and table.row(0, named=True)["speedup_lo"] is not None:
        head = table.row(0, named=True)
        notes.append(interval_note(head["runs"], head["interval_basis"],
                                   baseline is not None and baseline.half is None))
    lo = hi = None
    if baseline is not None and baseline.half is not None and math.isfinite(baseline.half):
        lo, hi = int(round(baseline.lo)), int(round(baseline.hi))
    return Economics(estimates=table, baseline_ns=baseline_ns, baseline_source=baseline_source,
                     verdict=verdict, notes=notes, profiled_only=profiled_only, waits=waits,
                     baseline_lo_ns=lo, baseline_hi_ns=hi)


def interval_note(runs: int, basis: str, given_baseline: bool = False) -> str:
    """What the 95 % intervals cover, in words."""
    if runs > 1:
        text = (f"95% intervals (in brackets) over {runs} repeated runs of the cycle: the wider of the per-cycle "
                "scatter and the run means' spread" + (" (the run means' here)" if basis == "runs" else ""))
    else:
        text = ("95% intervals (in brackets) from the per-cycle scatter of one run each: run-to-run noise (two "
                "launches of one server differed by 0.03% to 10% in this project's SGLang captures) is not in them; repeat the run without the profiler "
                "in one launch window, interleaved with the others (`specprof capture --no-nsys --repeat 3`, "
                "docs/economics.md) to measure it")
    if given_baseline:
        text += "; the baseline given with --baseline-ms adds no width"
    return text


def _wins(row: dict):
    """True (wins), False (loses), or None: unknown, or a wash (the speedup's interval holds 1)."""
    if row["speedup"] is None:
        return None
    if row["speedup_lo"] is not None and row["speedup_lo"] <= 1 <= row["speedup_hi"]:
        return None
    return row["speedup"] > 1
