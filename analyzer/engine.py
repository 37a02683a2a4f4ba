"""How the analysis runs its polars queries over the ops (tens of millions of rows at scale).

Group-bys and filters over the ops run on polars' streaming engine: it reads the columns in
morsels and keeps only the groups, where the in-memory engine materialises the keys and a row
index for every op first. At 11 M ops that is 0.4 to 1 GB less transient memory per query, and
the queries run as fast or faster (benchmarks/stages.py; docs/performance.md). Queries the
streaming engine does not support fall back to the in-memory engine by themselves.
"""

from __future__ import annotations

import polars as pl


def collect(query: pl.LazyFrame) -> pl.DataFrame:
    """Run a lazy query over the ops on the streaming engine."""
    return query.collect(engine="streaming")


class ArrowStream:
    """An Arrow C stream capsule (made by specprof's C modules), as the object polars' constructors take
    (`__arrow_c_stream__`): `pl.DataFrame(ArrowStream(capsule))`."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __arrow_c_stream__(self, requested_schema=None):
        return self._capsule


_libc = None


def trim_c_heap() -> None:
    """Give the memory freed on the C heap back to the operating system (glibc's malloc_trim; a
    no-op elsewhere). The SQLite driver builds its Arrow batches with malloc; once polars has taken
    the rows and the batches are released, glibc keeps the freed pages (0.4 GB at 10 M ops) where
    polars' own allocator cannot reuse them."""
    global _libc
    if _libc is None:
        try:
            import ctypes
            import ctypes.util

            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _libc = False
    if _libc:
        _libc.malloc_trim(0)
