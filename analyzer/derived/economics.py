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
from specprof.analyzer.model.columns import distinct
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
    c = known["correct"].to_numpy().astype(float)
    r = known["requests"].to_numpy().astype(float)
    ratio = c.sum() / r.sum()
    n = len(c)
    half = (t975(n - 1) * math.sqrt(((c - ratio * r) ** 2).sum() / (n * (n - 1))) / r.mean()) if n > 1 else math.inf
    out = Measure(ratio + 1.0, half, n)
    if runs is not None and "file" in known.columns:
        labels = known.join(runs, on="file", how="left")["run"].to_list()
        names = list(dict.fromkeys(labels))
        if len(names) > 1:
            lab = np.asarray(labels)
            means = np.array([c[lab == x].sum() / r[lab == x].sum() + 1.0 for x in names])
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


# -- the draft's shape: chain or tree, grouped decode steps ---------------------------------------------------------

@dataclass(frozen=True)
class DraftShape:
    """What the run says of its draft: K (`steps`), SGLang's `--speculative-eagle-topk` (`topk`, 1: a chain) and
    `--speculative-num-draft-tokens`, `--num-continuous-decode-steps`, the engine's version, and where the shape was
    read (`source`: SHAPE_FROM_LOG or SHAPE_FROM_COMMAND; None when nothing says)."""

    steps: int | None = None
    topk: int = 1
    num_draft_tokens: int | None = None
    continuous_steps: int = 1
    version: str | None = None
    source: str | None = None

    @property
    def tree(self) -> bool:
        return self.topk > 1

    @property
    def speculative(self) -> bool:
        """The run drafts at all: K known and at least 1 (plain decoding, or K unknown: False)."""
        return bool(self.steps)

    @property
    def kind(self) -> str | None:
        """`tree`, `chain`, or None for a run that does not draft (or whose K nothing says)."""
        if not self.speculative:
            return None
        return "tree" if self.tree else "chain"

    @property
    def description(self) -> str | None:
        """The shape in one line, with where it was read: None for a run that does not draft."""
        if not self.speculative:
            return None
        tokens = self.verify_tokens
        checks = f"verify checks {tokens if tokens is not None else 'an unknown number of'} tokens per request"
        if self.tree:
            drafted = self.num_draft_tokens if self.num_draft_tokens is not None else "unknown"
            text = (f"tree, topk {self.topk}, {_steps(self.steps)}, {drafted} draft tokens ({checks}; a cycle accepts "
                    f"at most {self.max_accept_len}: one path and the bonus token)")
        else:
            text = f"chain, {_steps(self.steps)} ({checks}; a cycle accepts at most {self.max_accept_len})"
        return text + (f"; from {self.source}" if self.source else "")

    @property
    def verify_tokens(self) -> int | None:
        """Tokens per request the verify forward checks: the tree's draft tokens (SGLang's
        --speculative-num-draft-tokens), K + 1 for a chain (which SGLang enforces when topk is 1)."""
        if self.tree and self.num_draft_tokens is not None:
            return self.num_draft_tokens
        return None if self.steps is None else self.steps + 1

    @property
    def max_accept_len(self) -> int | None:
        """The most one cycle can accept per request: one path of K drafts, and the bonus token."""
        return None if self.steps is None else self.steps + 1

    def as_tree(self) -> dict | None:
        """JSON `draft_tree`: None for a chain draft."""
        if not self.tree:
            return None
        return {"topk": self.topk, "num_draft_tokens": self.num_draft_tokens, "verify_tokens": self.verify_tokens,
                "steps": self.steps, "max_accept_len": self.max_accept_len}


def _steps(n: int) -> str:
    return f"{n} step" + ("" if n == 1 else "s")


# Where a run's draft shape was read (DraftShape.source): the server's own start-up line of resolved settings (also
# the ones it chose itself), else the traced command line.
SHAPE_FROM_LOG = "the server log's server_args"
SHAPE_FROM_COMMAND = "the traced command line"


# SGLang versions whose source was read for --num-continuous-decode-steps: the option is declared
# (srt/arg_groups/fields/schedule.py) and nothing else reads it.
CONTINUOUS_STEPS_UNUSED = ("0.5.23",)


