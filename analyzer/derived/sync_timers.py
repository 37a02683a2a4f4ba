"""What synchronize timers would cost (`sync_timer_estimate`): `torch.cuda.synchronize()` before and after every
phase, with the host clock read in between (the usual hand-made timers), replayed on one capture's own timeline
(docs/economics.md, "What synchronize timers do to the numbers"). A pure function of the attribution's tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from specprof.analyzer.derived.economics import IDLE_GAP_FACTOR
from specprof.analyzer.model.columns import distinct
from specprof.analyzer.model.numeric import np

# At most this many cycles per process are replayed by `sync_timer_estimate` (evenly spaced): its cost stays
# bounded however long the capture, and the mean over them is the estimate.
SYNC_ESTIMATE_CYCLES = 400


@dataclass
class SyncTimerEstimate:
    """What `torch.cuda.synchronize()` before and after every phase, with the host clock in between (the usual
    hand-made timers), would add to this capture, estimated from its own timeline (`sync_timer_estimate`).

    phases: phase, instances, events_ns (the phase's GPU time as in-stream events at its boundaries would read
    it, unsynchronised: from when the stream reaches the phase's start to its last op's end), timer_ns (what the
    timer would read: from the synchronize before the phase to the one after it), inflation_pct;
    cycle_ns / synced_cycle_ns: the mean busy cycle period as captured and with the timers; cycle_inflation_pct;
    sync_ns: one synchronize call's own cost (measured from the trace's synchronize calls, derived/sync_calls.py,
    else 0 and said);
    syncs_per_cycle; cycles: periods averaged; bound_ns: what no synced cycle can exceed, the mean over the same
    cycles of the host period + the GPU time of the ops launched in it + one synchronize call's cost per segment
    (the GPU's work run after the host's, with nothing overlapped): the replay keeps to it by construction."""

    phases: pl.DataFrame
    cycle_ns: int
    synced_cycle_ns: int
    cycle_inflation_pct: float
    sync_ns: int
    syncs_per_cycle: float
    cycles: int
    bound_ns: int = 0
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
                        grouping: tuple[str, ...] = ("cycle",), sync_ns: int | None = None
                        ) -> SyncTimerEstimate | None:
    """Estimate, from one capture's timeline, what a synchronize at every phase boundary (before and after each
    phase of the cycle, as hand-made timers do) would add, per phase and per cycle (docs/economics.md).

    Between two consecutive synchronize points the GPU starts idle. The time from one to the next becomes the
    longer of the host's work in it (as captured, less the time the host spent blocked on GPU work launched
    before it, which the synchronize already waited for) and the GPU work launched in it, replayed from an idle
    GPU: each op starts at max(the previous op's end on its stream, its launch + the launch latency) plus the gap
    it had after both in the capture, so an undisturbed segment replays as captured. Then the synchronize call
    itself. What the timers remove is the launch-queue overlap: a phase whose host work ran while the GPU still
    finished the one before now waits for it, then launches. `ops`: the attribution's (launch_start, kind,
    stream, pid); `ranges`: its ranges (phase, cycle); `cycles`: its cycles; `api`: the trace's launch calls;
    `sync_ns`: one synchronize call's own cost as the trace's synchronize calls measure it (derived/sync_calls.py),
    None where it has none. None without two consecutive cycles with phases.

    Memory: each process's launched ops are gathered a few columns at a time, for the launch latency's sample;
    of them only the ops launched in the replayed cycles (and the window before each) are kept for the replay."""
    phases = ranges.filter(pl.col("cycle").is_not_null() & pl.col("phase").is_not_null()
                           & ~pl.col("name").is_in(list(grouping)))
    if not phases.height or cycles.height < 2:
        return None
    launch_rows = _launch_rows(ops)
    notes = []
    if sync_ns is None:
        sync_ns = 0
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
    rows, periods, synced, bounds = [], [], [], []
    for pid, ids, period_all, median, by_cycle, window, pairs, _ in plans:
        if pid not in replayed:
            continue
        po = replayed.pop(pid).with_columns(ready=pl.col("launch_start") + pl.min_horizontal(
            pl.lit(lat), pl.col("start") - pl.col("launch_start"))).sort("launch_start", maintain_order=True)
        po = _with_waits(po)
        p_launch = po["launch_start"].to_numpy()
        p_end, p_start = po["end"].to_numpy(), po["start"].to_numpy()
        p_ready, p_gap = po["ready"].to_numpy(), po["gap"].to_numpy()
        p_after = po["after"].to_numpy()
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
                dur = _synced_segment(t0, t1, p_launch, p_start, p_end, p_ready, p_gap, p_after, p_stream,
                                      p_memcpy, api_t, window) + sync_ns
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
            a, b = np.searchsorted(p_launch, [first, points[-1][0]])
            bounds.append(points[-1][0] - first + int((p_end[a:b] - p_start[a:b]).sum())
                          + (len(points) - 1) * sync_ns)
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
        sync_ns=sync_ns, syncs_per_cycle=2.0 * len(rows) / len(periods), cycles=len(periods),
        bound_ns=int(round(float(np.mean(bounds)))), notes=notes)


def _with_waits(po: pl.DataFrame) -> pl.DataFrame:
    """The replay's ops (in launch order) with `after`, the row (in `po`) of the op on another stream of the same
    device that each waited for in the capture (-1: none), and `gap`, the time each started after all it waited
    for: the end of the op before it on its stream, its launch + the launch latency (`ready`), and the latest end of
    an op of the same device that ended before it started, where later than both (a cross-stream wait: an event
    the stream waited on). The replay waits for that op's replayed end instead of keeping the wait as a gap (for the
    GPU work replayed so far where that op is not replayed before it: launched later, as the overlap scheduler's
    copies wait for work launched after them): a side stream's copy that waited milliseconds for the main stream
    replays after the main stream's replayed work."""
    po = po.with_row_index("_row").with_columns(pl.col("_row").cast(pl.Int64))
    ends = po.select("device", pl.col("end").alias("_dep_end"), pl.col("_row").alias("after")).sort("_dep_end")
    found = po.sort("start").join_asof(ends, left_on="start", right_on="_dep_end", by="device",
                                       strategy="backward", check_sortedness=False).sort("_row")
    base = pl.max_horizontal(pl.col("prev").fill_null(0), pl.col("ready"))
    waited = pl.col("_dep_end").is_not_null() & (pl.col("_dep_end") > base)
    found = found.with_columns(after=pl.when(waited).then(pl.col("after")).otherwise(-1),
                               gap=pl.col("start") - pl.when(waited).then(pl.col("_dep_end")).otherwise(base))
    return found.with_columns(gap=pl.when(pl.col("gap") < 0).then(0).otherwise(pl.col("gap"))).drop("_dep_end",
                                                                                                    "_row")


def _synced_segment(t0, t1, launch, start, end, ready, gap, after, stream, memcpy, api_t, window) -> int:
    """The time from a synchronize at t0 to the next synchronize point t1, with the GPU idle at t0 (see
    `sync_timer_estimate`). `launch` sorted; earlier work is looked for `window` ns back; `after`: the row each
    op waited for on another stream (`_with_waits`), -1 for none."""
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
    done: dict = {}  # row -> its replayed end, for the ops of this segment
    for row, st, r, g, d, w in zip(range(b, c), stream[b:c].tolist(), ready[b:c].tolist(), gap[b:c].tolist(),
                                   (end[b:c] - start[b:c]).tolist(), after[b:c].tolist()):
        e = max(last.get(st, t0), r, t0 if w < 0 else done.get(w, gpu_end)) + g + d
        last[st] = e
        done[row] = e
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
