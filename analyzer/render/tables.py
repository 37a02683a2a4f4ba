"""Write the analysis tables as CSV or Parquet files, one file per table (docs/tables.md).

Every table the analysis has goes out: the attribution's (phases, categories, cycles, ...), the cycle breakdown, the
cross-check's,
the economics' and the per-rank results' where the run has them (`crosscheck_*.csv`, `economics_*.csv`,
`ranks_*.csv`). Times stay integer nanoseconds (latency percentiles: float ns), and every time column says so in
its name (`attributed_ns`, `busy_ns`, `start_ns`); counts, ids, ratios and names keep theirs.

CSV only: a text cell (or header) that a spreadsheet would read as a formula, one beginning with `=`, `+`, `-`,
`@`, a tab or a carriage return, is written with a leading `'` (`csv_safe`; kernel and range names come from
other people's programs). Parquet keeps every value exactly."""

from __future__ import annotations

import dataclasses
import os

import polars as pl

from specprof.analyzer import safe_files
from specprof.analyzer.derived.analysis import Analysis
from specprof.analyzer.errors import SpecprofError

TABLES = ("phases", "categories", "cycles", "cycle_phases", "launch", "streams", "devices",
          "kernels", "unattributed", "ranges", "ops", "segments")
# The tables of the run's other files: (file name prefix, the Analysis attribute, its tables).
MORE = (("crosscheck", "crosscheck", ("alignment", "pairs", "consistency", "inflation", "ground_truth", "accept")),
        ("economics", "economics", ("estimates", "waits")),
        ("ranks", "ranks", ("ranks", "phases", "categories", "skew", "comm", "comm_phases", "collectives",
                             "stragglers")))

# What a spreadsheet reads as the start of a formula (OWASP's list for CSV injection).
FORMULA_START = r"^[=+\-@\t\r]"

_T = ("start", "end")
# Per table, its time columns whose names say no unit: each gets `_ns`.
TIME_COLUMNS = {
    "phases": ("cpu", "gpu_span", "gpu_busy", "attributed", "side_busy"),
    "cycles": _T,
    "cycle_phases": ("attributed", "gpu_busy", "cpu"),
    "launch": ("latency_p50", "latency_p90", "latency_max", "idle_latency_p50", "idle_latency_p90"),
    "streams": ("first", "last", "busy", "cpu_wait", "launch", "idle", "wall", "overlapped"),
    "devices": ("first", "last", "busy", "wall"),
    "ranges": _T + ("gpu_start", "gpu_end"),
    "ops": _T + ("launch_start", "launch_end", "prev_end"),
    "segments": _T,
    "crosscheck_pairs": ("trace_start",),
    "ranks_ranks": ("first", "last", "wall", "busy", "attributed", "comm", "wait", "transfer", "unmatched"),
    "ranks_phases": ("cpu", "gpu_span", "gpu_busy", "attributed", "side_busy"),
    "ranks_skew": ("min", "max", "mean", "skew"),
    "ranks_comm": _T + ("last_start", "wait", "transfer"),
    "ranks_comm_phases": ("comm", "wait", "transfer", "unmatched"),
    "ranks_collectives": ("wait", "transfer"),
    "ranks_stragglers": ("margin_mean", "margin_max", "caused"),
}


def named(table: str, df: pl.DataFrame) -> pl.DataFrame:
    """`df` with its time columns named with their unit (TIME_COLUMNS)."""
    return df.rename({c: f"{c}_ns" for c in TIME_COLUMNS.get(table, ()) if c in df.columns})


