"""Sidecar files (`specprof.sidecar/1`, written by tracer/sidecar.py) -> polars tables.

A sidecar is one JSONL file per traced process: a header, then `clock`, `cycle`, `range`, `gpu_time` and
`capture` records, then a footer (absent when the process was killed). Times are `time.perf_counter_ns()` of that process: integer
nanoseconds on an unsynchronised clock that only the `clock` records (and the NVTX marks they pair with) tie
to anything else.

The file is untrusted input: every field the analysis uses is type-checked, and the first bad line stops the
read with a `SpecprofError` naming the file and the line. Two things are tolerated, each with a note: record
types this reader does not know (a newer tracer may add some), and a cut last line without a newline (a
process killed in the middle of a write).

The tables it reads them into: `Sidecars` (model/sidecars.py).
"""

from __future__ import annotations

import gc
import glob
import json
import os
from itertools import repeat

import polars as pl

from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.labels import DECODE_PHASES
from specprof.analyzer.model.sidecars import (ACCEPTS_SCHEMA, CAPTURE_SCHEMA, CLOCKS_SCHEMA, CYCLES_SCHEMA, FILES_SCHEMA,
                                     GPU_TIME_SCHEMA, PHASES_SCHEMA, Sidecars)
from specprof.analyzer.readers.files import open_input

SCHEMA = "specprof.sidecar/1"

GLOB = "specprof-sidecar.*.jsonl"

# Bound what one untrusted line may make us hold (a real record is a few hundred bytes).
MAX_LINE_BYTES = 16 << 20
_BIG = 1 << 63


def find(directory: str) -> list[str]:
    """The sidecar files in a run directory, sorted."""
    return sorted(glob.glob(os.path.join(glob.escape(directory), GLOB)))


class _Line:
    """Type checks for one record; errors name the file and line."""

    def __init__(self, path: str, number, record: dict):
        self.path, self.number, self.record = path, number, record

    def fail(self, what: str) -> SpecprofError:
        return SpecprofError(f"{self.path}:{self.number}: not a specprof sidecar record: {what}", self.path)

    def int(self, key: str, nullable: bool = False, minimum: int | None = None):
        value = self.record.get(key)
        return self.check_int(value, key, nullable, minimum)

    def check_int(self, value, what: str, nullable: bool = False, minimum: int | None = None):
        if type(value) is int and -_BIG < value < _BIG and (minimum is None or value >= minimum):
            return value  # the usual case, checked first
        if value is None and nullable:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(f"`{what}` must be an integer, not {_show(value)}")
        if minimum is not None and value < minimum:
            raise self.fail(f"`{what}` must be at least {minimum}, not {value}")
        if abs(value) >= _BIG:
            raise self.fail(f"`{what}` does not fit in 64 bits")
        return value

    def str(self, key: str, nullable: bool = False):
        value = self.record.get(key)
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            raise self.fail(f"`{key}` must be a string, not {_show(value)}")
        return value

    def interval(self, what: str, start, end):
        start = self.check_int(start, f"{what} start")
        end = self.check_int(end, f"{what} end", nullable=True)
        if end is not None and end < start:
            raise self.fail(f"{what} ends before it starts ({end} < {start})")
        return start, end


def _show(value) -> str:
    text = _json_text(value)
    if text is None:
        return "a value nested too deep"
    return text if len(text) <= 40 else text[:39] + "…"


def _json_text(value) -> str | None:
    """`value` as JSON text, None when it is nested too deep to write."""
    try:
        return json.dumps(value)
    except RecursionError:
        return None


def _lines(path: str):
    """(number, text, has_newline) for each line; a clear error when the file cannot be read."""
    with open_input(path, "a sidecar file", binary=True) as fh:
        number = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE_BYTES:
                raise SpecprofError(f"{path}:{number}: a line longer than {MAX_LINE_BYTES >> 20} MiB: "
                                    "not a specprof sidecar", path)
            yield number, raw, raw.endswith(b"\n")


