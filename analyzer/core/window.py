"""A window of a trace: the part a user wants to look at (steady state only, say), chosen before attribution.

A window is given by cycles (`--cycle-window A:B`: cycles A to B-1 of each process, numbered from 0 as the
per-cycle table numbers them), by time (`--time-window A:B`: milliseconds from the start of the trace's first
GPU op, integer ns here), or `--skip-warmup N` (the cycle window `N:`); a cycle window and a time window
together keep what both keep. `select(trace, window, grouping)` returns the Trace with only what the window
keeps, and the attribution runs on that as on any trace:

- an op is kept or left out whole, by the time of its launch call (its own start where it has no launch
  record): GPU work launched in the window counts in full even where it runs past the window's end, and work
  launched before it does not count even where it runs inside it. The idle time before a stream's first kept
  op is not counted (as at the start of any trace);
- a CUDA API call is kept when it starts in the window; the NVTX marks are all kept (the cross-check aligns
  clocks with them);
- a range is kept when it overlaps the window, whole (so the ops inside still find their phase), except that
  a cycle window keeps only the cycle ranges that start in it: the first and last cycles of a time window may
  be partial, those of a cycle window are whole;
- the kept cycles keep their numbers (`Trace.meta.extra["cycle_index_offset"]`: per process, the cycles
  before the window), so cycle 120 of a window is cycle 120 of the whole trace.

A cycle window of a trace without cycle ranges, or one that keeps nothing, is an error that says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.trace import Trace

INF = 2**62  # "no end" on the trace's clock (ns)


@dataclass(frozen=True)
class Window:
    """Which part of a trace to analyse; the empty Window is the whole trace."""

    first_cycle: int | None = None  # cycles [first_cycle, end_cycle) of each process
    end_cycle: int | None = None
    start_ns: int | None = None  # [start_ns, end_ns) from the capture's start (TraceMeta.start_ns)
    end_ns: int | None = None

    @classmethod
    def of(cls, cycles: tuple[int | None, int | None] | None = None,
           time_ns: tuple[int | None, int | None] | None = None, skip_warmup: int | None = None) -> Window:
        """A window from what the user gives (each may be None): cycles (A, B), time (A, B) in ns, or the
        number of warm-up cycles to skip (the cycle window N:)."""
        if skip_warmup is not None and cycles is not None:
            raise SpecprofError("--skip-warmup N is the cycle window N: ; give one of --skip-warmup and "
                                "--cycle-window")
        if skip_warmup is not None:
            cycles = (skip_warmup, None)
        first, end = cycles or (None, None)
        start, stop = time_ns or (None, None)
        for a, b, what in ((first, end, "--cycle-window"), (start, stop, "--time-window")):
            if a is not None and b is not None and b <= a:
                raise SpecprofError(f"{what} A:B needs A < B (it keeps A up to, not including, B)")
            if (a is not None and a < 0) or (b is not None and b < 0):
                raise SpecprofError(f"{what} takes numbers from 0")
            if any(x is not None and x > INF for x in (a, b)):  # beyond any trace, and beyond 64 bits
                top = "4.6e12 (2^62 ns, in ms)" if what == "--time-window" else "2^62"
                raise SpecprofError(f"{what} takes numbers up to {top}")
        return cls(first, end, start, stop)

    @property
    def by_cycles(self) -> bool:
        return self.first_cycle is not None or self.end_cycle is not None

    @property
    def by_time(self) -> bool:
        return self.start_ns is not None or self.end_ns is not None

    def __bool__(self) -> bool:
        return self.by_cycles or self.by_time

    def describe(self) -> str:
        """The window in the user's words: `cycles 10:50, time 200:1500 ms`."""
        parts = []
        if self.by_cycles:
            parts.append(f"cycles {_edge(self.first_cycle)}:{_edge(self.end_cycle)}")
        if self.by_time:
            parts.append(f"time {_edge(self.start_ns, 1e6)}:{_edge(self.end_ns, 1e6)} ms")
        return ", ".join(parts)

    def key(self) -> list:
        return [self.first_cycle, self.end_cycle, self.start_ns, self.end_ns]


