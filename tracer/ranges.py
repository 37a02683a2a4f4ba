"""The hot path: entering and leaving a phase, and the wrappers the target table installs.

Entering a phase pushes an NVTX range (domain `specprof`, message = the phase name), opens a
`torch.profiler.record_function` range when the torch profiler is active, and takes `time.perf_counter_ns()`;
leaving takes the time again and pops both. Nothing here synchronises with a device or reads a tensor's data,
logs, or imports anything: everything is bound when the tracer starts.

A wrapper catches the tracer's own exceptions (the wrapped method runs as if untraced) and lets the wrapped
method's exceptions through untouched, popping its range first. Every step of the tracer's own (the NVTX push,
pop and mark, a clock reading, a CUDA event, record_function, writing a record) that raises is counted
(`Recorder.faults`, the footer's `tracer_faults`) and the others still run: a frame is always closed and
forgotten, an NVTX range is popped exactly when its push succeeded, and a fault never stops a later cycle. A
range whose push failed keeps its times in the sidecar; a phase whose start could not be stamped is not
recorded (counted).

Two optional helpers ride on the same calls (both off unless the session turns them on):
- `events` (tracer/gpu_events.py): a CUDA event recorded in-stream right before a cycle's or an in-cycle
  phase's NVTX push and right after its pop; their elapsed times are read later with `query()` only;
- `window` (tracer/window.py): counts decode cycles and starts and stops the profiler's capture between them.
"""

from __future__ import annotations

import functools
import itertools
import sys
import threading
import time
from typing import Any, Callable

from specprof.tracer import DOMAIN, PHASES
from specprof.tracer.cycles import AcceptMatcher, Cycle
from specprof.tracer.targets import COUNTS, MARKER, RANGE

CYCLE = "cycle"
VERIFY = "verify"
# Phases whose end makes their cycle a decode cycle (one that produced tokens for running requests).
DECODE_PHASES = frozenset((VERIFY, "decode"))

# A frame is a list, for speed: [phase, start_ns, end_ns, record_function or None, enclosing Cycle or None,
# start CUDA event or None, end CUDA event or None, whether its NVTX range was pushed].
_PHASE, _START, _END, _RF, _CYCLE, _EV_START, _EV_END, _PUSHED = range(8)


class NoNvtx:
    """Used until the tracer starts, and when the nvtx package cannot be imported."""

    def push(self, phase: str) -> None:
        pass

    def pop(self) -> None:
        pass

    def mark(self, message: str) -> None:
        pass


class NvtxRanges:
    """NVTX push/pop in domain `specprof` through the `nvtx` package (registered strings, CPU side only)."""

    def __init__(self, domain: str = DOMAIN):
        import nvtx  # imported when the tracer starts, never at module import

        self._domain = nvtx.get_domain(domain)
        self._attributes = {phase: self._domain.get_event_attributes(message=phase) for phase in PHASES}
        self._push = self._domain.push_range
        self.pop = self._domain.pop_range

    def push(self, phase: str) -> None:
        attributes = self._attributes.get(phase)
        if attributes is None:
            attributes = self._attributes[phase] = self._domain.get_event_attributes(message=phase)
        self._push(attributes)

    def mark(self, message: str) -> None:
        self._domain.mark(message=message)


class _ThreadState(threading.local):
    def __init__(self):
        self.stack: list[list] = []  # open frames on this thread, innermost last
        self.cycle: Cycle | None = None  # the open cycle on this thread


