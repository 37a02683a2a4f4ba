"""The attributed timeline as a Perfetto trace (`specprof export --perfetto FILE`), for ui.perfetto.dev.

The file is Perfetto's native protobuf format (a `Trace` of `TracePacket`s with `TrackDescriptor`s and
`TrackEvent`s, as in perfetto/protos/perfetto/trace/), written here field by field: no protobuf library is
needed to write it. What it holds:

- per GPU device a track, and per stream two tracks under it: `stream S kernels` (every op as a slice named by
  its short name, with its phase, category, cycle, kind and full name as arguments, and `phase`, `category` as
  the slice's categories) and `stream S phase · category` (the attribution's tiling: every nanosecond of the
  stream as a slice named `phase · category`, idle kinds included: `draft · cpu_wait`, `(unattributed) · idle`).
  Perfetto colours a slice by its name, so the second track is the timeline coloured by phase and category;
- per process that launched GPU work or opened ranges, a process track, and per thread a thread track with its
  ranges (NVTX or record_function, nested as they were) and its launch calls;
- a flow from each launch call to each op it launched (a CUDA-graph launch has one flow per node).

Slices on one track must nest; ranges or ops that overlap without nesting go to extra tracks beside it
(`(overlapping 1)`, ...), so nothing is dropped. Times are the trace's own clock in integer ns, as Perfetto
takes them. Names come from the trace and are untrusted: each is a length-delimited protobuf string (nothing in
it can reach outside its field), in UTF-8. Event names, argument names
and argument values are interned (each text written once: a kernel's full name is not repeated per launch).
"""

from __future__ import annotations

import struct

import polars as pl

from specprof.analyzer import progress, safe_files
from specprof.analyzer.core.attribution import Attribution
from specprof.analyzer.errors import SpecprofError

SEQUENCE = 1  # the one packet sequence of the file (trusted_packet_sequence_id)
BEGIN, END = 1, 2  # TrackEvent.Type
CLEARED, NEEDS_STATE = 1, 2  # TracePacket.SequenceFlags
SEP = " · "


# -- protobuf wire format ------------------------------------------------------------------------------------------

def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64 as two's complement, as protobuf does
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _int(field: int, n: int) -> bytes:
    return _varint(field << 3) + _varint(n)


def _fixed64(field: int, n: int) -> bytes:
    return _varint((field << 3) | 1) + struct.pack("<Q", n & ((1 << 64) - 1))


def _bytes(field: int, data: bytes) -> bytes:
    return _varint((field << 3) | 2) + _varint(len(data)) + data


def _str(field: int, text: str) -> bytes:
    return _bytes(field, str(text).encode("utf-8", "replace"))


def _packet(body: bytes) -> bytes:
    """One TracePacket, as the `packet` field (1) of the Trace."""
    return _bytes(1, body + _int(10, SEQUENCE))


# -- tracks --------------------------------------------------------------------------------------------------------

class _Tracks:
    """Track uuids, and the descriptor packets that declare them."""

    def __init__(self):
        self.next = 1
        self.packets: list[bytes] = []

    def add(self, name: str, parent: int | None = None, process: tuple[int, str] | None = None,
            thread: tuple[int, int, str] | None = None) -> int:
        uuid = self.next
        self.next += 1
        body = _int(1, uuid) + _str(2, name)
        if parent is not None:
            body += _int(5, parent)
        if process is not None:
            body += _bytes(3, _int(1, process[0]) + _str(6, process[1]))
        if thread is not None:
            body += _bytes(4, _int(1, thread[0]) + _int(2, thread[1]) + _str(5, thread[2]))
        self.packets.append(_packet(_bytes(60, body)))
        return uuid


def _os_id(n: int) -> int:
    """A process or thread id as the OS numbered it: nsys packs it into the low 24 bits of a larger one."""
    return n if 0 <= n < 2**31 else n & 0xFFFFFF


def _lanes(starts, ends) -> list[int]:
    """For intervals in (start, -end) order, a lane each such that the intervals of one lane nest."""
    stacks: list[list[int]] = []
    out = []
    for s, e in zip(starts, ends):
        for i, stack in enumerate(stacks):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or e <= stack[-1]:
                stack.append(e)
                out.append(i)
                break
        else:
            stacks.append([e])
            out.append(len(stacks) - 1)
    return out


# -- events --------------------------------------------------------------------------------------------------------

EVENT_SCHEMA = {"track": pl.Int64, "start": pl.Int64, "end": pl.Int64, "name": pl.Utf8, "cats": pl.List(pl.Utf8),
                "args": pl.List(pl.Struct({"k": pl.Utf8, "v": pl.Utf8})), "flows": pl.List(pl.Int64),
                "ends_flow": pl.Int64}