def _edge(v, scale: float = 1) -> str:
    if v is None:
        return ""
    return f"{v / scale:g}" if scale != 1 else str(v)


def _cycle_ranges(ranges: pl.DataFrame, grouping) -> pl.DataFrame:
    """The cycle ranges with their number per process (as the per-cycle table numbers them)."""
    return ranges.filter(pl.col("name").is_in(list(grouping))).sort("pid", "start").with_columns(
        index=pl.int_range(pl.len()).over("pid").cast(pl.Int64))


def _bounds(ranges: pl.DataFrame, origin: int | None, window: Window, grouping, path: str) -> pl.DataFrame:
    """Per process (pid; null: every process without a bound of its own), the window [t0, t1) on the trace's
    clock, from the trace's ranges and the capture's start (`origin`: model/trace.py capture_start)."""
    t0, t1 = -INF, INF
    if window.by_time:
        if origin is None:
            raise SpecprofError(f"{path}: nothing in this trace has a time, so no time window", path)
        if window.start_ns is not None:
            t0 = origin + window.start_ns
        if window.end_ns is not None:
            t1 = origin + window.end_ns
    if not window.by_cycles:
        return pl.DataFrame({"pid": [None], "t0": [t0], "t1": [t1]}, schema={"pid": pl.Int64, "t0": pl.Int64,
                                                                            "t1": pl.Int64})
    cycles = _cycle_ranges(ranges, grouping)
    if cycles.is_empty():
        raise SpecprofError(f"{path}: no cycle ranges ({', '.join(grouping)}) in this trace, so no "
                            "cycle window; use --time-window A:B (ms) instead", path)
    first = window.first_cycle or 0
    per_pid = cycles.group_by("pid").agg(
        t0=pl.col("start").filter(pl.col("index") == first).first(),
        t1=pl.col("start").filter(pl.col("index") == window.end_cycle).first() if window.end_cycle is not None
        else pl.lit(None, dtype=pl.Int64),
        n=pl.len())
    kept = per_pid.filter(pl.col("t0").is_not_null())
    if kept.is_empty():
        most = int(per_pid["n"].max())
        raise SpecprofError(f"{path}: the cycle window starts at cycle {first}, but no process has more "
                            f"than {most} cycles (numbered from 0)", path)
    kept = kept.select("pid", pl.max_horizontal(pl.col("t0"), pl.lit(t0)).alias("t0"),
                       pl.min_horizontal(pl.col("t1").fill_null(INF), pl.lit(t1)).alias("t1"))
    # Processes without cycles of their own: the span of every process's window.
    rest = pl.DataFrame({"pid": [None], "t0": [int(kept["t0"].min())], "t1": [int(kept["t1"].max())]},
                        schema={"pid": pl.Int64, "t0": pl.Int64, "t1": pl.Int64})
    return pl.concat([kept.cast({"pid": pl.Int64, "t0": pl.Int64, "t1": pl.Int64}), rest])


def _with_bounds(df: pl.DataFrame, bounds: pl.DataFrame) -> pl.DataFrame:
    """`df` (with a pid column) with the window's t0, t1 of its process."""
    own = bounds.filter(pl.col("pid").is_not_null())
    rest = bounds.filter(pl.col("pid").is_null()).row(0, named=True)
    return df.join(own, on="pid", how="left").with_columns(pl.col("t0").fill_null(rest["t0"]),
                                                             pl.col("t1").fill_null(rest["t1"]))


def hull(ranges: pl.DataFrame, origin: int | None, window: Window, grouping, path: str) -> tuple[int, int]:
    """[t0, t1) on the trace's clock that holds every process's window: what a read of the window's part of an
    export (readers/nsys/window.py) must hold, from the trace's ranges and the capture's start (`origin`)."""
    bounds = _bounds(ranges, origin, window, grouping, path)
    return int(bounds["t0"].min()), int(bounds["t1"].max())


