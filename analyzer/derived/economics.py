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
  unknown), `verdict` (one sentence).
- `baseline_ns`, `baseline_source`: the plain-decode step time and where it came from (null when not given).
- `verdict`: plain sentences about the headline row, and the profiled row when its verdict differs.
- `notes`: what was missing or assumed.
- `profiled_only`: every estimate was measured under the profiler; `waits`: then, per phase of the decode
  cycle, the share of its time the GPU waited for the host (derived/breakdown.py): what the profiler's CUDA
  tracing stretches most.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

# A gap between two cycles longer than this many median periods is idle time (no batch to run, a prefill
# of new requests), not part of a cycle's cost: such periods are left out and counted.
IDLE_GAP_FACTOR = 3.0

ESTIMATE_SCHEMA = {
    "source": pl.Utf8, "profiled": pl.Boolean, "cycles": pl.Int64, "cycle_ns": pl.Int64,
    "accept_len": pl.Float64, "batch": pl.Float64, "tokens_per_s": pl.Float64,
    "tokens_per_s_per_request": pl.Float64, "baseline_ns": pl.Int64, "baseline_tokens_per_s": pl.Float64,
    "speedup": pl.Float64, "break_even_accept_len": pl.Float64, "draft_steps": pl.Int64,
    "max_accept_len": pl.Int64, "break_even_reachable": pl.Boolean, "verdict": pl.Utf8,
}


@dataclass
class Economics:
    estimates: pl.DataFrame
    baseline_ns: int | None
    baseline_source: str | None
    verdict: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    profiled_only: bool = False
    waits: pl.DataFrame | None = None  # phase, share_of_cycle, wait_share: the GPU waiting on the host

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
             batch: float | None, baseline_ns: int | None, draft_steps: int | None = None) -> dict:
    """One row of `Economics.estimates` (see the module docstring)."""
    row = {"source": source, "profiled": profiled, "cycles": cycles, "cycle_ns": cycle_ns,
           "accept_len": accept_len, "batch": batch, "tokens_per_s": None, "tokens_per_s_per_request": None,
           "baseline_ns": baseline_ns, "baseline_tokens_per_s": None, "speedup": None,
           "break_even_accept_len": None, "draft_steps": draft_steps,
           "max_accept_len": None if draft_steps is None else draft_steps + 1, "break_even_reachable": None, "verdict": None}
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
    row["verdict"] = verdict_sentence(row)
    return row


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
        s = f" (now {L:.2f}x the plain-decode throughput)" if L is not None else ""
        return (f"speculation cannot pay at any acceptance: the cycle ({c / 1e6:.3f} ms) is {be:.2f} plain-decode "
                f"steps ({b / 1e6:.3f} ms), more than the {k + 1} tokens per request a cycle of K={k} draft steps can "
                f"yield at most (every draft and the bonus accepted){s}; to pay, the cycle must shrink below "
                f"{(k + 1) * b / 1e6:.3f} ms")
    if L is None:
        return (f"accept length unknown (no accept counts in the sidecar, or no sidecar): speculation pays "
                f"only if it exceeds {be:.3f} (cycle {c / 1e6:.3f} ms / baseline step {b / 1e6:.3f} ms)")
    s = L * b / c
    if s > 1:
        slack_c = L * b - c
        return (f"speculation wins: {s:.2f}x the plain-decode throughput ({(s - 1) * 100:.0f}% more tokens/s); "
                f"it stays ahead while the accept length is above {be:.3f} (now {L:.3f}, "
                f"{(1 - be / L) * 100:.0f}% of margin) or the cycle below {L * b / 1e6:.3f} ms "
                f"(now {c / 1e6:.3f}, {slack_c / 1e6:.3f} ms of margin)")
    if s < 1:
        return (f"speculation loses: {s:.2f}x the plain-decode throughput ({(1 - s) * 100:.0f}% fewer tokens/s); "
                f"to break even the accept length must grow from {L:.3f} to {be:.3f} (+{(be / L - 1) * 100:.0f}%) "
                f"or the cycle shrink from {c / 1e6:.3f} ms to {L * b / 1e6:.3f} ms "
                f"(-{(1 - L * b / c) * 100:.0f}%)")
    return f"break-even: speculation and plain decode give the same throughput (accept length {L:.3f} = {be:.3f})"


def economics(estimates: list[dict], baseline_ns: int | None, baseline_source: str | None,
              notes: list[str] | None = None, waits: pl.DataFrame | None = None, profiler: str = "nsys",
              twin_hint: str | None = None) -> Economics:
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
    return Economics(estimates=table, baseline_ns=baseline_ns, baseline_source=baseline_source,
                     verdict=verdict, notes=list(notes or []), profiled_only=profiled_only, waits=waits)


def _wins(row: dict):
    return None if row["speedup"] is None else row["speedup"] > 1
