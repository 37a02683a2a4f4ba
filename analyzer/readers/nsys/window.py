"""Reading only the part of an nsys export that a window keeps (--cycle-window, --time-window, --skip-warmup).

A window keeps the GPU ops launched in it and the CUDA calls that start in it (core/window.py says exactly what).
`read_window(path, span)` reads:

1. The NVTX table whole (the cycle ranges are in it; ranges and marks are kept as for any window); `span(ranges,
   start_ns)` (the caller's: core/window.py's bounds) gives the window's hull [t0, t1) on the trace's clock,
   from the capture's start (the earliest op, launch call, range or mark: found from the zones).
2. The zones of the GPU-op tables and of the CUDA-call table: per run of ZONE_LEAVES leaf pages (rowid order),
   its rows and each column's least and greatest value (start, end, correlation id, ...), computed by the page
   reader in C as it walks and checks every page, keeping no row.
3. Only the zones that can hold what the window needs: the calls that start in [t0, t1), every call and op
   sharing a correlation id with them (the launch calls the full read keeps are those an op carries, the
   earlier of a runtime call and its driver call), the ops that start in the window (kept by their own start
   when no launch call carries them anywhere: the calls of their correlation ids are looked up by zone), and
   the zones that reach into the kept ops' span (to number them).
4. The kept rows, with every column (names too), by rowid (only the leaves that can hold them), through the
   full reader's own code (read.py `read_ops`, `read_api`), so they are decoded as in a full read.

Nothing is assumed about the order of the rows (time order, or not): a zone is read whenever its bounds allow a
row the window needs, so rows out of order cost reads, never results. What the full read would have numbered
(each op's `op_id`: its place among all the export's ops in (start, end) order) and counted (the ops of the
whole export, its first op's start and last op's end, the devices) comes from the zones (`Whole`):
core/window.py's `select` then keeps from the part exactly what it keeps from the whole trace
(tests/test_window_reads.py). Where a table cannot be read from its pages (no C module, a record that
overflows its page, a read through SQLite asked for), or a zone shows what only a full read reports (a NULL
where nsys always writes a value), `read_window` returns None and the caller reads the export whole. The zones and
the rows are read by pages.py `PartialReads`; the narrow reads are made from the tables' own `Table`s (tables.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import polars as pl

from specprof.analyzer import progress
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.columns import trim_c_heap
from specprof.analyzer.model.trace import API_SCHEMA, OPS_SCHEMA, Trace, empty
from specprof.analyzer.readers.bounds import bounded_names, check_span, names_note
from specprof.analyzer.readers.nsys.export import Export
from specprof.analyzer.readers.nsys.pages import ROWID, PartialReads, Unreadable
from specprof.analyzer.readers.nsys.read import read_api, read_meta, read_nvtx, read_ops, read_strings
from specprof.analyzer.readers.nsys.select import Select
from specprof.analyzer.readers.nsys.tables import (
    CALL_COLUMNS,
    CUDA_CALLS,
    GPU_OPS,
    GPU_TABLES,
    NVTX,
    OP_COLUMNS,
    PID_MASK,
    TIME_LIMIT,
    sync_ids,
)


@dataclass(frozen=True)
class Whole:
    """What the whole export holds, for a window read from part of it: its GPU ops, its first op's start and its
    last op's end."""

    ops: int
    first_start: int | None
    last_end: int | None


class _Planned:
    """The export as read.py's table readers see it (`parallel`, `whole`), reading through `PartialReads` only
    the rows whose rowids `rows[table]` lists."""

    def __init__(self, ex: Export, pages: PartialReads, rows: dict[str, pl.Series]):
        self._ex, self._pages, self._rows = ex, pages, rows

    def __getattr__(self, name):
        return getattr(self._ex, name)

    def parallel(self, select: Select, schema: dict, keep=None, step=None, slice_rows=None):
        want = self._rows.get(select.table)
        if select.table not in self._ex.tables or want is None:
            return []
        frames = [f.drop(ROWID) for f in self._pages.read(select, schema, rowids=want)]
        if step is not None:
            step.advance(sum(f.height for f in frames))
        if keep is not None:
            frames = [keep(f) for f in frames if f.height]
        return [f for f in frames if f.height]

    def whole(self, select: Select, schema: dict, step=None) -> pl.DataFrame:
        frames = self.parallel(select, schema, step=step)
        return pl.concat(frames) if len(frames) > 1 else frames[0] if frames else empty(schema)


