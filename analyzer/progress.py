"""Progress of the long steps of an analysis: a bar on stderr, and hooks for the benchmarks.

Each step that can take more than a moment runs inside `step(name, total)`; it may `advance(n)`
when it knows how far it got (rows read, say). A bar is drawn on stderr only when `enable()` was
called (the CLI does, unless --quiet or stderr is not a terminal), and only once the outermost open
step has run for `DELAY_S`: short analyses print nothing, and an analysis of many short steps (several
traces, each in seconds) shows its innermost step, with the outer steps' counts before it. A background thread redraws the bar, so a
step that spends seconds inside one polars call still shows its elapsed time.

Listeners (`listen`) get ("start" | "end", name, info) for every step, enabled or not: the
benchmark harness records each step's wall time, CPU time and peak memory that way.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager

DELAY_S = 2.0  # a step shorter than this draws nothing
REDRAW_S = 0.2
WIDTH = 24

_enabled = False
_listeners: list = []
_lock = threading.Lock()
_current: list["Step"] = []  # the open steps, outermost first
_ticker: threading.Thread | None = None
_stream = sys.stderr


def enable(on: bool = True, stream=None) -> None:
    """Draw bars on `stream` (stderr) from now on; `enable(False)` stops."""
    global _enabled, _stream
    _enabled = on
    if stream is not None:
        _stream = stream


def wanted(quiet: bool, stream=None) -> bool:
    """Whether to draw bars: not --quiet, and the stream (stderr) is a terminal."""
    stream = stream or sys.stderr
    try:
        return not quiet and stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def listen(fn) -> None:
    """Call fn(event, name, info) at the start and end of every step."""
    _listeners.append(fn)


def unlisten(fn) -> None:
    if fn in _listeners:
        _listeners.remove(fn)


class Step:
    def __init__(self, name: str, total: int | None, unit: str):
        self.name = name
        self.total = total
        self.unit = unit
        self.done = 0
        self.t0 = time.perf_counter()
        self.drawn = False

    def advance(self, n: int = 1) -> None:
        self.done += n

    def line(self) -> str:
        elapsed = time.perf_counter() - self.t0
        if self.total:
            frac = min(1.0, self.done / self.total)
            fill = int(frac * WIDTH)
            bar = "#" * fill + "-" * (WIDTH - fill)
            count = f"{_human(self.done)}/{_human(self.total)} {self.unit}".rstrip()
            return f"specprof: {self.name} [{bar}] {frac * 100:3.0f}% {count} {elapsed:5.1f}s"
        spin = "|/-\\"[int(elapsed / REDRAW_S) % 4]
        return f"specprof: {self.name} {spin} {elapsed:5.1f}s"


def _human(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    if n >= 10_000:
        return f"{n / 1e3:.0f}k"
    return str(n)


def _draw(final: bool = False) -> None:
    with _lock:
        if not _enabled or not _current:
            return
        s = _current[-1]
        if not final and time.perf_counter() - _current[0].t0 < DELAY_S:
            return
        outer = "".join(f"[{o.done}/{o.total}] " for o in _current[:-1] if o.total)
        line = s.line().replace("specprof: ", "specprof: " + outer, 1)
        try:
            _stream.write("\r" + line[:118].ljust(118) + ("\n" if final else ""))
            _stream.flush()
        except (OSError, ValueError):
            return
        for o in _current:
            o.drawn = True


def _tick() -> None:
    while True:
        time.sleep(REDRAW_S)
        with _lock:
            idle = not _current
        if idle:
            continue
        _draw()


@contextmanager
def step(name: str, total: int | None = None, unit: str = ""):
    """Run a step: `with step("reading kernels", rows, "rows") as s: ... s.advance(n)`."""
    global _ticker
    s = Step(name, total, unit)
    for fn in list(_listeners):
        fn("start", name, {"total": total})
    with _lock:
        _current.append(s)
    if _enabled and _ticker is None:
        _ticker = threading.Thread(target=_tick, name="specprof-progress", daemon=True)
        _ticker.start()
    try:
        yield s
    finally:
        if s.total:
            s.done = max(s.done, s.total)
        # The outermost step ends its line; an inner one leaves it to be drawn over by the next.
        if _enabled and s.drawn and _current and _current[0] is s:
            _draw(final=True)
        with _lock:
            _current.remove(s)
        for fn in list(_listeners):
            fn("end", name, {"total": total, "done": s.done})
