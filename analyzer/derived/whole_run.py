"""The whole run as its client saw it, beside the economics' steady state (docs/economics.md, "Steady state
against the whole run").

The economics compare decode cycles at the full batch inside the capture window: the steady state. A benchmark
client times the whole workload instead: the requests' prefill, the first cycles at the full batch (one-off work:
on the dense target a speculative server's first full-batch cycles take 80-115 ms, against 8 ms later), the
decode cycles as the batch fills and empties, and any time with no request running. `whole_run` gives, per side
(the run, and the plain baseline run), each repeated run's tokens/s as the client saw it (output tokens over the
client's wall clock), their ratio with its range over the pairs of repeated runs (each run against each baseline
run: two runs a side give no useful 95 % interval), and the
client's wall clock split by the sidecar of the same server process into measured parts (`Split`):

- prefill: the periods (start to next start) of the cycles that decode nothing (prefill batches);
- stalls: a decode cycle's period beyond the steady period (the median decode period of the workload) where it is
  more than STALL_FACTOR times it, followed by another decode cycle (warm-up: first full-batch cycles, graph
  work); `capture`: such a stall at the nsys capture window's start or stop (the profiler's own, runs under nsys);
- idle: such a long period followed by a prefill cycle (the server waited for requests);
- outside: the client's clock outside the server's cycles (requests sent and answered, before the first cycle
  and after the last);
- decode: the rest, the decode cycles at their own pace.

The sidecar's cycles are the workload's when they start within the client's clock: the client's UTC start mapped
to the sidecar's clock by its clock records (the median of time_ns - perf_counter_ns), else the clock taken to end
with the last cycle. Pure: no files read.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from specprof.analyzer.derived.intervals import Measure, mean_measure
from specprof.analyzer.model.client import WholeRunFiles
from specprof.analyzer.model.run_data import RunData

STALL_FACTOR = 3.0  # a period this many times the steady one is no steady-state cycle (as economics.IDLE_GAP_FACTOR)
PARTS = ("prefill", "stalls", "capture", "idle", "outside", "decode")


@dataclass(frozen=True)
class Split:
    """One run's client wall clock split into measured parts, ns each (PARTS); they add up to `wall_ns`."""

    wall_ns: int
    parts: dict  # part -> ns
    cycles: int  # the sidecar's cycles inside the client's clock
    stalls: int  # decode cycles counted as stalls (capture included)
    steady_ns: int  # the steady period (median decode period)
    aligned: str  # "clock" (the client's start on the sidecar's clock) | "end" (the last cycle's end)


@dataclass(frozen=True)
class ClientRun:
    """One repeated run as its client saw it."""

    path: str  # its client.json
    profiled: bool
    requests: int
    tokens: int
    wall_ns: int
    split: Split | None  # None: no single sidecar of the same process

    @property
    def tokens_per_s(self) -> float:
        return self.tokens * 1e9 / self.wall_ns


@dataclass(frozen=True)
class WholeRun:
    """The run's and the baseline's whole-run tokens/s and their ratio, beside the steady-state speedup."""

    runs: list[ClientRun]
    baseline: list[ClientRun]
    tokens_per_s: Measure
    baseline_tokens_per_s: Measure | None
    speedup: float | None  # whole-run tokens/s over the baseline's (None: no baseline client records)
    speedup_lo: float | None  # the lowest and highest ratio over the pairs of repeated runs (run x baseline run):
    speedup_hi: float | None  # None with one pair
    steady_speedup: float | None  # the economics' headline speedup (the steady state)
    decode_speedup: float | None  # the ratio of tokens over the decode part alone (prefill, stalls, idle, outside out)
    lines: list[str]  # what the figures say, in the user's words


def split_of(f: WholeRunFiles) -> Split | None:
    """The client's wall clock of `f` split by its sidecar's cycles (module docstring); None without a sidecar or
    without a decode cycle inside the client's clock."""
    sc, wall = f.sidecars, f.client.wall_ns
    if sc is None or not sc.cycles.height:
        return None
    cycles = sc.cycles.sort("start")
    last_end = int(cycles["end"].max())
    offset = None
    if f.client.start_ns is not None and sc.clocks.height:
        offset = int((sc.clocks["time_ns"] - sc.clocks["perf_counter_ns"]).median())
    if offset is not None:
        t0, aligned = f.client.start_ns - offset, "clock"
    else:
        t0, aligned = last_end - wall, "end"
    t1 = t0 + wall
    # the workload's cycles, each with its period (to the next cycle's start; the last one, to its own end)
    c = (cycles.with_columns(period=(pl.col("start").shift(-1) - pl.col("start")).fill_null(pl.col("end")
                                                                                            - pl.col("start")),
                             next_decode=pl.col("decode").shift(-1).fill_null(True))
         .filter(pl.col("start").is_between(t0, t1)))
    decode = c.filter(pl.col("decode"))
    if not decode.height:
        return None
    steady = int(decode["period"].median())
    edges = set(sc.capture["after_cycle"].drop_nulls().to_list()) if sc.capture.height else set()
    long = c.filter(pl.col("decode") & (pl.col("period") > STALL_FACTOR * steady)).with_columns(
        excess=pl.col("period") - steady)
    capture = long.filter(pl.col("index").is_in(list(edges)))
    rest = long.filter(~pl.col("index").is_in(list(edges)))
    idle = rest.filter(~pl.col("next_decode"))
    stalls = rest.filter(pl.col("next_decode"))
    span_end = min(int(c["start"].max() + c["period"].tail(1).item()), t1)
    parts = {
        "prefill": int(c.filter(~pl.col("decode"))["period"].sum()),
        "stalls": int(stalls["excess"].sum()),
        "capture": int(capture["excess"].sum()),
        "idle": int(idle["excess"].sum()),
        "outside": max(0, int(c["start"].min()) - t0) + max(0, t1 - span_end),
    }
    parts["decode"] = wall - sum(parts.values())
    return Split(wall_ns=wall, parts=parts, cycles=c.height, stalls=long.height, steady_ns=steady, aligned=aligned)