def _touching(zones: pl.DataFrame, column: str, lo, hi) -> list[int]:
    """The zones that can hold a value of `column` in [lo, hi] (their least and greatest bound it)."""
    if lo is None or hi is None:
        return []
    hit = zones.with_row_index("_z").filter((pl.col(f"min_{column}") <= hi) & (pl.col(f"max_{column}") >= lo)
                                            & (pl.col("rows") > 0))
    return hit.get_column("_z").to_list()


def _holding(zones: pl.DataFrame, column: str, values: pl.Series) -> list[int]:
    """The zones that can hold one of `values` in `column`."""
    from specprof.analyzer.model.numeric import np

    v = values.drop_nulls().unique().sort().to_numpy()
    if not len(v):
        return []
    lo, hi = zones.get_column(f"min_{column}").to_numpy(), zones.get_column(f"max_{column}").to_numpy()
    first = np.searchsorted(v, lo, side="left")  # the first value >= the zone's least
    ok = (first < len(v)) & (v[np.minimum(first, len(v) - 1)] <= hi) & (zones.get_column("rows").to_numpy() > 0)
    return np.flatnonzero(ok).tolist()


def _op_read(ex: Export, table) -> tuple[Select, dict] | None:
    """The narrow read of a GPU-op table (`table`: its `Table`): the columns every full read of it reads before
    its names."""
    cols = ex.columns(table.name)
    return table.read(cols, only=OP_COLUMNS) if cols else None


def _call_read(ex: Export, strings: pl.DataFrame) -> tuple[Select, dict] | None:
    """The narrow read of the CUDA calls: as the full read selects them (read.py `read_api`: with a correlation
    id, and not one of the calls that never launch), without their names."""
    cols = ex.columns(CUDA_CALLS.name)
    return CUDA_CALLS.read(cols, strings, only=CALL_COLUMNS) if cols else None


def _sound(zones: pl.DataFrame, select: Select, schema: dict) -> bool:
    """Whether what the full read would refuse (a NULL in a column nsys always fills, a time beyond +-2^62 ns)
    is absent from every zone: else the export is read whole, which says what is wrong."""
    for name, column in zip(schema, select.columns):
        if column in select.required and zones.select((pl.col(f"flags_{name}") & 1).sum()).item():
            return False
        if name in ("start", "end") and zones.height and (
                zones.filter(pl.col("rows") > 0).select(pl.col(f"min_{name}").min() < -TIME_LIMIT,
                                                        pl.col(f"max_{name}").max() > TIME_LIMIT).row(0) != (
                    False, False)):
            return False
    return True