def shape_notes(shape: DraftShape) -> list[str]:
    """Plain sentences on a tree draft and on grouped decode steps."""
    out = []
    if shape.tree:
        tokens = shape.verify_tokens
        out.append(f"tree draft (--speculative-eagle-topk {shape.topk}): each of the K={shape.steps} steps keeps "
                   f"{shape.topk} candidates, and verify checks {tokens if tokens is not None else 'an unknown number of'}"
                   " draft tokens per request, not K + 1; a cycle still accepts at most K + 1 = "
                   f"{shape.max_accept_len} tokens per request (one path of the tree, and the bonus token)")
    if shape.continuous_steps > 1:
        if shape.version in CONTINUOUS_STEPS_UNUSED:
            out.append(f"--num-continuous-decode-steps {shape.continuous_steps}: SGLang {shape.version} declares the "
                       "option but nothing in it reads it, so the decode cycles are single steps, as traced")
        else:
            out.append(f"--num-continuous-decode-steps {shape.continuous_steps} with SGLang "
                       f"{shape.version or '(version unknown)'}, whose handling of it specprof has not checked: each "
                       "traced cycle is one speculative forward (one verify) either way, so cycle times and accept "
                       "lengths stay per forward; steps run back to back show as cycles without the scheduler's gap "
                       "between them; compare only runs with the same setting")
    return out


# -- what synchronize timers would cost ---------------------------------------------------------------------------

# At most this many cycles per process are replayed by `sync_timer_estimate` (evenly spaced): its cost stays
# bounded however long the capture, and the mean over them is the estimate.
SYNC_ESTIMATE_CYCLES = 400
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cuCtxSynchronize",
              "cuStreamSynchronize")


@dataclass
class SyncTimerEstimate:
    """What `torch.cuda.synchronize()` before and after every phase, with the host clock in between (the usual
    hand-made timers), would add to this capture, estimated from its own timeline (`sync_timer_estimate`).

    phases: phase, instances, events_ns (the phase's GPU time as in-stream events at its boundaries would read
    it, unsynchronised: from when the stream reaches the phase's start to its last op's end), timer_ns (what the
    timer would read: from the synchronize before the phase to the one after it), inflation_pct;
    cycle_ns / synced_cycle_ns: the mean busy cycle period as captured and with the timers; cycle_inflation_pct;
    sync_ns: one synchronize call's own cost (from the trace's synchronize calls, else 0 and said);
    syncs_per_cycle; cycles: periods averaged."""

    phases: pl.DataFrame
    cycle_ns: int
    synced_cycle_ns: int
    cycle_inflation_pct: float
    sync_ns: int
    syncs_per_cycle: float
    cycles: int
    notes: list[str] = field(default_factory=list)


def _launch_rows(ops: pl.DataFrame) -> dict:
    """Per process, the row numbers of its launched ops in `ops` (start order): one pass over the rows per process
    (a GPU capture has a few), each keeping only its rows' numbers."""
    launched = pl.col("launch_start").is_not_null()
    pids = distinct(ops.lazy().filter(launched).select("pid").collect().get_column("pid")).drop_nulls().to_list() \
        if ops.height else []
    if len(pids) > 64:  # many processes: one group-by instead
        rows = ops.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("row"), "pid", "launch_start").filter(
            launched).group_by("pid", maintain_order=True).agg("row")
        return {pid: r for pid, r in zip(rows["pid"].to_list(), rows["row"])}
    return {pid: ops.select(pl.arg_where(launched & (pl.col("pid") == pid))).to_series() for pid in pids}


_LAUNCH_COLUMNS = ("launch_start", "start", "end", "device", "stream")
_CHUNK_ROWS = 1 << 20  # a process's launched ops are gathered this many at a time


