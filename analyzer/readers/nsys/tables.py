"""The nsys tables the reader reads, each described once (`Table`): its columns (the names they are read as, the
export's columns they come from, their types, which an export may lack), the conditions its rows meet and the
columns nsys always fills. Every read of a table is made from its `Table`: the full read's (all its columns,
read.py), the window's narrow one (a few columns, window.py) and the split's (per_process.py, the full read's).
Also what nsys writes that the reader relies on: event types, the process part of a thread id, the calls
that never launch GPU work.

Tables are created lazily and columns change between versions (nsys 2021.x to 2026.x), so each read is made
from the columns the export has (`Table.read`)."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from specprof.analyzer.model.trace import SYNC_NAMES
from specprof.analyzer.readers.nsys.select import Select

# ENUM_NSYS_EVENT_TYPE values used here.
NVTX_MARK = 34
NVTX_RANGES = (59, 60, 70, 71)  # PushPop, StartEnd, and their NVTXT variants
NVTX_DOMAIN_CREATE = 75

MEMCPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
                8: "DtoD", 9: "HtoH", 10: "PtoP"}

PID_MASK = ~0xFFFFFF  # globalPid = globalTid with the low 24 (tid) bits cleared
TIME_LIMIT = 1 << 62  # ns: no timestamp lies further from 0 (the difference of two then fits in 64 bits)


@dataclass(frozen=True)
class Column:
    """One column of a table as the reader reads it: `name`, what the frame read calls it; `source`, the
    export's column (the first of these it has; with none, the last, which the read then reports missing);
    `dtype`, pl.Int64 or pl.Utf8 (text); `optional`: an export may lack it, and it is read as NULLs then."""

    name: str
    source: tuple[str, ...]
    dtype: object = pl.Int64
    optional: bool = False

    def of(self, cols: set[str]) -> str | None:
        """The export's column this is read from (`cols`: the table's columns), or None for NULLs."""
        for source in self.source:
            if source in cols:
                return source
        return None if self.optional else self.source[-1]


@dataclass(frozen=True)
class Table:
    """One nsys table as the reader reads it: `columns` in the order they are read, `where` (conditions every
    read of it has, as `Select` takes them), `required` (the export's columns nsys always fills: a row with one
    NULL is refused), and `launches_only`: the calls NOT_LAUNCHES names are left out of every read."""

    name: str
    columns: tuple[Column, ...]
    required: tuple[str, ...] = ()
    where: tuple[tuple, ...] = ()
    launches_only: bool = False

    def read(self, cols: set[str], strings: pl.DataFrame | None = None,
             only: tuple[str, ...] | None = None) -> tuple[Select, dict]:
        """The read of this table in an export whose table has the columns `cols`: its `Select` and the schema
        its rows are read as (column names and types, by position). `strings` (StringIds: id, value) for a
        table read `launches_only`; `only`: the names of the columns to read (a narrow read), else all."""
        chosen = [c for c in self.columns if only is None or c.name in only]
        where = self.where + (not_launches(strings, cols) if self.launches_only else ())
        return (Select(self.name, tuple(c.of(cols) for c in chosen), where, self.required),
                {c.name: c.dtype for c in chosen})


def _int(name: str, *source: str, optional: bool = False) -> Column:
    return Column(name, source, pl.Int64, optional)


# What every GPU op row of nsys has, and the columns every GPU-op table is read with first (its narrow read).
_OP_REQUIRED = ("start", "end", "deviceId", "streamId", "globalPid")
OP_COLUMNS = ("start", "end", "device", "stream", "pid", "correlation")


def _op_table(name: str, *more: Column, device_optional: bool = False) -> Table:
    return Table(name, (_int("start", "start"), _int("end", "end"),
                        _int("device", "deviceId", optional=device_optional), _int("stream", "streamId"),
                        _int("pid", "globalPid", optional=True), _int("correlation", "correlationId", optional=True),
                        *more), required=_OP_REQUIRED)


# Names stay string ids: the full read looks them up.
KERNELS = _op_table("CUPTI_ACTIVITY_KIND_KERNEL", _int("name_id", "demangledName", "shortName"),
                    _int("short_id", "shortName", "demangledName"), _int("graph_node", "graphNodeId", optional=True))
MEMCPYS = _op_table("CUPTI_ACTIVITY_KIND_MEMCPY", _int("copy_kind", "copyKind", optional=True),
                    _int("graph_node", "graphNodeId", optional=True))
MEMSETS = _op_table("CUPTI_ACTIVITY_KIND_MEMSET", _int("graph_node", "graphNodeId", optional=True))
# --cuda-graph-trace=graph: one row per graph launch, no kernel rows.
GRAPH_LAUNCHES = _op_table("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", _int("graph_id", "graphId", optional=True),
                           device_optional=True)
# The CUDA runtime and driver calls that can have launched something: those with a correlation id, and not one of
# NOT_LAUNCHES.
CUDA_CALLS = Table("CUPTI_ACTIVITY_KIND_RUNTIME",
                   (_int("start", "start"), _int("end", "end"), _int("tid", "globalTid"),
                    _int("correlation", "correlationId"), _int("name_id", "nameId")),
                   required=("start", "end", "globalTid"), where=(("not null", "correlationId"),), launches_only=True)
CALL_COLUMNS = ("start", "end", "tid", "correlation")  # a call's narrow read: its columns but its name
NVTX = Table("NVTX_EVENTS",
             (_int("start", "start"), _int("end", "end"), _int("event_type", "eventType"), _int("tid", "globalTid"),
              _int("end_tid", "endGlobalTid", optional=True), Column("text", ("text",), pl.Utf8, optional=True),
              _int("text_id", "textId", optional=True), _int("domain_id", "domainId", optional=True)),
             required=("start", "globalTid"),
             where=(("in", "eventType", (*NVTX_RANGES, NVTX_MARK, NVTX_DOMAIN_CREATE)),))

GPU_OPS = (KERNELS, MEMCPYS, MEMSETS, GRAPH_LAUNCHES)  # the tables of GPU ops, in the order the full read stacks them
LARGE = (*GPU_OPS, CUDA_CALLS, NVTX)  # the tables read in slices, in threads (read.py `large_reads`)
GPU_TABLES = tuple(t.name for t in GPU_OPS)
# The column that says which process a row is of: a GPU op's globalPid, a CUDA call's or NVTX event's globalTid
# (the process's, with the thread's number in its low 24 bits).
PROCESS_COLUMNS = {**{t: "globalPid" for t in GPU_TABLES}, CUDA_CALLS.name: "globalTid", NVTX.name: "globalTid"}

VERSION_SUFFIX = r"_v\d+$"  # cudaLaunchKernel_v7000 is cudaLaunchKernel

# CUDA calls that never launch GPU work (no kernel, memcpy, memset or graph record carries their
# correlation id): queries, events, stream and device synchronisation, capture state, module and library
# loading. A real capture has more of them than launches (reference-k4: cuKernelGetName,
# cuKernelGetAttribute and cudaStreamIsCapturing alone are 3 of every 5 runtime rows). SQLite skips
# them in the query, so the driver never converts them; leaving one out of this list costs time, never
# a result (tests/test_reader_nsys.py reads every capture with and without it).
NOT_LAUNCHES = frozenset({
    "cuKernelGetName", "cuKernelGetAttribute", "cuKernelSetAttribute", "cuKernelGetFunction",
    "cuLibraryLoadData", "cuLibraryGetKernel", "cuLibraryUnload", "cuModuleLoadData", "cuModuleGetFunction",
    "cuModuleUnload", "cuFuncGetAttribute", "cuFuncSetAttribute", "cuGetProcAddress",
    "cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxSynchronize", "cuProfilerStart", "cuProfilerStop",
    "cuStreamIsCapturing", "cuStreamGetCaptureInfo", "cuStreamSynchronize", "cuStreamQuery", "cuStreamWaitEvent",
    "cuEventCreate", "cuEventRecord", "cuEventRecordWithFlags", "cuEventSynchronize", "cuEventQuery",
    "cuEventDestroy", "cuPointerGetAttribute", "cuPointerGetAttributes", "cuMemGetInfo",
    "cudaStreamIsCapturing", "cudaStreamGetCaptureInfo", "cudaStreamSynchronize", "cudaStreamQuery",
    "cudaStreamWaitEvent", "cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority",
    "cudaStreamDestroy", "cudaEventCreate", "cudaEventCreateWithFlags", "cudaEventRecord",
    "cudaEventRecordWithFlags", "cudaEventSynchronize", "cudaEventQuery", "cudaEventDestroy",
    "cudaEventElapsedTime", "cudaDeviceSynchronize", "cudaGetDevice", "cudaSetDevice", "cudaGetDeviceCount",
    "cudaGetDeviceProperties", "cudaDeviceGetAttribute", "cudaGetLastError", "cudaPeekAtLastError",
    "cudaFuncGetAttributes", "cudaFuncSetAttribute", "cudaPointerGetAttributes", "cudaMemGetInfo",
    "cudaProfilerStart", "cudaProfilerStop", "cudaGetDriverEntryPoint", "cudaGetDriverEntryPointByVersion",
})


def _ids_of(strings: pl.DataFrame, names) -> tuple[int, ...]:
    """The string ids of the call names `names` in this export (version suffixes ignored), sorted."""
    ids = strings.filter(pl.col("value").cast(pl.Utf8).str.replace(VERSION_SUFFIX, "").is_in(list(names)))
    return tuple(sorted(int(i) for i in ids.get_column("id").to_list()))


def not_launches(strings: pl.DataFrame, cols: set[str]) -> tuple[tuple, ...]:
    """The condition `nameId NOT IN (...)`: the string ids of NOT_LAUNCHES in this export (version
    suffixes ignored) but the synchronize-class calls (SYNC_NAMES, which the read keeps), or none when there
    are none."""
    if "nameId" not in cols or strings.is_empty():
        return ()
    ids = _ids_of(strings, NOT_LAUNCHES - SYNC_NAMES)
    return (("not in", "nameId", ids),) if ids else ()


def sync_ids(strings: pl.DataFrame) -> pl.Series:
    """The string ids of the synchronize-class calls (SYNC_NAMES) in this export."""
    return pl.Series("id", _ids_of(strings, SYNC_NAMES) if strings.height else (), pl.Int64)