def _slices(df: pl.DataFrame, track_of, tracks: _Tracks, lane_name) -> pl.DataFrame:
    """`df` (key columns, start, end, name, ...) with `track`: the key's track, or an extra track beside it for
    slices that do not nest."""
    df = df.sort("key", "start", pl.col("end"), descending=[False, False, True])
    lanes = []
    for (key,), part in df.group_by("key", maintain_order=True):
        lane = _lanes(part["start"].to_list(), part["end"].to_list())
        base = track_of(key)
        extra: dict[int, int] = {}
        ids = []
        for ln in lane:
            if ln == 0:
                ids.append(base)
            else:
                if ln not in extra:
                    extra[ln] = tracks.add(f"{lane_name(key)} (overlapping {ln})", parent=base)
                ids.append(extra[ln])
        lanes.append(pl.Series("track", ids, dtype=pl.Int64))
    if not lanes:
        return df.with_columns(track=pl.lit(None, dtype=pl.Int64))
    return df.with_columns(pl.concat(lanes))


def _encode(events: pl.DataFrame):
    """The TracePackets of `events` (EVENT_SCHEMA), begin and end, in time order. Event names, argument names and
    argument values are interned: each text is written once, in the packet that first uses it."""
    tables: tuple[dict, dict, dict] = ({}, {}, {})  # event names, argument names, argument values

    def iid(table: int, text: str, out: list) -> int:
        known = tables[table]
        n = known.get(text)
        if n is None:
            n = known[text] = len(known) + 1
            # InternedData: event_names (2, EventName), debug_annotation_names (3), debug_annotation_string_values
            # (29, InternedString): each {iid = 1, name/str = 2}
            out.append(_bytes((2, 3, 29)[table], _int(1, n) + _str(2, text)))
        return n

    # Each slice's begin and end. At the same time: the ends of slices that end there (innermost first, the later
    # rows of a track being the inner ones), then the begins (outermost first), then the ends of slices of no
    # length, after their begins.
    indexed = events.with_row_index("i").with_columns(pl.col("i").cast(pl.Int64))
    edges = pl.concat([
        indexed.select("i", ts="start", kind=pl.lit(BEGIN), order=pl.lit(1), depth=pl.col("i")),
        indexed.select("i", ts="end", kind=pl.lit(END), order=pl.when(pl.col("end") == pl.col("start")).then(2)
                       .otherwise(0), depth=-pl.col("i")),
    ]).sort("ts", "order", "depth")
    rows = events.rows()
    first = True
    for i, ts, kind, _, _ in edges.iter_rows():
        track, _start, _end, name, cats, args, flows, ends_flow = rows[i]
        ev = _int(9, kind) + _int(11, track)
        new: list[bytes] = []
        if kind == BEGIN:
            ev += _int(10, iid(0, name, new))
            for c in cats or ():
                if c is not None:
                    ev += _str(22, c)
            for arg in args or ():
                if arg["v"] is not None:
                    ev += _bytes(4, _int(1, iid(1, arg["k"], new)) + _int(17, iid(2, arg["v"], new)))
            for f in flows or ():
                ev += _fixed64(47, f)
            if ends_flow is not None:
                ev += _fixed64(48, ends_flow)
        flags = NEEDS_STATE | (CLEARED if first else 0)
        first = False
        yield _packet(_int(8, ts) + _bytes(11, ev) + (_bytes(12, b"".join(new)) if new else b"") + _int(13, flags))


def _arg(k: str, v: pl.Expr) -> pl.Expr:
    return pl.struct(k=pl.lit(k), v=v.cast(pl.Utf8))


def write(a: Attribution, path: str) -> dict:
    """Write the Perfetto trace of the attribution `a` (an Analysis reads as its attribution too) to `path`; returns what it holds (counts), for the command's message. Both
    steps show a progress bar once they have taken seconds (analyzer/progress.py)."""
    with progress.step("building the Perfetto tracks"):
        tracks, events, counts = _events(a)
    try:  # a new file renamed over `path`: a link there is refused
        with safe_files.replacing(path) as fh, progress.step("writing the Perfetto trace", 2 * events.height,
                                                             "edges") as bar:
            for p in tracks.packets:
                fh.write(p)
            buf = []
            for p in _encode(events):
                buf.append(p)
                if len(buf) >= 4096:
                    fh.write(b"".join(buf))
                    bar.advance(len(buf))
                    buf.clear()
            fh.write(b"".join(buf))
    except OSError as exc:
        raise SpecprofError(f"{path}: cannot write the Perfetto trace ({exc.strerror})", path) from None
    return counts


