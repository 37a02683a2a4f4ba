"""What every renderer shows, computed once: the statistics of a series (one quantile rule), the per-cycle table,
the phase-by-category pivot and its category order. Renderers (terminal, JSON, HTML, CSV) format these values and
compute none of their own, so that one quantity has one value wherever it appears.

All times integer ns.
"""

from __future__ import annotations

import math

import polars as pl

from analyzer.model.labels import IDLE_CATEGORIES
from analyzer.model.stats import QUANTILE

STATS = ("mean", "p50", "p90", "p99", "min", "max")


def quantile(values: pl.Series, q: float) -> int | None:
    """The q-quantile of integer ns `values` by the one rule, rounded to a ns; None for no values."""
    v = values.drop_nulls()
    if v.is_empty():
        return None
    return int(round(float(v.quantile(q, QUANTILE))))


def stats(values: pl.Series) -> dict[str, int | None]:
    """mean, p50, p90, p99, min, max of integer ns `values` (rounded to a ns), and n."""
    v = values.drop_nulls()
    if v.is_empty():
        return {**{k: None for k in STATS}, "n": 0}
    return {"mean": int(round(float(v.mean()))), "p50": quantile(v, 0.5), "p90": quantile(v, 0.9),
            "p99": quantile(v, 0.99), "min": int(v.min()), "max": int(v.max()), "n": v.len()}


def category_order(categories: pl.DataFrame, communication: set[str] | frozenset = frozenset()) -> list[str]:
    """The categories of a (phase, category, ns) table in the order tables and charts show them: busy categories
    by time (communication kinds after the compute), then the idle kinds."""
    names = (categories.group_by("category").agg(pl.col("ns").sum()).sort(["ns", "category"],
                                                                          descending=[True, False])["category"]
             .to_list())
    comm = [c for c in names if c in communication]
    busy = [c for c in names if c not in IDLE_CATEGORIES and c not in comm]
    return busy + comm + [c for c in IDLE_CATEGORIES if c in names]


def category_pivot(categories: pl.DataFrame, phases: list[str], order: list[str]) -> pl.DataFrame:
    """phase, one column per category of `order` (ns, 0 where none), total: the phases of `phases`, in that order."""
    wide = categories.pivot(on="category", index="phase", values="ns").fill_null(0) if categories.height else \
        pl.DataFrame({"phase": []}, schema={"phase": pl.Utf8})
    rows = pl.DataFrame({"phase": phases}, schema={"phase": pl.Utf8}).join(wide, on="phase", how="inner",
                                                                          maintain_order="left")
    rows = rows.with_columns([pl.col(c).cast(pl.Int64) if c in rows.columns else pl.lit(0, pl.Int64).alias(c)
                              for c in order])
    return rows.select("phase", *order).with_columns(total=pl.sum_horizontal(order) if order else pl.lit(0))


def cycle_table(cycles: pl.DataFrame, cycle_phases: pl.DataFrame, phases: list[str]) -> pl.DataFrame:
    """One row per cycle (in order per process): cycle, index, pid, start, end, one column per phase of `phases`
    (attributed ns on the rank's cycle stream), total (the cycle's length on that stream)."""
    wide = cycle_phases.pivot(on="phase", index="cycle", values="attributed").fill_null(0) \
        if cycle_phases.height else pl.DataFrame(schema={"cycle": pl.Int64})
    cols = [p for p in phases if p in wide.columns]
    data = cycles.sort("pid", "index").join(wide.select("cycle", *cols), on="cycle", how="left",
                                            maintain_order="left").with_columns(
        [pl.col(c).fill_null(0) for c in cols])
    return data.with_columns(total=pl.sum_horizontal(cols) if cols else pl.lit(0, pl.Int64))


def cycle_stats(table: pl.DataFrame, keep: pl.DataFrame | None, columns: list[str]) -> dict[str, dict]:
    """Per column of the per-cycle `table`: `stats` over the cycles `keep` (cycle ids: the breakdown's decode
    cycles), or over every cycle when `keep` is None."""
    rows = table if keep is None else table.join(keep.select("cycle"), on="cycle", how="semi")
    return {c: stats(rows[c]) for c in columns}


