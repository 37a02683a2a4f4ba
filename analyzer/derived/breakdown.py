"""Where one decode cycle goes: the per-cycle breakdown (docs/attribution.md, "The cycle breakdown").

A speculative cycle runs its phases one after another on one GPU stream (SGLang's forward stream; the
reference engine's default stream). On that stream, every nanosecond from one cycle's work to the next
cycle's belongs to exactly one cycle and one phase:

- the tiling (accounting) charges each piece of the stream's timeline to a phase and a cycle;
- a piece that belongs to no cycle (the engine's code between two cycles, with no range open: the scheduler
  processing results, preparing the next batch) is given to the cycle it follows: a cycle lasts from its
  start to the next cycle's start, as its period does.

So the phases' times of one cycle add up to that cycle's length on the stream, and their shares to 1. The
stream: per device, the one carrying the most GPU-busy time of decode cycles; the breakdown is that of the
device with the most. The cycles: decode cycles (those holding a `verify` or a plain `decode` phase, or, when
the trace names neither, every cycle) without a `prefill`, less each thread's last one (nothing marks where
it ends).

`CycleBreakdown` (what `Analysis.cycle_breakdown` holds), integer ns:
- device, stream; cycles (how many); mean_ns, median_ns, p90_ns (cycle length on the stream);
- phases: phase, ns_per_cycle (mean over the cycles, 0 where a cycle lacks the phase), share (of the mean
  cycle; the shares add up to 1), busy_ns_per_cycle (the GPU running the phase's ops), busy_share (busy over
  the phase's time: how much of the phase the GPU was working rather than waiting).
- devices: how many devices ran decode cycles (the others are in the per-rank analysis).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from analyzer.core import accounting
from analyzer.core.attribution import Attribution
from analyzer.model.labels import DECODE_PHASES, IDLE_CATEGORIES


@dataclass
class CycleBreakdown:
    device: int
    stream: int
    cycles: int
    mean_ns: int
    median_ns: int
    p90_ns: int
    phases: pl.DataFrame
    devices: int = 1


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


def cycle_breakdown(a: Attribution) -> CycleBreakdown | None:
    """The breakdown (module docstring), or None when the trace has fewer than two cycles."""
    keep = decode_cycles(a)
    if keep.is_empty():
        return None
    busy = ~pl.col("category").cast(pl.Utf8).is_in(IDLE_CATEGORIES)
    per_stream = (a.charges.join(keep.select("cycle"), on="cycle", how="semi").filter(busy)
                  .group_by("device", "stream").agg(pl.col("ns").sum()).sort("ns", "device", "stream",
                                                                              descending=[True, False, False]))
    if per_stream.is_empty():
        return None
    device, stream = per_stream.row(0)[:2]
    devices = per_stream["device"].n_unique()
    on = (pl.col("device") == device) & (pl.col("stream") == stream)
    segments = accounting.tile(a.ops.filter(on), a.waits.filter(on) if a.waits is not None else
                               pl.DataFrame(schema=accounting.SEGMENT_SCHEMA))
    # A piece of no cycle belongs to the cycle before it on the stream (the time up to the next cycle's start).
    segments = segments.sort("start").with_columns(cycle=pl.col("cycle").forward_fill())
    pieces = segments.join(keep.select("cycle"), on="cycle", how="semi").with_columns(
        ns=pl.col("end") - pl.col("start"), busy=busy, phase=pl.col("phase").cast(pl.Utf8))
    n = keep.height
    per_cycle = pieces.group_by("cycle").agg(pl.col("ns").sum())
    per_cycle = keep.select("cycle").join(per_cycle, on="cycle", how="left").fill_null(0)
    total = int(pieces["ns"].sum())
    phases = (pieces.group_by("phase").agg(ns=pl.col("ns").sum(), busy_ns=pl.col("ns").filter(pl.col("busy")).sum())
              .with_columns(ns_per_cycle=(pl.col("ns") / n).round().cast(pl.Int64),
                            share=pl.col("ns") / total if total else pl.lit(None, pl.Float64),
                            busy_ns_per_cycle=(pl.col("busy_ns") / n).round().cast(pl.Int64),
                            busy_share=pl.when(pl.col("ns") > 0).then(pl.col("busy_ns") / pl.col("ns")))
              .sort("ns", descending=True)
              .select("phase", "ns_per_cycle", "share", "busy_ns_per_cycle", "busy_share"))
    lengths = per_cycle["ns"]
    return CycleBreakdown(device=int(device), stream=int(stream), cycles=n, mean_ns=int(round(total / n)),
                          median_ns=int(round(lengths.median())), p90_ns=int(round(lengths.quantile(0.9, "linear"))),
                          phases=phases, devices=devices)
