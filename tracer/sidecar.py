"""The sidecar file: one JSONL file per process, written by a background flusher (contract: docs/sidecar.md).

The traced thread only appends to a bounded in-memory queue (`put`); a daemon thread turns the queue into JSON
lines every `flush_interval_s` and writes them with one unbuffered write, so a killed process loses at most the
last interval. When the queue is full a record is dropped and counted; the count is in the footer. Nothing here
raises into the caller: an unwritable directory or a full disk turns the sidecar off with one warning.

`ExitFlush` closes the sidecar at normal exit (atexit) and flushes it on SIGTERM and SIGINT before the signal
does what it would have done without us.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import socket
import threading
from collections import deque
from typing import Any, Callable

from specprof.tracer.cycles import Cycle, json_int, json_name

SCHEMA = "specprof.sidecar/1"
PREFIX = "specprof-sidecar."
SUFFIX = ".jsonl"

logger = logging.getLogger("specprof.tracer")

_NEW, _OPEN, _CLOSED, _OFF = "new", "open", "closed", "off"


def file_name(host: str, pid: int, session: int = 1) -> str:
    """`specprof-sidecar.<host>.<pid>.jsonl`; a later tracing session in the same process adds `.<session>`."""
    tail = "" if session == 1 else f".{session}"
    return f"{PREFIX}{host}.{pid}{tail}{SUFFIX}"


_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)


def _dumps(record: dict) -> str:
    if record.get("type") == "range":  # the frequent one, formatted directly
        return (
            f'{{"type":"range","name":{json_name(record["name"])},"start_ns":{record["start_ns"]},'
            f'"end_ns":{json_int(record["end_ns"])},"cycle":{json_int(record["cycle"])}}}'
        )
    return _ENCODER.encode(record)


class Sidecar:
    """A bounded queue of records and the thread that writes them. `rank` is set by whoever opens it."""

    CHUNK = 256

    def __init__(
        self,
        out_dir: str | None = None,
        *,
        max_queue: int = 10_000,
        flush_interval_s: float = 0.1,
    ):
        self._out_dir = out_dir
        self._max_queue = max(1, max_queue)
        self._interval = flush_interval_s
        self._queue: deque = deque()
        self._state = _NEW
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._writer: int | None = None  # thread ident holding _lock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.path: str | None = None
        self.pid = os.getpid()
        self.rank: int | None = None
        self.dropped = 0
        self.cycles = 0

    # -- the traced thread ---------------------------------------------------------------------------------
    def put(self, item: Any) -> None:
        """Queues a record dict or a finished Cycle. Never blocks: a full queue drops and counts. Records put
        before the file opens (other threads, while the first traced call opens it) wait in the queue and are
        written after the header; records put after it closed are counted as dropped."""
        state = self._state
        if state is not _OPEN and state is not _NEW:
            self.dropped += 1
            return
        if len(self._queue) >= self._max_queue:
            self.dropped += 1
            return
        self._queue.append(item)

    @property
    def is_open(self) -> bool:
        return self._state is _OPEN

    # -- opening and closing -------------------------------------------------------------------------------
    def open(self, header: dict, first: list[dict] = ()) -> bool:
        """Creates the file (never over an existing one), writes `header` and `first`, starts the flusher."""
        if self._state is not _NEW:
            return self._state is _OPEN
        try:
            out_dir = self._out_dir or os.getcwd()
            os.makedirs(out_dir, exist_ok=True)
            host = socket.gethostname() or "localhost"
            self.pid = os.getpid()
            for session in range(1, 1000):
                path = os.path.join(out_dir, file_name(host, self.pid, session))
                try:
                    self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
                    break
                except FileExistsError:
                    continue
            else:
                raise FileExistsError(f"{out_dir}: 999 sidecars of pid {self.pid} already")
            self.path = path
            self._write_bytes("".join(_dumps(r) + "\n" for r in (header, *first)).encode())
        except Exception as exc:
            self._turn_off(f"cannot write the sidecar in {self._out_dir or os.getcwd()!r}: {exc}")
            return False
        self._state = _OPEN
        self._stop.clear()
        self._thread = threading.Thread(target=self._flush_loop, name="specprof-sidecar", daemon=True)
        self._thread.start()
        return True

    def close(self, footer: dict | None = None) -> None:
        """Writes what is queued and the footer, then closes the file. Idempotent."""
        if self._state is not _OPEN:
            return
        self._state = _CLOSED  # put() refuses from here on
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread() and thread.is_alive():
            thread.join(timeout=2.0)
        if not self._locked(self._drain):
            return  # we interrupted our own write (a signal during close): the outer close finishes
        record = {"type": "footer", "dropped": self.dropped, "cycles": self.cycles}
        record.update(footer or {})
        self._locked(lambda: self._write_bytes((_dumps(record) + "\n").encode()))
        self._close_fd()

    def flush(self) -> None:
        """Writes everything queued now, from the calling thread (signal handlers)."""
        if self._state is _OPEN:
            self._locked(self._drain)

    def after_fork_in_child(self) -> None:
        """A forked child writes its own file: forget the parent's (without flushing or closing it)."""
        self._queue = deque()
        self._state = _NEW
        self._fd = None
        self._lock = threading.Lock()
        self._writer = None
        self._stop = threading.Event()
        self._thread = None
        self.path = None
        self.pid = os.getpid()
        self.dropped = 0
        self.cycles = 0

    # -- the flusher ---------------------------------------------------------------------------------------
    def _flush_loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._locked(self._drain)

    def _locked(self, work: Callable[[], None]) -> bool:
        me = threading.get_ident()
        if self._writer == me:
            return False
        if not self._lock.acquire(timeout=5.0):
            return False
        self._writer = me
        try:
            work()
        except Exception as exc:  # never into the caller
            self._turn_off(f"sidecar write failed: {exc}")
        finally:
            self._writer = None
            self._lock.release()
        return True

    def _drain(self) -> None:
        """Writes the queue out in chunks of at most CHUNK records (one write each): memory stays small."""
        queue = self._queue
        while queue and self._state is not _OFF:
            lines: list[str] = []
            cycles = 0
            while queue and len(lines) < self.CHUNK:
                try:
                    item = queue.popleft()
                except IndexError:
                    break
                try:
                    if isinstance(item, Cycle):
                        lines.append(item.json_line(self.pid, self.rank))
                        cycles += 1
                    else:
                        lines.append(_dumps(item))
                except Exception:
                    self.dropped += 1
            if not lines:
                return
            if self._fd is None:
                self.dropped += len(lines)
                return
            try:
                self._write_bytes(("\n".join(lines) + "\n").encode())
            except OSError as exc:
                self.dropped += len(lines)
                self._turn_off(f"sidecar write failed: {exc}")
                return
            self.cycles += cycles

    def _write_bytes(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def _turn_off(self, why: str) -> None:
        if self._state is not _OFF:
            logger.warning("specprof: %s; tracing goes on without a sidecar", why)
        self._state = _OFF
        self._queue.clear()
        self._close_fd()

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


class ExitFlush:
    """Calls `close(reason)` at normal exit and on a fatal SIGTERM/SIGINT; `flush()` when another handler decides.

    Signal handlers are installed only from the main thread, never over SIG_IGN, and chain to the handler they
    replace: a Python handler (SGLang's, or SIGINT's KeyboardInterrupt) runs after a flush; the default action
    runs after a close, by re-raising the signal with the default disposition restored.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, flush: Callable[[], None], close: Callable[[str], None]):
        self._flush = flush
        self._close = close
        self._previous: dict[int, Any] = {}
        self._atexit_registered = False

    def install(self) -> None:
        if not self._atexit_registered:
            atexit.register(self._at_exit)
            self._atexit_registered = True
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in self.SIGNALS:
            try:
                previous = signal.getsignal(signum)
                if previous is signal.SIG_IGN or previous == self._handle or signum in self._previous:
                    continue
                signal.signal(signum, self._handle)
                self._previous[signum] = previous
            except (ValueError, OSError, RuntimeError):
                continue

    def uninstall(self) -> None:
        if self._atexit_registered:
            atexit.unregister(self._at_exit)
            self._atexit_registered = False
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, previous in list(self._previous.items()):
            try:
                if signal.getsignal(signum) == self._handle:
                    signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
            except (ValueError, OSError, RuntimeError):
                pass
            del self._previous[signum]

    def _at_exit(self) -> None:
        try:
            self._close("exit")
        except Exception:
            pass

    def _handle(self, signum: int, frame) -> None:
        previous = self._previous.get(signum, signal.SIG_DFL)
        if callable(previous):
            try:
                self._flush()
            except Exception:
                pass
            previous(signum, frame)
            return
        # The default action (or one set outside Python, which we cannot call): the process ends now.
        try:
            self._close(signal.Signals(signum).name)
        except Exception:
            pass
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
