"""The read of an nsys SQLite export into a Trace (`read_nsys_sqlite`): the whole export, or one process's rows.

Each large table is read as its `Table` in tables.py says, through the export object (export.py `Export`: from its
pages or through SQLite), slice by slice in threads; names are looked up in StringIds, the launch calls kept are
those an op carries, the NVTX events become ranges and marks. The window reader (window.py) reads part of an
export through these same functions.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import polars as pl

from specprof.analyzer import progress
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.columns import distinct, merge_order, trim_c_heap
from specprof.analyzer.model.trace import (
    API_SCHEMA,
    MARKS_SCHEMA,
    OPS_SCHEMA,
    RANGES_SCHEMA,
    SYNCS_SCHEMA,
    Trace,
    TraceMeta,
    conform,
    empty,
)
from specprof.analyzer.readers.bounds import bounded_names, check_span, names_note
from specprof.analyzer.readers.nsys.export import Export
from specprof.analyzer.readers.nsys.select import Select
from specprof.analyzer.readers.nsys.tables import (
    CUDA_CALLS,
    GPU_TABLES,
    GRAPH_LAUNCHES,
    KERNELS,
    LARGE,
    MEMCPY_KINDS,
    MEMCPYS,
    MEMSETS,
    NVTX,
    NVTX_DOMAIN_CREATE,
    NVTX_MARK,
    NVTX_RANGES,
    PID_MASK,
    VERSION_SUFFIX,
    sync_ids,
)


def read_nsys_sqlite(path: str, process: int | None = None, split=None, *, pages: bool | None = None,
                     threads: int | None = None) -> Trace:
    """Read an nsys SQLite export into a Trace; with `process` (a globalPid), only that process's GPU ops, CUDA
    calls and NVTX events (app/process_tasks.py), and with `split` (per_process.py), its rows of the large tables from
    there, where one walk of the export put them, instead of a walk of its own. `pages` and `threads`: how the
    large tables are read (export.py `Export`; None: the default)."""
    ex = Export(path, pages=pages, threads=threads, process=process, split=split)
    try:
        meta = read_meta(ex)
        strings = read_strings(ex)
        value, cut = bounded_names(strings.get_column("value"))
        if cut:
            strings = strings.with_columns(value)
            meta.notes.append(names_note(cut, "strings (names of kernels, calls or ranges)"))
        gpu = sum(hi - lo for lo, hi in (ex.row_span(t) for t in GPU_TABLES if t in ex.tables))
        with progress.step("reading GPU ops", gpu, "rows") as step:
            ops = read_ops(ex, strings, step)
        trim_c_heap()  # the driver's freed batches
        calls = CUDA_CALLS.name
        span = ex.row_span(calls) if calls in ex.tables else (0, 0)
        with progress.step("reading CUDA API calls", span[1] - span[0], "rows") as step:
            api, syncs = read_api(ex, strings, ops, step)
        trim_c_heap()
        span = ex.row_span(NVTX.name) if NVTX.name in ex.tables else (0, 0)
        with progress.step("reading NVTX ranges", span[1] - span[0], "rows") as step:
            ranges, marks = read_nvtx(ex, strings, meta, step)
        meta.extra["tables_read_by"] = dict(ex.read_by)
    finally:
        ex.close()
    trim_c_heap()
    check_span(path, {"GPU ops": ops, "CUDA API calls": api, "NVTX ranges": ranges}, "export it again")
    if not ops.is_empty():
        known_gpus = {g["device"] for g in meta.gpus}
        for device in distinct(ops.get_column("device")).drop_nulls().to_list():
            if device not in known_gpus:
                meta.gpus.append({"device": device, "name": None})
    return Trace(ops=ops, api=api, ranges=ranges, marks=marks, meta=meta, syncs=syncs)


def read_meta(ex: Export) -> TraceMeta:
    """The export's metadata (versions, GPUs, processes, thread names), from its small tables."""
    meta = TraceMeta(path=ex.path, format="nsys-sqlite")
    for table in ("META_DATA_EXPORT", "TARGET_INFO_GPU", "PROCESSES", "ThreadNames", "StringIds"):
        ex.check(table)  # small tables, read through SQLite: whole, or refused
    if "META_DATA_EXPORT" in ex.tables:
        kv = dict(ex.rows("SELECT CAST(name AS TEXT), CAST(value AS TEXT) FROM META_DATA_EXPORT NOT INDEXED"))
        meta.tool_version = kv.get("EXPORT_PRODUCT_VERSION")
        meta.schema_version = kv.get("EXPORT_SCHEMA_VERSION")
    if "TARGET_INFO_GPU" in ex.tables and {"id", "name"} <= ex.columns("TARGET_INFO_GPU"):
        for device, name in _integers(ex, "TARGET_INFO_GPU", ex.rows(
                "SELECT DISTINCT id, CAST(name AS TEXT) FROM TARGET_INFO_GPU NOT INDEXED ORDER BY id"), 1):
            meta.gpus.append({"device": device, "name": name})
    if "PROCESSES" in ex.tables:
        for gpid, pid, name in _integers(ex, "PROCESSES", ex.rows(
                "SELECT globalPid, pid, CAST(name AS TEXT) FROM PROCESSES NOT INDEXED"), 2):
            meta.processes.append({"pid": gpid, "os_pid": pid, "name": name})
    if "ThreadNames" in ex.tables and "StringIds" in ex.tables:
        for tid, name in _integers(ex, "ThreadNames", ex.rows(
            "SELECT t.globalTid, CAST(s.value AS TEXT) FROM ThreadNames t NOT INDEXED "
            "JOIN StringIds s NOT INDEXED ON s.id = t.nameId"
        ), 1):
            meta.threads[tid] = name
    return meta