def read_window(path: str, span: Callable[[pl.DataFrame, int | None], tuple[int, int]], *,
                pages: bool | None = None, threads: int | None = None) -> tuple[Trace, Whole] | None:
    """The part of the export at `path` that a window can keep, and what the whole export holds (`Whole`); None
    when a table cannot be read from its pages (read the export whole then). `span(ranges, start_ns)`: the
    window's hull [t0, t1) on the trace's clock, from the NVTX ranges and the capture's start. `pages` and
    `threads`: as export.py `Export` takes them (a part is read only from the pages: with pages=False, None)."""
    ex = Export(path, pages=pages, threads=threads)
    try:
        meta = read_meta(ex)
        strings = read_strings(ex)
        value, cut = bounded_names(strings.get_column("value"))  # as the full read (read_nsys_sqlite)
        if cut:
            strings = strings.with_columns(value)
            meta.notes.append(names_note(cut, "strings (names of kernels, calls or ranges)"))
        reads = PartialReads(ex)
        span_n = ex.row_span(NVTX.name) if NVTX.name in ex.tables else (0, 0)
        with progress.step("reading NVTX ranges", span_n[1] - span_n[0], "rows") as step:
            ranges, marks = read_nvtx(ex, strings, meta, step)
        try:
            with progress.step("planning the window's reads"):
                plan = _plan(ex, strings, reads, ranges, marks, span)
            if plan is None:
                return None
            whole, devices, kept_ops, kept_api, start_ns, extremes = plan
            meta.start_ns = start_ns  # the whole capture's start (model/trace.py capture_start), not the part's
            ids = kept_ops.get_column("op_id").sort()
            rows = {t: kept_ops.filter(pl.col("_table") == i).get_column(ROWID).sort()
                    for i, t in enumerate(GPU_TABLES)}
            with progress.step("reading GPU ops", kept_ops.height, "rows") as step:
                wide = read_ops(_Planned(ex, reads, rows), strings, step)
            if wide.height != ids.len():  # cannot be: the same rows, read twice
                raise SpecprofError(f"{path}: the window's GPU ops read {wide.height} rows where {ids.len()} were "
                                    "planned; the export changed while it was read?", path)
            wide = wide.with_columns(op_id=ids)
            with progress.step("reading CUDA API calls", kept_api.len(), "rows") as step:
                api, syncs = read_api(_Planned(ex, reads, {CUDA_CALLS.name: kept_api}), strings, wide, step) \
                    if wide.height else (None, None)
        except Unreadable:
            return None
        # in the order a full read reads them
        order = [*GPU_TABLES, CUDA_CALLS.name, NVTX.name]
        meta.extra["tables_read_by"] = {t: ex.read_by[t] for t in sorted(ex.read_by, key=order.index)}
    finally:
        ex.close()
    trim_c_heap()
    # as the full read checks the whole export's span: its ops' from the zones, the calls and ranges it kept
    check_span(path, {"GPU ops": extremes, "CUDA API calls": api if api is not None else pl.DataFrame(),
                         "NVTX ranges": ranges}, "export it again")
    known_gpus = {g["device"] for g in meta.gpus}
    meta.gpus.extend({"device": d, "name": None} for d in devices if d not in known_gpus)
    trace = Trace(ops=wide if wide.height else empty(OPS_SCHEMA), api=api if api is not None else empty(API_SCHEMA),
                  ranges=ranges, marks=marks, meta=meta, syncs=syncs)
    return trace, whole


def _read_zones(pages: PartialReads, select: Select | None, schema: dict, zones: list[int]) -> pl.DataFrame:
    frames = pages.read(select, schema, zones=zones) if select is not None and zones else []
    return pl.concat(frames) if frames else pl.DataFrame(schema={**schema, ROWID: pl.Int64})