def client_run(f: WholeRunFiles) -> ClientRun:
    c = f.client
    return ClientRun(path=c.path, profiled=f.profiled, requests=c.requests, tokens=c.tokens, wall_ns=c.wall_ns,
                     split=split_of(f))


def whole_run(runs: list[WholeRunFiles], baseline: list[WholeRunFiles] | None = None,
              steady_speedup: float | None = None) -> WholeRun | None:
    """The whole run against the steady state (module docstring): None without client records of the run."""
    if not runs:
        return None
    mine = [client_run(f) for f in runs]
    base = [client_run(f) for f in baseline or []]
    tps = mean_measure([r.tokens_per_s for r in mine], runs=list(range(len(mine))))
    base_tps = mean_measure([r.tokens_per_s for r in base], runs=list(range(len(base)))) if base else None
    speedup = lo = hi = decode_speedup = None
    if base_tps is not None:
        speedup = tps.value / base_tps.value
        pairs = [a.tokens_per_s / b.tokens_per_s for a in mine for b in base]
        if len(pairs) > 1:
            lo, hi = min(pairs), max(pairs)
        dm, db = _decode_rate(mine), _decode_rate(base)
        decode_speedup = dm / db if dm and db else None
    out = WholeRun(runs=mine, baseline=base, tokens_per_s=tps, baseline_tokens_per_s=base_tps, speedup=speedup,
                   speedup_lo=lo, speedup_hi=hi, steady_speedup=steady_speedup, decode_speedup=decode_speedup,
                   lines=[])
    out.lines.extend(explain(out))
    return out


def _decode_rate(runs: list[ClientRun]) -> float | None:
    """Tokens per second of the decode part alone, pooled over the runs with a split."""
    split = [r for r in runs if r.split is not None and r.split.parts["decode"] > 0]
    if not split:
        return None
    return sum(r.tokens for r in split) * 1e9 / sum(r.split.parts["decode"] for r in split)


def mean_parts(runs: list[ClientRun]) -> dict | None:
    """Each part's mean ns over the runs with a split (and the mean wall clock as `wall`)."""
    split = [r.split for r in runs if r.split is not None]
    if not split:
        return None
    out = {p: sum(s.parts[p] for s in split) / len(split) for p in PARTS}
    out["wall"] = sum(s.wall_ns for s in split) / len(split)
    return out


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.1f} ms"


def _parts_text(parts: dict) -> str:
    wall = parts["wall"]
    return ", ".join(f"{p} {_ms(parts[p])} ({parts[p] / wall:.0%})" for p in PARTS if round(parts[p] / 1e5))


def explain(w: WholeRun) -> list[str]:
    """The sentences that say which figure the verdict is about and why the whole run differs."""
    lines = []
    if w.speedup is not None and w.steady_speedup is not None:
        pairs = len(w.runs) * len(w.baseline)
        span = f" ({w.speedup_lo:.2f}-{w.speedup_hi:.2f} over {pairs} pairs of repeated runs)" \
            if w.speedup_lo is not None else ""
        lines.append(f"the verdict is about the steady state ({w.steady_speedup:.2f}x: decode cycles at the full "
                     f"batch, what speculation changes); a benchmark client timing the whole workload sees "
                     f"{w.speedup:.2f}x{span}")
    profiled = [r for r in w.runs + w.baseline if r.profiled]
    if profiled:
        lines.append("client records of a run under nsys: its clock includes the profiler's capture start and stop "
                     "(`capture`); the run without nsys (RUN/no-nsys with its client.json) is what a benchmark sees")
    for label, runs in (("run", w.runs), ("baseline", w.baseline)):
        parts = mean_parts(runs)
        if parts is not None:
            stalls = sum(r.split.stalls for r in runs if r.split is not None)
            lines.append(f"{label}: client wall clock {_ms(parts['wall'])} (mean of {len(runs)}): "
                         f"{_parts_text(parts)}"
                         + (f"; {stalls} cycles over {STALL_FACTOR:g}x the steady period in all" if stalls else ""))
    if w.decode_speedup is not None:
        lines.append(f"without prefill, stalls, idle and the time outside the server's cycles, the whole run's ratio "
                     f"would be {w.decode_speedup:.2f}x (the decode part alone, the batch filling and emptying "
                     "included)")
    return lines


def whole_run_of(data: RunData, economics) -> WholeRun | None:
    """`whole_run` of a run's parsed files, beside the economics' headline speedup (None without)."""
    head = economics.headline if economics is not None else None
    return whole_run(data.whole_run, data.baseline_whole_run, head["speedup"] if head is not None else None)
