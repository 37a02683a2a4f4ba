"""A benchmark client's records of a run's workload: RUN/client.json as scripts/sglang/serve.py writes it
(`requests`, `workload_s`, `workload_start`, `responses` with each one's `output_tokens` and `seconds`), read into
model/client.py `ClientRecord`. The file is untrusted: at most MAX_BYTES read, at most MAX_RESPONSES responses, every
number checked; a broken file is one SpecprofError line naming it."""

from __future__ import annotations

import datetime
import json
import math
import os

from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.client import ClientRecord, WholeRunFiles
from specprof.analyzer.readers import sidecar as sc
from specprof.analyzer.readers.files import open_input
from specprof.analyzer.readers.inputs import twin_dirs

CLIENT_FILE = "client.json"
MAX_BYTES = 64 << 20
MAX_RESPONSES = 1_000_000
MAX_SECONDS = 30 * 86400.0  # a workload longer than a month is no workload's clock


def _seconds(path: str, value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 < value <= MAX_SECONDS:
        raise SpecprofError(f"{path}: {what} is not a number of seconds (got {str(value)[:40]!r}): write the "
                            "client's records again, or move the file away", path)
    return int(round(value * 1e9))


def _tokens(path: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1 << 40:
        raise SpecprofError(f"{path}: a response's output_tokens is not a count (got {str(value)[:40]!r}): write "
                            "the client's records again, or move the file away", path)
    return value


def _start(value) -> int | None:
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        t = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if t.tzinfo is None:
        return None
    return int(round(t.timestamp() * 1e6)) * 1000


def read_client(path: str) -> ClientRecord:
    """The client records in `path` (a client.json)."""
    with open_input(path, "a client record file", binary=True) as fh:
        raw = fh.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise SpecprofError(f"{path}: larger than {MAX_BYTES >> 20} MiB: no client record file is; move it away",
                            path)
    try:
        record = json.loads(raw.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError) as exc:
        raise SpecprofError(f"{path}: not JSON ({str(exc)[:80]}): write the client's records again, or move the "
                            "file away", path) from None
    responses = record.get("responses") if isinstance(record, dict) else None
    if not isinstance(responses, list) or not responses or len(responses) > MAX_RESPONSES \
            or not all(isinstance(r, dict) for r in responses):
        raise SpecprofError(f"{path}: no list of responses (the serve script's client.json has one): write the "
                            "client's records again, or move the file away", path)
    wall = _seconds(path, record.get("workload_s"), "workload_s")
    each = tuple(_seconds(path, r.get("seconds"), "a response's seconds") for r in responses)
    tokens = sum(_tokens(path, r.get("output_tokens")) for r in responses)
    return ClientRecord(path=path, requests=len(responses), tokens=tokens, wall_ns=wall,
                        start_ns=_start(record.get("workload_start")), request_ns=each)


def read_whole_runs(folder: str | None) -> list[WholeRunFiles]:
    """The client records of the run directory `folder` with their sidecars: its twins without nsys (RUN/no-nsys,
    RUN/no-nsys-2, ...) where they have client records (what a benchmark sees), else the run's own under nsys;
    none where no such file is there."""
    if not folder or not os.path.isdir(folder):
        return []
    out = []
    for d in twin_dirs(folder):
        if os.path.isfile(os.path.join(d, CLIENT_FILE)):
            out.append(_one(d, profiled=False))
    if not out and os.path.isfile(os.path.join(folder, CLIENT_FILE)):
        out.append(_one(folder, profiled=True))
    return out


def _one(folder: str, profiled: bool) -> WholeRunFiles:
    paths = sc.find(folder)
    return WholeRunFiles(client=read_client(os.path.join(folder, CLIENT_FILE)),
                         sidecars=sc.read_sidecars(paths) if len(paths) == 1 else None, profiled=profiled)