def _events(a: Attribution) -> tuple[_Tracks, pl.DataFrame, dict]:
    """The tracks of `a`'s trace, its slices as events (EVENT_SCHEMA) and their counts."""
    tracks = _Tracks()
    meta = a.trace.meta
    gpu_names = {g.get("device"): g.get("name") for g in meta.gpus}
    ops = a.ops
    stream_keys = ops.select("device", "stream").unique().sort("device", "stream")
    devices, kernel_track, seg_track = {}, {}, {}
    for device, stream in stream_keys.iter_rows():
        if device not in devices:
            devices[device] = tracks.add(f"GPU {device}: {gpu_names.get(device) or 'GPU'}")
        kernel_track[(device, stream)] = tracks.add(f"stream {stream} kernels", parent=devices[device])
        seg_track[(device, stream)] = tracks.add(f"stream {stream} phase{SEP}category", parent=devices[device])

    procs = {p["pid"]: p for p in meta.processes}
    process_track, thread_track = {}, {}

    def thread(key) -> int:
        pid, tid = key
        if key not in thread_track:
            if pid not in process_track:
                p = procs.get(pid, {})
                os_pid = p.get("os_pid", _os_id(pid))
                process_track[pid] = tracks.add(f"{p.get('name') or 'process'} {os_pid}",
                                                process=(os_pid, p.get("name") or "process"))
            name = meta.threads.get(tid) or "thread"
            thread_track[key] = tracks.add(f"{name} {_os_id(tid)}", parent=process_track[pid],
                                           thread=(procs.get(pid, {}).get("os_pid", _os_id(pid)), _os_id(tid), name))
        return thread_track[key]

    # GPU ops: one slice each, and the end of its launch's flow.
    launched = pl.col("launch_start").is_not_null() & pl.col("launch_tid").is_not_null()
    kernels = ops.select(
        key=pl.struct("device", "stream"), start="start", end="end",
        name=pl.coalesce(pl.col("short_name").cast(pl.Utf8), pl.col("name").cast(pl.Utf8), pl.lit("op")),
        cats=pl.concat_list(pl.col("phase").cast(pl.Utf8), pl.col("category").cast(pl.Utf8)),
        args=pl.concat_list(_arg("phase", pl.col("phase")), _arg("category", pl.col("category")),
                            _arg("cycle", pl.col("cycle")), _arg("kind", pl.col("kind")),
                            _arg("name", pl.col("name")), _arg("correlation", pl.col("correlation"))),
        flows=pl.lit(None, dtype=pl.List(pl.Int64)),
        ends_flow=pl.when(launched).then(pl.col("op_id") + 1))
    kernels = _slices(kernels, lambda k: kernel_track[(k["device"], k["stream"])], tracks,
                      lambda k: f"stream {k['stream']} kernels")
    # The tiling: every nanosecond of each stream, named phase · category.
    segments = a.segments.select(
        key=pl.struct("device", "stream"), start="start", end="end",
        name=pl.col("phase").cast(pl.Utf8) + SEP + pl.col("category").cast(pl.Utf8),
        cats=pl.concat_list(pl.col("phase").cast(pl.Utf8), pl.col("category").cast(pl.Utf8)),
        args=pl.concat_list(_arg("cycle", pl.col("cycle")), _arg("op_id", pl.col("op_id"))),
        flows=pl.lit(None, dtype=pl.List(pl.Int64)), ends_flow=pl.lit(None, dtype=pl.Int64))
    seg_tracks = pl.DataFrame([{"key": {"device": d, "stream": s}, "track": t} for (d, s), t in seg_track.items()],
                              schema={"key": segments.schema["key"], "track": pl.Int64})
    segments = segments.join(seg_tracks, on="key", how="left")
    # CPU: the ranges and the launch calls of each thread, nested; each launch starts the flows to its ops.
    ranges = a.ranges.select(
        key=pl.struct("pid", "tid"), start="start", end="end", name=pl.col("name").cast(pl.Utf8),
        cats=pl.concat_list(pl.lit("range")),
        args=pl.concat_list(_arg("domain", pl.col("domain")), _arg("phase", pl.col("phase")),
                            _arg("cycle", pl.col("cycle"))),
        flows=pl.lit(None, dtype=pl.List(pl.Int64)), ends_flow=pl.lit(None, dtype=pl.Int64))
    launches = ops.filter(launched).group_by(
        "pid", "launch_tid", "launch_start", "launch_end", "correlation").agg(
        name=pl.col("launch_name").first().cast(pl.Utf8), flows=(pl.col("op_id") + 1).sort()).select(
        key=pl.struct(pid="pid", tid="launch_tid"), start="launch_start", end="launch_end",
        name=pl.coalesce("name", pl.lit("launch")), cats=pl.concat_list(pl.lit("launch")),
        args=pl.concat_list(_arg("correlation", pl.col("correlation"))), flows="flows",
        ends_flow=pl.lit(None, dtype=pl.Int64))
    cpu = _slices(pl.concat([ranges, launches]), lambda k: thread((k["pid"], k["tid"])), tracks,
                  lambda k: f"{meta.threads.get(k['tid']) or 'thread'} {_os_id(k['tid'])}")
    events = pl.concat([x.select(list(EVENT_SCHEMA)).cast(EVENT_SCHEMA) for x in (kernels, segments, cpu)])
    return tracks, events, {"ops": kernels.height, "segments": segments.height, "ranges": ranges.height,
                            "launches": launches.height, "tracks": tracks.next - 1}