def _integers(ex: Export, table: str, rows: list[tuple], count: int) -> list[tuple]:
    """`rows` whose first `count` values are integers (or NULL), else one SpecprofError naming the table:
    text or a BLOB where nsys writes an id is damage, never a value to show."""
    for row in rows:
        if not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in row[:count]):
            raise SpecprofError(
                f"{ex.path}: table {table} holds a value that is not an integer where nsys writes an id; the "
                "export is damaged or not made by nsys: export it again with `nsys export --type sqlite`",
                ex.path)
    return rows


def read_strings(ex: Export) -> pl.DataFrame:
    """StringIds, with `value` dictionary-encoded: joining it onto millions of rows stays cheap."""
    schema = {"id": pl.Int64, "value": pl.Utf8}
    if "StringIds" not in ex.tables:
        return pl.DataFrame(schema=schema).with_columns(pl.col("value").cast(pl.Categorical))
    ex.check("StringIds")
    return ex.frame("SELECT id, CAST(value AS BLOB) FROM StringIds NOT INDEXED", schema,
                    table="StringIds").with_columns(pl.col("value").cast(pl.Categorical))


def _name_table(strings: pl.DataFrame) -> pl.Series | None:
    """The names laid out by string id (nsys numbers strings from 0), or None when the ids are
    spread too wide for that."""
    ids = strings.get_column("id")
    lo, hi = (ids.min(), ids.max()) if ids.len() else (None, None)
    if lo is None or lo < 0 or hi >= _DENSE_IDS:
        return None
    return pl.DataFrame({"id": pl.int_range(hi + 1, eager=True, dtype=pl.Int64)}).join(
        strings, on="id", how="left", maintain_order="left").get_column("value")


def _name_of(df: pl.DataFrame, strings: pl.DataFrame, id_col: str, out: str,
             table: pl.Series | None = None) -> pl.DataFrame:
    """Replace integer string-id column `id_col` by its text in column `out` (same row order).

    With `table` (`_name_table(strings)`), each row's name is a gather, no hash join over millions
    of rows; otherwise one join on the id column. The frame's other columns are not copied."""
    if table is not None:
        at = df.get_column(id_col)
        inside = ((at >= 0) & (at < table.len())).fill_null(False)
        names = table.gather(at.zip_with(inside, pl.Series([None], dtype=pl.Int64)))
        return df.with_columns(names.alias(out)).drop(id_col)
    lookup = strings.rename({"id": id_col, "value": out})
    names = df.select(id_col).join(lookup, on=id_col, how="left", maintain_order="left").get_column(out)
    return df.with_columns(names).drop(id_col)


_DENSE_IDS = 1 << 24  # string ids below this are looked up in a table indexed by id