def _launched(ops: pl.DataFrame, rows: pl.Series, spans: list[tuple[int, int]] | None
              ) -> tuple[pl.Series, pl.DataFrame | None]:
    """Of one process's launched ops (`rows`: their row numbers in `ops`, in start order, op_id's, which each
    stream's ops keep): the launch latency's sample (`_idle_latencies`), and, with `spans`, the ops launched in
    them with the columns the replay reads and `prev`, the end of the op before on its stream (among all the
    process's launched ops). Gathered in chunks of rows, each stream's last end carried from one chunk to the
    next: the estimate's memory is a chunk's, not a process's."""
    lats, parts, carried = [], [], None
    for at in range(0, rows.len(), _CHUNK_ROWS):
        part = rows.slice(at, _CHUNK_ROWS)
        o = ops.select(_LAUNCH_COLUMNS)[part]
        prev = pl.col("end").shift(1).over("device", "stream")
        if carried is not None:  # a stream's first op of this chunk follows its last of the chunks before
            o = o.join(carried, on=["device", "stream"], how="left", maintain_order="left")
            prev = pl.coalesce(prev, pl.col("carried"))
        o = o.with_columns(prev=prev).select(*_LAUNCH_COLUMNS, "prev")
        lats.append(_idle_latencies(o))
        if spans:
            keep = pl.Series(_within(o.get_column("launch_start").to_numpy(), spans))
            parts.append(o.filter(keep).with_columns(kind=ops.get_column("kind").gather(part.filter(keep))))
        last = o.group_by("device", "stream").agg(carried=pl.col("end").last())
        carried = last if carried is None else pl.concat([carried, last]).group_by(
            "device", "stream", maintain_order=True).agg(pl.col("carried").last())
        del o
    lat = pl.concat(lats) if lats else pl.Series([], dtype=pl.Int64)
    return lat, (pl.concat(parts) if parts else None) if spans else None


def _idle_latencies(o: pl.DataFrame) -> pl.Series:
    """Of a process's launched ops (launch_start, start, prev), (start - launch call start) of those that found
    their stream idle (the previous op on it had ended before the launch): the launch latency's sample."""
    idle = o.filter(pl.col("prev").is_null() | (pl.col("prev") <= pl.col("launch_start")))
    lat = idle["start"] - idle["launch_start"]
    return lat.filter(lat >= 0)


