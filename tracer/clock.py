"""Paired clock readings that let a reader put sidecar times (perf_counter_ns) on an nsys timeline.

Each reading is also an NVTX mark in domain `specprof` whose message carries the same perf_counter_ns value:
nsys timestamps the mark on its own clock, so `offset = mark timestamp in nsys - perf_counter_ns` (docs/sidecar.md).
"""

from __future__ import annotations

import time

MARK_PREFIX = "specprof.clock_sync perf_counter_ns="


def mark_message(perf_counter_ns: int) -> str:
    return f"{MARK_PREFIX}{perf_counter_ns}"


def _monotonic_raw_ns() -> int | None:
    raw = getattr(time, "CLOCK_MONOTONIC_RAW", None)
    return time.clock_gettime_ns(raw) if raw is not None else None


def read(mark=None, perf_counter_ns=time.perf_counter_ns) -> dict:
    """One paired reading as a sidecar `clock` record; `mark(message)` emits the NVTX mark right after the read.

    `mark_done_ns` is perf_counter right after the mark call returned. The mark's nsys timestamp lies between
    the two, near the end: the NVTX call first registers the message (a new string each time, which takes tens
    of microseconds under nsys), then marks."""
    perf = perf_counter_ns()
    if mark is not None:
        mark(mark_message(perf))
    done = perf_counter_ns()
    return {
        "type": "clock",
        "perf_counter_ns": perf,
        "mark_done_ns": done,
        "monotonic_raw_ns": _monotonic_raw_ns(),
        "time_ns": time.time_ns(),
    }


def describe() -> dict:
    """What perf_counter is on this machine (header's `clock`)."""
    info = time.get_clock_info("perf_counter")
    return {
        "perf_counter": info.implementation,
        "resolution_ns": int(round(info.resolution * 1e9)),
        "unit": "ns",
    }
