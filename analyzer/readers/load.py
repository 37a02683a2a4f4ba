"""A path -> a Trace: the reader chosen by the file's content, and the Parquet cache of an nsys export's parsed
tables (readers/trace_cache.py)."""

from __future__ import annotations

import os

from analyzer import progress
from analyzer.model.trace import Trace
from analyzer.readers import trace_cache
from analyzer.readers.files import open_input
from analyzer.readers.inputs import resolve
from analyzer.readers.kineto import read_kineto
from analyzer.readers.nsys_sqlite import read_nsys_sqlite


def is_kineto_file(path: str) -> bool:
    """Whether the file at `path` is read as a PyTorch-profiler (Kineto) trace: gzip, or JSON by its first
    bytes or its name. Anything else goes to the nsys reader (which says what it is not)."""
    if not os.path.isfile(path):
        return False
    with open_input(path, "a trace file", binary=True) as fh:
        head = fh.read(16)
    return head[:2] == b"\x1f\x8b" or head.lstrip()[:1] in (b"{", b"[") or path.endswith((".json", ".json.gz"))


def load_trace(path: str, cache: bool = False) -> Trace:
    """Read a trace file (or a run directory's export), choosing the reader by content.

    With `cache`, an nsys export's parsed tables are kept as Parquet beside it (readers/trace_cache.py)
    and read from there the next time."""
    path = resolve(path)
    if is_kineto_file(path):
        return read_kineto(path)
    if not cache:
        return read_nsys_sqlite(path)
    with progress.step("reading the cache"):
        trace = trace_cache.load(path)
    if trace is None:
        trace = read_nsys_sqlite(path)
        with progress.step("writing the cache"):
            trace_cache.store(path, trace)
    return trace