def select(trace: Trace, window: Window, grouping=("cycle",), whole=None) -> Trace:
    """The part of `trace` that `window` keeps (the module's docstring says what is kept). `whole`
    (readers/nsys/window.py `Whole`): `trace` holds only the part of an export that a read for this window
    kept (its `meta.start_ns` the whole capture's), and `whole` says what the export holds (its GPU ops, its
    first op's start, its last op's end)."""
    if not window:
        return trace
    total = trace.ops.height if whole is None else whole.ops
    first = trace.ops["start"].min() if whole is None else whole.first_start
    last = trace.ops["end"].max() if whole is None else whole.last_end
    bounds = _bounds(trace.ranges, trace.meta.start_ns, window, grouping, trace.meta.path)
    inside = (pl.col("at") >= pl.col("t0")) & (pl.col("at") < pl.col("t1"))
    launch = trace.api.select("pid", "correlation", launched="start").unique(["pid", "correlation"], keep="first")
    ops = _with_bounds(trace.ops.join(launch, on=["pid", "correlation"], how="left", maintain_order="left"),
                       bounds).with_columns(at=pl.coalesce("launched", "start"))
    ops = ops.filter(inside).select(trace.ops.columns)
    if ops.is_empty():
        raise SpecprofError(f"{trace.meta.path}: the window ({window.describe()}) holds no GPU op; the trace's ops "
                            "run from "
                            f"{(first - trace.meta.start_ns) / 1e6:.1f} to "
                            f"{(last - trace.meta.start_ns) / 1e6:.1f} ms after the capture's start", trace.meta.path)
    api = _with_bounds(trace.api, bounds).with_columns(at=pl.col("start")).filter(inside).select(trace.api.columns)
    syncs = _with_bounds(trace.syncs, bounds).with_columns(at=pl.col("start")).filter(inside).select(
        trace.syncs.columns).sort("start", maintain_order=True)
    ranges = _with_bounds(trace.ranges, bounds).filter((pl.col("start") < pl.col("t1")) & (pl.col("end") > pl.col("t0")))
    is_cycle = pl.col("name").is_in(list(grouping))
    if window.by_cycles:  # whole cycles: only those that start in the window
        ranges = ranges.filter(~is_cycle | ((pl.col("start") >= pl.col("t0")) & (pl.col("start") < pl.col("t1"))))
    ranges = ranges.select(trace.ranges.columns)
    # The kept cycles keep their numbers: per process, how many cycles came before the first one kept.
    every = _cycle_ranges(trace.ranges, grouping)
    offset = every.join(ranges.filter(is_cycle).select("range_id"), on="range_id", how="semi").group_by("pid").agg(
        offset=pl.col("index").min())
    kept_cycles = ranges.filter(is_cycle).height
    meta = replace(trace.meta, notes=[*trace.meta.notes, (
        f"window {window.describe()}: {ops.height:,} of {total:,} GPU ops (by launch time), "
        f"{kept_cycles:,} of {every.height:,} cycles")],
        extra={**trace.meta.extra, "window": window.describe(),
               "cycle_index_offset": {int(p): int(o) for p, o in offset.iter_rows() if o}})
    collectives = None
    if trace.collectives is not None:
        collectives = trace.collectives.join(ops.select("op_id"), on="op_id", how="semi")
    return Trace(ops=ops, api=api, ranges=ranges, marks=trace.marks, meta=meta, collectives=collectives, syncs=syncs)


def renumber_cycles(cycles: pl.DataFrame, offsets: dict) -> pl.DataFrame:
    """The per-cycle table of a window with the cycles' numbers in the whole trace (`index` + the cycles of its
    process before the window)."""
    if not offsets or cycles.is_empty():
        return cycles
    off = pl.DataFrame({"pid": list(offsets), "_offset": list(offsets.values())},
                       schema={"pid": cycles.schema["pid"], "_offset": pl.Int64})
    return cycles.join(off, on="pid", how="left", maintain_order="left").with_columns(
        index=pl.col("index") + pl.col("_offset").fill_null(0)).drop("_offset")
