"""The synchronize-class calls a capture holds (`sync_calls`): where they fall, phase by phase, what they cost, and
one call's own cost (what the synchronize-timer estimate charges per call, derived/sync_timers.py). A capture whose
own code synchronizes inside a phase is the distortion specprof exists to catch: that phase's host time includes a
wait for the GPU (docs/economics.md, "Synchronize calls in the capture"). A pure function of the attribution's
tables."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from specprof.analyzer.core.projection import innermost_at_launch, timeline
from specprof.analyzer.model.numeric import np
from specprof.analyzer.model.trace import BLOCKING_COPIES


# One synchronize call's own cost is this quantile of the calls' own costs: the least a call takes once the GPU is
# done, as a call without a profiler's per-call tracing costs (the median under nsys read 7.2 us on reference-k4
# and overstated the measured timers of that engine; the 10th percentile, 2.8 us, agrees with them).
OWN_QUANTILE = 0.1


@dataclass(frozen=True)
class SyncCalls:
    """The trace's synchronize-class calls (model/trace.py SYNC_NAMES).

    phases: phase (null: in no phase), call (its name), calls, total_ns, mean_ns, own_ns (the median of each call's
    own cost), in phase order of first call; calls, total_ns: all of them; own_ns: one synchronize call's own cost,
    the OWN_QUANTILE quantile over the synchronize calls (not the blocking copies) of the time from when the GPU had
    done the work it waited for (the last GPU op of its process to end before the call returned, or the call's start when none
    ended during it) to the call's return; None without such a call. warning: one line where the captured code
    synchronizes inside a phase, else None."""

    phases: pl.DataFrame
    calls: int
    total_ns: int
    own_ns: int | None
    warning: str | None = None
    notes: list[str] = field(default_factory=list)


def sync_calls(syncs: pl.DataFrame, ops: pl.DataFrame, ranges: pl.DataFrame,
               grouping: tuple[str, ...] = ("cycle",)) -> SyncCalls | None:
    """The synchronize-class calls `syncs` (Trace.syncs) of a capture attributed to the phase whose range on their
    thread encloses them (the innermost range's phase: `ranges`, the attribution's, with `phase`), with each call's
    own cost measured against the GPU ops `ops` (their pid, end). None without any."""
    if syncs.is_empty():
        return None
    rows = syncs.sort("start", maintain_order=True)
    if ranges.height:
        found = innermost_at_launch(rows, ranges, timeline(ranges))
        phase = ranges.select("range_id", pl.col("phase").cast(pl.Utf8), pl.col("name").cast(pl.Utf8).alias("_r"))
        rows = found.join(phase, on="range_id", how="left", maintain_order="left").with_columns(
            phase=pl.when(pl.col("_r").is_in(list(grouping))).then(None).otherwise(pl.col("phase"))).drop("_r")
    else:
        rows = rows.with_columns(phase=pl.lit(None, pl.Utf8))
    rows = rows.with_columns(own=_own_cost(rows, ops), call=pl.col("name").cast(pl.Utf8))
    table = rows.group_by("phase", "call", maintain_order=True).agg(
        calls=pl.len(), total_ns=(pl.col("end") - pl.col("start")).sum(),
        mean_ns=(pl.col("end") - pl.col("start")).mean().round().cast(pl.Int64),
        own_ns=pl.col("own").median().round().cast(pl.Int64))
    waits = rows.filter(~pl.col("call").is_in(list(BLOCKING_COPIES)))
    own = int(waits["own"].quantile(OWN_QUANTILE, "nearest")) if waits.height else None
    inside = table.filter(pl.col("phase").is_not_null())
    warning = None
    if inside.height:
        parts = [f"{r['phase']} ({r['calls']:,} {r['call']}, {r['total_ns'] / 1e6:.3f} ms)"
                 for r in inside.iter_rows(named=True)]
        warning = ("the captured code synchronizes inside a phase: " + "; ".join(parts) + ": the host waits for the "
                   "GPU there, so that phase's host time includes GPU time, and a timer around it reads both")
    return SyncCalls(phases=table.select("phase", "call", "calls", "total_ns", "mean_ns", "own_ns"), calls=rows.height,
                     total_ns=int((rows["end"] - rows["start"]).sum()), own_ns=own, warning=warning)


def _own_cost(calls: pl.DataFrame, ops: pl.DataFrame) -> pl.Series:
    """Per call (in `calls`' order), end - max(start, the last end of a GPU op of its process within the call): the
    time the call took after the GPU had done what it waited for. Only the ops that end inside a call are looked
    at (one pass over the ops' ends)."""
    start, end = calls["start"].to_numpy(), calls["end"].to_numpy()
    done = start.copy()
    if ops.height:
        e = ops["end"].to_numpy()
        lo, hi = _merged(start, end)
        k = np.searchsorted(lo, e, side="right") - 1
        near = (k >= 0) & (e <= hi[np.maximum(k, 0)])
        near_ops = ops.filter(pl.Series(near)).select("pid", "end").sort("end")
        for pid in np.unique(calls["pid"].drop_nulls().to_numpy()):
            mine = (calls["pid"] == pid).fill_null(False).to_numpy()
            ends = near_ops.filter(pl.col("pid") == int(pid))["end"].to_numpy()
            at = np.searchsorted(ends, end[mine], side="right") - 1
            last = np.where(at >= 0, ends[np.maximum(at, 0)] if len(ends) else 0, np.iinfo(np.int64).min)
            done[mine] = np.maximum(start[mine], last)
    return pl.Series("own", end - done, pl.Int64)


def _merged(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The intervals [start, end] merged, as sorted arrays of their lows and highs."""
    order = np.argsort(start, kind="stable")
    lo, hi = [], []
    for a, b in zip(start[order].tolist(), end[order].tolist()):
        if lo and a <= hi[-1]:
            hi[-1] = max(hi[-1], b)
        else:
            lo.append(a)
            hi.append(b)
    return np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