def frames(a: Analysis) -> dict[str, pl.DataFrame]:
    """Every table of the analysis, by file name (without the extension), its columns named with their units."""
    # a run without nsys has none of the trace's tables: one row says what needs a capture under nsys
    out = {name: getattr(a, name) for name in TABLES} if a.traced else {
        "needs_nsys": pl.DataFrame({"note": [a.needs_nsys]}, schema={"note": pl.Utf8})}
    breakdown = getattr(a, "cycle_breakdown", None)
    if breakdown is not None:  # where one decode cycle goes, per rank, on the stream its phases run on
        ranks = getattr(a, "ranks", None)
        every = (ranks.breakdowns if ranks is not None and ranks.breakdowns else [breakdown])
        out["cycle_breakdown"] = pl.concat([b.phases.select(
            pl.lit(b.rank, dtype=pl.Int64).alias("rank"), pl.lit(b.rank == breakdown.rank).alias("headline"),
            pl.lit(b.device, dtype=pl.Int64).alias("device"), pl.lit(b.stream, dtype=pl.Int64).alias("stream"),
            pl.lit(b.cycles, dtype=pl.Int64).alias("cycles"), pl.all()) for b in every])
    econ = getattr(a, "economics", None)
    groups = getattr(econ, "groups", None) if econ is not None else None
    if groups is not None:  # the economics per batch-size group and K (derived/groups.py), and their phases
        out["economics_batch_groups"] = groups.rows
        out["economics_batch_group_phases"] = groups.phases
    shape = getattr(a, "draft_shape", None)
    if shape is not None and shape.kind is not None:  # the draft's shape, chain or tree: one row
        out["draft_shape"] = pl.DataFrame([{
            "kind": shape.kind, "steps": shape.steps, "topk": shape.topk, "num_draft_tokens": shape.num_draft_tokens,
            "verify_tokens": shape.verify_tokens, "max_accept_len": shape.max_accept_len, "source": shape.source,
            "description": shape.description}],
            schema={"kind": pl.Utf8, "steps": pl.Int64, "topk": pl.Int64, "num_draft_tokens": pl.Int64,
                    "verify_tokens": pl.Int64, "max_accept_len": pl.Int64, "source": pl.Utf8, "description": pl.Utf8})
    for prefix, attr, names in MORE:
        part = getattr(a, attr, None)
        if part is None:
            continue
        for name in names:
            df = getattr(part, name, None)
            if dataclasses.is_dataclass(df):  # one row (the accept-length check)
                df = pl.DataFrame([dataclasses.asdict(df)])
            if isinstance(df, pl.DataFrame):
                out[f"{prefix}_{name}"] = df
    return {name: named(name, df) for name, df in out.items()}


def _safe_text(text: str) -> str:
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def csv_safe(df: pl.DataFrame) -> pl.DataFrame:
    """`df` for a CSV file: every text column (categoricals as their text, lists joined by "; ") with a
    leading `'` on each cell that begins as a formula would (FORMULA_START), and so every column name."""
    lists = [c for c, t in df.schema.items() if isinstance(t, pl.List)]
    df = df.with_columns(pl.col(c).list.eval(pl.element().cast(pl.Utf8)).list.join("; ") for c in lists)
    texts = [c for c, t in df.schema.items() if t in (pl.Utf8, pl.Categorical) or isinstance(t, pl.Enum)]
    # Only the columns that hold such a cell (looked for among their distinct values: cheap on names).
    texts = [c for c in texts
             if df.get_column(c).drop_nulls().unique().cast(pl.Utf8).str.contains(FORMULA_START).any()]
    df = df.with_columns(
        pl.when(pl.col(c).cast(pl.Utf8).str.contains(FORMULA_START))
        .then(pl.lit("'") + pl.col(c).cast(pl.Utf8))
        .otherwise(pl.col(c).cast(pl.Utf8))
        .alias(c)
        for c in texts)
    return df.rename({c: _safe_text(c) for c in df.columns if _safe_text(c) != c})


def write(a: Analysis, directory: str, fmt: str, own_folder: bool = False) -> list[str]:
    """Write every table to `directory` as `<table>.csv` or `<table>.parquet`; returns the paths. `directory` is
    the user's (made with its parents, as named), or with `own_folder` one specprof names itself inside the
    user's (made, never through a link there). Each file is new, renamed over its name: a link there is refused,
    never written through (specprof.analyzer.safe_files)."""
    try:
        if own_folder:
            safe_files.make_folders(os.path.dirname(directory) or os.curdir)
            folder = safe_files.own_folder(directory)
        else:
            safe_files.make_folders(directory)
            folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise SpecprofError(f"{directory}: cannot create the output folder ({exc.strerror})", directory) from None
    paths = []
    try:
        for name, df in frames(a).items():
            path = os.path.join(directory, f"{name}.{fmt}")
            try:
                with safe_files.replacing(f"{name}.{fmt}", dir_fd=folder) as fh:
                    if fmt == "csv":
                        # CSV has no nested values: a list (the accept check's explanations) is written as its
                        # items joined by "; "; categoricals as their text; no cell a spreadsheet would run
                        # (csv_safe).
                        csv_safe(df).write_csv(fh)
                    else:
                        df.write_parquet(fh)
            except OSError as exc:
                raise SpecprofError(f"{path}: cannot write ({exc.strerror})", path) from None
            paths.append(path)
    finally:
        os.close(folder)
    return paths
