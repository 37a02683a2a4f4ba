"""Ground truth on any server: CUDA events recorded in-stream at phase boundaries, read without ever waiting.

With `SPECPROF_GPU_EVENTS=1` (`specprof capture --gpu-events`), the recorder asks `record()` for an event right
before a cycle's (or an in-cycle phase's) NVTX push, and for its end event right after its pop, so the events'
interval holds the whole range, the tracer's own host time in it included. The two boundaries cost the same
host time: everything `record()` does before its record call (the graph-capture check, the event, the current
stream: `prepare()`) is done before the push at the start and before the pop at the end, so only the record call
itself (`fire()`) follows the pop, as only it precedes the push: under nsys on the H200 the start event's record
call ends 2.7-4.9 us before the push and the end event's starts 4.7-7.7 us after the pop (tests/test_one_number.py;
done after the pop, those checks put it 22-51 us after the pop, time a launch-bound phase's events held and its
range did not). `record()` records a timing
event on the calling thread's current CUDA stream: a host call that enqueues a marker, no synchronisation. The
GPU time of the phase instance is the time between its two events on that stream: every GPU operation enqueued
there between the two calls, and every gap in which that stream waited (for the host, for another stream).

Events are read later, at the close of later cycles: the oldest waiting cycle is read once `query()` says its
last event has completed (non-blocking: never `synchronize()`, never `elapsed_time()` on an event that has not
completed). Each read cycle becomes one sidecar record

    {"type": "gpu_time", "cycle": 17, "phases": [["cycle", 3012345], ["draft", 812000], ...]}

(integer nanoseconds, rounded from CUDA's float milliseconds, which resolve about 0.5 us). Events are pooled:
one that has been read is recorded again. Nothing is recorded while the current stream is capturing a CUDA
graph (the event would become part of the graph). At most `max_pending` cycles wait; beyond that the oldest is
given up and counted (`footer.gpu_time_dropped`), and so is every cycle still waiting at close.

torch is never imported here: it is taken from `sys.modules` (the engine imported it). Without torch or a GPU,
`record()` (and `prepare()`) return None and nothing is recorded.
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Any, Callable

ENV = "SPECPROF_GPU_EVENTS"
RECORD = "gpu_time"


class GpuEvents:
    def __init__(self, emit: Callable[[dict], None], max_pending: int = 64):
        self._emit = emit
        self._max_pending = max(1, max_pending)
        self._pending: deque = deque()  # (cycle index, [(phase, start event, end event), ...])
        self._pool: list = []
        self._cuda: Any = None  # torch.cuda, once torch is imported by the engine
        self.failed: str | None = None  # why events stopped, if they did
        self.read = 0
        self.dropped = 0

    def _torch_cuda(self) -> Any:
        cuda = self._cuda
        if cuda is None:
            torch = sys.modules.get("torch")
            if torch is None:
                return None
            cuda = self._cuda = torch.cuda
        return cuda

    def record(self) -> Any:
        """A timing event recorded on the current stream now, or None (no torch, no GPU, graph capture, an
        error: events then stop for good, with the reason in `failed`)."""
        return self.fire(self.prepare())

    def prepare(self) -> Any:
        """What recording an event needs, found now, so that `fire()` is the record call alone: (event, the
        current stream), or None (no torch, no GPU, graph capture, an error, as `record`)."""
        if self.failed is not None:
            return None
        try:
            cuda = self._torch_cuda()
            if cuda is None or cuda.is_current_stream_capturing():
                return None
            event = self._pool.pop() if self._pool else cuda.Event(enable_timing=True)
            return event, cuda.current_stream()
        except Exception as exc:
            self.failed = f"{type(exc).__name__}: {exc}"
            return None

    def fire(self, prepared: Any) -> Any:
        """The event of `prepare()`, recorded on its stream now, or None."""
        if prepared is None:
            return None
        event, stream = prepared
        try:
            event.record(stream)
            return event
        except Exception as exc:
            self.failed = f"{type(exc).__name__}: {exc}"
            return None

    def cycle_closed(self, index: int, pairs: list) -> None:
        """Queues a closed cycle's (phase, start event, end event) pairs (the cycle's own first; a pair with an
        event missing is left out), then reads what has completed."""
        pairs = [pair for pair in pairs if pair[1] is not None and pair[2] is not None]
        if pairs:
            self._pending.append((index, pairs))
            if len(self._pending) > self._max_pending:
                self._pending.popleft()  # its events are not reused: still pending on the GPU, maybe
                self.dropped += 1
        self.poll()

    def poll(self) -> None:
        """Reads every waiting cycle, oldest first, whose events have all completed; stops at the first that
        has not. Never waits."""
        pending = self._pending
        try:
            while pending:
                index, pairs = pending[0]
                if not all(end.query() for _, _, end in pairs):
                    return
                pending.popleft()
                phases = [[phase, int(round(start.elapsed_time(end) * 1e6))] for phase, start, end in pairs]
                self._emit({"type": RECORD, "cycle": index, "phases": phases})
                self.read += 1
                for _, start, end in pairs:
                    self._pool.append(start)
                    self._pool.append(end)
        except Exception as exc:
            self.failed = f"{type(exc).__name__}: {exc}"
            self.dropped += len(pending)
            pending.clear()

    def close(self) -> dict:
        """Reads what has completed; what still waits is given up. The footer's counts."""
        self.poll()
        self.dropped += len(self._pending)
        self._pending.clear()
        summary = {"gpu_time_cycles": self.read, "gpu_time_dropped": self.dropped}
        if self.failed is not None:
            summary["gpu_time_failed"] = self.failed
        return summary

    def reset(self) -> None:
        """In a forked child: the parent's events are not ours."""
        self._pending = deque()
        self._pool = []
        self.read = self.dropped = 0
