"""How the analysis runs its polars queries over the ops (tens of millions of rows at scale).

Group-bys and filters over the ops run on polars' streaming engine: it reads the columns in
morsels and keeps only the groups, where the in-memory engine materialises the keys and a row
index for every op first. At 11 M ops that is 0.4 to 1 GB less transient memory per query, and
the queries run as fast or faster (benchmarks/stages.py; docs/performance.md). Queries the
streaming engine does not support fall back to the in-memory engine by themselves.
"""

from __future__ import annotations

import polars as pl

try:  # built by `pip install` where a C compiler is found (setup.py); optional
    from specprof.analyzer import _scan
except ImportError:  # pragma: no cover - exercised on machines without a compiler
    _scan = None


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


def distinct(col: pl.Series) -> pl.Series:
    """The distinct values of `col` (null included, when there), sorted. Runs of equal values are
    collapsed first (one comparison per row), so a column of few values in long runs (process ids,
    devices over millions of ops) hashes only its runs: 4x faster than `unique()` at 11 M rows."""
    runs = pl.concat([col.head(1), col.filter(col.ne_missing(col.shift(1)))]) if col.len() > 1 else col
    return runs.unique().sort()


def by_rank(expr: pl.Expr, values: pl.Series) -> pl.Expr:
    """`expr`'s value numbered by its rank among the sorted distinct `values` (Int64), which hold every value it
    takes; null numbered values.len(): few values spread wide become dense codes. One binary search per row (a
    dictionary lookup, `replace_strict`, holds several copies of the column: 0.36 GB transient at 11 M rows,
    against 0.04 GB)."""
    return pl.when(expr.is_null()).then(pl.lit(values.len(), pl.Int64)).otherwise(
        pl.lit(values).search_sorted(expr).cast(pl.Int64))


def per_distinct(col: pl.Series, text: callable) -> pl.Series:
    """`text` (a function of a text Series) applied to each distinct value of the dictionary-encoded `col`, once,
    and looked up per row: a Categorical of `col`'s length, with no text column of that length made (a name
    repeated on a million rows is processed and held once)."""
    names = col.unique().drop_nulls()
    out = text(names.cast(pl.Utf8)).cast(pl.Categorical)
    return col.replace_strict(names, out, default=None, return_dtype=pl.Categorical).alias(col.name)


def dense_key(df: pl.DataFrame, by: list[str], cap: int = 1 << 31) -> tuple[pl.Series, int, int] | None:
    """One Int64 per row that numbers the distinct tuples of the integer columns `by` (null a value of its
    own), with its (lowest value, span), when the span is at most `cap`; else None. Mixed radix: each
    column's code times the product of the widths before it. A column of few values spread wide (process
    ids, 2^24 apart) is numbered by rank (one dictionary lookup), not by its range."""
    codes, radix = [], 1
    for name in by:
        col = df.get_column(name)
        if not col.dtype.is_integer():
            return None
        lo, hi = col.min(), col.max()
        values = distinct(col).drop_nulls() if lo is not None and hi - lo + 2 > 1 << 16 else None
        if lo is None:  # every value null (or no rows): one code
            code, width = pl.col(name).is_null().cast(pl.Int64) * 0, 1
        elif values is not None and values.len() <= 4096:  # few values spread wide: by rank
            code, width = by_rank(pl.col(name), values), values.len() + 1
        elif hi - lo + 2 <= cap:
            code, width = (pl.col(name).cast(pl.Int64) - lo).fill_null(hi - lo + 1), hi - lo + 2
        else:
            return None
        if radix * width > cap:
            return None
        codes.append(code * radix)
        radix *= width
    key = collect(df.lazy().select(pl.sum_horizontal(codes).alias("k") if codes else pl.lit(0, pl.Int64).alias("k")))
    key = key.get_column("k")
    return key, 0, radix


def first_distinct(df: pl.DataFrame, by: list[str]) -> pl.Series:
    """Per row, whether its tuple of `by` values occurs there for the first time (polars'
    `is_first_distinct`): by a bitmap in C (analyzer/_scan.c) where it is built and the values number
    densely (`dense_key`), else by polars' hash (0.9 s single-threaded at 11 M rows, against 0.05 s)."""
    packed = dense_key(df, by, cap=1 << 31 if _scan is not None else 1 << 62) if df.height else None
    if packed is None:
        return df.select(pl.struct(by).is_first_distinct().alias("first")).get_column("first")
    key, lo, span = packed
    if _scan is None:  # one integer key hashes much faster than a struct of the columns
        return key.is_first_distinct().alias("first")
    mask = _scan.first_seen(key.rechunk().__arrow_c_stream__(), lo, span)
    return pl.DataFrame(ArrowStream(mask)).to_series().alias("first")


def merge_order(starts: pl.Series, ends: pl.Series, lengths: list[int]) -> pl.Series | None:
    """The row order that merges consecutive runs of the given lengths, each already in (start, end)
    order, into one (start, end) order, ties in run order (a stable sort's result), by one pass in C;
    None where the C module is not built, there are over 16 runs, or a run is not in order."""
    if _scan is None or starts.has_nulls() or ends.has_nulls():
        return None
    # Runs that continue one another in order are one run (the slices of one table, usually).
    offsets, at = [], 0
    for length in lengths:
        if length and (not offsets or (starts[at - 1], ends[at - 1]) > (starts[at], ends[at])):
            offsets.append(at)
        at += length
    if not 1 <= len(offsets) <= 16:
        return None
    offsets = tuple(offsets)
    try:
        order = _scan.merge_runs(starts.cast(pl.Int64).rechunk().__arrow_c_stream__(),
                                 ends.cast(pl.Int64).rechunk().__arrow_c_stream__(), offsets)
    except ValueError:
        return None
    return pl.DataFrame(ArrowStream(order)).to_series().cast(pl.UInt32)


def lookup_rows(build: pl.Series, probe: pl.Series) -> pl.Series | None:
    """Per value of `probe`, the position in `build` of the same value (its first), or null: a hash join
    of one non-negative integer key in C (analyzer/_scan.c), for each probe row in its order. None where
    the C module is not built, `build` holds a null or a negative value, or the keys collide too much
    for the C table (the caller joins in polars)."""
    if _scan is None or build.has_nulls() or (build.len() and build.min() < 0):
        return None
    try:
        rows = _scan.lookup(build.cast(pl.Int64).rechunk().__arrow_c_stream__(),
                            probe.cast(pl.Int64).fill_null(-1).rechunk().__arrow_c_stream__())
    except ValueError:  # keys that collide too much for its table: polars' join
        return None
    return pl.DataFrame(ArrowStream(rows)).to_series().cast(pl.UInt32).alias("row")


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
