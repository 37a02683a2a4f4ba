"""A capture window in decode cycles: start the profiler's capture after W decode cycles, stop it after N more.

With `SPECPROF_CAPTURE_CYCLES=W:N` (`specprof capture --capture-cycles W:N`, which also makes nsys record only
between `cudaProfilerStart` and `cudaProfilerStop`), every traced process counts its own decode cycles (cycles
that ran `verify`, or a plain `decode` step) and, at the close of the W-th, calls `cudaProfilerStart()`; at the
close of the (W+N)-th, `cudaProfilerStop()`. With W = 0 the capture starts at the process's first traced call.
Both are host calls that return at once (no synchronisation); nsys then records the steady state, not the
server's start-up (weights, CUDA-graph capture, warm-up). Every tensor-parallel rank runs the same count.

The calls go through `torch.cuda.profiler` (torch taken from `sys.modules`, never imported here). Each is
written to the sidecar:

    {"type": "capture", "event": "start", "after_cycle": 41, "decode_cycles": 20, "ns": 123456789}

(`after_cycle`: the index of the cycle just closed, null at a start before any; `ns`: perf_counter_ns right
after the call). A call that fails turns the window off with one warning; the engine goes on.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Callable

ENV = "SPECPROF_CAPTURE_CYCLES"
RECORD = "capture"

logger = logging.getLogger("specprof.tracer")


def parse(text: str) -> tuple[int, int]:
    """`W:N` -> (W, N): W >= 0 decode cycles before the window, N >= 1 in it. ValueError otherwise."""
    skip, sep, count = text.partition(":")
    try:
        if not sep:
            raise ValueError
        w, n = int(skip), int(count)
    except ValueError:
        raise ValueError(f"{text!r} is not W:N (two whole numbers, e.g. 50:200)") from None
    if w < 0 or n < 1:
        raise ValueError(f"{text!r}: W must be 0 or more and N 1 or more")
    return w, n


def _torch_profiler() -> tuple[Callable[[], None], Callable[[], None]]:
    torch = sys.modules.get("torch")
    if torch is None:
        raise RuntimeError("torch is not imported in this process")
    profiler = torch.cuda.profiler
    return profiler.start, profiler.stop


class CaptureWindow:
    def __init__(
        self,
        skip: int,
        count: int,
        emit: Callable[[dict], None],
        profiler: Callable[[], tuple[Callable[[], None], Callable[[], None]]] = _torch_profiler,
        perf_counter_ns: Callable[[], int] = time.perf_counter_ns,
    ):
        self.skip, self.count = skip, count
        self._emit = emit
        self._profiler = profiler
        self._clock = perf_counter_ns
        self.decode_cycles = 0
        self.state = "waiting"  # -> "open" -> "closed", or "off" after a failure

    def process_started(self) -> None:
        """The first traced call: a window that skips nothing opens here."""
        if self.skip == 0 and self.state == "waiting":
            self._call("start", None)

    def decode_cycle_closed(self, index: int) -> bool:
        """Counts a decode cycle; True when this opened the capture."""
        self.decode_cycles += 1
        n = self.decode_cycles
        if self.state == "waiting" and n == self.skip:
            return self._call("start", index)
        if self.state == "open" and n == self.skip + self.count:
            self._call("stop", index)
        return False

    def _call(self, event: str, index: "int | None") -> bool:
        try:
            start, stop = self._profiler()
            (start if event == "start" else stop)()
        except Exception as exc:
            self.state = "off"
            logger.warning("specprof: capture window off: cudaProfiler%s failed (%s: %s)",
                           event.capitalize(), type(exc).__name__, exc)
            return False
        self.state = "open" if event == "start" else "closed"
        self._emit({"type": RECORD, "event": event, "after_cycle": index, "decode_cycles": self.decode_cycles,
                    "ns": self._clock()})
        return True

    def reset(self) -> None:
        """In a forked child: count again from zero (the child is another process)."""
        self.decode_cycles = 0
        self.state = "waiting"


def from_environment(value: "str | None", emit: Callable[[dict], None], **options: Any) -> "CaptureWindow | None":
    """The window `SPECPROF_CAPTURE_CYCLES` asks for, or None (unset, or not W:N: one warning)."""
    if not value:
        return None
    try:
        skip, count = parse(value)
    except ValueError as exc:
        logger.warning("specprof: %s=%s ignored: %s", ENV, value, exc)
        return None
    return CaptureWindow(skip, count, emit, **options)