class Recorder:
    """Per-process phase state: open frames per thread, cycles, and where finished ones go.

    `on_start(owner)` runs once, at the first traced call (owner = that call's `self`); it may replace `nvtx`.
    `torch.autograd.profiler` is looked up in sys.modules (never imported): while its `_is_profiler_enabled` is
    set, each range is also a `record_function` range.
    `emit_range(record)` receives range records; cycles go through `matcher` (accept counts) to its `emit`.
    `clock_sync()` runs between cycles: at least every `sync_every_ns`, and after cycles 2**n - 1.
    """

    def __init__(
        self,
        *,
        matcher: AcceptMatcher,
        emit_range: Callable[[dict], None],
        batch_size: Callable[[Any], "int | None"],
        on_start: Callable[[Any], None] = lambda owner: None,
        clock_sync: Callable[[], None] = lambda: None,
        sync_every_ns: int = 1_000_000_000,
        perf_counter_ns: Callable[[], int] = time.perf_counter_ns,
    ):
        self.nvtx: Any = NoNvtx()
        self.events: Any = None  # specprof.tracer.gpu_events.GpuEvents when the session records CUDA events
        self.window: Any = None  # specprof.tracer.window.CaptureWindow when the session opens a capture window
        self.rotation: Any = None  # specprof.tracer.rotation.Rotation when the session rotates K (--sweep-steps)
        self._profiler_module = None  # torch.autograd.profiler, once torch is imported by someone else
        self.matcher = matcher
        self._emit_range = emit_range
        self._batch_size = batch_size
        self._on_start = on_start
        self._clock_sync = clock_sync
        self._sync_every_ns = sync_every_ns
        self._last_sync_ns: int | None = None
        self._clock = perf_counter_ns
        self._local = _ThreadState()
        self._indices = itertools.count()
        self.started = False
        self.last_cycle_index: int | None = None
        self.faults = 0  # steps of the tracer's own bookkeeping that raised (the footer's `tracer_faults`)

    def after_fork_in_child(self) -> None:
        self._local = _ThreadState()
        self._indices = itertools.count()
        self.started = False
        self.last_cycle_index = None
        self._last_sync_ns = None
        self.faults = 0
        self.matcher.reset()

    def _start(self, args: tuple) -> None:
        self.started = True
        try:
            self._last_sync_ns = self._clock()  # on_start writes the first clock reading
        except Exception:
            self.faults += 1
        try:
            self._on_start(args[0] if args else None)
        except Exception:
            self.faults += 1

    def _sync(self) -> None:
        try:
            self._clock_sync()
        except Exception:
            self.faults += 1

    # The four methods below run on every traced call: few lookups, no logging, nothing that blocks.
    def _open(self, phase: str, state: _ThreadState, frame: list, timed: bool = False) -> bool:
        """Records the start event (`timed`, events on), pushes the NVTX range, stamps the start, opens
        record_function; whether the frame opened. The event comes first and the end event last (`_close`), so
        the events' interval holds the whole NVTX range, the tracer's own host time inside it included: a
        phase's projected GPU time and its events measure the same span. A fault of any step is counted; only a
        start that cannot be stamped leaves the frame unopened (its NVTX range popped again)."""
        if timed and self.events is not None:
            try:
                frame[_EV_START] = self.events.record()
            except Exception:
                self.faults += 1
        try:
            self.nvtx.push(phase)
            frame[_PUSHED] = True
        except Exception:
            self.faults += 1
        try:
            try:
                frame[_START] = self._clock()
            except Exception:
                self.faults += 1
                self._pop(frame)
                frame[_EV_START] = None
                return False
            module = self._profiler_module
            if module is None:
                module = self._profiler_module = sys.modules.get("torch.autograd.profiler")
            if module is not None and module._is_profiler_enabled:
                try:
                    scope = module.record_function(phase)
                    scope.__enter__()
                    frame[_RF] = scope
                except Exception:
                    self.faults += 1
            state.stack.append(frame)
            return True
        except BaseException:  # KeyboardInterrupt, SystemExit: the range is not left open
            self._pop(frame)
            raise

    def _pop(self, frame: list) -> None:
        if frame[_PUSHED]:
            frame[_PUSHED] = False
            try:
                self.nvtx.pop()
            except Exception:
                self.faults += 1

    def _close(self, frame: list, state: _ThreadState) -> int | None:
        """Stamps the end, closes record_function, prepares the end event, pops the NVTX range, records the end
        event (the record call alone after the pop: gpu_events.py) and forgets the frame; the end (None when the
        clock failed). A failure of any step is counted (`faults`) and the others still run: a frame is always
        closed, so one fault never keeps a cycle open."""
        end = None
        try:
            try:
                end = self._clock()
            except Exception:
                self.faults += 1
            scope = frame[_RF]
            if scope is not None:
                frame[_RF] = None
                try:
                    scope.__exit__(None, None, None)
                except Exception:
                    self.faults += 1
        finally:
            prepared = None
            if frame[_EV_START] is not None:
                try:  # the end event's checks before the pop, its record call right after it (gpu_events.py)
                    prepared = self.events.prepare()
                except Exception:
                    self.faults += 1
            self._pop(frame)
            if prepared is not None:
                try:
                    frame[_EV_END] = self.events.fire(prepared)
                except Exception:
                    self.faults += 1
            frame[_END] = end
            stack = state.stack
            if stack and stack[-1] is frame:
                stack.pop()
            else:  # left out of order (a generator, a leaked frame): drop it by identity
                state.stack = [f for f in stack if f is not frame]
        return end

    def enter(self, phase: str, args: tuple, kwargs: dict, shape: "Callable | None" = None) -> list | None:
        """A phase (not `cycle`): inside this thread's open cycle, or a range of its own. `shape` (a target's,
        tracer/targets.py) gives the open cycle its `steps` and `draft_tokens`."""
        if not self.started:
            self._start(args)
        state = self._local
        stack = state.stack
        if stack and stack[-1][_PHASE] == phase:
            return None  # the same phase again inside itself (an override calling super()): one range
        cycle = state.cycle
        frame = [phase, 0, None, None, cycle, None, None, False]
        if not self._open(phase, state, frame, timed=cycle is not None):
            return None
        if cycle is not None:
            cycle.phases.append(frame)
            if shape is not None:
                try:
                    read = shape(args, kwargs)
                    if read is not None:
                        cycle.steps, cycle.draft_tokens = read
                except Exception:
                    self.faults += 1
        return frame

    def exit(self, frame: list) -> None:
        state = self._local
        end = self._close(frame, state)
        cycle = frame[_CYCLE]
        if cycle is not None:
            phase = frame[_PHASE]
            if phase in DECODE_PHASES:
                cycle.decode = True
                if phase == VERIFY:
                    cycle.verified = True
        else:
            try:
                self._emit_range(
                    {
                        "type": "range",
                        "name": frame[_PHASE],
                        "start_ns": frame[_START],
                        "end_ns": end,
                        "cycle": self.last_cycle_index,
                    }
                )
            except Exception:
                self.faults += 1

    def enter_cycle(self, phase: str, args: tuple, kwargs: dict) -> list | None:
        if not self.started:
            self._start(args)
        state = self._local
        if state.cycle is not None:
            return None  # a cycle inside a cycle (an override calling super()): one cycle
        if self.rotation is not None:
            try:
                self.rotation.cycle_starting(args[0] if args else None)
            except Exception:
                self.faults += 1
        batch = args[1] if len(args) > 1 else kwargs.get("batch")
        try:
            size = self._batch_size(batch)
        except Exception:
            size = None
        cycle = Cycle(next(self._indices), 0, size)
        frame = [phase, 0, None, None, cycle, None, None, False]
        if not self._open(phase, state, frame, timed=True):
            return None
        cycle.start_ns = frame[_START]
        state.cycle = cycle
        self.last_cycle_index = cycle.index
        return frame

    def exit_cycle(self, frame: list) -> None:
        state = self._local
        cycle = frame[_CYCLE]
        if state.cycle is cycle:
            state.cycle = None  # first: whatever fails below, the next cycle opens
        end = self._close(frame, state)
        cycle.end_ns = end
        try:
            self.matcher.cycle_closed(cycle)
        except Exception:
            self.faults += 1
        if self.events is not None:
            pairs = []
            for f in (frame, *cycle.phases):
                pairs.append((f[_PHASE], f[_EV_START], f[_EV_END]))
                f[_EV_START] = f[_EV_END] = None  # the events are the reader's now
            try:
                self.events.cycle_closed(cycle.index, pairs)
            except Exception:
                self.faults += 1
        if end is None:
            return
        try:
            opened = self.window is not None and cycle.decode and self.window.decode_cycle_closed(cycle.index)
        except Exception:
            self.faults += 1
            opened = False
        if opened:
            self._last_sync_ns = end
            self._sync()  # a clock-sync mark inside the capture, right at its start
        # A clock reading (and NVTX mark) at least every sync_every_ns, and after cycles 0, 1, 3, 7, 15, ...:
        # a short capture range that starts after the first cycles still holds a few marks.
        last = self._last_sync_ns
        index = cycle.index
        if last is None or end - last >= self._sync_every_ns or index & (index + 1) == 0:
            self._last_sync_ns = end
            self._sync()

    def counts(self, counts: list[int]) -> None:
        self.matcher.counts_arrived(counts, self._local.cycle)

    def enter_step(self, step: Callable[[tuple, dict], "str | None"], args: tuple, kwargs: dict) -> list | None:
        """A step target: outside any cycle, a `cycle` range and inside it a range of the phase `step` names;
        inside a cycle (or when `step` names none), nothing. Returns [cycle frame, phase frame] or None."""
        state = self._local
        if state.cycle is not None or state.stack:
            return None
        try:
            phase = step(args, kwargs)
        except Exception:
            self.faults += 1
            return None
        if phase is None:
            return None
        cycle_frame = self.enter_cycle(CYCLE, args, kwargs)
        if cycle_frame is None:
            return None
        try:
            return [cycle_frame, self.enter(phase, args, kwargs)]
        except BaseException:
            self.exit_cycle(cycle_frame)
            raise

    def exit_step(self, frames: list) -> None:
        cycle_frame, phase_frame = frames
        try:
            if phase_frame is not None:
                self.exit(phase_frame)
        finally:
            self.exit_cycle(cycle_frame)


