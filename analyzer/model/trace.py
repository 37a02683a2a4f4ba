"""The one data model in the middle: a Trace is a few polars tables on the trace's own clock.

Readers (nsys SQLite, Kineto JSON) are the only code that knows a file format; they produce a Trace.
Analyses are pure functions from these tables to tables. All times are integer nanoseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

# One row per GPU activity (kernel, memcpy, memset, or a whole graph when captured with
# --cuda-graph-trace=graph). `correlation` joins to `api`; graph-node kernels carry the
# correlation id of the cudaGraphLaunch that replayed them.
OPS_SCHEMA = {
    "op_id": pl.Int64,
    "kind": pl.Categorical,  # kernel | memcpy | memset | graph
    "start": pl.Int64,
    "end": pl.Int64,
    "device": pl.Int64,
    "stream": pl.Int64,
    "pid": pl.Int64,  # process that launched it (nsys globalPid, Kineto pid)
    "correlation": pl.Int64,
    # Names repeat millions of times: dictionary-encoded (4 bytes per op).
    "name": pl.Categorical,  # full (demangled) name
    "short_name": pl.Categorical,
    "graph_node": pl.Int64,  # null unless the op is a CUDA-graph node
}

# CUDA runtime and driver calls: pid, thread, start, end, name (version suffix stripped), correlation.
API_SCHEMA = {
    "pid": pl.Int64,
    "tid": pl.Int64,
    "start": pl.Int64,
    "end": pl.Int64,
    "name": pl.Categorical,
    "correlation": pl.Int64,
}

# The calls that make the host wait for the GPU (synchronize-class): event, stream, context and device
# synchronisation, and the copies that block the host until they are done (cudaMemcpy without Async: these launch
# a copy too, so they are launch calls as well). The readers keep them as a table of their own (`Trace.syncs`).
SYNC_NAMES = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cuCtxSynchronize",
    "cuStreamSynchronize", "cuEventSynchronize", "cudaThreadSynchronize",
    "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol", "cudaMemcpyPeer",
    "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpyDtoD", "cuMemcpy2D", "cuMemcpy3D", "cuMemcpyPeer",
})
# The copies among them: what a synchronize's own cost is not measured from (they carry a copy's time).
BLOCKING_COPIES = frozenset(n for n in SYNC_NAMES if "Memcpy" in n)

# The synchronize-class calls (SYNC_NAMES) as the trace has them: nsys' CUDA runtime and driver calls, Kineto's
# cuda_runtime and cuda_driver events; name without its version suffix.
SYNCS_SCHEMA = {
    "pid": pl.Int64,
    "tid": pl.Int64,
    "start": pl.Int64,
    "end": pl.Int64,
    "name": pl.Categorical,
}

# Closed CPU ranges (NVTX push/pop and start/end that end on the thread they began on, or
# record_function / user_annotation ranges). Names and domains repeat once per cycle or per call:
# dictionary-encoded (4 bytes per range, each distinct name held once), as the ops' names are.
RANGES_SCHEMA = {
    "range_id": pl.Int64,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "start": pl.Int64,
    "end": pl.Int64,
    "name": pl.Categorical,
    "domain": pl.Categorical,
}

# Optional: NCCL kernels' collective arguments, one row per op that has them (Kineto traces of
# torch >= 2.3 carry them on the kernel event; nsys exports do not). Joins to ops by op_id.
COLLECTIVES_SCHEMA = {
    "op_id": pl.Int64,
    "collective": pl.Utf8,  # allreduce, allgather, send, ...
    "in_nelems": pl.Int64,
    "out_nelems": pl.Int64,
    "group_size": pl.Int64,
    "dtype": pl.Utf8,
    "in_split_size": pl.Utf8,
    "out_split_size": pl.Utf8,
    "pg_name": pl.Utf8,
    "pg_desc": pl.Utf8,
    "pg_ranks": pl.Utf8,
}

# Instant markers (NVTX marks): the tracer's clock-sync marks live here.
MARKS_SCHEMA = {
    "pid": pl.Int64,
    "tid": pl.Int64,
    "ts": pl.Int64,
    "name": pl.Utf8,
    "domain": pl.Utf8,
}


def empty(schema: dict) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def conform(df: pl.DataFrame, schema: dict) -> pl.DataFrame:
    """Select and cast `df` to exactly `schema` (missing columns become nulls)."""
    columns = []
    for name, dtype in schema.items():
        if name in df.columns:
            columns.append(pl.col(name).cast(dtype))
        else:
            columns.append(pl.lit(None, dtype=dtype).alias(name))
    return df.select(columns)


def single_chunk(df: pl.DataFrame) -> pl.DataFrame:
    """`df` with every column in one contiguous chunk (a copy only where a column has several). A
    frame whose columns are chunked differently (slices read in parallel, a Parquet file's row
    groups, then columns added whole by the analysis) makes polars re-align all of its columns in
    many operations: a copy of the whole frame each time. The readers and the cache hand over
    single-chunk tables already, so that this copies nothing at scale."""
    if all(df.get_column(c).n_chunks() == 1 for c in df.columns):
        return df
    return df.rechunk()


@dataclass
class TraceMeta:
    path: str
    format: str  # "nsys-sqlite" | "kineto-json"
    tool_version: str | None = None  # nsys EXPORT_PRODUCT_VERSION, or Kineto schema version
    schema_version: str | None = None
    gpus: list[dict] = field(default_factory=list)  # {"device", "name", ...}
    processes: list[dict] = field(default_factory=list)  # {"pid", "name"}
    threads: dict[int, str] = field(default_factory=dict)  # tid -> thread name
    # Counts of rows the reader could not use, by reason (never dropped silently).
    skipped: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    rank: int | None = None  # distributed rank, when the trace says (Kineto distributedInfo.rank)
    # The capture's start, on the trace's clock: time 0 of every time shown (the per-cycle table's start ms,
    # --time-window, the report's timeline). Set once, from the whole trace (`capture_start`); a window keeps it.
    start_ns: int | None = None
    extra: dict = field(default_factory=dict)  # format-specific facts (Kineto: base_time_ns, world_size)


@dataclass
class Trace:
    ops: pl.DataFrame
    api: pl.DataFrame
    ranges: pl.DataFrame
    marks: pl.DataFrame
    meta: TraceMeta
    collectives: pl.DataFrame | None = None  # optional, COLLECTIVES_SCHEMA
    syncs: pl.DataFrame | None = None  # SYNCS_SCHEMA (None: none read)

    def __post_init__(self):
        self.syncs = conform(self.syncs if self.syncs is not None else empty(SYNCS_SCHEMA), SYNCS_SCHEMA)
        self.ops = single_chunk(conform(self.ops, OPS_SCHEMA))
        self.api = single_chunk(conform(self.api, API_SCHEMA))
        self.ranges = single_chunk(conform(self.ranges, RANGES_SCHEMA))
        self.marks = conform(self.marks, MARKS_SCHEMA)
        if self.collectives is not None:
            self.collectives = conform(self.collectives, COLLECTIVES_SCHEMA)
        if self.meta.start_ns is None:
            self.meta.start_ns = capture_start(self)


def capture_start(trace: Trace) -> int | None:
    """The capture's start: the trace's first event, the earliest start of a GPU op, an API call, a range or a
    mark (None for a trace with none). The one origin of the times specprof shows."""
    firsts = [t["start"].min() for t in (trace.ops, trace.api, trace.ranges) if t.height]
    if trace.marks.height:
        firsts.append(trace.marks["ts"].min())
    firsts = [int(v) for v in firsts if v is not None]
    return min(firsts) if firsts else None