def read_sidecars(paths: list[str]) -> Sidecars:
    """Read sidecar files into one set of tables. Raises SpecprofError on anything that is not a sidecar."""
    if not paths:
        raise SpecprofError("no sidecar files given")
    files, cycles, phases, accepts, clocks, headers, notes = [], [], [], [], [], [], []
    extra: dict[str, list] = {"gpu_time": [], "capture": []}
    # Millions of small tuples and no reference cycles: the cyclic GC would only rescan them (40% of the time).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for file_no, path in enumerate(paths):
            _read_one(path, file_no, files, cycles, phases, accepts, clocks, headers, notes, extra)
    finally:
        if was_enabled:
            gc.enable()
    return Sidecars(
        files=pl.DataFrame(files, schema=FILES_SCHEMA, orient="row"),
        cycles=pl.DataFrame(cycles, schema=CYCLES_SCHEMA, orient="row"),
        phases=pl.DataFrame(phases, schema=PHASES_SCHEMA, orient="row"),
        accepts=pl.DataFrame(accepts, schema=ACCEPTS_SCHEMA, orient="row"),
        clocks=pl.DataFrame(clocks, schema=CLOCKS_SCHEMA, orient="row"),
        gpu_time=pl.DataFrame(extra["gpu_time"], schema=GPU_TIME_SCHEMA, orient="row"),
        capture=pl.DataFrame(extra["capture"], schema=CAPTURE_SCHEMA, orient="row"),
        headers=headers,
        notes=notes,
    )


