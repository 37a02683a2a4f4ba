"""The sidecar file: one JSONL file per process, written by a background flusher (contract: docs/sidecar.md).

The traced thread only appends to a bounded in-memory queue (`put`); a daemon thread turns the queue into JSON
lines every `flush_interval_s` and writes them with one unbuffered write, so a killed process loses at most the
last interval. When the queue is full a record is dropped and counted. Nothing here raises into the caller.

A write that fails (a full disk, a file-size limit) loses only the records it held: they are counted, the file
is cut back to its last whole line, and the next flush writes again, so recording goes on once writes work
again. The count of records lost so far is always in the file: the footer's `dropped` at close, and before that
the header's own `dropped`, a fixed-width number rewritten in place at each flush (it never grows the file, so it
is written even on a full disk) for a process that ends without its footer. The file is created new, never
through a link (specprof.analyzer.safe_files). Only a file that cannot be created, or whose header cannot be
written, turns the sidecar off, with one warning.

`ExitFlush` closes the sidecar at normal exit (atexit) and flushes it on SIGTERM and SIGINT before the signal
does what it would have done without us.
"""

from __future__ import annotations

import atexit
import errno
import json
import logging
import os
import signal
import socket
import threading
from collections import deque
from typing import Any, Callable

from specprof.analyzer import safe_files
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
    SLOT = 20  # the width of the header's running count of dropped records: any int64

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
        self.failed_writes = 0
        self._reset_file()

    def _reset_file(self) -> None:
        self._size = 0  # bytes of whole lines in the file: where the next write goes
        self._cut = False  # bytes of a failed write may lie beyond _size
        self._slot: int | None = None  # the offset of the header's `dropped` digits
        self._slot_value = 0  # the count written there
        self._failing = False  # the last write failed (one warning for a run of failures)

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
        """Creates the file (never over an existing one, never through a link), writes `header` (with its
        running count of dropped records) and `first`, starts the flusher."""
        if self._state is not _NEW:
            return self._state is _OPEN
        try:
            out_dir = self._out_dir or os.getcwd()
            safe_files.make_folders(out_dir)
            host = socket.gethostname() or "localhost"
            self.pid = os.getpid()
            for session in range(1, 1000):
                path = os.path.join(out_dir, file_name(host, self.pid, session))
                try:
                    self._fd = safe_files.create(path, mode=0o644)
                    break
                except FileExistsError:
                    continue
            else:
                raise FileExistsError(f"{out_dir}: 999 sidecars of pid {self.pid} already")
            self.path = path
            head = _dumps(header)
            prefix = head[:-1] + ("," if len(head) > 2 else "") + '"dropped":'
            self._write((prefix + "0".ljust(self.SLOT) + "}\n" + "".join(_dumps(r) + "\n" for r in first)).encode())
            self._slot = len(prefix.encode())
        except Exception as exc:
            self._remove_unwritten()
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
        self._locked(lambda: self._finish(footer))

    def _finish(self, footer: dict | None) -> None:
        if self._queue:  # what a failing write left queued
            self.dropped += len(self._queue)
            self._queue.clear()
        record = {"type": "footer", "dropped": self.dropped, "cycles": self.cycles}
        if self.failed_writes:
            record["failed_writes"] = self.failed_writes
        record.update(footer or {})
        try:
            self._write((_dumps(record) + "\n").encode())
        except OSError:
            self.failed_writes += 1  # no footer: the header's count stands for it
        self._write_count()
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
        self.failed_writes = 0
        self._reset_file()

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
        """Writes the queue out in chunks of at most CHUNK records (one write each): memory stays small. A chunk
        whose write fails is counted as dropped, and the rest waits for the next flush."""
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
                break
            if self._fd is None:
                self.dropped += len(lines)
                break
            try:
                self._write(("\n".join(lines) + "\n").encode())
            except OSError as exc:
                self.dropped += len(lines)
                self.failed_writes += 1
                if not self._failing:
                    self._failing = True
                    logger.warning("specprof: sidecar write failed (%s); records are dropped and counted until "
                                   "writes work again", exc)
                break
            if self._failing:
                self._failing = False
                logger.warning("specprof: sidecar writes work again (%d records dropped so far)", self.dropped)
            self.cycles += cycles
        self._write_count()

    def _write(self, data: bytes) -> None:
        """Writes `data` after the file's whole lines. When the write fails (OSError, raised), what it wrote of
        `data` is cut off again: the file keeps whole lines only."""
        offset = self._size
        view = memoryview(data)
        try:
            while view:
                written = os.pwrite(self._fd, view, offset)
                if written <= 0:
                    raise OSError(errno.EIO, "nothing written")
                offset += written
                view = view[written:]
        except OSError:
            if offset > self._size:
                self._cut = True
                self._cut_back()
            raise
        self._size = offset
        if self._cut:  # a cut that failed before: bytes of a failed write may lie beyond this one
            self._cut_back()

    def _cut_back(self) -> None:
        try:
            os.ftruncate(self._fd, self._size)
            self._cut = False
        except OSError:
            pass

    def _write_count(self) -> None:
        """The header's count of dropped records, rewritten in place (the same width: never grows the file)."""
        count = self.dropped
        if self._slot is None or self._fd is None or count == self._slot_value:
            return
        digits = str(count).ljust(self.SLOT).encode()
        if len(digits) != self.SLOT:
            return
        try:
            if os.pwrite(self._fd, digits, self._slot) == self.SLOT:
                self._slot_value = count
        except OSError:
            pass

    def _remove_unwritten(self) -> None:
        """Removes the file `open` created when its header could not be written (a file without a header is not
        a sidecar: it would stop the analysis of the whole run)."""
        fd, path = self._fd, self.path
        if fd is None or path is None:
            return
        try:
            mine = os.fstat(fd)
            there = os.stat(path, follow_symlinks=False)
            if (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino):
                os.unlink(path)
        except OSError:
            pass
        self.path = None

    def _turn_off(self, why: str) -> None:
        if self._state is not _OFF:
            logger.warning("specprof: %s; tracing goes on without a sidecar", why)
        self._state = _OFF
        self.dropped += len(self._queue)
        self._queue.clear()
        self._write_count()
        self._close_fd()

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                if self._cut:
                    os.ftruncate(fd, self._size)
            except OSError:
                pass
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
