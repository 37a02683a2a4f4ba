"""Cross-check: can the profile's numbers be trusted, and how much did the profiler distort them?

Three comparisons (method and measured numbers: docs/crosscheck.md):

1. Consistency, same run: per phase, the nsys CPU range durations (NVTX push/pop, nsys's clock) against the
   sidecar's durations (perf_counter_ns stamped by the tracer inside the same calls), for the same
   instances. The clocks are aligned with the tracer's NVTX clock-sync marks, or, when no mark fell inside
   the capture, by matching the sequence of cycle durations; instances are then paired by name and start.
   Both measure the same interval, so they must agree: a phase is `consistent` when the mean durations differ
   by at most TOLERANCE (2%) or FLOOR_NS (10 us), whichever is larger, else `distorted`.
2. Inflation, two runs of one workload: the sidecar of the profiled run against the sidecar of the same
   workload run without nsys (the baseline), per phase, mean time per cycle. `measure` says what was timed:
   `cpu` (sidecar wall clock of the phase call) or `gpu` (CUDA events around the phase, when both runs have a
   reference-engine ground_truth.json). The `period` row is the cycle start-to-start time: what throughput
   sees.
3. Accept length: the sidecar's mean accept length against the `accept len` lines of SGLang's server log.
4. Ground truth, same run: when the tracer recorded CUDA events at phase boundaries (`capture --gpu-events`),
   the attributed time of each phase instance on the stream the phase ran on against the GPU time between
   its two events. Within GT_TOLERANCE (3%) or GT_FLOOR_NS (0.1 ms) of the mean per instance: `within`.

A sidecar that holds a capture window (`capture --capture-cycles W:N`) is compared over that window: the
profiled run's window is what the trace holds, and the run without nsys counted its own W decode cycles
before its window, so the two leave out the same warm-up even when prefill batches split differently.

`CrossCheck` (what `Analysis.crosscheck` holds; the HTML report reads it). All times integer ns:
- `alignment`: one row per sidecar file: file, path, pid (OS pid in the sidecar), trace_pid, method
  ("clock_sync marks" | "cycle sequence" | "none"), marks (the trace's clock-sync marks of this process whose
  reading is in this sidecar), offset_ns and drift_ppm (trace time = sidecar time + offset_ns + drift_ppm / 1e6
  x (sidecar time - the first matched cycle's start)), mark_offset_ns (the offset the marks alone give:
  max(ts - mark_done_ns), or min(ts - perf_counter_ns) for older sidecars; null without marks), mark_lag_ns
  (median over marks of their offset minus the fitted one: how far the marks' own estimate is from the cycle
  starts, near 0 with mark_done_ns, the NVTX call's duration without it), sidecar_cycles, trace_cycles,
  matched_cycles, first_index and last_index (sidecar indices of the first and last matched cycle),
  residual_p50_ns and residual_max_ns (|trace start - sidecar start - offset| over matched cycles).
- `pairs`: one row per matched instance: file, name, cycle (sidecar index), trace_start, nsys_ns (range
  duration in the trace: an NVTX range, or a record_function range in a Kineto trace; the name stays
  `nsys_ns`), sidecar_ns, diff_ns (trace - sidecar).
- `profiler`: "nsys" or "torch.profiler" (what recorded the trace, and what "with" means in `inflation`).
- `consistency`: one row per phase name: phase, instances, nsys_ns and sidecar_ns (means per instance),
  diff_ns, diff_pct, abs_diff_p90_ns, abs_diff_max_ns, tolerance_ns, verdict ("consistent" | "distorted").
- `inflation` (null without a baseline): one row per (measure, phase): measure, phase, cycles_with,
  cycles_without, with_ns and without_ns (mean per cycle), ratio (with / without), ratio_lo and ratio_hi
  (95% interval from the per-cycle spread, and from the twins' run-to-run noise where repeats exist),
  verdict ("inflated" | "unchanged" | "shorter" within INFLATION_TOLERANCE; "within noise" when repeated twins
  measured a run-to-run noise the difference does not exceed; "noise" when the run under the profiler is
  faster where a profiler cannot make it faster, the cycle, its period and GPU time; or "negligible" when the
  phase takes under FLOOR_NS per cycle in both runs), noise_pct (the twins' run-to-run noise, % of the mean,
  null without repeats).
- `accept` (null without a server log): `AcceptCheck`.
- `ground_truth` (null without CUDA events in the sidecar): one row per phase: phase, instances (phase
  instances matched to events), stream (the stream the phase's ops ran on, the one the events were recorded
  on), attributed_ns and events_ns (means per instance), diff_ns, diff_pct, abs_diff_max_ns, tolerance_ns,
  verdict ("within" | "outside").
- `baseline`: the baseline sidecar paths; `notes`: what was missing or assumed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

import polars as pl

from specprof.analyzer.core.attribution import Attribution
from specprof.analyzer.derived.economics import cycle_periods, run_of
from specprof.analyzer.derived.intervals import t975
from specprof.analyzer.model.numeric import np
from specprof.analyzer.model.run_data import RunData
from specprof.analyzer.model.sidecars import Sidecars
from specprof.analyzer.model.stats import QUANTILE
from specprof.analyzer.model.trace import Trace

TOLERANCE = 0.02  # relative, on the mean per instance
FLOOR_NS = 10_000  # absolute floor of the tolerance: the NVTX push/pop outside the tracer's stamps
INFLATION_TOLERANCE = 0.02  # a ratio within 1 +- this is "unchanged"
GT_TOLERANCE = 0.03  # attributed vs CUDA events, relative, on the mean per instance
GT_FLOOR_NS = 100_000  # ... or this, whichever is larger
MATCH_NS = 100_000  # after alignment, an instance pairs with the same-named trace range within this
DUR_NS = 50_000  # the same cycle's durations in the trace and the sidecar differ by less (fixtures: < 20 us)
RESIDUAL_NS = 100_000  # a matched cycle's start is off the fitted offset line by less
DOMAIN = "specprof"
MARK = re.compile(r"^specprof\.clock_sync perf_counter_ns=(\d{1,19})$")
CYCLE = "cycle"
PERIOD = "period"
LOG_ROUNDING = 0.005  # SGLang prints accept len with 2 decimals
DEFAULT_LOG_INTERVAL = 40  # SGLang's --decode-log-interval default

ALIGNMENT_SCHEMA = {
    "file": pl.Int64, "path": pl.Utf8, "pid": pl.Int64, "trace_pid": pl.Int64, "method": pl.Utf8,
    "marks": pl.Int64, "offset_ns": pl.Int64, "drift_ppm": pl.Float64, "mark_offset_ns": pl.Int64,
    "mark_lag_ns": pl.Int64,
    "sidecar_cycles": pl.Int64, "trace_cycles": pl.Int64, "matched_cycles": pl.Int64,
    "first_index": pl.Int64, "last_index": pl.Int64, "residual_p50_ns": pl.Int64, "residual_max_ns": pl.Int64,
}
PAIRS_SCHEMA = {"file": pl.Int64, "name": pl.Utf8, "cycle": pl.Int64, "trace_start": pl.Int64,
                "nsys_ns": pl.Int64, "sidecar_ns": pl.Int64, "diff_ns": pl.Int64}
INFLATION_SCHEMA = {
    "measure": pl.Utf8, "phase": pl.Utf8, "cycles_with": pl.Int64, "cycles_without": pl.Int64,
    "with_ns": pl.Int64, "without_ns": pl.Int64, "ratio": pl.Float64, "ratio_lo": pl.Float64,
    "ratio_hi": pl.Float64, "verdict": pl.Utf8, "noise_pct": pl.Float64,
}


@dataclass
class AcceptCheck:
    """Sidecar accept length against the server log's `accept len` lines (all lengths include the bonus).

    sidecar_pooled: sum(correct + 1) / request-rounds, SGLang's own definition; sidecar_per_cycle: the mean of
    per-cycle means (per-batch averaging); log_mean: the mean of the log lines; log_weighted: weighted by
    `#running-req` (closer to per-request pooling; null when the lines lack it); gap: log - sidecar_pooled
    (log_weighted when known); overlap_bound: how much delaying the counts by one iteration can move an
    interval's mean (per-cycle spread / interval); verdict: "agree" | "explained" | "unexplained";
    explanations: plain sentences."""

    sidecar_pooled: float
    sidecar_per_cycle: float
    request_rounds: int
    cycles: int
    log_lines: int
    log_mean: float
    log_weighted: float | None
    log_rate_mean: float | None
    gap: float
    overlap_bound: float
    verdict: str
    explanations: list[str] = field(default_factory=list)
    # what a hand count over the same records would read, each way it can go wrong (`hand_counts`)
    hand_counts: list[dict] = field(default_factory=list)

    @property
    def log_accept_len(self) -> float:
        """The server log's accept length the gap is of: log_weighted when known, else log_mean."""
        return self.log_weighted if self.log_weighted is not None else self.log_mean