def capture(ops: pl.DataFrame, streams: pl.DataFrame) -> dict:
    """The capture's wall time (first GPU op start to last op end, over every stream) and, per stream, its GPU
    busy time, role and what a side stream's work overlapped: {"wall", "streams": [rows of `streams`]}."""
    first, last = ops["start"].min(), ops["end"].max()
    wall = int(last - first) if first is not None else 0
    return {"wall": wall, "streams": list(streams.iter_rows(named=True))}


def shown_cycles(a) -> pl.DataFrame | None:
    """The cycles the per-cycle statistics are over: the headline breakdown's decode cycles (cycle), or None
    (every cycle) without a breakdown."""
    b = getattr(a, "cycle_breakdown", None)
    return None if b is None or b.per_cycle is None else b.per_cycle.select("cycle")


def cycle_charges(a, b=None) -> tuple[pl.DataFrame, int]:
    """The charges behind the headline breakdown `b` (default: `a`'s), for what compares runs (compare, the results
    store, the sweep): (charges of the shown rank's cycle stream, with `cycle` null outside the breakdown's decode
    cycles; how many decode cycles). Without a breakdown: every charge of the cycle streams, and every cycle."""
    b = b if b is not None else getattr(a, "cycle_breakdown", None)
    home = a.home_charges
    if b is None or b.per_cycle is None:
        return home, a.cycles.height
    mine = home.filter((pl.col("device") == b.device) & (pl.col("stream") == b.stream))
    keep = b.per_cycle.get_column("cycle").implode()
    return mine.with_columns(cycle=pl.when(pl.col("cycle").is_in(keep)).then(pl.col("cycle"))), b.cycles


def timeline_blocks(segs: pl.DataFrame, gpu_key: pl.DataFrame, t0: int, budget: int) -> pl.DataFrame:
    """The timeline's bins (the HTML report draws them): segments (`gpu_key`: device, stream -> row), as blocks: runs of consecutive segments charged to one phase
    on one stream; when there are more than `budget` runs, fixed time bins named by their main phase."""
    schema = {"row": pl.Int64, "start": pl.Int64, "end": pl.Int64, "phase": pl.Utf8, "busy": pl.Int64,
              "ops": pl.Int64, "mixed": pl.Boolean}
    if segs.is_empty():
        return pl.DataFrame(schema=schema)
    s = segs.join(gpu_key, on=["device", "stream"], how="left").sort("row", "start").with_columns(
        dur=pl.col("end") - pl.col("start"), is_busy=~pl.col("category").is_in(IDLE_CATEGORIES))
    gap = pl.col("start") != pl.col("end").shift(1).over("row")
    run = ((pl.col("phase") != pl.col("phase").shift(1).over("row")) | gap).fill_null(True).cum_sum()
    s = s.with_columns(run=run)
    runs = s.group_by("row", "run").agg(
        start=pl.col("start").min(), end=pl.col("end").max(), phase=pl.col("phase").first(),
        busy=(pl.col("dur") * pl.col("is_busy")).sum(), ops=pl.col("is_busy").sum().cast(pl.Int64),
    ).with_columns(mixed=pl.lit(False))
    if runs.height <= budget:
        return runs.select(list(schema)).sort("row", "start")
    rows = max(1, gpu_key.height)
    span = int(s["end"].max() - s["start"].min())
    width = max(1, math.ceil(span * rows / budget))
    s = s.with_columns(bin=(pl.col("start") - t0) // width)
    per = s.group_by("row", "bin", "phase").agg(ns=pl.col("dur").sum(), start=pl.col("start").min(),
                                                end=pl.col("end").max(),
                                                busy=(pl.col("dur") * pl.col("is_busy")).sum(),
                                                ops=pl.col("is_busy").sum().cast(pl.Int64))
    top = per.sort("ns", descending=True).group_by("row", "bin").agg(
        phase=pl.col("phase").first(), start=pl.col("start").min(), end=pl.col("end").max(),
        busy=pl.col("busy").sum(), ops=pl.col("ops").sum(), mixed=(pl.len() > 1))
    return top.select(list(schema)).sort("row", "start")