def _plan(ex: Export, strings: pl.DataFrame, pages: PartialReads, ranges: pl.DataFrame, marks: pl.DataFrame,
          span):
    """(Whole, the devices of the ops, the kept ops' _table, _rowid and op_id, the kept calls' rowids, the
    capture's start, the ops' extreme times), or None where the zones show what only a full read reports."""
    op_reads = {t.name: _op_read(ex, t) for t in GPU_OPS}
    op_sel = {t: read[0] if read is not None else None for t, read in op_reads.items()}
    op_schema = {t: read[1] for t, read in op_reads.items() if read is not None}
    op_zones = {t: pages.zones(sel, op_schema[t]) for t, sel in op_sel.items() if sel is not None}
    api_read = _call_read(ex, strings)
    api_sel, api_schema = api_read if api_read is not None else (None, None)
    api_zones = pages.zones(api_sel, api_schema) if api_sel is not None else None
    if not all(_sound(op_zones[t], op_sel[t], op_schema[t]) for t in op_zones) or (
            api_zones is not None and not _sound(api_zones, api_sel, api_schema)):
        return None
    every = pl.concat([z.filter(pl.col("rows") > 0) for z in op_zones.values()]) if op_zones else None
    count = int(every.get_column("rows").sum()) if every is not None else 0
    if every is not None and every.select((pl.col("flags_device") & 2).sum()).item():
        return None  # a device number beyond 63: the zones do not list the devices
    first = every.get_column("min_start").min() if count else None
    whole = Whole(ops=count, first_start=first, last_end=every.get_column("max_end").max() if count else None)
    mask = every.select(pl.col("mask_device").bitwise_or()).item() if count else 0
    devices = [d for d in range(64) if mask >> d & 1]
    pid_of = pl.col("tid") & pl.lit(PID_MASK, dtype=pl.Int64)

    def calls(zones: list[int]) -> pl.DataFrame:
        return _read_zones(pages, api_sel, api_schema, zones).with_columns(pid=pid_of)

    def carrying(correlations: pl.Series) -> pl.DataFrame:
        """Every op (pid, correlation) of these correlation ids."""
        found = [_read_zones(pages, op_sel[t], op_schema[t], _holding(op_zones[t], "correlation", correlations))
                 .select("pid", "correlation") for t in op_zones]
        return pl.concat(found).unique() if found else pl.DataFrame(schema={"pid": pl.Int64, "correlation": pl.Int64})

    # the capture's start (model/trace.py capture_start): the earliest op, launch call, range or mark
    firsts = [first, _first_launch(api_zones, calls, carrying) if api_zones is not None else None,
              ranges.get_column("start").min() if ranges.height else None,
              marks.get_column("ts").min() if marks.height else None]
    firsts = [int(v) for v in firsts if v is not None]
    start_ns = min(firsts) if firsts else None
    extremes = every.select(start=pl.concat_list("min_start", "max_start"), end=pl.concat_list("min_end", "max_end")
                            ).explode("start", "end") if count else pl.DataFrame()
    if not count:
        return whole, devices, pl.DataFrame(schema={"_table": pl.Int8, ROWID: pl.Int64, "op_id": pl.Int64}), \
            pl.Series(ROWID, [], pl.Int64), start_ns, extremes
    t0, t1 = span(ranges, start_ns)
    inside = (pl.col("start") >= t0) & (pl.col("start") < t1)

    # the calls that start in the window, and every call that shares a correlation id with one of them
    near = calls(_touching(api_zones, "start", t0, t1 - 1)) if api_zones is not None else calls([])
    window_calls = near.filter(inside)
    waits = _sync_rows(ex, strings, pages, api_zones, t0, t1) if api_zones is not None else []
    c_lo, c_hi = window_calls.get_column("correlation").min(), window_calls.get_column("correlation").max()
    # the ops that can be launched from the window (their correlation ids) or start in it
    ops = []
    for i, t in enumerate(GPU_TABLES):
        if t in op_zones:
            z = op_zones[t]
            touched = sorted(set(_touching(z, "correlation", c_lo, c_hi)) | set(_touching(z, "start", t0, t1 - 1)))
            ops.append(_read_zones(pages, op_sel[t], op_schema[t], touched).with_columns(_table=pl.lit(i, pl.Int8)))
    ops = pl.concat(ops)
    if api_zones is not None and c_lo is not None:
        related = calls(sorted(set(_touching(api_zones, "correlation", c_lo, c_hi))))
    else:
        related = calls([])
    # as the full read keeps calls: those whose (process, correlation id) an op carries, the earliest of a pair
    launches = _launches(related, ops)
    kept_calls = launches.filter(inside)
    first_launch = launches.select("pid", "correlation", launched="start")
    at = ops.join(first_launch, on=["pid", "correlation"], how="left", maintain_order="left")
    # an op that starts in the window with a correlation id outside the window's calls': launched, or not?
    unknown = at.filter(inside & pl.col("launched").is_null() & pl.col("correlation").is_not_null()
                        & ~pl.col("correlation").is_between(c_lo, c_hi) if c_lo is not None else
                        inside & pl.col("launched").is_null() & pl.col("correlation").is_not_null())
    if unknown.height and api_zones is not None:
        theirs = calls(_holding(api_zones, "correlation", unknown.get_column("correlation")))
        launched = theirs.join(unknown.select("pid", "correlation").unique(), on=["pid", "correlation"], how="semi")
        at = at.join(launched.select("pid", "correlation").unique().with_columns(_elsewhere=pl.lit(True)),
                     on=["pid", "correlation"], how="left", maintain_order="left")
    else:
        at = at.with_columns(_elsewhere=pl.lit(None, pl.Boolean))
    at = at.with_columns(at=pl.when(pl.col("launched").is_not_null()).then("launched")
                         .when(pl.col("_elsewhere").is_null()).then("start"))  # launched elsewhere: outside
    kept = at.filter((pl.col("at") >= t0) & (pl.col("at") < t1)).select("_table", ROWID, "start", "end")
    rows = pl.concat([kept_calls.get_column(ROWID), pl.Series(ROWID, waits, pl.Int64)]).unique().sort()
    return whole, devices, _numbered(kept, op_zones, op_sel, pages), rows, start_ns, extremes