def _within(launch: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """Which of the launch times lie in one of the closed intervals `spans`."""
    spans = sorted(spans)
    lo, hi = [], []
    for a, b in spans:  # merged, so that each time falls in at most one
        if lo and a <= hi[-1]:
            hi[-1] = max(hi[-1], b)
        else:
            lo.append(a)
            hi.append(b)
    k = np.searchsorted(np.asarray(lo, dtype=np.int64), launch, side="right") - 1
    return (k >= 0) & (launch <= np.asarray(hi, dtype=np.int64)[np.maximum(k, 0)])


def sync_timer_estimate(ops: pl.DataFrame, ranges: pl.DataFrame, cycles: pl.DataFrame, api: pl.DataFrame,
                        grouping: tuple[str, ...] = ("cycle",)) -> SyncTimerEstimate | None:
    """Estimate, from one capture's timeline, what a synchronize at every phase boundary (before and after each
    phase of the cycle, as hand-made timers do) would add, per phase and per cycle (docs/economics.md).

    Between two consecutive synchronize points the GPU starts idle. The time from one to the next becomes the
    longer of the host's work in it (as captured, less the time the host spent blocked on GPU work launched
    before it, which the synchronize already waited for) and the GPU work launched in it, replayed from an idle
    GPU: each op starts at max(the previous op's end on its stream, its launch + the launch latency) plus the gap
    it had after both in the capture, so an undisturbed segment replays as captured. Then the synchronize call
    itself. What the timers remove is the launch-queue overlap: a phase whose host work ran while the GPU still
    finished the one before now waits for it, then launches. `ops`: the attribution's (launch_start, kind,
    stream, pid); `ranges`: its ranges (phase, cycle); `cycles`: its cycles; `api`: the trace's calls. None
    without two consecutive cycles with phases.

    Memory: each process's launched ops are gathered a few columns at a time, for the launch latency's sample;
    of them only the ops launched in the replayed cycles (and the window before each) are kept for the replay."""
    phases = ranges.filter(pl.col("cycle").is_not_null() & pl.col("phase").is_not_null()
                           & ~pl.col("name").is_in(list(grouping)))
    if not phases.height or cycles.height < 2:
        return None
    launch_rows = _launch_rows(ops)
    sync_calls = api.filter(pl.col("name").cast(pl.Utf8).is_in(list(SYNC_CALLS)))
    notes = []
    sync_ns = 0
    if sync_calls.height:
        sync_ns = int((sync_calls["end"] - sync_calls["start"]).quantile(0.1, "nearest"))
    else:
        notes.append("no synchronize call in the trace to measure one's own cost: counted as 0, so the estimate "
                     "is the launch-queue overlap the timers remove alone (a lower bound)")
    # Each process's cycles to replay (from the ranges alone), then its ops: the launch latency's sample from all
    # of them, and the replay's ops from those cycles' spans only.
    plans = []
    cyc = cycles.sort("pid", "start")
    for pid in cyc["pid"].unique().to_list():
        mine = cyc.filter(pl.col("pid") == pid)
        ph = phases.filter(pl.col("pid") == pid).sort("start")
        if pid not in launch_rows:
            continue
        starts = mine["start"].to_numpy()
        ids = mine["cycle"].to_list()
        period_all = np.diff(starts)
        if not len(period_all):
            continue
        median = float(np.median(period_all))
        by_cycle: dict = {}
        for r in ph.select("cycle", pl.col("phase").cast(pl.Utf8), "start", "end").iter_rows():
            by_cycle.setdefault(r[0], []).append(r[1:])
        window = int(2 * median)  # how far back a host read's copy or a phase's earlier work is looked for
        pairs = range(len(ids) - 1)
        if len(pairs) > SYNC_ESTIMATE_CYCLES:  # the replay is a pass over each cycle's ops: a bounded, even sample
            pairs = [pairs[k * len(pairs) // SYNC_ESTIMATE_CYCLES] for k in range(SYNC_ESTIMATE_CYCLES)]
            notes.append(f"estimated from {SYNC_ESTIMATE_CYCLES:,} of {len(ids) - 1:,} cycles (evenly spaced) of "
                         f"process {pid}")
        spans = []  # every launch time the replay of a pair looks at: its points, and `window` before the first
        for i in pairs:
            here, nxt = by_cycle.get(ids[i]), by_cycle.get(ids[i + 1])
            if here and nxt:
                times = [t for r in here for t in r[1:]] + [min(r[1] for r in nxt)]
                spans.append((min(times) - window, max(times)))
        plans.append((pid, ids, period_all, median, by_cycle, window, pairs, spans))
    lats, replayed = [], {}
    planned = {plan[0]: plan[-1] for plan in plans}
    for pid in list(launch_rows):
        lat, replay = _launched(ops, launch_rows.pop(pid), planned.get(pid))
        lats.append(lat)
        if replay is not None:
            replayed[pid] = replay
    lat = pl.concat(lats) if lats else pl.Series([], dtype=pl.Int64)
    lat = int(lat.quantile(0.05, "nearest")) if lat.len() else 0
    del lats
    rows, periods, synced = [], [], []
    for pid, ids, period_all, median, by_cycle, window, pairs, _ in plans:
        if pid not in replayed:
            continue
        po = replayed.pop(pid).with_columns(ready=pl.col("launch_start") + pl.min_horizontal(
            pl.lit(lat), pl.col("start") - pl.col("launch_start")))
        po = po.with_columns(gap=pl.col("start") - pl.max_horizontal(pl.col("prev").fill_null(0), pl.col("ready")))
        po = po.with_columns(gap=pl.when(pl.col("gap") < 0).then(0).otherwise(pl.col("gap"))).sort(
            "launch_start", maintain_order=True)
        p_launch = po["launch_start"].to_numpy()
        p_end, p_start = po["end"].to_numpy(), po["start"].to_numpy()
        p_ready, p_gap = po["ready"].to_numpy(), po["gap"].to_numpy()
        p_stream = (po["device"] * 1_000_000 + po["stream"]).to_numpy()
        p_memcpy = (po["kind"].cast(pl.Utf8) == "memcpy").to_numpy()
        api_t = np.sort(api.filter(pl.col("pid") == pid)["start"].to_numpy())
        for i in pairs:
            here, nxt = by_cycle.get(ids[i]), by_cycle.get(ids[i + 1])
            if not here or not nxt or period_all[i] > IDLE_GAP_FACTOR * median:
                continue
            points = []
            for phase, t_start, t_end in here:
                points += [(t_start, "start", phase, t_end), (t_end, "end", phase, t_start)]
            points.sort()
            points.append((min(r[1] for r in nxt), "start", None, None))
            total = 0
            timer_start = {}
            for j in range(len(points) - 1):
                t0, t1 = points[j][0], points[j + 1][0]
                dur = _synced_segment(t0, t1, p_launch, p_start, p_end, p_ready, p_gap, p_stream, p_memcpy,
                                      api_t, window) + sync_ns
                kind, name = points[j][1], points[j][2]
                if kind == "start":
                    timer_start[name] = total
                total += dur
                if points[j + 1][1] == "end":
                    name_end, began = points[j + 1][2], points[j + 1][3]
                    rows.append((name_end, total - timer_start.get(name_end, total - dur),
                                 _events_time(began, points[j + 1][0], p_launch, p_end, p_stream, lat, window)))
            first = points[0][0]
            periods.append(points[-1][0] - first)
            synced.append(total)
    if not periods:
        return None
    per = pl.DataFrame(rows, schema={"phase": pl.Utf8, "timer_ns": pl.Int64, "events_ns": pl.Int64}, orient="row")
    table = per.group_by("phase", maintain_order=True).agg(
        instances=pl.len(), events_ns=pl.col("events_ns").mean().round().cast(pl.Int64),
        timer_ns=pl.col("timer_ns").mean().round().cast(pl.Int64)).with_columns(
        inflation_pct=pl.when(pl.col("events_ns") > 0).then(
            100.0 * (pl.col("timer_ns") / pl.col("events_ns") - 1)))
    c, s = float(np.mean(periods)), float(np.mean(synced))
    return SyncTimerEstimate(
        phases=table.select("phase", "instances", "events_ns", "timer_ns", "inflation_pct"),
        cycle_ns=int(round(c)), synced_cycle_ns=int(round(s)), cycle_inflation_pct=100.0 * (s / c - 1),
        sync_ns=sync_ns, syncs_per_cycle=2.0 * len(rows) / len(periods), cycles=len(periods), notes=notes)


def _synced_segment(t0, t1, launch, start, end, ready, gap, stream, memcpy, api_t, window) -> int:
    """The time from a synchronize at t0 to the next synchronize point t1, with the GPU idle at t0 (see
    `sync_timer_estimate`). `launch` sorted; earlier work is looked for `window` ns back."""
    host = t1 - t0
    a, b, c = np.searchsorted(launch, [t0 - window, t0, t1])
    # the host blocked, at the start, on a copy of earlier work (a host read): the synchronize did that wait
    cand = np.arange(a, b)
    cand = cand[memcpy[a:b] & (end[a:b] <= t1)]
    if len(cand):
        waited_until = int(end[cand].max())
        k = np.searchsorted(api_t, t0)
        first_call = api_t[k] if k < len(api_t) else t1
        if waited_until > t0 and first_call >= waited_until:
            host -= waited_until - t0
    gpu_end = t0
    last: dict = {}
    for st, r, g, d in zip(stream[b:c].tolist(), ready[b:c].tolist(), gap[b:c].tolist(),
                           (end[b:c] - start[b:c]).tolist()):
        e = max(last.get(st, t0), r) + g + d
        last[st] = e
        if e > gpu_end:
            gpu_end = e
    return int(max(host, gpu_end - t0))


def _events_time(t_start, t_end, launch, end, stream, lat, window) -> int:
    """The GPU time of the phase run from t_start to t_end on the host, as in-stream events at its boundaries
    read it in the capture: from when its stream reached the phase's start (the later of the work before it and
    the start + the launch latency) to the end of its last op."""
    a, b, c = np.searchsorted(launch, [t_start - window, t_start, t_end])
    if c == b:
        return 0
    ids, counts = np.unique(stream[b:c], return_counts=True)
    s_id = ids[counts.argmax()]
    earlier = end[a:b][stream[a:b] == s_id]
    begin = max(int(earlier.max()) if len(earlier) else 0, t_start + lat)
    return int(max(0, end[b:c].max() - begin))
