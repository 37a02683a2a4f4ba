"""The tracer's sidecars as tables (`Sidecars`): what readers/sidecar.py reads from `specprof.sidecar/1` files and
the cross-check, the economics and the sweep take.

Tables (integer ns; `file` is the position of the file in the list read):
- `files`:   file, path, pid, rank, host, preset, argv (JSON text), dropped, unmatched_accepts, footer_reason,
             complete (a footer was found)
- `cycles`:  file, pid, rank, index, start, end, batch_size, steps (the draft steps K the cycle's verify
             checked, 0 when the draft was skipped; null for a cycle without verify and in sidecars written before
             the tracer recorded it), draft_tokens (tokens per request its verify scored: K + 1 for a chain;
             null likewise), requests (accept counts received, null when none arrived), correct (their sum),
             accept_len (correct / requests + 1: per request-round, the bonus token included), verify (the cycle
             ran a `verify` phase: a speculative decode cycle; SGLang's v2 worker also runs prefill batches as
             cycles, without one), decode (the cycle ran `verify` or a plain `decode` step: a decode cycle,
             speculative or not)
- `phases`:  file, pid, cycle, name, start, end, in_cycle. Phases inside a cycle (in_cycle true, `cycle` is
             its index) and ranges of their own such as `accept` or `prefill` (in_cycle false, `cycle` is the
             index of the last cycle opened before them, as the tracer wrote it)
- `accepts`: file, pid, cycle, request (position in the batch), correct (correct draft tokens of that request
             in that cycle; the bonus token is not counted here)
- `clocks`:  file, pid, perf_counter_ns, mark_done_ns (perf_counter once the NVTX mark call returned; null in
             sidecars written before the tracer recorded it), monotonic_raw_ns, time_ns
- `gpu_time`: file, pid, cycle, phase, ns: GPU time between CUDA events recorded in-stream at the phase's
             boundaries (`specprof capture --gpu-events`; the cycle's own pair is phase `cycle`), one row per
             instance
- `capture`: file, pid, event ("start" | "stop": the tracer's cudaProfilerStart/Stop of a capture window),
             after_cycle (the cycle just closed; null for a start before any), decode_cycles, ns
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

FILES_SCHEMA = {
    "file": pl.Int64, "path": pl.Utf8, "pid": pl.Int64, "rank": pl.Int64, "host": pl.Utf8,
    "preset": pl.Utf8, "argv": pl.Utf8, "dropped": pl.Int64, "unmatched_accepts": pl.Int64,
    "footer_reason": pl.Utf8, "complete": pl.Boolean,
}
CYCLES_SCHEMA = {
    "file": pl.Int64, "pid": pl.Int64, "rank": pl.Int64, "index": pl.Int64, "start": pl.Int64,
    "end": pl.Int64, "batch_size": pl.Int64, "steps": pl.Int64, "draft_tokens": pl.Int64, "requests": pl.Int64,
    "correct": pl.Int64,
    "accept_len": pl.Float64, "verify": pl.Boolean, "decode": pl.Boolean,
}
PHASES_SCHEMA = {
    "file": pl.Int64, "pid": pl.Int64, "cycle": pl.Int64, "name": pl.Utf8, "start": pl.Int64,
    "end": pl.Int64, "in_cycle": pl.Boolean,
}
GPU_TIME_SCHEMA = {"file": pl.Int64, "pid": pl.Int64, "cycle": pl.Int64, "phase": pl.Utf8, "ns": pl.Int64}
CAPTURE_SCHEMA = {"file": pl.Int64, "pid": pl.Int64, "event": pl.Utf8, "after_cycle": pl.Int64,
                  "decode_cycles": pl.Int64, "ns": pl.Int64}
ACCEPTS_SCHEMA = {"file": pl.Int64, "pid": pl.Int64, "cycle": pl.Int64, "request": pl.Int64,
                  "correct": pl.Int64}
CLOCKS_SCHEMA = {"file": pl.Int64, "pid": pl.Int64, "perf_counter_ns": pl.Int64, "mark_done_ns": pl.Int64,
                 "monotonic_raw_ns": pl.Int64, "time_ns": pl.Int64}


@dataclass
class Sidecars:
    """The tables of one or more sidecar files (see the module docstring)."""

    files: pl.DataFrame
    cycles: pl.DataFrame
    phases: pl.DataFrame
    accepts: pl.DataFrame
    clocks: pl.DataFrame
    gpu_time: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=GPU_TIME_SCHEMA))
    capture: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=CAPTURE_SCHEMA))
    headers: list[dict] = field(default_factory=list)  # the header records as written, one per file
    notes: list[str] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return self.files["path"].to_list()

    def step_counts(self) -> pl.DataFrame:
        """The speculative decode cycles (those that ran `verify`) of each file per step count: file, steps,
        draft_tokens, cycles, sorted; steps and draft_tokens null for cycles whose sidecar did not record them.
        An adaptive server's K = 0 cycles are the row with steps 0."""
        return (self.cycles.filter(pl.col("verify"))
                .group_by("file", "steps", "draft_tokens").agg(cycles=pl.len().cast(pl.Int64))
                .sort("file", "steps", "draft_tokens", nulls_last=True))