def _read_one(path, file_no, files, cycles, phases, accepts, clocks, headers, notes, extra) -> None:
    header = footer = None
    pid = rank = None
    unknown: dict[str, int] = {}
    seen_index: set[int] = set()
    for number, raw, complete_line in _lines(path):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            if not complete_line and header is not None:
                notes.append(f"{path}: the last line is cut off (the process was killed while writing); "
                             "it was left out")
                break
            deep = ", nested too deep to read" if isinstance(exc, RecursionError) else ""
            if header is None and number == 1:
                raise SpecprofError(f"{path}: not a specprof sidecar (the first line is not JSON{deep})",
                                    path) from None
            raise SpecprofError(f"{path}:{number}: not valid JSON{deep}: the sidecar is damaged", path) from None
        if not isinstance(record, dict) or not isinstance(record.get("type"), str):
            raise SpecprofError(f"{path}:{number}: not a specprof sidecar record (no `type`)", path)
        line = _Line(path, number, record)
        kind = record["type"]
        if header is None:
            if kind != "header":
                raise SpecprofError(f"{path}: not a specprof sidecar (the first record is not a header)", path)
            schema = record.get("schema")
            if schema != SCHEMA:
                raise SpecprofError(f"{path}: sidecar schema {_show(schema)}, this version reads {SCHEMA}; "
                                    "update specprof", path)
            header = record
            pid = line.int("pid", minimum=0)
            rank = line.int("rank", nullable=True, minimum=0)
            headers.append(record)
            continue
        if footer is not None:
            raise line.fail("a record after the footer")
        if kind == "cycle":
            index = line.int("index", minimum=0)
            if index in seen_index:
                raise line.fail(f"cycle {index} appears twice")
            seen_index.add(index)
            start, end = line.interval("cycle", record.get("start_ns"), record.get("end_ns"))
            batch = line.int("batch_size", nullable=True, minimum=0)
            steps = line.int("steps", nullable=True, minimum=0)  # absent before the tracer recorded them: null
            tokens = line.int("draft_tokens", nullable=True, minimum=1)
            accept = record.get("accept")
            requests = correct = accept_len = None
            if accept is not None:
                counts = accept.get("correct_drafts") if isinstance(accept, dict) else None
                if not isinstance(counts, list):
                    raise line.fail("`accept.correct_drafts` must be a list")
                if not all(type(n) is int and 0 <= n < _BIG for n in counts):
                    for n in counts:
                        line.check_int(n, "correct_drafts entry", minimum=0)
                accepts.extend(zip(repeat(file_no), repeat(pid), repeat(index), range(len(counts)), counts))
                requests, correct = len(counts), sum(counts)
                accept_len = correct / requests + 1.0 if requests else None
            frames = record.get("phases")
            if not isinstance(frames, list):
                raise line.fail("`phases` must be a list")
            verify = decode = False
            for frame in frames:
                if not isinstance(frame, list) or len(frame) != 3 or not isinstance(frame[0], str):
                    raise line.fail("a phase must be [name, start_ns, end_ns]")
                p_start, p_end = line.interval(f"phase {frame[0]!r}", frame[1], frame[2])
                phases.append((file_no, pid, index, frame[0], p_start, p_end, True))
                verify = verify or frame[0] == "verify"
                decode = decode or frame[0] in DECODE_PHASES
            cycles.append((file_no, pid, rank, index, start, end, batch, steps, tokens, requests, correct,
                           accept_len, verify, decode))
        elif kind == "range":
            name = line.str("name")
            start, end = line.interval(f"range {name!r}", record.get("start_ns"), record.get("end_ns"))
            phases.append((file_no, pid, line.int("cycle", nullable=True, minimum=0), name, start, end, False))
        elif kind == "clock":
            clocks.append((file_no, pid, line.int("perf_counter_ns"), line.int("mark_done_ns", nullable=True),
                           line.int("monotonic_raw_ns", nullable=True), line.int("time_ns", nullable=True)))
        elif kind == "gpu_time":
            index = line.int("cycle", minimum=0)
            frames = record.get("phases")
            if not isinstance(frames, list):
                raise line.fail("`phases` must be a list")
            for frame in frames:
                if not isinstance(frame, list) or len(frame) != 2 or not isinstance(frame[0], str):
                    raise line.fail("a gpu_time phase must be [name, ns]")
                extra["gpu_time"].append((file_no, pid, index, frame[0],
                                          line.check_int(frame[1], f"gpu_time {frame[0]!r}", minimum=0)))
        elif kind == "capture":
            event = line.str("event")
            if event not in ("start", "stop"):
                raise line.fail(f"`event` must be start or stop, not {_show(event)}")
            extra["capture"].append((file_no, pid, event, line.int("after_cycle", nullable=True, minimum=0),
                                     line.int("decode_cycles", minimum=0), line.int("ns")))
        elif kind == "footer":
            footer = record
        elif kind == "header":
            raise line.fail("a second header")
        else:
            unknown[kind] = unknown.get(kind, 0) + 1
    if header is None:
        raise SpecprofError(f"{path}: empty: not a specprof sidecar", path)
    if unknown:
        kinds = ", ".join(f"{n} {k!r}" for k, n in sorted(unknown.items()))
        notes.append(f"{path}: records of types this version does not read were skipped ({kinds})")
    if footer is None:
        notes.append(f"{path}: no footer (the process did not exit normally); the last interval's records "
                     "may be missing")
    foot = _Line(path, "footer", footer or {})
    # Records the tracer lost: the footer's count, else the header's running count (rewritten at each flush).
    dropped = foot.int("dropped", nullable=True, minimum=0) if footer else \
        _Line(path, 1, header).int("dropped", nullable=True, minimum=0)
    failed = foot.int("failed_writes", nullable=True, minimum=0) if footer else None
    files.append((
        file_no, path, pid, rank, header.get("host") if isinstance(header.get("host"), str) else None,
        header.get("preset") if isinstance(header.get("preset"), str) else None,
        _json_text(header.get("argv")) if isinstance(header.get("argv"), list) else None,
        dropped,
        foot.int("unmatched_accepts", nullable=True, minimum=0) if footer else None,
        footer.get("reason") if footer and isinstance(footer.get("reason"), str) else None,
        footer is not None,
    ))
    if dropped and footer is None:
        notes.append(f"{path}: the tracer had dropped {dropped} records by its last flush (its queue was full or "
                     "a write of the sidecar failed; the count in its header)")
    elif dropped and failed:
        notes.append(f"{path}: the tracer dropped {dropped} records ({failed} writes of the sidecar failed: a full "
                     "disk or a file-size limit; or its queue was full)")
    elif dropped:
        notes.append(f"{path}: the tracer dropped {dropped} records (its queue was full)")