def large_reads(ex: Export, strings: pl.DataFrame) -> list[tuple[Select, dict]]:
    """Every read of a large table that `read_nsys_sqlite` makes of the export (the tables it has), each as the
    select and the schema it is read as: what per_process.py splits by process in one walk."""
    reads = []
    for table in LARGE:
        cols = ex.columns(table.name)
        if cols:
            reads.append(table.read(cols, strings))
    return reads


def read_ops(ex: Export, strings: pl.DataFrame, step=None) -> pl.DataFrame:
    """The GPU ops (kernels, memcpys, memsets, graph launches), named, in (start, end) order, numbered (op_id)."""
    parts = []
    cols = ex.columns(KERNELS.name)
    if cols:
        table = _name_table(strings)

        def named(df: pl.DataFrame) -> pl.DataFrame:  # per slice, in the reading thread
            df = _name_of(df, strings, "name_id", "name", table)
            return _name_of(df, strings, "short_id", "short_name", table)

        frames = ex.parallel(*KERNELS.read(cols), keep=named, step=step)
        parts.extend(f.with_columns(kind=pl.lit("kernel", dtype=pl.Categorical)) for f in frames)  # a part per slice
        del frames
    cols = ex.columns(MEMCPYS.name)
    if cols:
        df = ex.whole(*MEMCPYS.read(cols), step=step)
        kinds = pl.DataFrame({"copy_kind": list(MEMCPY_KINDS), "k": list(MEMCPY_KINDS.values())})
        df = df.join(kinds, on="copy_kind", how="left").with_columns(
            name=(pl.lit("[CUDA memcpy ") + pl.col("k").fill_null("Unknown") + pl.lit("]")).cast(pl.Categorical)
        ).drop("copy_kind", "k")
        parts.append(df.with_columns(short_name=pl.col("name"), kind=pl.lit("memcpy", dtype=pl.Categorical)))
    cols = ex.columns(MEMSETS.name)
    if cols:
        df = ex.whole(*MEMSETS.read(cols), step=step)
        memset = pl.lit("[CUDA memset]").cast(pl.Categorical)
        parts.append(df.with_columns(name=memset, short_name=memset, kind=pl.lit("memset", dtype=pl.Categorical)))
    cols = ex.columns(GRAPH_LAUNCHES.name)
    if cols:
        # --cuda-graph-trace=graph: one row per graph launch, no kernel rows.
        df = ex.whole(*GRAPH_LAUNCHES.read(cols), step=step)
        df = df.with_columns(
            name=(pl.lit("[CUDA graph ") + pl.col("graph_id").cast(pl.Utf8).fill_null("?") + pl.lit("]"))
            .cast(pl.Categorical),
            graph_node=pl.lit(None, dtype=pl.Int64),
        ).drop("graph_id")
        parts.append(df.with_columns(short_name=pl.col("name"), kind=pl.lit("graph", dtype=pl.Categorical)))
    parts = [conform(p, {c: t for c, t in OPS_SCHEMA.items() if c != "op_id"}) for p in parts if p.height]
    if not parts:
        return empty(OPS_SCHEMA)
    # (in start order now: polars' sorted flag says so to the analyses that need it)
    return _stack_sorted(parts, ex.threads).with_row_index("op_id").with_columns(
        pl.col("op_id").cast(pl.Int64)).set_sorted("start")


def _stack_sorted(parts: list[pl.DataFrame], threads: int) -> pl.DataFrame:
    """The parts (same columns) stacked into one frame in (start, end) order, ties in part order.

    Built one column at a time, each column's pieces stacked into one chunk (and put in order) on
    their own: the rows are never held twice (stacking whole frames, then sorting them, held 2x the
    ops: 1.8 GB at 11 M). op_id follows this order. Each part is usually in it already (a table of an
    export, or a slice of one): then their merge order comes from one pass in C (`columns.merge_order`)
    instead of a sort of all the rows."""
    names = list(parts[0].columns)
    pieces = {name: [p.drop_in_place(name) for p in parts] for name in names}  # no copy
    parts.clear()

    def stack(name: str) -> pl.Series:
        return pl.concat(pieces.pop(name), rechunk=True)

    lengths = [s.len() for s in pieces["start"]]
    out = {"start": stack("start"), "end": stack("end")}
    key = pl.DataFrame(out)
    order = None
    if not _in_order(key, "start", "end"):
        order = merge_order(out["start"], out["end"], lengths)
        if order is None:  # a part out of order itself, or too many parts: sort
            order = key.select(pl.arg_sort_by("start", "end", maintain_order=True)).to_series()
    del key

    def place(name: str) -> tuple[str, pl.Series]:
        column = out.pop(name) if name in out else stack(name)
        return name, column if order is None else column.gather(order)

    # Columns are stacked and gathered in parallel threads (polars releases the GIL while it copies;
    # each thread works on Series of its own): as many columns at once as there are readers.
    with ThreadPoolExecutor(threads) as pool:
        placed = dict(pool.map(place, names))
    return pl.DataFrame({name: placed[name] for name in names})


