"""A path -> a Trace: the reader chosen by the file's content, and the Parquet cache of an nsys export's parsed
tables (readers/trace_cache.py)."""

from __future__ import annotations

import os

from specprof.analyzer import progress
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.trace import Trace
from specprof.analyzer.readers import trace_cache
from specprof.analyzer.readers.files import open_input
from specprof.analyzer.readers.inputs import resolve
from specprof.analyzer.readers.kineto import GZIP_MAGIC, read_kineto
from specprof.analyzer.readers.nsys import read_nsys_sqlite


def _head(path: str) -> bytes:
    with open_input(path, "a trace file", binary=True) as fh:
        return fh.read(16)


def _check_gzip_name(path: str, head: bytes) -> None:
    """A file named `*.gz` must start with gzip's magic bytes: say so, naming the file, rather than let a reader
    take it for a damaged trace of its own kind."""
    if path.endswith(".gz") and head[:2] != GZIP_MAGIC:
        raise SpecprofError(f"{path}: not gzip-compressed (the name ends in .gz, but the file does not start with "
                            "gzip's bytes 1f 8b); if it is a plain trace, name it without .gz, else copy or "
                            "export it again", path)


def is_kineto_file(path: str) -> bool:
    """Whether the file at `path` is read as a PyTorch-profiler (Kineto) trace: gzip, or JSON by its first
    bytes or its name. Anything else goes to the nsys reader (which says what it is not)."""
    if not os.path.isfile(path):
        return False
    head = _head(path)
    return head[:2] == GZIP_MAGIC or head.lstrip()[:1] in (b"{", b"[") or path.endswith((".json", ".json.gz"))


def load_trace(path: str, cache: bool = False) -> Trace:
    """Read a trace file (or a run directory's export), choosing the reader by content.

    With `cache`, an nsys export's parsed tables are kept as Parquet in the user's cache folder
    (readers/trace_cache.py) and read from there the next time."""
    path = resolve(path)
    if os.path.isfile(path):
        _check_gzip_name(path, _head(path))
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