def _sync_rows(ex: Export, strings: pl.DataFrame, pages: PartialReads, api_zones: pl.DataFrame, t0: int,
               t1: int) -> list[int]:
    """The rowids of the synchronize-class calls (tables.py `sync_ids`) that start in [t0, t1): the full read
    keeps them beside the launch calls (read.py `read_api`), and so the window's read of the calls does."""
    waits = sync_ids(strings)
    if waits.is_empty():
        return []
    select, schema = CUDA_CALLS.read(ex.columns(CUDA_CALLS.name), strings, only=("start", "name_id"))
    found = _read_zones(pages, select, schema, _touching(api_zones, "start", t0, t1 - 1))
    return found.filter((pl.col("start") >= t0) & (pl.col("start") < t1)
                        & pl.col("name_id").is_in(waits.implode())).get_column(ROWID).to_list()


def _first_launch(api_zones: pl.DataFrame, calls, carrying) -> int | None:
    """The start of the earliest CUDA call that launched an op (what the full read keeps): the zones in order of
    their earliest call, until no zone can hold an earlier one than found."""
    best = None
    order = api_zones.with_row_index("_z").filter(pl.col("rows") > 0).sort("min_start")
    for zone, least in order.select("_z", "min_start").iter_rows():
        if best is not None and least >= best:
            break
        rows = calls([zone])
        launched = rows.join(carrying(rows.get_column("correlation")), on=["pid", "correlation"], how="semi")
        if launched.height:
            m = int(launched.get_column("start").min())
            best = m if best is None else min(best, m)
    return best


def _launches(calls: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Of `calls` (every call of some correlation ids), those the full read keeps as launch calls: an op (of
    `ops`, which holds every op of those ids) carries its (process, correlation id); of a runtime call and the
    driver call it makes, the earlier (read.py `read_api`)."""
    carried = calls.join(ops.select("pid", "correlation").unique(), on=["pid", "correlation"], how="semi")
    return carried.sort("start", ROWID).unique(["pid", "correlation"], keep="first", maintain_order=True)


def _numbered(kept: pl.DataFrame, op_zones: dict, op_sel: dict, pages: PartialReads) -> pl.DataFrame:
    """`kept` (ops: _table, _rowid, start, end) with `op_id`, as the full read numbers them: the place among all
    the export's ops in (start, end) order, ties in (table, rowid) order. Zones wholly before the first kept
    op's start count whole; those that reach into the kept ops' span are read and the ops ranked among them."""
    cols = ["_table", ROWID, "op_id"]
    if kept.is_empty():
        return kept.select("_table", ROWID).with_columns(op_id=pl.lit(None, pl.Int64)).select(cols)
    lo, hi = kept.get_column("start").min(), kept.get_column("start").max()
    before = 0
    near = []
    for i, t in enumerate(GPU_TABLES):
        if t not in op_zones:
            continue
        z = op_zones[t].filter(pl.col("rows") > 0)
        before += int(z.filter(pl.col("max_start") < lo).get_column("rows").sum())
        touched = _touching(op_zones[t], "start", lo, hi)
        near.append(_read_zones(pages, op_sel[t], {"start": pl.Int64, "end": pl.Int64}, touched)
                    .with_columns(_table=pl.lit(i, pl.Int8)))
    ranked = pl.concat(near).sort("start", "end", "_table", ROWID).with_columns(
        op_id=pl.int_range(pl.len(), dtype=pl.Int64) + before)
    return kept.join(ranked, on=["_table", ROWID], how="left").select(cols)
