"""Reader for PyTorch-profiler (Kineto) Chrome-trace JSON, plain or gzip -> Trace.

Every generation of Kineto output is read: modern (`ac2g` flows, `baseTimeNanoseconds`-relative
timestamps with nanosecond decimals), 2022 (`async_cpu_to_gpu` / `async_gpu` flows, capitalised
`Kernel` / `Runtime` categories, lowercase `external id`, integer microseconds) and the
absolute-epoch float traces in between. docs/kineto.md says how each field maps.

The file is never loaded whole: ijson (yajl2_c backend when installed) streams `traceEvents` one
event at a time and the reader keeps only what the Trace needs, in typed column arrays (8 bytes a
value, names dictionary-encoded). The top-level keys that come before `traceEvents` are read from
the first chunks, the ones after it from the text that follows the last event. After the parse
everything is vectorised (numpy for the time conversion, polars for the joins).

What maps to what:
- ops: categories `kernel` / `gpu_memcpy` / `gpu_memset` (and `Kernel` / `Memcpy` / `Memset`);
  the event's pid is the device and its tid the stream (`args.device` / `args.stream` win);
  `args.correlation` joins to the launching API call. The op's `pid` is the launching process,
  taken from that call, so that projection joins on (pid, correlation) as for nsys.
- api: `cuda_runtime` / `cuda_driver` (`Runtime`): pid, tid, ts, dur, name, `args.correlation`.
- ranges: `user_annotation` (record_function) on CPU threads; with `cpu_ops=True` also `cpu_op`
  (aten operators), which are not phases by default. `gpu_user_annotation` events are Kineto's
  own GPU spans of an annotation and are not ranges.
- marks: instant events on a CPU thread.
- collectives: NCCL kernels' collective arguments (`Collective name`, message sizes, group), one
  row per op that has them.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import re
import zlib
from array import array
from collections import deque

import polars as pl

from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.numeric import np
from specprof.analyzer.readers.bounds import bounded_names, check_span, names_note
from specprof.analyzer.model.trace import (
    API_SCHEMA,
    SYNC_NAMES,
    SYNCS_SCHEMA,
    COLLECTIVES_SCHEMA,
    MARKS_SCHEMA,
    RANGES_SCHEMA,
    Trace,
    TraceMeta,
    empty,
)

FORMAT = "kineto-json"
GZIP_MAGIC = b"\x1f\x8b"

# Kineto category -> op kind (0 kernel, 1 memcpy, 2 memset). The capitalised ones are 2022's.
_OP_KINDS = {"kernel": 0, "Kernel": 0, "gpu_memcpy": 1, "Memcpy": 1, "gpu_memset": 2, "Memset": 2}
_KIND_NAMES = ["kernel", "memcpy", "memset"]
_API_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})
_FLOW_CATS = frozenset({"ac2g", "async_cpu_to_gpu", "async_gpu"})
RANGE_CATEGORY = "user_annotation"
CPU_OP_CATEGORY = "cpu_op"

# NCCL kernels' collective arguments (torch >= 2.3 writes them on the kernel event).
_COLLECTIVE_ARGS = {
    "Collective name": "collective",
    "In msg nelems": "in_nelems",
    "Out msg nelems": "out_nelems",
    "Group size": "group_size",
    "dtype": "dtype",
    "In split size": "in_split_size",
    "Out split size": "out_split_size",
    "Process Group Name": "pg_name",
    "Process Group Description": "pg_desc",
    "Process Group Ranks": "pg_ranks",
}

# Bytes of (decompressed) text the parser reads at a time. ijson parses a whole buffer before it
# yields its events: small buffers keep those few events in cache (1 MiB buffers run 2x slower). But ijson
# copies a value that spans buffers at every buffer (a 40 MB name took 20.6 s in 16 KiB reads, 0.4 s in 1 MiB
# reads): while one event goes on past LONG_EVENT bytes, the reads double, up to BIG_READ, and shrink again at
# the next event.
READ_SIZE = 1 << 14
LONG_EVENT = 1 << 16
BIG_READ = 1 << 22
# No event of a trace is longer than this (text): ijson builds each event whole, and one event of 1.5e8 array
# items (a 2.9 MB .gz) reached 5 GB. A longer one is refused while it is read, having cost at most a few hundred
# MB (its values up to here).
MAX_EVENT_BYTES = 32 << 20
HEAD_LIMIT = 16 << 20  # top-level keys further than this before `traceEvents` are not read
TAIL_WINDOW = 4 << 20  # nor those further than this from the end (Kineto writes a few kB there)
# JSON nesting kept to this depth: a Kineto trace nests 5 or 6 levels ({traceEvents: [{args: {...: [...]}}]});
# ijson's memory grows with the square of the depth (each event carries its whole path), so a small file of
# deeper nesting is refused before it is parsed that far (a 40 KB file of depth 20,000 took 2 GB).
MAX_DEPTH = 64
# Kineto writes timestamps in microseconds; no trace of this epoch (or relative to a base time)
# reaches 1e17 us, while nanosecond epoch values do: such values are taken as nanoseconds.
_NS_THRESHOLD = 1e17


def read_kineto(path: str, cpu_ops: bool = False) -> Trace:
    """Read a Kineto JSON trace (`.json` or `.json.gz`) into a Trace.

    `cpu_ops=True` also makes every `cpu_op` (aten operator) event a range, so that operators
    become phases; by default only `user_annotation` (record_function) ranges are phases.
    """
    path = str(path)
    _check_file(path)
    parser = _Parser(path, cpu_ops)
    parser.run()
    return parser.build()


def is_kineto(path: str, limit: int = 4 << 20) -> bool:
    """True when `path` looks like a Kineto trace: a JSON object with a top-level `traceEvents`
    key in its first `limit` bytes, or a JSON array of objects (Chrome's array format)."""
    import ijson

    try:
        with _open(path) as fh:
            head = fh.read(limit)
    except (OSError, EOFError, zlib.error):
        return False
    body = head.lstrip()
    if body[:1] == b"[":
        return re.match(rb"\[\s*(\{|\])", body) is not None
    if body[:1] != b"{":
        return False
    if not _Depth(MAX_DEPTH).fits(head):
        return False
    try:
        for prefix, event, value in ijson.parse(head):
            if prefix == "" and event == "map_key" and value == "traceEvents":
                return True
    except Exception:  # truncated at `limit`, or not JSON: decided by what came before
        return False
    return False


# --- files -----------------------------------------------------------------------------------

def _check_file(path: str) -> None:
    if not os.path.exists(path):
        raise SpecprofError(f"{path}: no such file; give the path of a PyTorch-profiler trace "
                            "(.json or .json.gz)", path)
    if os.path.isdir(path):
        raise SpecprofError(f"{path}: is a directory; give the path of a PyTorch-profiler trace", path)
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise SpecprofError(f"{path}: cannot be read ({exc.strerror})", path) from None


def _open(path: str):
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == GZIP_MAGIC:
        return gzip.open(path, "rb")
    return open(path, "rb")


class _Sink(list):
    """The target of an ijson coroutine: a list it appends to."""

    send = list.append


_DELETE = bytes(b for b in range(256) if b not in b'"[]{}')  # translate() keeps quotes and brackets only
_OPEN = frozenset(b"[{")


class _Depth:
    """The nesting depth of JSON text fed to it chunk by chunk (brackets inside strings do not count).

    No regular expression and no per-byte loop over the chunk: escapes are removed (escaped backslashes, then
    escaped quotes), bytes.translate keeps only the quotes and brackets, adjacent quotes are dropped in pairs
    (a pair holds no bracket between its quotes: a string without brackets, or the bracket-free text between
    two strings; dropping it moves no other character to the other side of a quote), and what is left, a few
    brackets as a rule, is split at its quotes. All of it runs in C over the chunk; only a chunk whose openers
    could take the depth past the limit is walked, bracket by bracket (its brackets only)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.depth = 0
        self.in_string = False
        self.escaped = False  # the text so far ends inside a string, on a backslash whose character comes next

    def fits(self, data: bytes) -> bool:
        """Takes the next chunk; False once the depth has gone past the limit."""
        if self.escaped:
            data = data[1:]
            self.escaped = False
        if b"\\" in data:  # backslashes appear only inside strings
            data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
            if data.endswith(b"\\"):
                data = data[:-1]
                self.escaped = True
        marks = data.translate(None, _DELETE)
        if b'"' in marks:
            marks = marks.replace(b'""', b"")
        if b'"' in marks:
            parts = marks.split(b'"')
            marks = b"".join(parts[1::2] if self.in_string else parts[::2])
            if len(parts) % 2 == 0:  # an odd number of quotes: the chunk ends on the other side
                self.in_string = not self.in_string
        elif self.in_string:
            return True  # the whole chunk inside one string
        opens = marks.count(b"[") + marks.count(b"{")
        if self.depth + opens <= self.limit:
            self.depth = max(0, self.depth + opens - (len(marks) - opens))
            return True
        depth, limit = self.depth, self.limit
        for byte in marks:
            if byte in _OPEN:
                depth += 1
                if depth > limit:
                    return False
            else:
                depth -= 1
        self.depth = max(0, depth)
        return True


class _Tap:
    """The file ijson reads: passes the (decompressed) text through, feeds the top-level keys
    before `traceEvents` to a second parser until the events begin, and keeps the last
    TAIL_WINDOW bytes, where the keys after `traceEvents` are."""

    def __init__(self, fh, first: bytes, head, path: str):
        self.fh = fh
        self.first = first
        self.head = head
        self.head_bytes = 0
        self.ring: deque[bytes] = deque()
        self.ring_bytes = 0
        self.path = path
        self.depth = _Depth(MAX_DEPTH)
        self.seen = 0  # events the parser has yielded (set by its loop)
        self._seen_before = 0
        self._since = 0  # bytes read since the parser last yielded an event
        self._size = READ_SIZE

    def read(self, n: int = -1) -> bytes:
        if n == 0:  # ijson's probe for bytes or str
            return b""
        if self.seen != self._seen_before:  # an event ended: back to small reads
            self._seen_before, self._since, self._size = self.seen, 0, READ_SIZE
        elif self._since > MAX_EVENT_BYTES:
            raise SpecprofError(
                f"{self.path}: one event is longer than {MAX_EVENT_BYTES >> 20} MB of JSON (a PyTorch-profiler "
                "event takes a few hundred bytes); the file is not a trace, or is damaged: give the file "
                "torch.profiler's export_chrome_trace wrote", self.path)
        elif self._since > LONG_EVENT:
            self._size = min(BIG_READ, self._size * 2)
        if self.first is not None:
            data, self.first = self.first, None
        else:
            data = self.fh.read(max(n, self._size) if n > 0 else n)
        if not data:
            return data
        self._since += len(data)
        if not self.depth.fits(data):  # before either parser sees it
            raise SpecprofError(
                f"{self.path}: JSON nested deeper than {MAX_DEPTH} levels (a PyTorch-profiler trace nests 6); "
                "the file is not a trace, or is damaged: give the file torch.profiler's export_chrome_trace wrote",
                self.path)
        if self.head is not None:
            self.head.send(data)
            self.head_bytes += len(data)
            if self.head_bytes > HEAD_LIMIT:
                self.head = None
        self.ring.append(data)
        self.ring_bytes += len(data)
        while self.ring_bytes - len(self.ring[0]) >= TAIL_WINDOW:
            self.ring_bytes -= len(self.ring.popleft())
        return data


# --- the streaming parse ---------------------------------------------------------------------

class _Parser:
    def __init__(self, path: str, cpu_ops: bool):
        self.path = path
        self.range_cats = {RANGE_CATEGORY: 0}
        if cpu_ops:
            self.range_cats[CPU_OP_CATEGORY] = 1
        self.names: dict[str, int] = {}  # name -> id (dictionary encoding, shared by all tables)
        # GPU ops
        self.o_kind = array("b")
        self.o_ts = array("d")
        self.o_dur = array("d")
        self.o_dev = array("q")
        self.o_stream = array("q")
        self.o_corr = array("q")
        self.o_name = array("q")
        self.o_evpid = array("q")  # the event's own pid (the device row in the viewer)
        # API calls
        self.a_pid = array("q")
        self.a_tid = array("q")
        self.a_ts = array("d")
        self.a_dur = array("d")
        self.a_name = array("q")
        self.a_corr = array("q")
        # ranges
        self.r_pid = array("q")
        self.r_tid = array("q")
        self.r_ts = array("d")
        self.r_dur = array("d")
        self.r_name = array("q")
        self.r_cat = array("b")
        # marks
        self.m_pid = array("q")
        self.m_tid = array("q")
        self.m_ts = array("d")
        self.m_name = array("q")
        # flow ends on GPU rows: (pid, tid, ts) -> correlation, for ops without args.correlation
        # (every trace seen has args.correlation: these are collected only after such an op)
        self.f_pid = array("q")
        self.f_tid = array("q")
        self.f_ts = array("d")
        self.f_id = array("q")
        self.collectives: list[tuple[int, dict]] = []  # (op row, args)
        self.process_names: dict[int, str] = {}
        self.process_labels: dict[int, str] = {}
        self.thread_names: dict[int, str] = {}
        self.device_names: dict[int, str | None] = {}
        self.skipped: dict[str, int] = {}
        self.ignored: dict[str, int] = {}  # events of categories the Trace does not use
        self.events = 0
        self.head: dict = {}
        self.tail: dict = {}
        self.array_format = False

        self._op_cols = (self.o_kind, self.o_ts, self.o_dur, self.o_dev, self.o_stream, self.o_corr,
                         self.o_name, self.o_evpid)
        self._api_cols = (self.a_pid, self.a_tid, self.a_ts, self.a_dur, self.a_name, self.a_corr)
        self._range_cols = (self.r_pid, self.r_tid, self.r_ts, self.r_dur, self.r_name, self.r_cat)
        self._mark_cols = (self.m_pid, self.m_tid, self.m_ts, self.m_name)
        self._flow_cols = (self.f_pid, self.f_tid, self.f_ts, self.f_id)

    def run(self) -> None:
        import ijson

        self.backend = ijson.backend
        try:
            fh = _open(self.path)
        except OSError as exc:
            raise SpecprofError(f"{self.path}: cannot be read ({exc.strerror})", self.path) from None
        try:
            with fh:
                self._feed(fh, ijson)
        except SpecprofError:
            raise
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise SpecprofError(
                f"{self.path}: the gzip file is truncated or corrupt ({exc}); copy or export the "
                "trace again", self.path) from None
        except ijson.common.IncompleteJSONError as exc:
            raise SpecprofError(
                f"{self.path}: not valid JSON, or cut short ({_first_line(exc)}); the trace is probably "
                "truncated: export it again (torch.profiler's export_chrome_trace)", self.path) from None
        except ijson.JSONError as exc:
            raise SpecprofError(
                f"{self.path}: not valid JSON ({_first_line(exc)}); give a PyTorch-profiler trace "
                "(.json or .json.gz)", self.path) from None
        except UnicodeDecodeError as exc:
            raise SpecprofError(f"{self.path}: not valid UTF-8 JSON ({exc.reason}); give a "
                                "PyTorch-profiler trace (.json or .json.gz)", self.path) from None
        except OSError as exc:
            raise SpecprofError(f"{self.path}: cannot be read ({exc})", self.path) from None

    def _feed(self, fh, ijson) -> None:
        first = fh.read(4096)
        body = first.lstrip()
        while first and not body:  # leading whitespace only so far
            more = fh.read(4096)
            if not more:
                break
            first += more
            body = first.lstrip()
        if body[:1] not in (b"{", b"["):
            raise SpecprofError(
                f"{self.path}: not a PyTorch-profiler trace (not a JSON object or array); give the "
                "file torch.profiler's export_chrome_trace (or tensorboard_trace_handler) wrote",
                self.path)
        self.array_format = body[:1] == b"["
        head_sink = _Sink()
        tap = _Tap(fh, first, None if self.array_format else ijson.kvitems_coro(head_sink, "", use_float=True),
                   self.path)
        gen = ijson.items(tap, "item" if self.array_format else "traceEvents.item", use_float=True,
                          buf_size=READ_SIZE)
        collecting = gc.isenabled()
        gc.disable()  # the loop makes no reference cycles; collections would only rescan live objects
        try:
            self._events(gen, tap)
        finally:
            if collecting:
                gc.enable()
        tap.head = None
        for key, value in head_sink:
            self.head[key] = value
        if not self.array_format:
            text = b"".join(tap.ring)
            if not self.events and "traceEvents" not in self.head and b'"traceEvents"' not in text:
                raise SpecprofError(
                    f"{self.path}: a JSON file but not a PyTorch-profiler trace (no `traceEvents`); "
                    "give the file torch.profiler's export_chrome_trace wrote", self.path)
            self.head.pop("traceEvents", None)
            self.tail = _tail_keys(text)

    def _repair(self) -> None:
        """After a malformed event: cut every table's columns back to the rows all of them have."""
        for group in (self._op_cols, self._api_cols, self._range_cols, self._mark_cols, self._flow_cols):
            n = min(len(c) for c in group)
            for c in group:
                del c[n:]
        n_ops = len(self.o_kind)
        while self.collectives and self.collectives[-1][0] >= n_ops:
            self.collectives.pop()
        self.skipped["malformed_events"] = self.skipped.get("malformed_events", 0) + 1

    def _events(self, events, tap) -> None:
        """The one loop over events: append what each needs to its table's columns.

        An event of the wrong shape (a field missing or of the wrong type) is skipped and counted;
        the columns it had already grown are cut back (`_repair`)."""
        names = self.names
        op_kinds = _OP_KINDS
        api_cats = _API_CATS
        flow_cats = _FLOW_CATS
        range_cats = self.range_cats
        o_kind, o_ts, o_dur, o_dev = self.o_kind, self.o_ts, self.o_dur, self.o_dev
        o_stream, o_corr, o_name, o_evpid = self.o_stream, self.o_corr, self.o_name, self.o_evpid
        a_pid, a_tid, a_ts, a_dur, a_name, a_corr = (self.a_pid, self.a_tid, self.a_ts, self.a_dur,
                                                      self.a_name, self.a_corr)
        r_pid, r_tid, r_ts, r_dur, r_name, r_cat = (self.r_pid, self.r_tid, self.r_ts, self.r_dur,
                                                     self.r_name, self.r_cat)
        f_pid, f_tid, f_ts, f_id = self.f_pid, self.f_tid, self.f_ts, self.f_id
        collectives = self.collectives
        ignored = self.ignored
        need_flows = False  # flow ends are kept only once an op without args.correlation was seen
        count = 0
        for ev in events:
            if not count:
                tap.head = None  # the events have begun: the top-level keys before them are read
            count += 1
            tap.seen = count
            try:
                cat = ev.get("cat")
                kind = op_kinds.get(cat)
                if kind is not None:
                    if ev.get("ph") != "X":
                        continue
                    args = ev.get("args") or {}
                    name = ev["name"]
                    nid = names.get(name) if type(name) is str else None
                    if nid is None:
                        nid = _intern(names, name)
                    pid = ev.get("pid")
                    dev = args.get("device", pid)
                    stream = args.get("stream", ev.get("tid"))
                    corr = args.get("correlation")
                    o_ts.append(ev["ts"])
                    o_dur.append(ev["dur"])
                    o_dev.append(-1 if dev is None else dev)
                    o_stream.append(-1 if stream is None else stream)
                    if corr is None:
                        corr = -1
                        need_flows = True  # flows from here on can name it (Kineto writes them after)
                    o_corr.append(corr)
                    o_evpid.append(pid if type(pid) is int else -1)
                    o_name.append(nid)
                    o_kind.append(kind)
                    if "Collective name" in args:
                        collectives.append((len(o_kind) - 1, _collective_args(args)))
                elif cat in api_cats:
                    if ev.get("ph") != "X":
                        continue
                    corr = ev["args"].get("correlation")
                    if corr is None:
                        continue
                    name = ev["name"]
                    nid = names.get(name) if type(name) is str else None
                    if nid is None:
                        nid = _intern(names, name)
                    a_ts.append(ev["ts"])
                    a_dur.append(ev["dur"])
                    a_pid.append(ev["pid"])
                    a_tid.append(ev["tid"])
                    a_corr.append(corr)
                    a_name.append(nid)
                elif cat in flow_cats:
                    if need_flows and ev.get("ph") == "f":
                        pid = ev.get("pid")
                        tid = ev.get("tid")
                        if type(pid) is int and type(tid) is int:
                            f_ts.append(ev["ts"])
                            f_id.append(ev["id"])
                            f_pid.append(pid)
                            f_tid.append(tid)
                else:
                    rc = range_cats.get(cat)
                    if rc is not None:
                        if ev.get("ph") != "X":
                            continue
                        name = ev["name"]
                        nid = names.get(name) if type(name) is str else None
                        if nid is None:
                            nid = _intern(names, name)
                        r_ts.append(ev["ts"])
                        r_dur.append(ev["dur"])
                        r_pid.append(ev["pid"])
                        r_tid.append(ev["tid"])
                        r_name.append(nid)
                        r_cat.append(rc)
                    else:
                        seen = ignored.get(cat)  # cpu_op, fwdbwd, ...: counted only
                        if seen is not None and ev.get("ph") == "X":
                            ignored[cat] = seen + 1
                        else:
                            self._other(ev, cat)
            except (AttributeError, TypeError, ValueError, KeyError, OverflowError):
                self._repair()
        self.events = count

    def _other(self, ev: dict, cat) -> None:
        """Metadata, instant and ignored events (a few per trace, or counted only)."""
        ph = ev.get("ph")
        if ph == "M":
            self._metadata(ev)
        elif ph == "i" or ph == "I":
            pid = ev.get("pid")
            tid = ev.get("tid")
            if type(pid) is int and type(tid) is int:
                name = ev.get("name")
                nid = self.names.get(name) if isinstance(name, str) else None
                if nid is None:
                    nid = _intern(self.names, name)
                self.m_ts.append(ev["ts"])
                self.m_pid.append(pid)
                self.m_tid.append(tid)
                self.m_name.append(nid)
        elif isinstance(cat, str):
            self.ignored[cat[:64]] = self.ignored.get(cat[:64], 0) + 1
        elif cat is not None:
            key = _text(cat)[:64]
            self.ignored[key] = self.ignored.get(key, 0) + 1

    def _metadata(self, ev: dict) -> None:
        pid = ev.get("pid")
        args = ev.get("args")
        if type(pid) is not int or not isinstance(args, dict):
            return
        name = ev.get("name")
        if name == "process_name" and isinstance(args.get("name"), str):
            self.process_names[pid] = args["name"]
        elif name == "process_labels" and isinstance(args.get("labels"), str):
            self.process_labels[pid] = args["labels"]
        elif name == "thread_name" and isinstance(args.get("name"), str) and type(ev.get("tid")) is int:
            self.thread_names[ev["tid"]] = args["name"]

    # --- after the parse: columns -> tables ------------------------------------------------------

    def build(self) -> Trace:
        meta = self._meta()
        if self.array_format and self.skipped.get("malformed_events", 0) == self.events:
            raise SpecprofError(
                f"{self.path}: a JSON array but not a PyTorch-profiler trace (no trace events in it); "
                "give the file torch.profiler's export_chrome_trace wrote", self.path)
        if not len(self.o_kind):
            found = ", ".join(f"{k} {v}" for k, v in sorted(self.ignored.items(), key=lambda kv: -kv[1])[:4])
            raise SpecprofError(
                f"{self.path}: the PyTorch-profiler trace has no GPU events (no kernel, gpu_memcpy or "
                f"gpu_memset; {self.events} events{': ' + found if found else ''}); profile with "
                "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]", self.path)
        base = self._base_ns(meta)
        names, cut = bounded_names(_names_series(self.names))
        if cut:
            meta.notes.append(names_note(cut, "names"))
        ops = self._ops(names, base, meta)
        api = self._api(names, base, ops, meta)
        ops = self._launching_process(ops, api, meta)
        ranges = self._ranges(names, base, meta)
        marks = self._marks(names, base)
        collectives = self._collectives(ops)
        ops = ops.drop("_row")
        self._processes(meta, api, ranges)
        for k, v in self.skipped.items():
            meta.skipped[k] = meta.skipped.get(k, 0) + v
        for what, table in (("GPU ops", ops), ("CUDA API calls", api), ("ranges", ranges)):
            check_span(self.path, {what: table}, "export it again")  # each on its own: some mix two clocks
        return Trace(ops=ops, api=api, ranges=ranges, marks=marks, meta=meta, collectives=collectives,
                     syncs=getattr(self, "syncs", None))

    def _meta(self) -> TraceMeta:
        top = {**self.head, **self.tail}
        meta = TraceMeta(path=self.path, format=FORMAT)
        schema = top.get("schemaVersion")
        meta.schema_version = None if schema is None else _text(schema)
        versions = [f"schema {meta.schema_version}" if schema is not None else "schema unknown (2022 or older)"]
        for key, label in (("cupti_version", "CUPTI"), ("cuda_runtime_version", "CUDA runtime")):
            if isinstance(top.get(key), (int, str)):
                versions.append(f"{label} {top[key]}")
        meta.tool_version = "Kineto " + ", ".join(versions)
        props = top.get("deviceProperties")
        if isinstance(props, list):
            for p in props:
                if isinstance(p, dict) and isinstance(p.get("id"), int):
                    self.device_names[p["id"]] = None if p.get("name") is None else _text(p["name"])
        dist = top.get("distributedInfo")
        if isinstance(dist, dict):
            if isinstance(dist.get("rank"), int):
                meta.rank = dist["rank"]
            if isinstance(dist.get("world_size"), int):
                meta.extra["world_size"] = dist["world_size"]
            if isinstance(dist.get("backend"), str):
                meta.extra["backend"] = dist["backend"]
        base = top.get("baseTimeNanoseconds")
        if isinstance(base, int) and not isinstance(base, bool) and 0 <= base < 2**62:
            meta.extra["base_time_ns"] = base
        for key in ("displayTimeUnit", "traceName", "trace_id"):
            if isinstance(top.get(key), str):
                meta.extra[key] = top[key][:1000]
        if not str(getattr(self, "backend", "yajl2_c")).startswith("yajl2"):
            meta.notes.append(f"ijson runs on its {self.backend} backend here (no yajl2_c): reading is "
                              "several times slower; reinstall ijson from its wheels")
        if self.array_format:
            meta.notes.append("the trace is a bare JSON array of events (Chrome's array format): no "
                              "device properties, rank or base time")
        if self.ignored:
            meta.extra["ignored_events"] = dict(sorted(self.ignored.items()))
        meta.threads.update(self.thread_names)
        return meta

    def _base_ns(self, meta: TraceMeta) -> int:
        return int(meta.extra.get("base_time_ns", 0))

    def _to_ns(self, ts: array, base: int, what: str, meta: TraceMeta) -> np.ndarray:
        """Float microseconds -> integer nanoseconds, exact for the double each value parses to."""
        t = np.frombuffer(ts, dtype=np.float64) if len(ts) else np.zeros(0)
        finite = np.isfinite(t)
        t = np.where(finite, t, 0.0)
        if len(t) and np.median(np.abs(t)) >= _NS_THRESHOLD:
            # Nanosecond values written where microseconds belong (not Kineto's own output).
            if "timestamps_in_ns" not in meta.extra:
                meta.extra["timestamps_in_ns"] = True
                meta.notes.append("timestamps are larger than any microsecond epoch value: read as "
                                  "nanoseconds")
            return np.rint(t).astype(np.int64) + base
        # Values whose nanoseconds (plus the base) would not fit in int64 are as bad as NaN.
        limit = (np.iinfo(np.int64).max - max(base, 0)) / 1000.0 - 1.0
        finite &= np.abs(t) < limit
        t = np.where(finite, t, 0.0)
        whole = np.floor(t)
        frac = np.rint((t - whole) * 1000.0).astype(np.int64)
        ns = whole.astype(np.int64) * 1000 + frac + base
        if len(t) and not finite.all():
            ns[~finite] = np.iinfo(np.int64).min
        return ns

    def _times(self, ts: array, dur: array, base: int, what: str, meta: TraceMeta):
        start = self._to_ns(ts, base, what, meta)
        d = np.frombuffer(dur, dtype=np.float64) if len(dur) else np.zeros(0)
        scale = 1.0 if meta.extra.get("timestamps_in_ns") else 1000.0
        ok = np.isfinite(d) & (np.abs(d) < 1e15)  # longer than 30 years: not a duration
        d_ns = np.rint(np.where(ok, d, -1.0) * scale).astype(np.int64)
        bad = (start == np.iinfo(np.int64).min) | (d_ns < 0)
        bad |= start > np.iinfo(np.int64).max - np.maximum(d_ns, 0)
        n_bad = int(bad.sum())
        if n_bad:
            self.skipped[f"{what}_with_bad_times"] = self.skipped.get(f"{what}_with_bad_times", 0) + n_bad
        # The end is start + duration: both exact, so no op ends before it starts.
        return start, start + np.maximum(d_ns, 0), ~bad

    def _ops(self, names: pl.Series, base: int, meta: TraceMeta) -> pl.DataFrame:
        start, end, ok = self._times(self.o_ts, self.o_dur, base, "gpu_events", meta)
        n = len(self.o_kind)
        ops = pl.DataFrame({
            "_row": np.arange(n, dtype=np.int64),
            "kind": pl.Series(_KIND_NAMES, dtype=pl.Categorical).gather(
                np.frombuffer(self.o_kind, dtype=np.int8).astype(np.uint32)),
            "start": start,
            "end": end,
            "device": np.frombuffer(self.o_dev, dtype=np.int64),
            "stream": np.frombuffer(self.o_stream, dtype=np.int64),
            "correlation": np.frombuffer(self.o_corr, dtype=np.int64),
            "_evpid": np.frombuffer(self.o_evpid, dtype=np.int64),
            "_ts": np.frombuffer(self.o_ts, dtype=np.float64),
            "name": names.gather(np.frombuffer(self.o_name, dtype=np.int64).astype(np.uint32)),
        }).filter(pl.Series(ok))
        missing = ops.filter(pl.col("correlation") < 0)
        if missing.height and len(self.f_id):
            # No args.correlation: the flow end drawn on the op's row (same pid, tid and ts) has it.
            flows = pl.DataFrame({
                "_evpid": np.frombuffer(self.f_pid, dtype=np.int64),
                "stream": np.frombuffer(self.f_tid, dtype=np.int64),
                "_ts": np.frombuffer(self.f_ts, dtype=np.float64),
                "_flow": np.frombuffer(self.f_id, dtype=np.int64),
            }).unique(["_evpid", "stream", "_ts"], keep="first")
            ops = ops.join(flows, on=["_evpid", "stream", "_ts"], how="left").with_columns(
                correlation=pl.when(pl.col("correlation") < 0).then(pl.col("_flow").fill_null(-1))
                .otherwise(pl.col("correlation"))).drop("_flow")
        ops = ops.with_columns(
            correlation=pl.when(pl.col("correlation") < 0).then(None).otherwise(pl.col("correlation")),
        ).drop("_ts", "_evpid")
        ops = ops.with_columns(short_name=_short_names(ops))
        return ops.sort("start", "end", "_row").with_row_index("op_id").with_columns(
            pl.col("op_id").cast(pl.Int64))

    def _api(self, names: pl.Series, base: int, ops: pl.DataFrame, meta: TraceMeta) -> pl.DataFrame:
        if not len(self.a_pid):
            return empty(API_SCHEMA)
        start, end, ok = self._times(self.a_ts, self.a_dur, base, "api_calls", meta)
        api = pl.DataFrame({
            "pid": np.frombuffer(self.a_pid, dtype=np.int64),
            "tid": np.frombuffer(self.a_tid, dtype=np.int64),
            "start": start,
            "end": end,
            "name": names.gather(np.frombuffer(self.a_name, dtype=np.int64).astype(np.uint32)),
            "correlation": np.frombuffer(self.a_corr, dtype=np.int64),
        }).filter(pl.Series(ok))
        self.syncs = _sync_calls(api)
        launched = ops.select("correlation").drop_nulls().unique()
        api = api.join(launched, on="correlation", how="semi")
        # A runtime call and the driver call it makes can share a correlation id: keep the outer one.
        return api.sort("start", "end", descending=[False, True]).unique(
            ["pid", "correlation"], keep="first", maintain_order=True)

    def _launching_process(self, ops: pl.DataFrame, api: pl.DataFrame, meta: TraceMeta) -> pl.DataFrame:
        """The op's pid: the process of its launch call (the latest one with its correlation id
        that began before the op did); else the trace's main process."""
        if api.is_empty():
            main = self._main_pid(api)
            return ops.with_columns(pid=pl.lit(main, dtype=pl.Int64))
        calls = api.select("correlation", "pid", _t=pl.col("start")).sort("_t")
        found = ops.sort("start").join_asof(calls, left_on="start", right_on="_t", by="correlation",
                                           strategy="backward", check_sortedness=False).drop("_t")
        main = self._main_pid(api)
        # A launch recorded a little after its op's start (clock skew between CPU and GPU
        # timestamps) still launched it: take the nearest call with that id.
        late = found.filter(pl.col("pid").is_null() & pl.col("correlation").is_not_null())
        if late.height:
            nearest = late.drop("pid").join_asof(calls, left_on="start", right_on="_t", by="correlation",
                                                 strategy="forward", check_sortedness=False)
            found = found.join(nearest.select("op_id", _pid="pid"), on="op_id", how="left").with_columns(
                pid=pl.coalesce("pid", "_pid")).drop("_pid")
        return found.with_columns(pl.col("pid").fill_null(main)).sort("op_id")

    def _main_pid(self, api: pl.DataFrame) -> int:
        if not api.is_empty():
            return int(api.group_by("pid").len().sort("len", descending=True)["pid"][0])
        if len(self.a_pid):
            vals, counts = np.unique(np.frombuffer(self.a_pid, dtype=np.int64), return_counts=True)
            return int(vals[np.argmax(counts)])
        if len(self.r_pid):
            vals, counts = np.unique(np.frombuffer(self.r_pid, dtype=np.int64), return_counts=True)
            return int(vals[np.argmax(counts)])
        return -1

    def _ranges(self, names: pl.Series, base: int, meta: TraceMeta) -> pl.DataFrame:
        if not len(self.r_pid):
            return empty(RANGES_SCHEMA)
        start, end, ok = self._times(self.r_ts, self.r_dur, base, "ranges", meta)
        cats = [RANGE_CATEGORY, CPU_OP_CATEGORY]
        ranges = pl.DataFrame({
            "pid": np.frombuffer(self.r_pid, dtype=np.int64),
            "tid": np.frombuffer(self.r_tid, dtype=np.int64),
            "start": start,
            "end": end,
            "name": names.gather(np.frombuffer(self.r_name, dtype=np.int64).astype(np.uint32)),
            "domain": pl.Series(cats).gather(np.frombuffer(self.r_cat, dtype=np.int8).astype(np.uint32)),
        }).filter(pl.Series(ok))
        return (
            ranges.with_columns(pl.col("name").cast(pl.Utf8))
            .sort("tid", "start", pl.col("end"), descending=[False, False, True], maintain_order=True)
            .with_row_index("range_id")
            .with_columns(pl.col("range_id").cast(pl.Int64))
        )

    def _marks(self, names: pl.Series, base: int) -> pl.DataFrame:
        if not len(self.m_pid):
            return empty(MARKS_SCHEMA)
        ts = self._to_ns(self.m_ts, base, "marks", TraceMeta(path=self.path, format=FORMAT))
        return pl.DataFrame({
            "pid": np.frombuffer(self.m_pid, dtype=np.int64),
            "tid": np.frombuffer(self.m_tid, dtype=np.int64),
            "ts": ts,
            "name": names.gather(np.frombuffer(self.m_name, dtype=np.int64).astype(np.uint32)).cast(pl.Utf8),
            "domain": pl.lit(""),
        }).filter(pl.col("ts") != np.iinfo(np.int64).min)

    def _collectives(self, ops: pl.DataFrame) -> pl.DataFrame:
        if not self.collectives:
            return empty(COLLECTIVES_SCHEMA)
        cols: dict[str, list] = {"_row": []}
        for key in _COLLECTIVE_ARGS.values():
            cols[key] = []
        for row, args in self.collectives:
            cols["_row"].append(row)
            for raw, key in _COLLECTIVE_ARGS.items():
                v = args.get(raw)
                cols[key].append(None if v is None or isinstance(v, (dict, list)) else v)
        # Values of the wrong type for their column (an untrusted trace) become nulls.
        df = pl.DataFrame([pl.Series(k, v, dtype=COLLECTIVES_SCHEMA.get(k, pl.Int64), strict=False)
                           for k, v in cols.items()])
        df = df.join(ops.select("_row", "op_id"), on="_row", how="inner").drop("_row")
        return df.sort("op_id")

    def _processes(self, meta: TraceMeta, api: pl.DataFrame, ranges: pl.DataFrame) -> None:
        cpu = set()
        if len(self.a_pid):
            cpu.update(np.unique(np.frombuffer(self.a_pid, dtype=np.int64)).tolist())
        if not ranges.is_empty():
            cpu.update(ranges["pid"].unique().to_list())
        for pid in sorted(cpu):
            meta.processes.append({"pid": pid, "name": self.process_names.get(pid)})
        # The devices the trace has work on (deviceProperties lists every GPU of the machine).
        if len(self.o_dev):
            for dev in np.unique(np.frombuffer(self.o_dev, dtype=np.int64)).tolist():
                meta.gpus.append({"device": dev, "name": self.device_names.get(dev)})


# --- helpers -----------------------------------------------------------------------------------

def _first_line(exc: Exception) -> str:
    text = str(exc).splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def _text(value) -> str:
    """A JSON value as text: strings as they are, anything else as its JSON (never evaluated)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, default=str)[:1000]


def _collective_args(args: dict) -> dict:
    """What is kept of an NCCL kernel's args: the collective's fields, each a number or a string of at most
    4096 characters (an event's args can be anything; only these are used, one dict per collective op)."""
    kept = {}
    for key in _COLLECTIVE_ARGS:
        v = args.get(key)
        if isinstance(v, (int, float)):
            kept[key] = v
        elif isinstance(v, str):
            kept[key] = v[:4096]
    return kept


def _intern(names: dict, name) -> int:
    """The id of `name`; a name that is not a string is named by its JSON text."""
    key = _text(name)
    nid = names.get(key)
    if nid is None:
        nid = names[key] = len(names)
    return nid


def _names_series(names: dict) -> pl.Series:
    """Id -> name, dictionary-encoded (Categorical): gathering from it copies 4-byte codes."""
    return pl.Series("name", list(names), dtype=pl.Utf8).cast(pl.Categorical)


_TEMPLATE_OR_ARGS = re.compile(r"<[^<>]*>|\([^()]*\)")


def _shorten(name: str) -> str:
    """A kernel's short name as nsys shows it: no return type, template arguments, parameters or
    namespaces (`void at::native::vectorized_elementwise_kernel<4, ...>(...)` ->
    `vectorized_elementwise_kernel`). Memcpy/memset names stay whole."""
    if name.startswith(("Memcpy", "Memset")) or ("<" not in name and "(" not in name and "::" not in name):
        return name
    s = name
    for _ in range(64):  # nested brackets, innermost first
        t = _TEMPLATE_OR_ARGS.sub("", s)
        if t == s:
            break
        s = t
    s = s.strip()
    if s.startswith("void "):
        s = s[5:]
    s = s.split(" ")[-1] if " " in s else s
    s = s.rsplit("::", 1)[-1]
    return s or name


def _short_names(ops: pl.DataFrame) -> pl.Series:
    """short_name per op, computed once per distinct name."""
    distinct = ops.select(pl.col("name").unique()).to_series()
    table = pl.DataFrame({
        "name": distinct,
        "short_name": pl.Series([None if n is None else _shorten(n) for n in distinct.cast(pl.Utf8).to_list()],
                                dtype=pl.Utf8).cast(pl.Categorical),
    })
    return ops.select("name").join(table, on="name", how="left", maintain_order="left")["short_name"]


_TAIL_START = re.compile(rb"[}\[]\s*\]\s*(?=,\s*\"|\})")


def _tail_keys(text: bytes) -> dict:
    """The top-level keys after `traceEvents`, from the text that follows the last event.

    `text` starts inside the last event. The array's closing bracket is the first `]` after a
    `}` (or `[`) from which the rest of the text parses as the remainder of the top-level object;
    a bracket inside an event or a string leaves unbalanced closers and does not parse.
    """
    for m in _TAIL_START.finditer(text):
        rest = text[m.end():].lstrip()
        if rest[:1] == b"}":
            if not rest[1:].strip():
                return {}
            continue
        try:
            obj = json.loads(b"{" + rest[1:])
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict) and "traceEvents" not in obj:
            return obj
    return {}


def _sync_calls(api: pl.DataFrame) -> pl.DataFrame:
    """The synchronize-class calls (model/trace.py SYNC_NAMES, a version suffix _vNNNN off) among the runtime and
    driver events `api`, as SYNCS_SCHEMA in start order."""
    name = pl.col("name").cast(pl.Utf8).str.replace(r"_v\d+$", "")
    found = api.filter(name.is_in(list(SYNC_NAMES)))
    return found.select(list(SYNCS_SCHEMA)).with_columns(name.cast(pl.Categorical)).sort("start", maintain_order=True)
