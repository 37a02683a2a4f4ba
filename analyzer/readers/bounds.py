"""What every reader holds a trace to, whatever its format: names no longer than a real one is (longer ones are
cut, and the trace's notes say how many were), and timestamps that span no more than a capture can last (else
the trace is refused). The nsys reader and the Kineto reader both apply them."""

from __future__ import annotations

import polars as pl

from specprof.analyzer.errors import SpecprofError

# Names (kernels, ranges, marks, calls) are cut to this many characters when read: a real one is at most a few
# thousand (a demangled template kernel), and a longer one, repeated through the analysis, cost 4 GB at
# 200 KB and was OOM-killed at 20 MB. Each one cut ends in "…", and the trace's notes say how many were.
MAX_NAME_CHARS = 4096

# ns: no trace spans more (417 days): every duration, and every sum of durations over up to 256 devices or
# streams, then fits in 64 bits
SPAN_LIMIT = 1 << 55


def bounded_names(col: pl.Series) -> tuple[pl.Series, int]:
    """`col` (text) with every value longer than MAX_NAME_CHARS cut to it, "…" last; and how many were."""
    if col.dtype == pl.Categorical:
        cut, n = bounded_names(col.cast(pl.Utf8))
        return (cut.cast(pl.Categorical), n) if n else (col, 0)
    long = col.str.len_chars() > MAX_NAME_CHARS
    n = int(long.sum() or 0)
    if not n:
        return col, 0
    frame = pl.DataFrame({"v": col, "long": long})
    cut = frame.select(pl.when(pl.col("long")).then(pl.col("v").str.slice(0, MAX_NAME_CHARS - 1) + pl.lit("…"))
                       .otherwise(pl.col("v")).alias(col.name)).to_series()
    return cut, n


def names_note(n: int, what: str) -> str:
    return (f"{n:,} {what} longer than {MAX_NAME_CHARS:,} characters were cut to that length (ending in …): no "
            "real name is that long")


def check_span(path: str, tables: dict, what_to_do: str) -> None:
    """Refuses a trace whose timestamps (the `start` and `end` columns of `tables`, by what they hold) span
    more than SPAN_LIMIT: no capture lasts that long, and the durations and sums the analysis takes would
    no longer fit in 64 bits (one kernel from -2^62 to 2^62 lasts 2^63 ns)."""
    lo = hi = None
    for name, df in tables.items():
        cols = [c for c in ("start", "end") if c in df.columns]
        if df.is_empty() or not cols:
            continue
        row = df.select(lo=pl.min_horizontal(pl.col(c).min() for c in cols),
                        hi=pl.max_horizontal(pl.col(c).max() for c in cols)).row(0)
        if row[0] is None:
            continue
        if lo is None or row[0] < lo[0]:
            lo = (row[0], name)
        if hi is None or row[1] > hi[0]:
            hi = (row[1], name)
    if lo is not None and hi[0] - lo[0] > SPAN_LIMIT:
        raise SpecprofError(
            f"{path}: its timestamps span {(hi[0] - lo[0]) / 1e9:.3g} s (from {lo[1]} to {hi[1]}), more than "
            f"2^55 ns (417 days); no capture lasts that long: the trace is damaged: {what_to_do}", path)