@dataclass
class CrossCheck:
    alignment: pl.DataFrame
    pairs: pl.DataFrame
    consistency: pl.DataFrame
    profiler: str = "nsys"  # what timed the trace's ranges: "nsys", or "torch.profiler" (Kineto)
    inflation: pl.DataFrame | None = None
    accept: AcceptCheck | None = None
    ground_truth: pl.DataFrame | None = None
    baseline: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- clocks ----------------------------------------------------------------------------------------------------

def clock_marks(marks: pl.DataFrame) -> pl.DataFrame:
    """The tracer's clock-sync marks in a trace: pid, ts (trace clock), perf_counter_ns (sidecar clock, from the
    mark's message)."""
    m = marks.with_columns(perf=pl.col("name").str.extract(MARK.pattern, 1)).filter(pl.col("perf").is_not_null())
    return m.select("pid", "ts", perf_counter_ns=pl.col("perf").cast(pl.Int64, strict=False)).filter(
        pl.col("perf_counter_ns").is_not_null())


def _sequence_pairs(t_dur: np.ndarray, s_dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Without marks: pair trace and sidecar cycles by matching the sequence of their durations.

    The same cycle has the same duration in both (the NVTX range wraps the tracer's stamps by a few us);
    neighbouring cycles differ by their jitter. Candidate index shifts come from the first trace cycles'
    duration matches; the shift whose overlap has the smallest median duration difference wins, and its pairs
    whose durations agree are returned (trace rows, sidecar rows)."""
    none = (np.array([], dtype=np.int64), np.array([], dtype=np.int64))
    m, n = len(t_dur), len(s_dur)
    if m == 0 or n == 0:
        return none
    head = min(m, 8)
    close = np.abs(t_dur[:head, None] - s_dur[None, :]) <= np.maximum(DUR_NS, 0.01 * t_dur[:head, None])
    ti, sj = np.nonzero(close)
    if len(ti) == 0:
        return none
    shifts, votes = np.unique(sj - ti, return_counts=True)
    best, best_score = None, None
    for shift in shifts[np.argsort(-votes, kind="stable")][:8]:
        i0, j0 = max(0, -shift), max(0, shift)
        length = min(m - i0, n - j0)
        if length < max(2, min(m, n) // 2):
            continue
        score = np.median(np.abs(t_dur[i0:i0 + length] - s_dur[j0:j0 + length]))
        if score <= DUR_NS and (best_score is None or score < best_score):
            best, best_score = (i0, j0, length), score
    if best is None:
        return none
    i0, j0, length = best
    ti, sj = np.arange(i0, i0 + length), np.arange(j0, j0 + length)
    ok = np.abs(t_dur[ti] - s_dur[sj]) <= np.maximum(DUR_NS, 0.01 * t_dur[ti])
    return ti[ok], sj[ok]


def _nearest(t_start: np.ndarray, s_shifted: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """One-to-one nearest pairs (trace i, sidecar j) with |t_i - s_j| <= tol; s_shifted sorted."""
    if len(t_start) == 0 or len(s_shifted) == 0:
        return np.array([], dtype=np.int64), np.array([], dtype=np.int64)
    pos = np.searchsorted(s_shifted, t_start)
    lo = np.clip(pos - 1, 0, len(s_shifted) - 1)
    hi = np.clip(pos, 0, len(s_shifted) - 1)
    pick = np.where(np.abs(s_shifted[lo] - t_start) <= np.abs(s_shifted[hi] - t_start), lo, hi)
    ok = np.abs(s_shifted[pick] - t_start) <= tol
    ti, sj = np.nonzero(ok)[0], pick[ok]
    # keep one trace cycle per sidecar cycle (the closest)
    order = np.lexsort((np.abs(s_shifted[sj] - t_start[ti]), sj))
    ti, sj = ti[order], sj[order]
    first = np.ones(len(sj), dtype=bool)
    first[1:] = sj[1:] != sj[:-1]
    return ti[first], sj[first]


@dataclass
class Offset:
    """trace time = sidecar time + offset_ns + drift x (sidecar time - ref_ns)."""

    offset_ns: int
    drift: float
    ref_ns: int

    def at(self, t):
        return t + self.offset_ns + self.drift * (t - self.ref_ns)

    def expr(self, column: str) -> pl.Expr:
        c = pl.col(column)
        return (c + self.offset_ns + (self.drift * (c - self.ref_ns).cast(pl.Float64)).round(0).cast(pl.Int64))


def _fit_offset(s_start: np.ndarray, diff: np.ndarray) -> Offset:
    """offset(t) = a + b (t - ref) through (sidecar start, trace - sidecar) pairs, refitted once without the
    pairs more than RESIDUAL_NS off (a stray cycle must not tilt the line); a constant under 3 pairs."""
    ref = int(s_start[0])
    keep = np.ones(len(diff), dtype=bool)
    a, b = float(np.median(diff)), 0.0
    for _ in range(2):
        x, y = (s_start[keep] - ref).astype(float), diff[keep].astype(float)
        if len(x) >= 3 and np.ptp(x) > 0:
            b, a = np.polyfit(x, y, 1)
        else:
            a, b = float(np.median(y)), 0.0
        keep = np.abs(diff - (a + b * (s_start - ref))) <= RESIDUAL_NS
        if keep.sum() < max(2, len(diff) // 2):
            break
    return Offset(int(round(a)), float(b), ref)


def align(trace_cycles: pl.DataFrame, side_cycles: pl.DataFrame, marks: pl.DataFrame) -> dict:
    """Clock offset and cycle pairs for one process.

    trace_cycles: start, end (trace clock); side_cycles: index, start, end (sidecar clock); marks: ts,
    perf_counter_ns, mark_done_ns (null when unknown) of this process. A mark's offset is ts - mark_done_ns
    (nsys stamps the mark near the end of the NVTX call, docs/sidecar.md), or ts - perf_counter_ns for
    sidecars without mark_done_ns (late by the call's duration). With marks, each sidecar cycle is moved by
    the offset interpolated
    between the marks around it and paired with the nearest trace cycle; without, pairs come from the sequence
    of durations. Then offset(t) = a + b t is fitted through the pairs' start differences (b: the two clocks'
    rate difference, reported in ppm). Returns the alignment row fields, `offset` (Offset or None) and
    `pairs` (trace rows, sidecar rows)."""
    t = trace_cycles.sort("start")
    s = side_cycles.filter(pl.col("end").is_not_null()).sort("start")
    t_start, t_dur = t["start"].to_numpy(), (t["end"] - t["start"]).to_numpy()
    s_start, s_dur = s["start"].to_numpy(), (s["end"] - s["start"]).to_numpy()
    out = {"marks": marks.height, "mark_offset_ns": None, "mark_lag_ns": None, "sidecar_cycles": s.height,
           "trace_cycles": t.height, "method": "none", "offset_ns": None, "drift_ppm": None,
           "matched_cycles": 0, "first_index": None, "last_index": None, "residual_p50_ns": None,
           "residual_max_ns": None, "offset": None, "t": t, "s": s,
           "pairs": (np.array([], dtype=np.int64), np.array([], dtype=np.int64))}
    ti = sj = np.array([], dtype=np.int64)
    if marks.height:
        m = marks.sort("perf_counter_ns").with_columns(
            stamp=pl.coalesce("mark_done_ns", "perf_counter_ns"))
        m_perf = m["stamp"].to_numpy()
        m_off = (m["ts"] - m["stamp"]).to_numpy()
        out["mark_offset_ns"] = int(m_off.max() if m["mark_done_ns"].null_count() == 0 else m_off.min())
        period = float(np.median(np.diff(t_start))) if len(t_start) > 1 else float(t_dur.max(initial=0))
        local = np.interp(s_start.astype(float), m_perf.astype(float), m_off.astype(float))
        ti, sj = _nearest(t_start, s_start + local.round().astype(np.int64), max(0.4 * period, 1_000.0))
        # The marks must have put the same cycles side by side: their durations agree to a few us.
        if len(ti) and np.median(np.abs(t_dur[ti] - s_dur[sj])) <= DUR_NS:
            out["method"] = "clock_sync marks"
        else:
            ti = sj = np.array([], dtype=np.int64)
    if not len(ti):
        ti, sj = _sequence_pairs(t_dur, s_dur)
        if len(ti):
            out["method"] = "cycle sequence"
    if not len(ti):
        return out
    order = np.argsort(sj)
    ti, sj = ti[order], sj[order]
    diff = t_start[ti] - s_start[sj]
    offset = _fit_offset(s_start[sj], diff)
    resid = np.abs(t_start[ti] - offset.at(s_start[sj]))
    good = resid <= RESIDUAL_NS
    ti, sj, resid = ti[good], sj[good], resid[good]
    idx = s["index"].to_numpy()[sj]
    if marks.height:
        out["mark_lag_ns"] = int(np.median(m_off - (offset.at(m_perf) - m_perf)))
    out.update(
        offset_ns=offset.offset_ns, drift_ppm=offset.drift * 1e6, offset=offset, matched_cycles=len(ti),
        first_index=int(idx.min()) if len(idx) else None, last_index=int(idx.max()) if len(idx) else None,
        residual_p50_ns=int(np.median(resid)) if len(resid) else None,
        residual_max_ns=int(resid.max()) if len(resid) else None, pairs=(ti, sj))
    return out


# -- consistency ------------------------------------------------------------------------------------------------

def sidecar_intervals(sc: Sidecars, file: int) -> pl.DataFrame:
    """Every timed interval of one sidecar file: name, cycle, start, end (cycles themselves named `cycle`)."""
    cyc = sc.cycles.filter(pl.col("file") == file).select(
        name=pl.lit(CYCLE), cycle="index", start="start", end="end")
    ph = sc.phases.filter(pl.col("file") == file).select("name", "cycle", "start", "end")
    return pl.concat([cyc, ph]).filter(pl.col("end").is_not_null())


def match_intervals(trace_ranges: pl.DataFrame, intervals: pl.DataFrame, offset: Offset, tol: int = MATCH_NS
                    ) -> pl.DataFrame:
    """Pair sidecar intervals (sidecar clock) with same-named trace ranges (trace clock), nearest start."""
    # joined on the trace's dictionary-encoded names (the sidecar's few are encoded, not the trace's many decoded)
    side = intervals.with_columns(pl.col("name").cast(pl.Categorical), t=offset.expr("start")).sort("t")
    tr = trace_ranges.select("name", t="start", trace_start="start",
                             nsys_ns=pl.col("end") - pl.col("start")).sort("t")
    joined = side.join_asof(tr, on="t", by="name", strategy="nearest", tolerance=tol,
                            check_sortedness=False).filter(
        pl.col("trace_start").is_not_null())
    # one sidecar interval per trace range: the closest
    joined = joined.with_columns(err=(pl.col("t") - pl.col("trace_start")).abs()).sort("err").unique(
        subset=["name", "trace_start"], keep="first")
    return joined.select(pl.col("name").cast(pl.Utf8), "cycle", "trace_start", "nsys_ns",
                         sidecar_ns=pl.col("end") - pl.col("start")).with_columns(
        diff_ns=pl.col("nsys_ns") - pl.col("sidecar_ns")).sort("trace_start")


def consistency(pairs: pl.DataFrame, tolerance: float = TOLERANCE, floor_ns: int = FLOOR_NS) -> pl.DataFrame:
    """Per phase: mean nsys and sidecar durations of the same instances, their difference, and a verdict."""
    t = pairs.group_by(phase="name").agg(
        instances=pl.len().cast(pl.Int64),
        nsys_ns=pl.col("nsys_ns").mean(),
        sidecar_ns=pl.col("sidecar_ns").mean(),
        abs_diff_p90_ns=pl.col("diff_ns").abs().quantile(0.9, QUANTILE).round().cast(pl.Int64),
        abs_diff_max_ns=pl.col("diff_ns").abs().max(),
    ).with_columns(diff_ns=pl.col("nsys_ns") - pl.col("sidecar_ns"))
    t = t.with_columns(
        diff_pct=pl.when(pl.col("sidecar_ns") > 0).then(100.0 * pl.col("diff_ns") / pl.col("sidecar_ns")),
        tolerance_ns=pl.max_horizontal(pl.col("sidecar_ns") * tolerance, pl.lit(float(floor_ns))),
    ).with_columns(
        verdict=pl.when(pl.col("diff_ns").abs() <= pl.col("tolerance_ns")).then(pl.lit("consistent"))
        .otherwise(pl.lit("distorted")),
    )
    order = pl.when(pl.col("phase") == CYCLE).then(1).otherwise(0)
    return t.select(
        "phase", "instances",
        *[pl.col(c).round(0).cast(pl.Int64) for c in ("nsys_ns", "sidecar_ns", "diff_ns")],
        "diff_pct", pl.col("abs_diff_p90_ns").cast(pl.Int64), pl.col("abs_diff_max_ns").cast(pl.Int64),
        pl.col("tolerance_ns").round(0).cast(pl.Int64), "verdict",
    ).sort(order, pl.col("sidecar_ns"), descending=[False, True])


# -- inflation --------------------------------------------------------------------------------------------------

def capture_windows(sc: Sidecars) -> pl.DataFrame:
    """Per sidecar file with a complete capture window, in file order: file, first and last (the indices of the
    first and the last cycle inside it: after the `start` record's cycle, up to the `stop` record's)."""
    c = sc.capture
    start = c.filter(pl.col("event") == "start").group_by("file").agg(
        first=(pl.col("after_cycle").first().fill_null(-1) + 1))
    stop = c.filter(pl.col("event") == "stop").group_by("file").agg(last=pl.col("after_cycle").first())
    return start.join(stop, on="file").filter(pl.col("last").is_not_null() & (pl.col("last") >= pl.col("first"))
                                              ).sort("file")


def window_cycles(sc: Sidecars, first: int | None, last: int | None) -> pl.DataFrame:
    """The sidecar's cycles to compare: a file's own capture window where it has one, else index in
    [first, last] (either bound None: open)."""
    keep = pl.lit(True)
    if first is not None:
        keep = keep & (pl.col("index") >= first)
    if last is not None:
        keep = keep & (pl.col("index") <= last)
    windows = capture_windows(sc)
    cycles = sc.cycles.join(windows, on="file", how="left")
    own = pl.col("first").is_not_null()
    return cycles.filter(pl.when(own).then(pl.col("index").is_between(pl.col("first"), pl.col("last")))
                         .otherwise(keep)).drop("first", "last")


def per_cycle_times(sc: Sidecars, first: int | None, last: int | None) -> pl.DataFrame:
    """Per cycle (file, index) and phase: the phase's total sidecar time in that cycle, plus `cycle` (the cycle
    range) and `period` (start to next start, idle gaps left out), for the cycles `window_cycles` keeps."""
    cycles = window_cycles(sc, first, last).filter(pl.col("end").is_not_null())
    ph = sc.phases.filter(pl.col("end").is_not_null()).rename({"cycle": "index"}).join(
        cycles.select("file", "index"), on=["file", "index"], how="semi")
    per = ph.group_by("file", "index", phase="name").agg(ns=(pl.col("end") - pl.col("start")).sum())
    cyc = cycles.select("file", "index", phase=pl.lit(CYCLE), ns=pl.col("end") - pl.col("start"))
    periods = cycle_periods(sc.cycles.select("file", "index", "start"), key="file").filter(~pl.col("idle"))
    periods = periods.join(cycles.select("file", "index"), on=["file", "index"], how="semi").select(
        "file", "index", phase=pl.lit(PERIOD), ns="period")
    return pl.concat([per, cyc, periods])


def twin_noise(times: pl.DataFrame, runs: pl.DataFrame) -> dict[str, float]:
    """Per phase, the run-to-run noise of the runs without the profiler: the 95% half-width of their means (t,
    runs - 1 degrees of freedom) over the mean, from repeated twins (RUN/no-nsys, RUN/no-nsys-2, ...). `times`:
    file, index, phase, ns (per_cycle_times); `runs`: file, run. Empty with fewer than two runs."""
    t = times.join(runs, on="file", how="left")
    if t["run"].n_unique() < 2:
        return {}
    cycles = t.filter(pl.col("phase") == CYCLE).group_by("run").agg(n=pl.len())
    out = {}
    for phase in t["phase"].unique().to_list():
        per = t.filter(pl.col("phase") == phase).group_by("run").agg(total=pl.col("ns").sum(), k=pl.len())
        per = per.join(cycles, on="run", how="left").with_columns(
            mean=pl.col("total") / (pl.col("k") if phase == PERIOD else pl.col("n")))
        means = per["mean"].drop_nulls().to_numpy()
        if len(means) >= 2 and means.mean() > 0:
            out[phase] = t975(len(means) - 1) * float(means.std(ddof=1)) / math.sqrt(len(means)) / float(means.mean())
    return out


# What a profiler cannot make faster: the whole cycle and its period, and GPU time between in-stream events.
CANNOT_SHORTEN = (CYCLE, PERIOD)


def _mean_var(ns: list[int], n: int) -> tuple[float, float]:
    """Mean and sample variance of `n` values: the integer ns `ns` and zeros for the rest, from exact integer
    sums: the same numbers whatever the order of the values (a group-by's order varies from run to run)."""
    n = max(n, len(ns))
    total, squares = sum(ns), sum(x * x for x in ns)
    return total / n, (n * squares - total * total) / (n * (n - 1)) if n > 1 else 0.0


def _ratio_rows(measure: str, with_t: pl.DataFrame, without_t: pl.DataFrame, n_with: int, n_without: int,
                phases: list[str], noise: dict[str, float] | None = None) -> list[dict]:
    """Mean per cycle (a cycle without the phase counts 0) with / without, and a 95% interval (delta method, with
    the twins' run-to-run noise `noise` (phase -> relative 95% half-width) added where repeats measured it).

    A difference within that noise is "within noise", never inflation; a run under the profiler that is faster
    where a profiler cannot make it faster (the cycle, its period, GPU time) is "noise": the two runs differ by
    something else."""
    noise = noise or {}
    rows = []
    for phase in phases:
        a = with_t.filter(pl.col("phase") == phase)["ns"].to_list()
        b = without_t.filter(pl.col("phase") == phase)["ns"].to_list()
        na, nb = (n_with, n_without) if phase != PERIOD else (len(a), len(b))
        if na == 0 or nb == 0:
            continue
        (ma, va), (mb, vb) = _mean_var(a, na), _mean_var(b, nb)
        if mb <= 0:
            continue
        ratio = ma / mb
        rel = math.sqrt((va / na / ma**2 if na > 1 and ma > 0 else 0.0) + (vb / nb / mb**2 if nb > 1 else 0.0))
        run_noise = noise.get(phase)
        half = math.sqrt((1.96 * rel) ** 2 + (run_noise or 0.0) ** 2)
        verdict = ("negligible" if max(ma, mb) < FLOOR_NS else
                   "within noise" if run_noise is not None and abs(ratio - 1) <= max(INFLATION_TOLERANCE, half) else
                   "inflated" if ratio > 1 + INFLATION_TOLERANCE else
                   "noise" if ratio < 1 - INFLATION_TOLERANCE and (measure == "gpu" or phase in CANNOT_SHORTEN) else
                   "shorter" if ratio < 1 - INFLATION_TOLERANCE else "unchanged")
        rows.append({"measure": measure, "phase": phase, "cycles_with": na, "cycles_without": nb,
                     "with_ns": int(round(ma)), "without_ns": int(round(mb)), "ratio": ratio,
                     "ratio_lo": ratio * (1 - half), "ratio_hi": ratio * (1 + half),
                     "verdict": verdict, "noise_pct": None if run_noise is None else 100 * run_noise})
    return rows


def inflation(profiled: Sidecars, baseline: Sidecars, first: int | None, last: int | None,
              gt_with: pl.DataFrame | None = None, gt_without: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per phase: mean time per cycle under nsys (the profiled sidecar) over without (the baseline sidecar),
    for cycles with index in [first, last] in both (the same warm-up left out); then the same from CUDA-event
    ground truth when both runs have it."""
    w = per_cycle_times(profiled, first, last)
    wo = per_cycle_times(baseline, first, last)
    n_w = w.filter(pl.col("phase") == CYCLE).height
    n_wo = wo.filter(pl.col("phase") == CYCLE).height
    by_time = w.group_by("phase").agg(pl.col("ns").sum()).sort(["ns", "phase"], descending=[True, False])
    seen = [p for p in by_time["phase"].to_list() if p not in (CYCLE, PERIOD)]
    rows = _ratio_rows("cpu", w, wo, n_w, n_wo, seen + [CYCLE, PERIOD], twin_noise(wo, run_of(baseline.files)))
    if gt_with is None and gt_without is None and profiled.gpu_time.height and baseline.gpu_time.height:
        gt_with, gt_without = events_per_cycle(profiled, first, last), events_per_cycle(baseline, first, last)
    if gt_with is not None and gt_without is not None and gt_with.height and gt_without.height:
        gw = gt_with.rename({"index": "cycle"})
        gwo = gt_without.rename({"index": "cycle"})
        order = gw.group_by("phase").agg(pl.col("ns").sum()).sort(["ns", "phase"], descending=[True, False])[
            "phase"].to_list()
        gpu_noise = {}
        if baseline.gpu_time.height:
            keep = window_cycles(baseline, first, last).select("file", "index")
            ev = baseline.gpu_time.rename({"cycle": "index"}).join(keep, on=["file", "index"], how="semi")
            gpu_noise = twin_noise(ev.group_by("file", "index", "phase").agg(pl.col("ns").sum()),
                                   run_of(baseline.files))
        rows += _ratio_rows("gpu", gw, gwo, gw["cycle"].n_unique(), gwo["cycle"].n_unique(), order, gpu_noise)
    return pl.DataFrame(noise_floor(rows), schema=INFLATION_SCHEMA, orient="row") if rows else pl.DataFrame(
        schema=INFLATION_SCHEMA)


def noise_floor(rows: list[dict]) -> list[dict]:
    """Where a row says "noise" (the run under the profiler faster than a profiler can make it), the two runs
    differ by at least that much run to run: every other difference up to it is "within noise", not inflation."""
    seen = [1 - r["ratio"] for r in rows if r["verdict"] == "noise"]
    if not seen:
        return rows
    floor = max(seen)
    return [{**r, "verdict": "within noise"} if r["verdict"] in ("inflated", "shorter", "unchanged")
            and abs(r["ratio"] - 1) <= floor else r for r in rows]


def events_per_cycle(sc: Sidecars, first: int | None, last: int | None) -> pl.DataFrame:
    """The sidecar's CUDA-event GPU time per (cycle, phase) over the cycles `window_cycles` keeps, as the
    ground-truth table: index, phase, ns (the cycle's own pair as phase `cycle`). Cycles are told apart by
    file, so files of several processes do not mix."""
    keep = window_cycles(sc, first, last).select("file", "index")
    ev = sc.gpu_time.rename({"cycle": "index"}).join(keep, on=["file", "index"], how="semi")
    return ev.group_by("file", "index", "phase").agg(pl.col("ns").sum()).select(
        index=pl.col("file") * (1 << 40) + pl.col("index"), phase="phase", ns="ns")


def unprofiled_times(sides: Sidecars, first: int | None = None, last: int | None = None
                     ) -> tuple[pl.DataFrame | None, int | None, int]:
    """What the run without the profiler `sides` alone gives the cycle breakdown, as `inflation`'s `without`
    columns read it: (phase, ns) the mean GPU time per cycle between each phase's CUDA events (None without
    events), the mean cycle period (start to start, idle gaps left out; None without cycles), and the number of
    cycles with events, over the cycles `window_cycles` keeps (a sidecar's own capture window where it has one)."""
    times = per_cycle_times(sides, first, last)
    periods = times.filter(pl.col("phase") == PERIOD)["ns"].to_list()
    period_ns = int(round(_mean_var(periods, len(periods))[0])) if periods else None
    if not sides.gpu_time.height:
        return None, period_ns, 0
    ev = events_per_cycle(sides, first, last)
    n = ev["index"].n_unique()
    if not n:
        return None, period_ns, 0
    order = ev.group_by("phase").agg(pl.col("ns").sum()).sort(["ns", "phase"], descending=[True, False])[
        "phase"].to_list()
    rows = []
    for phase in order:
        if phase == CYCLE:
            continue
        mean, _ = _mean_var(ev.filter(pl.col("phase") == phase)["ns"].to_list(), n)
        if mean > 0:
            rows.append({"phase": phase, "ns": int(round(mean))})
    return pl.DataFrame(rows, schema={"phase": pl.Utf8, "ns": pl.Int64}, orient="row"), period_ns, n


def reference_events(truth: pl.DataFrame, sidecars: Sidecars) -> pl.DataFrame | None:
    """The reference engine's `ground_truth.json` (readers/ground_truth.py: index = measured cycle, from 0) as a
    sidecar `gpu_time` table, for `ground_truth_check`. The engine runs its warm-up cycles, then the measured ones
    and nothing after, so measured cycle i is the sidecar's cycle (its cycles - the measured ones) + i. One
    process only (a TP run writes one file per rank); None when the counts do not fit."""
    if sidecars.files.height != 1 or not truth.height or not sidecars.cycles.height:
        return None
    measured = truth["index"].max() + 1
    warmup = sidecars.cycles["index"].max() + 1 - measured
    if warmup < 0 or truth["index"].min() < 0:
        return None
    return truth.select(file=pl.lit(sidecars.files["file"][0], pl.Int64),
                        pid=pl.lit(sidecars.files["pid"][0], pl.Int64),
                        cycle=pl.col("index") + warmup, phase="phase", ns="ns")


def ground_truth_check(ops: pl.DataFrame, charges: pl.DataFrame, cycles: pl.DataFrame, check: "CrossCheck",
                       sidecars: Sidecars, tolerance: float = GT_TOLERANCE, floor_ns: int = GT_FLOOR_NS
                       ) -> pl.DataFrame | None:
    """Attributed time per phase instance against the CUDA events the tracer recorded around it (module
    docstring, 4). `ops`, `charges`, `cycles`: the analysis's; `check`: the cross-check of the same sidecars
    (its alignment pairs each sidecar cycle with a trace cycle). None when the sidecars hold no events.

    The events were recorded on the stream the phase launched its work on: per (process, phase), the stream
    holding most of the phase's ops. Attributed time on that stream only is compared (the tiling also charges
    other streams' idle time to the phase, which no event sees). One instance per (cycle, phase): a phase
    entered twice in a cycle is summed on both sides."""
    if not sidecars.gpu_time.height or not check.pairs.height:
        return None
    files = check.alignment.filter(pl.col("trace_pid").is_not_null()).select("file", pid="trace_pid")
    matched = check.pairs.filter(pl.col("name") == CYCLE).join(files, on="file").join(
        cycles.select("pid", trace_start="start", trace_cycle="cycle"), on=["pid", "trace_start"])
    if not matched.height:
        return None
    events = sidecars.gpu_time.filter(pl.col("phase") != CYCLE).group_by("file", "cycle", "phase").agg(
        events_ns=pl.col("ns").sum())
    main = (ops.filter(pl.col("cycle").is_not_null()).group_by("pid", "phase", "device", "stream")
            .agg(busy=(pl.col("end") - pl.col("start")).sum())
            .sort("busy", descending=True).group_by("pid", "phase", maintain_order=True).first()
            .with_columns(pl.col("phase").cast(pl.Utf8)))
    cycle_pid = cycles.select(cycle="cycle", pid="pid")
    attributed = (charges.filter(pl.col("cycle").is_not_null()).with_columns(pl.col("phase").cast(pl.Utf8))
                  .join(cycle_pid, on="cycle").join(main.select("pid", "phase", "device", "stream"),
                                                    on=["pid", "phase", "device", "stream"])
                  .group_by("pid", "cycle", "phase", "stream").agg(attributed_ns=pl.col("ns").sum()))
    rows = (matched.select("file", "pid", trace_cycle="trace_cycle", side_cycle="cycle")
            .join(events, left_on=["file", "side_cycle"], right_on=["file", "cycle"])
            .join(attributed, left_on=["pid", "trace_cycle", "phase"], right_on=["pid", "cycle", "phase"]))
    if not rows.height:
        return None
    out = (rows.group_by("phase").agg(
        instances=pl.len(), stream=pl.col("stream").first(),
        attributed_ns=pl.col("attributed_ns").mean().round().cast(pl.Int64),
        events_ns=pl.col("events_ns").mean().round().cast(pl.Int64),
        abs_diff_max_ns=(pl.col("attributed_ns") - pl.col("events_ns")).abs().max())
        .with_columns(diff_ns=pl.col("attributed_ns") - pl.col("events_ns"),
                      tolerance_ns=pl.max_horizontal((pl.col("events_ns") * tolerance).round().cast(pl.Int64),
                                                     pl.lit(floor_ns)))
        .with_columns(diff_pct=pl.when(pl.col("events_ns") > 0)
                      .then(pl.col("diff_ns") / pl.col("events_ns") * 100),
                      verdict=pl.when(pl.col("diff_ns").abs() <= pl.col("tolerance_ns"))
                      .then(pl.lit("within")).otherwise(pl.lit("outside")))
        .sort("events_ns", descending=True))
    return out.select("phase", "instances", "stream", "attributed_ns", "events_ns", "diff_ns", "diff_pct",
                      "abs_diff_max_ns", "tolerance_ns", "verdict")


# -- accept length ----------------------------------------------------------------------------------------------

def hand_counts(known: pl.DataFrame) -> list[dict]:
    """What a hand-made accept count over the cycles `known` (those with accept counts) would read, for each way
    such a count goes wrong against SGLang's definition (sum(correct + 1) over request-rounds): `way`, `value`,
    `how` (in the user's words).

    - the bonus token left out: correct drafts per request-round, about 1 less;
    - the mean of per-cycle means, instead of pooling the request-rounds;
    - per cycle what SGLang counts per request: accepted drafts per cycle over the full batch, no bonus (a cycle
      with fewer requests counted as if full);
    - the overlap scheduler's one-iteration delay: each cycle's counts paired with the next cycle's requests."""
    rounds = int(known["requests"].sum())
    correct = int(known["correct"].sum())
    full = int(known["batch_size"].max()) if known["batch_size"].null_count() < known.height else None
    out = [{"way": "bonus token left out", "value": correct / rounds,
            "how": "correct drafts per request-round, without the bonus token"},
           {"way": "mean of per-cycle means", "value": float(known["accept_len"].mean()),
            "how": "each cycle's own accept length averaged, not pooled over request-rounds"}]
    if full:
        out.append({"way": "per cycle over the full batch", "value": correct / (known.height * full),
                    "how": f"accepted drafts per cycle over the full batch of {full}, without the bonus token"})
    late = known.sort("file", "index").with_columns(
        next_requests=pl.col("requests").shift(-1).over("file")).drop_nulls("next_requests")
    if late.height and int(late["next_requests"].sum()):
        out.append({"way": "counts one cycle late", "value": int(late["correct"].sum()) / int(late["next_requests"]
                                                                                                  .sum()) + 1.0,
                    "how": "each cycle's counts over the next cycle's requests (the overlap scheduler's "
                           "one-iteration delay)"})
    return out


def reconcile_accept(cycles: pl.DataFrame, log: pl.DataFrame, interval: int = DEFAULT_LOG_INTERVAL
                     ) -> AcceptCheck | None:
    """The sidecar's accept length (cycles with counts) against SGLang's logged `accept len` lines."""
    known = cycles.filter(pl.col("requests").is_not_null() & (pl.col("requests") > 0))
    if known.is_empty() or log.is_empty():
        return None
    rounds = int(known["requests"].sum())
    pooled = int(known["correct"].sum()) / rounds + 1.0
    per_cycle = float(known["accept_len"].mean())
    log_mean = float(log["accept_len"].mean())
    weighted = None
    if log["running"].null_count() == 0 and int(log["running"].sum()) > 0:
        weighted = float((log["accept_len"] * log["running"]).sum() / log["running"].sum())
    rate = float(log["accept_rate"].mean()) if log["accept_rate"].null_count() < log.height else None
    logged = weighted if weighted is not None else log_mean
    gap = logged - pooled
    spread = float(known["accept_len"].max() - known["accept_len"].min())
    overlap = spread / max(1, interval)
    lines, verdict = [], "unexplained"
    averaging = abs(pooled - per_cycle)
    if weighted is not None:
        averaging = max(averaging, abs(weighted - log_mean))
    if abs(gap) <= LOG_ROUNDING + 1e-9:
        verdict = "agree"
        lines.append(f"the log and the sidecar agree within the log's rounding to 2 decimals "
                     f"(gap {gap:+.4f})")
    elif abs(logged - (pooled - 1.0)) <= LOG_ROUNDING + overlap + 1e-9:
        verdict = "explained"
        lines.append(f"the log's value is the sidecar's minus 1.00: this SGLang version logs accepted drafts "
                     "without the bonus token; the sidecar (and specprof) count the bonus token, as SGLang "
                     ">= 0.5.11 does")
    elif abs(gap) <= LOG_ROUNDING + averaging + overlap + 1e-9:
        verdict = "explained"
        lines.append(f"the gap {gap:+.3f} is within what averaging and windows can make: per-request pooling "
                     f"vs per-batch averaging differ by {averaging:.3f} here, and delaying the counts by one "
                     f"iteration (overlap scheduling) moves a {interval}-iteration interval by at most "
                     f"{overlap:.3f}")
    else:
        lines.append(f"the gap {gap:+.3f} is larger than rounding ({LOG_ROUNDING}), averaging ({averaging:.3f}) "
                     f"and a one-iteration delay ({overlap:.3f}) can explain: the log and the sidecar most "
                     "likely cover different requests or time windows (warm-up, requests before or after "
                     "tracing), or a different server")
    lines.append(f"sidecar: {pooled:.3f} per request-round over {rounds:,} request-rounds in {known.height:,} "
                 f"cycles (SGLang's definition); {per_cycle:.3f} as a mean of per-cycle means")
    log_text = f"log: {log_mean:.3f} as a mean of {log.height:,} lines"
    if weighted is not None:
        log_text += f", {weighted:.3f} weighted by #running-req"
    if rate is not None:
        log_text += f"; accept rate {rate:.3f} (correct drafts / draft tokens)"
    lines.append(log_text)
    hand = hand_counts(known)
    lines.append("a hand count over these records would read: " + "; ".join(
        f"{h['value']:.3f} ({h['way']})" for h in hand) + f", against {pooled:.3f} (docs/crosscheck.md)")
    covered = log.height * interval
    if covered and not 0.5 <= known.height / covered <= 2.0:
        lines.append(f"windows: the log's lines cover about {covered:,} iterations at --decode-log-interval "
                     f"{interval}, the sidecar {known.height:,} cycles")
    return AcceptCheck(
        sidecar_pooled=pooled, sidecar_per_cycle=per_cycle, request_rounds=rounds, cycles=known.height,
        log_lines=log.height, log_mean=log_mean, log_weighted=weighted, log_rate_mean=rate, gap=gap,
        overlap_bound=overlap, verdict=verdict, explanations=lines, hand_counts=hand)


# -- the whole cross-check --------------------------------------------------------------------------------------

def aligned(check: CrossCheck) -> bool:
    """Whether any sidecar lined up with the trace (at least one cycle matched)."""
    return bool(check.alignment.filter(pl.col("matched_cycles") > 0).height)


def profiler_name(trace: Trace) -> str:
    """What recorded the trace: "nsys" for an nsys export, "torch.profiler" for a Kineto trace."""
    return "torch.profiler" if trace.meta.format.startswith("kineto") else "nsys"


def _trace_pid(trace: Trace, os_pid: int, cycle_pids: list[int], single: bool) -> int | None:
    for proc in trace.meta.processes:
        if proc.get("os_pid") == os_pid and proc.get("pid") in cycle_pids:
            return proc["pid"]
    if os_pid in cycle_pids:  # Kineto: the trace's pid is the OS pid
        return os_pid
    if single and len(cycle_pids) == 1:
        return cycle_pids[0]
    return None


def crosscheck(trace: Trace, sidecars: Sidecars, baseline: Sidecars | None = None,
               gt_with: pl.DataFrame | None = None, gt_without: pl.DataFrame | None = None,
               server_log: pl.DataFrame | None = None, log_interval: int = DEFAULT_LOG_INTERVAL) -> CrossCheck:
    """Align each sidecar with its process in the trace, pair instances, and compare (module docstring)."""
    notes = list(sidecars.notes)
    ranges = trace.ranges
    if ranges.filter(pl.col("domain") == DOMAIN).height:
        ranges = ranges.filter(pl.col("domain") == DOMAIN)
    else:
        notes.append(f"no ranges in domain {DOMAIN!r} (Kineto traces have no NVTX domains; a windowed nsys export "
                     "loses their names): "
                     "ranges of every domain were matched by name")
    trace_cycles = ranges.filter(pl.col("name") == CYCLE)
    cycle_pids = trace_cycles["pid"].unique().sort().to_list()
    marks = clock_marks(trace.marks)
    rows, pairs = [], []
    single = sidecars.files.height == 1
    for f in sidecars.files.iter_rows(named=True):
        base = {"file": f["file"], "path": f["path"], "pid": f["pid"]}
        tpid = _trace_pid(trace, f["pid"], cycle_pids, single)
        side = sidecars.cycles.filter(pl.col("file") == f["file"])
        if tpid is not None and not any(p.get("os_pid") == f["pid"] for p in trace.meta.processes) \
                and f["pid"] not in cycle_pids:
            notes.append(f"{f['path']}: the trace has no process with pid {f['pid']}; the sidecar was set beside "
                         "its only process with cycles")
        if tpid is None:
            notes.append(f"{f['path']}: no process with `cycle` ranges in the trace has pid {f['pid']}: "
                         "not cross-checked")
            rows.append({**base, "trace_pid": None, "method": "none", "sidecar_cycles": side.height,
                         "trace_cycles": 0, "matched_cycles": 0, "marks": 0})
            continue
        mine = marks.filter(pl.col("pid") == tpid).join(
            sidecars.clocks.filter(pl.col("file") == f["file"]).select("perf_counter_ns", "mark_done_ns"),
            on="perf_counter_ns", how="inner")
        if mine.height < marks.filter(pl.col("pid") == tpid).height:
            notes.append(f"{f['path']}: {marks.filter(pl.col('pid') == tpid).height - mine.height} clock-sync "
                         "marks of the trace's process carry readings this sidecar does not have: not used")
        a = align(trace_cycles.filter(pl.col("pid") == tpid), side, mine)
        rows.append({**base, "trace_pid": tpid, **{k: v for k, v in a.items() if k in ALIGNMENT_SCHEMA}})
        if a["offset"] is None:
            notes.append(f"{f['path']}: its cycles could not be lined up with the trace's (no clock-sync mark "
                         "in the capture and no matching sequence of cycle durations): not cross-checked")
            continue
        if a["method"] == "cycle sequence":
            notes.append(f"{f['path']}: no clock-sync mark inside the capture; clocks aligned by matching the "
                         f"sequence of cycle durations ({a['matched_cycles']} cycles)")
        p = match_intervals(ranges.filter(pl.col("pid") == tpid), sidecar_intervals(sidecars, f["file"]),
                            a["offset"], max(MATCH_NS, 2 * (a["residual_max_ns"] or 0)))
        pairs.append(p.with_columns(file=pl.lit(f["file"], dtype=pl.Int64)))
    alignment = pl.DataFrame(rows, schema=ALIGNMENT_SCHEMA, orient="row") if rows else pl.DataFrame(
        schema=ALIGNMENT_SCHEMA)
    pair_table = pl.concat(pairs).select(list(PAIRS_SCHEMA)) if pairs else pl.DataFrame(schema=PAIRS_SCHEMA)
    result = CrossCheck(alignment=alignment, pairs=pair_table, consistency=consistency(pair_table),
                        profiler=profiler_name(trace), notes=notes)
    matched = alignment.filter(pl.col("matched_cycles") > 0)
    first = int(matched["first_index"].min()) if matched.height else None
    last = int(matched["last_index"].max()) if matched.height else None
    if baseline is not None and not matched.height:
        notes.append("inflation: not measured, as no sidecar lines up with the trace (a sidecar of another run "
                     "says nothing about how the profiler slowed this one)")
    elif baseline is not None:
        result.baseline = baseline.paths
        notes.extend(baseline.notes)
        result.inflation = inflation(sidecars, baseline, first, last, gt_with, gt_without)
        faster = result.inflation.filter(pl.col("verdict") == "noise")
        if faster.height:
            worst = faster.sort("ratio").row(0, named=True)
            notes.append(f"inflation: the run under {result.profiler} is faster than the run without it "
                         f"({worst['measure']} {worst['phase']} {(worst['ratio'] - 1) * 100:+.0f}%), which a profiler "
                         "cannot make it: the two launches differ by at least that much run to run, so no "
                         "difference up to it is called inflation; measure the noise with repeated twins "
                         "(`specprof capture --no-nsys --repeat 3`), in one launch window, interleaved")
        windows = capture_windows(baseline)
        if windows.height:
            spans = ", ".join(f"{r['first']}..{r['last']}" for r in windows.iter_rows(named=True))
            notes.append(f"inflation: the baseline's own capture window (cycles {spans}: the same number of decode "
                         "cycles left out before it as in the capture)")
        elif first is not None:
            notes.append(f"inflation: cycles {first}..{last} of each sidecar (the ones the capture holds; "
                         "the same indices in the baseline, so both leave out the same warm-up)")
    if server_log is not None:
        keep = sidecars.cycles
        result.accept = reconcile_accept(keep, server_log, log_interval)
        if result.accept is None:
            notes.append("accept length: the sidecar has no accept counts to compare with the server log")
    return result


# -- the cross-check of a run: its attribution against its files ----------------------------------------------

def crosscheck_of(a: Attribution, data: RunData) -> CrossCheck | None:
    """The cross-check of the attribution `a` against its run's sidecars (and the run without nsys, ground truth
    and the server log, where `data` has them); None without a sidecar. The files the loader found without
    being given are said first in its notes."""
    if data.sidecars is None:
        return None
    truth = data.ground_truth
    check = crosscheck(a.trace, data.sidecars, data.baseline, truth if data.baseline is not None else None,
                          data.baseline_ground_truth, data.server_log, data.log_interval)
    check.notes[:0] = data.found
    events = data.sidecars
    if not events.gpu_time.height and truth is not None:
        # the reference engine's own in-stream CUDA events of this run, when the tracer recorded none
        recorded = reference_events(truth, events)
        if recorded is not None:
            events = replace(events, gpu_time=recorded)
            check.notes.append(f"ground truth: the reference engine's CUDA events ({data.ground_truth_file})")
    check.ground_truth = ground_truth_check(a.ops, a.charges, a.cycles, check, events)
    return check