def _in_order(df: pl.DataFrame, first: str, second: str | None = None) -> bool:
    """Whether `df` is sorted by (first, second), nulls first; one vectorised pass."""
    if df.height < 2:
        return True
    a = pl.col(first)
    up = a.shift(1)
    ok = (a > up) | (a == up) | up.is_null()
    if second is not None:
        ok = (a > up) | ((a == up) & (pl.col(second) >= pl.col(second).shift(1))) | up.is_null()
    nulls = df.select(pl.col(first).is_null().any()).item()
    return not nulls and bool(df.select(ok.all()).item())


def read_api(ex: Export, strings: pl.DataFrame, ops: pl.DataFrame, step=None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The CUDA runtime and driver calls that launched the ops (joined later by pid + correlation), and the
    synchronize-class calls (tables.py SYNC_NAMES: SYNCS_SCHEMA, in start order): (launch calls, synchronize calls).

    The table also holds every other CUDA call (queries, allocations): it is read in parallel rowid slices, and
    each slice keeps only the calls whose (process, correlation id) an op carries (one gather per row in a
    bitmap with a bit per (process number, id)) and the synchronize-class calls (their name ids).
    """
    cols = ex.columns(CUDA_CALLS.name)
    if not cols or ops.is_empty():
        return empty(API_SCHEMA), empty(SYNCS_SCHEMA)
    corr = ops.get_column("correlation").drop_nulls()
    if corr.is_empty():
        return empty(API_SCHEMA), empty(SYNCS_SCHEMA)
    lo, hi = int(corr.min()), int(corr.max())
    op_pids = distinct(ops.get_column("pid"))
    stride = hi + 1
    select, schema = CUDA_CALLS.read(cols, strings)
    pid_of = pl.col("tid") & pl.lit(PID_MASK, dtype=pl.Int64)
    waits = sync_ids(strings)
    by_process = lo >= 0 and not op_pids.has_nulls() and stride * op_pids.len() < 1 << 32
    if by_process:
        # One bit per (process, correlation id) that an op carries: the process's number x
        # stride + the id. Each slice keeps its calls by one gather in that bitmap.
        number = list(range(op_pids.len()))

        def keys(pid: pl.Series, c: pl.Series) -> pl.Series:
            n = pid.replace_strict(op_pids, number, default=None, return_dtype=pl.Int64)
            ok = (n.is_not_null() & (c >= 0) & (c <= hi)).fill_null(False)
            return (n * stride + c).zip_with(ok, pl.Series([None], dtype=pl.Int64))

        bitmap = pl.Series("m", [False], pl.Boolean).extend_constant(False, stride * op_pids.len() - 1)
        bitmap = bitmap.scatter(keys(ops.get_column("pid"), ops.get_column("correlation")).drop_nulls(), True)

        def launched(batch: pl.DataFrame) -> pl.Series:
            return bitmap.gather(keys(batch.get_column("pid"), batch.get_column("correlation"))).fill_null(False)
    elif lo >= 0 and hi < 1 << 31:  # ops of no known process: the correlation id alone, then the process
        bitmap = pl.Series("m", [False], pl.Boolean).extend_constant(False, hi).scatter(corr, True)

        def launched(batch: pl.DataFrame) -> pl.Series:
            c = batch.get_column("correlation")
            inside = ((c >= 0) & (c <= hi)).fill_null(False)
            return bitmap.gather(c.zip_with(inside, pl.Series([None], dtype=pl.Int64))).fill_null(False)
    else:  # ids beyond a bitmap's reach (no export seen has them): a hash lookup per slice
        wanted = corr.unique()

        def launched(batch: pl.DataFrame) -> pl.Series:
            return batch.get_column("correlation").is_in(wanted.implode()).fill_null(False)

    def keep(batch: pl.DataFrame) -> pl.DataFrame:
        batch = batch.with_columns(pid=pid_of)
        batch = batch.with_columns(_launch=launched(batch), _sync=pl.col("name_id").is_in(waits.implode()))
        return batch.filter(pl.col("_launch") | pl.col("_sync"))

    parts = ex.parallel(select, schema, keep=keep, step=step)
    if not parts:
        return empty(API_SCHEMA), empty(SYNCS_SCHEMA)
    df = pl.concat(parts)
    del parts
    syncs = df.filter(pl.col("_sync"))
    df = df.filter(pl.col("_launch")).drop("_launch", "_sync")
    if not by_process:
        # The same correlation id in another process launched nothing here.
        if op_pids.len() == 1 and op_pids[0] is not None:
            df = df.filter(pl.col("pid") == op_pids[0])
        else:
            df = _launched_here(df, ops)
    return _launch_calls(df, strings), _sync_calls(syncs, strings)


def _called(df: pl.DataFrame, strings: pl.DataFrame) -> pl.DataFrame:
    """`df` (calls with name_id) named (`name`, version suffix off) and in start order."""
    names = strings.join(df.select(pl.col("name_id").alias("id")).unique(), on="id", how="semi")
    names = names.with_columns(pl.col("value").cast(pl.Utf8).str.replace(VERSION_SUFFIX, "").cast(pl.Categorical))
    df = _name_of(df, names, "name_id", "name", _name_table(names))
    if not _in_order(df, "start"):
        df = df.sort("start", maintain_order=True)
    return df


def _sync_calls(syncs: pl.DataFrame, strings: pl.DataFrame) -> pl.DataFrame:
    """The synchronize-class calls read (with name_id), as SYNCS_SCHEMA in start order."""
    if syncs.is_empty():
        return empty(SYNCS_SCHEMA)
    return conform(_called(syncs, strings).select(list(SYNCS_SCHEMA)), SYNCS_SCHEMA)


def _launch_calls(df: pl.DataFrame, strings: pl.DataFrame) -> pl.DataFrame:
    """The launch calls read, named, in start order, one per (process, correlation id)."""
    df = _called(df, strings)
    # A runtime call and the driver call it makes can share a correlation id: keep the outer one
    # (the earlier). Whether any id occurs twice is checked on one sorted integer column (a hash over
    # the rows costs hundreds of MB); only then are the repeated ids found and de-duplicated.
    key = _process_correlation_key(df)
    if key is not None:
        ordered = key.sort()
        repeated = bool((ordered == ordered.shift(1)).any())
        del ordered
    else:
        repeated = True
    twice = df.select(pl.struct("pid", "correlation").is_duplicated().alias("d")).get_column("d") \
        if repeated else None
    if twice is not None and twice.any():
        df = pl.concat([df.filter(~twice),
                        df.filter(twice).unique(["pid", "correlation"], keep="first", maintain_order=True)])
        df = df.sort("start", maintain_order=True)
    return df


def _process_correlation_key(df: pl.DataFrame, pids: pl.Series | None = None) -> pl.Series | None:
    """(pid, correlation) packed into one Int64 (process number << 40 | correlation id; processes
    numbered in `pids`, default df's), or None when correlation ids do not fit in 40 bits."""
    lo, hi = df.select(lo=pl.col("correlation").min(), hi=pl.col("correlation").max()).row(0)
    if lo is None or lo < 0 or hi >= 1 << 40:
        return None
    pids = distinct(df.get_column("pid")).drop_nulls() if pids is None else pids
    rank = pl.DataFrame({"pid": pids, "_n": pl.int_range(pids.len(), eager=True).cast(pl.Int64) * (1 << 40)})
    return df.select("pid", "correlation").join(rank, on="pid", how="left", maintain_order="left").select(
        k=pl.col("_n") + pl.col("correlation")).get_column("k")


def _launched_here(df: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """The rows of `df` whose (pid, correlation) an op carries, in df's order. Membership by an as-of
    join of two sorted integer columns: a hash table over tens of millions of op keys costs GBs."""
    pids = pl.concat([distinct(df.get_column("pid")), distinct(ops.get_column("pid"))]).unique().drop_nulls().sort()
    mine, theirs = _process_correlation_key(df, pids), _process_correlation_key(ops, pids)
    if mine is None or theirs is None:
        return df.join(ops.select("pid", "correlation").unique(), on=["pid", "correlation"], how="semi",
                       maintain_order="left")
    right = pl.DataFrame({"k": theirs.drop_nulls().sort()}).with_columns(hit=pl.col("k")).set_sorted("k")
    left = pl.DataFrame({"k": mine, "_row": pl.int_range(df.height, eager=True)}).drop_nulls("k").sort("k")
    found = left.join_asof(right, on="k", strategy="backward", check_sortedness=False)
    rows = found.filter(pl.col("hit") == pl.col("k")).get_column("_row").sort()
    return df[rows]


def read_nvtx(ex: Export, strings: pl.DataFrame, meta: TraceMeta, step=None):
    """The NVTX ranges (closed, on one thread) and marks, each with its domain's name."""
    cols = ex.columns(NVTX.name)
    if not cols:
        return empty(RANGES_SCHEMA), empty(MARKS_SCHEMA)
    df = ex.whole(*NVTX.read(cols), step=step)
    text, cut = bounded_names(df.get_column("text"))
    if cut:
        df = df.with_columns(text)
        meta.notes.append(names_note(cut, "NVTX range or mark names"))
    # Names stay dictionary-encoded (the registered strings are; inline texts are encoded here), so a name
    # repeated on every range is held once.
    df = df.join(strings.rename({"id": "text_id", "value": "registered"}), on="text_id", how="left")
    df = df.with_columns(
        name=pl.coalesce(pl.col("text").cast(pl.Categorical), pl.col("registered").cast(pl.Categorical)),
        pid=pl.col("tid") & pl.lit(PID_MASK, dtype=pl.Int64),
        domain_id=pl.col("domain_id").fill_null(0),
    )
    domains = (
        df.filter(pl.col("event_type") == NVTX_DOMAIN_CREATE)
        .select("pid", "domain_id", pl.col("name").alias("domain"))
        .unique(["pid", "domain_id"], keep="last")
    )
    df = df.filter(pl.col("event_type") != NVTX_DOMAIN_CREATE).join(
        domains, on=["pid", "domain_id"], how="left"
    )
    unnamed = df.filter((pl.col("domain_id") != 0) & pl.col("domain").is_null())
    if unnamed.height:
        meta.notes.append(
            f"{unnamed.height} NVTX events use a domain whose creation was not captured "
            "(the export is a window); they are shown as domain '<id N>'"
        )
    cat = pl.Categorical
    df = df.with_columns(
        domain=pl.when(pl.col("domain_id") == 0)
        .then(pl.lit("", dtype=cat))
        .when(pl.col("domain").is_not_null())
        .then(pl.col("domain"))
        .otherwise((pl.lit("<id ") + pl.col("domain_id").cast(pl.Utf8) + pl.lit(">")).cast(cat))
    )
    marks = df.filter(pl.col("event_type") == NVTX_MARK).select(
        "pid", "tid", pl.col("start").alias("ts"), pl.col("name").cast(pl.Utf8).fill_null(""), "domain"
    )
    ranges = df.filter(pl.col("event_type").is_in(NVTX_RANGES))
    cross = ranges.filter(pl.col("end_tid").is_not_null() & (pl.col("end_tid") != pl.col("tid")))
    if cross.height:
        meta.skipped["ranges_ending_on_another_thread"] = cross.height
        ranges = ranges.filter(pl.col("end_tid").is_null() | (pl.col("end_tid") == pl.col("tid")))
    open_ranges = ranges.filter(pl.col("end").is_null()).height
    if open_ranges:
        # As NVIDIA's nvtx_gpu_proj_trace does: a range still open at the end ends with the trace.
        meta.notes.append(f"{open_ranges} NVTX ranges were still open at the end of the capture; "
                          "they are closed at the trace's last timestamp")
        last = ranges.select(pl.max_horizontal(pl.col("start").max(), pl.col("end").max())).item()
        ranges = ranges.with_columns(pl.col("end").fill_null(last))
    ranges = (
        ranges.select("pid", "tid", "start", "end", pl.col("name").fill_null(pl.lit("", dtype=pl.Categorical)), "domain")
        .sort("tid", "start", pl.col("end"), descending=[False, False, True])
        .with_row_index("range_id")
        .with_columns(pl.col("range_id").cast(pl.Int64))
    )
    return ranges, marks
