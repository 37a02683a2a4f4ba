"""Where one decode cycle goes, per rank: the per-cycle breakdown (docs/attribution.md, "The cycle breakdown").

A speculative cycle runs its phases one after another on one GPU stream per rank (SGLang's forward stream; the
reference engine's default stream): the rank's cycle stream (`streams.role`, core/summary.py). On that stream,
every nanosecond from one cycle's work to the next cycle's belongs to exactly one cycle and one phase: the
attribution's tiling charges each piece of the stream to a phase and a cycle, and a piece of no cycle (the
engine's code between two cycles) to the cycle it follows (accounting.stream_cycle). So the phases' times of
one cycle add up to that cycle's length on the stream, and their shares to 1. This is read from the
attribution's charges: nothing is tiled again.

The cycles: decode cycles (those holding a `verify` or a plain `decode` phase, or, when the trace names neither,
every cycle) without a `prefill`, less each thread's last one (nothing marks where it ends).

`CycleBreakdown`, integer ns, one per rank (`breakdowns`):
- rank, pid, device, stream (the rank's cycle stream); cycles (how many); mean_ns, median_ns, p90_ns (cycle
  length on the stream: `cycle_stats`);
- phases: phase, ns_per_cycle (mean over the cycles, 0 where a cycle lacks the phase), share (of the mean cycle;
  the shares add up to 1), busy_ns_per_cycle (the GPU running the phase's ops), busy_share (busy over the phase's
  time), unprofiled_ns_per_cycle (the same phase in the run without the profiler, from its CUDA events; null
  without them), ratio (ns_per_cycle / unprofiled_ns_per_cycle), unprofiled_share (of the unprofiled period);
- per_cycle: cycle, ns (each cycle's length on the stream);
- categories: phase, category, ns_per_cycle (each phase's time per cycle by category: its busy kinds, `allreduce`
  among them, and the idle gaps `launch`, `cpu_wait`, `idle`);
- unprofiled_mean_ns: the cycle's period without the profiler (null without a twin run);
- idle_ns, idle_gaps: the time the stream sat idle after a cycle, outside any phase, while the server had no
  running request (between requests, between the levels of a rising load): the idle, phase-less time of a cycle
  longer than IDLE_GAP_FACTOR x the median cycle, taken out of that cycle (`idle_gaps` of them) and counted here
  once; it is in no cycle's length, phase or share.

A run without nsys alone (`specprof capture --no-nsys --gpu-events`) has the column without the profiler only
(`from_events`): its phases' CUDA events and its period, the very numbers its capture under nsys shows beside its
own; device, stream, the cycle's length on the stream and every column of the trace are None.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from specprof.analyzer.core.attribution import Attribution
from specprof.analyzer.derived import views
from specprof.analyzer.model.labels import DECODE_PHASES, IDLE_CATEGORIES, UNATTRIBUTED

# A cycle whose idle time outside any phase is longer than this many median cycles waited for requests: that
# time is idle, in no cycle (derived/economics.py IDLE_GAP_FACTOR, the same rule on the sidecar's periods).
IDLE_GAP_FACTOR = 3.0
# A charge of no phase: where a cycle's idle time waits
WAITING = pl.col("phase").is_null() | (pl.col("phase").cast(pl.Utf8) == UNATTRIBUTED)

PHASE_SCHEMA = {"phase": pl.Utf8, "ns_per_cycle": pl.Int64, "share": pl.Float64, "busy_ns_per_cycle": pl.Int64,
                "busy_share": pl.Float64, "unprofiled_ns_per_cycle": pl.Int64, "ratio": pl.Float64,
                "unprofiled_share": pl.Float64}


@dataclass
class CycleBreakdown:
    device: int | None  # None: a run without nsys (`from_events`), as for stream and the cycle's length
    stream: int | None
    cycles: int
    mean_ns: int | None
    median_ns: int | None
    p90_ns: int | None
    phases: pl.DataFrame
    rank: int = 0
    pid: int | None = None
    per_cycle: pl.DataFrame | None = None
    unprofiled_mean_ns: int | None = None
    # Why this rank is the headline's (set on the headline breakdown only): "the only rank", "the straggler: ...".
    why: str | None = None
    # phase, category, ns_per_cycle: each phase's time per cycle by category (busy kinds and the idle gaps)
    categories: pl.DataFrame | None = None
    idle_ns: int = 0  # the idle time after cycles while no request ran, taken out of them (module docstring)
    idle_gaps: int = 0
    idle_cycles: pl.DataFrame | None = None  # cycle, ns: the idle time taken out of each cycle it followed


def decode_cycles(a: Attribution) -> pl.DataFrame:
    """The cycles to break down: cycle, pid (decode cycles, each thread's last one left out)."""
    cycles = a.cycles.sort("pid", "start").with_columns(last=pl.col("cycle").last().over("pid"))
    cycles = cycles.filter(pl.col("cycle") != pl.col("last"))
    decode = a.ranges.filter(pl.col("phase").is_in(DECODE_PHASES) & pl.col("cycle").is_not_null())
    if decode.height:
        cycles = cycles.join(decode.select("cycle").unique(), on="cycle", how="semi")
    # A prefill that ran in or right after a cycle (a new request's prompt) is no part of decoding.
    prefill = a.ranges.filter((pl.col("phase") == "prefill") & pl.col("cycle").is_not_null())
    return cycles.join(prefill.select("cycle").unique(), on="cycle", how="anti").select("cycle", "pid")


def _one(charges: pl.DataFrame, keep: pl.DataFrame, device: int, stream: int, rank: int, pid: int | None
         ) -> CycleBreakdown | None:
    """The breakdown of the cycles `keep` on (device, stream), from the attribution's charges."""
    n = keep.height
    if not n:
        return None
    mine = charges.filter((pl.col("device") == device) & (pl.col("stream") == stream)).join(
        keep.select("cycle"), on="cycle", how="semi").with_columns(
        busy=~pl.col("category").cast(pl.Utf8).is_in(IDLE_CATEGORIES), phase=pl.col("phase").cast(pl.Utf8))
    # idle: a cycle's phase-less idle time, where it is longer than IDLE_GAP_FACTOR x the median cycle
    waiting = WAITING & ~pl.col("busy")
    lengths = mine.group_by("cycle").agg(ns=pl.col("ns").sum(), wait=pl.col("ns").filter(waiting).sum())
    median = lengths["ns"].median() if lengths.height else None
    gaps = lengths.filter(pl.col("wait") > IDLE_GAP_FACTOR * median) if median else lengths.clear()
    if gaps.height:
        mine = mine.filter(~(pl.col("cycle").is_in(gaps["cycle"].implode()) & waiting))
    per_cycle = keep.select("cycle").join(mine.group_by("cycle").agg(ns=pl.col("ns").sum()), on="cycle",
                                          how="left").with_columns(pl.col("ns").fill_null(0))
    total = int(mine["ns"].sum() or 0)
    phases = (mine.group_by("phase").agg(ns=pl.col("ns").sum(), busy_ns=pl.col("ns").filter(pl.col("busy")).sum())
              .with_columns(ns_per_cycle=(pl.col("ns") / n).round().cast(pl.Int64),
                            share=pl.col("ns") / total if total else pl.lit(None, pl.Float64),
                            busy_ns_per_cycle=(pl.col("busy_ns") / n).round().cast(pl.Int64),
                            busy_share=pl.when(pl.col("ns") > 0).then(pl.col("busy_ns") / pl.col("ns")),
                            unprofiled_ns_per_cycle=pl.lit(None, pl.Int64), ratio=pl.lit(None, pl.Float64),
                            unprofiled_share=pl.lit(None, pl.Float64))
              .sort(["ns", "phase"], descending=[True, False])
              .select(list(PHASE_SCHEMA)).cast(PHASE_SCHEMA))
    categories = (mine.with_columns(category=pl.col("category").cast(pl.Utf8)).group_by("phase", "category")
                  .agg(ns_per_cycle=(pl.col("ns").sum() / n).round().cast(pl.Int64)).sort("phase", "category"))
    s = views.stats(per_cycle["ns"])
    return CycleBreakdown(device=int(device), stream=int(stream), cycles=n, mean_ns=int(round(total / n)),
                          median_ns=s["p50"], p90_ns=s["p90"], phases=phases, rank=int(rank),
                          pid=None if pid is None else int(pid), per_cycle=per_cycle, categories=categories,
                          idle_ns=int(gaps["wait"].sum() or 0), idle_gaps=gaps.height,
                          idle_cycles=gaps.select("cycle", ns="wait").sort("cycle"))


def breakdowns(a: Attribution, ranks: pl.DataFrame | None = None) -> list[CycleBreakdown]:
    """One breakdown per rank that ran decode cycles, in rank order. `ranks`: derived/ranks.py's rank table (rank,
    pid, device); without it, every (pid, device) with a cycle stream, numbered in device order."""
    keep = decode_cycles(a)
    if keep.is_empty():
        return []
    homes = a.streams.filter(pl.col("role") == "cycle").select("device", "stream", "pid")
    if ranks is None:
        ranks = homes.sort("device", "pid").with_row_index("rank").select(
            pl.col("rank").cast(pl.Int64), "pid", "device")
    out = []
    charges = a.home_charges
    for rank, pid, device in ranks.select("rank", "pid", "device").iter_rows():
        home = homes.filter((pl.col("device") == device) & (pl.col("pid") == pid))
        if home.is_empty():
            continue
        b = _one(charges, keep.filter(pl.col("pid") == pid), device, int(home["stream"][0]), rank, pid)
        if b is not None:
            out.append(b)
    return out


def headline(per_rank: list[CycleBreakdown], straggler: int | None = None) -> CycleBreakdown | None:
    """The breakdown the headline shows: the rank that sets the pace. With one rank, that one; with several, the
    straggler (the rank that arrived last at most matched collectives: the others wait for it), else the rank
    with the longest mean cycle."""
    if not per_rank:
        return None
    if len(per_rank) == 1:
        return replace(per_rank[0], why="the only rank")
    pick = next((b for b in per_rank if b.rank == straggler), None)
    if pick is not None:
        return replace(pick, why="the straggler: it arrived last at most collectives, the other ranks waited for it")
    pick = max(per_rank, key=lambda b: (b.mean_ns, -b.rank))
    return replace(pick, why="the longest mean cycle")


def with_unprofiled(b: CycleBreakdown, events: pl.DataFrame | None, period_ns: int | None) -> CycleBreakdown:
    """`b` with the column of the run without the profiler: `events` (phase, ns: mean GPU time per cycle between
    the phase's CUDA events in that run) and `period_ns` (its mean cycle period). Shares of the unprofiled column
    are of that period; a phase without events has none. Without events, only the period is set. The phases are
    then ordered by their time without the profiler, largest first (those without events last, by their own time)."""
    if events is None or events.is_empty():
        return replace(b, unprofiled_mean_ns=None if period_ns is None else int(period_ns))
    ev = events.select(pl.col("phase").cast(pl.Utf8), un=pl.col("ns").cast(pl.Float64))
    phases = b.phases.drop("unprofiled_ns_per_cycle", "ratio", "unprofiled_share").join(
        ev, on="phase", how="left").with_columns(
        unprofiled_ns_per_cycle=pl.col("un").round().cast(pl.Int64),
        ratio=pl.when(pl.col("un") > 0).then(pl.col("ns_per_cycle") / pl.col("un")),
        unprofiled_share=(pl.col("un") / period_ns) if period_ns else pl.lit(None, pl.Float64),
    ).select(list(PHASE_SCHEMA)).cast(PHASE_SCHEMA)
    # Largest first by the time without the profiler, the one to act on; the phases without events after them.
    phases = phases.sort(["unprofiled_ns_per_cycle", "ns_per_cycle", "phase"], descending=[True, True, False],
                         nulls_last=True, maintain_order=True)
    return replace(b, phases=phases, unprofiled_mean_ns=None if period_ns is None else int(period_ns))


def from_events(events: pl.DataFrame | None, period_ns: int | None, cycles: int) -> CycleBreakdown | None:
    """The breakdown of a run without the profiler alone: the column without it (`with_unprofiled`'s) from its CUDA
    events `events` (phase, ns per cycle; crosscheck.py `unprofiled_times`) and its period `period_ns` over
    `cycles` cycles, every column of a trace null; a prefill's events left out, as a capture's breakdown leaves out
    the cycles with one. None without events."""
    # a prefill (a new request's prompt) is no part of decoding (`decode_cycles`): its time stays outside the phases
    events = events.filter(pl.col("phase") != "prefill") if events is not None else None
    if events is None or events.is_empty():
        return None
    empty = events.select(pl.col("phase").cast(pl.Utf8)).with_columns(
        ns_per_cycle=pl.lit(None, pl.Int64), share=pl.lit(None, pl.Float64), busy_ns_per_cycle=pl.lit(None, pl.Int64),
        busy_share=pl.lit(None, pl.Float64)).with_columns(
        unprofiled_ns_per_cycle=pl.lit(None, pl.Int64), ratio=pl.lit(None, pl.Float64),
        unprofiled_share=pl.lit(None, pl.Float64)).select(list(PHASE_SCHEMA)).cast(PHASE_SCHEMA)
    b = CycleBreakdown(device=None, stream=None, cycles=int(cycles), mean_ns=None, median_ns=None, p90_ns=None,
                       phases=empty, why="a run without nsys: its CUDA events")
    b = with_unprofiled(b, events, period_ns)
    return replace(b, phases=b.phases.sort(["unprofiled_ns_per_cycle", "phase"], descending=[True, False]))
