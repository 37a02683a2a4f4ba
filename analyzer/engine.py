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