def range_wrapper(recorder: Recorder, phase: str, step: "Callable[[tuple, dict], str | None] | None" = None,
                  shape: "Callable[[tuple, dict], tuple | None] | None" = None) -> Callable[[Callable], Callable]:
    """A `make_wrapper` for targets.patch_method: the method runs inside a `phase` range (with `step`, a step
    target's `cycle` and phase ranges: Recorder.enter_step; with `shape`, the phase also reads its cycle's
    step count: Recorder.enter)."""
    if step is not None:
        enter, leave, phase = recorder.enter_step, recorder.exit_step, step
    elif phase == CYCLE:
        enter, leave = recorder.enter_cycle, recorder.exit_cycle
    elif shape is not None:
        enter, leave = functools.partial(recorder.enter, shape=shape), recorder.exit
    else:
        enter, leave = recorder.enter, recorder.exit

    def make(method: Callable) -> Callable:
        @functools.wraps(method)
        def specprof_range(*args, **kwargs):
            try:
                frame = enter(phase, args, kwargs)
            except Exception:
                recorder.faults += 1
                frame = None
            try:
                return method(*args, **kwargs)
            finally:
                if frame is not None:
                    try:
                        leave(frame)
                    except Exception:
                        recorder.faults += 1

        setattr(specprof_range, MARKER, RANGE)
        return specprof_range

    return make


def counts_wrapper(recorder: Recorder, read: Callable[[tuple, dict, Any], Any]) -> Callable[[Callable], Callable]:
    """A `make_wrapper` for targets.patch_method: after the method returns, `read` its accept counts."""
    deliver = recorder.counts

    def make(method: Callable) -> Callable:
        @functools.wraps(method)
        def specprof_counts(*args, **kwargs):
            returned = method(*args, **kwargs)
            try:
                counts = read(args, kwargs, returned)
                if counts is not None:
                    deliver(counts)
            except Exception:
                recorder.faults += 1
            return returned

        setattr(specprof_counts, MARKER, COUNTS)
        return specprof_counts

    return make
