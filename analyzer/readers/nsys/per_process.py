"""One walk of an nsys export's large tables that hands each process its rows: the first stage of the analysis of
an export of several processes one process per task (app/process_tasks.py).

The rows of all the processes of a capture are interleaved in time in every large table (GPU ops, CUDA calls, NVTX
events), so no page holds one process alone: a task that picked its process's rows out of the pages itself would
walk the whole file, and N tasks would walk it N times. Instead `split` walks each large table once, in slices of
SPLIT_ROWS rows read in parallel threads (export.py `Export.parallel`, pages or SQLite as for any read), and writes
each slice's rows of each process to a file of its own in a folder (Arrow IPC, uncompressed): what is held at once
is a slice per reading thread, never a table. The reads are exactly those `read_nsys_sqlite` makes (read.py
`large_reads`: the same columns, conditions and schema), so a task given the `Split` reads its process's files in
slice order and gets, row for row, what its own walk would have read (`Export.parallel`), then does everything
else a read does itself (names, the launches of its ops, its NVTX ranges). A GPU op belongs to the process of its
globalPid; a CUDA call or NVTX event to the process its globalTid lies in (the low 24 bits are the thread's), as
`Export.parallel` reads them for one process. `processes` says which processes ran GPU work.

The folder is the caller's to make and to remove (app/process_tasks.py removes it when the tasks are done or one
failed). Where a task runs on a host that does not see the folder (a Dask worker elsewhere), `Split.frames`
answers None and the task walks the export itself: slower, the same rows.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass

import polars as pl

from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.columns import distinct
from specprof.analyzer.readers.nsys.export import Export
from specprof.analyzer.readers.nsys.read import large_reads, read_strings
from specprof.analyzer.readers.nsys.select import Select
from specprof.analyzer.readers.nsys.tables import GPU_TABLES, PID_MASK, PROCESS_COLUMNS

SPLIT_ROWS = 500_000  # rows of a slice: what a reading thread holds at once while it splits


def read_key(select: Select, schema: dict) -> str:
    """A name for one read (its table, columns, conditions and schema): a task's read finds the split's rows of
    the same read by it, and no other."""
    what = repr((select.table, select.columns, select.where, select.required,
                 tuple((name, str(dtype)) for name, dtype in schema.items())))
    return hashlib.sha256(what.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Split:
    """Each process's rows of the large tables of one export, in files under `folder`: `files` maps a read
    (`read_key`) to each process's files (globalPid -> names, in rowid order). Small and picklable: what a task
    is given."""

    folder: str
    files: dict
    read_by: dict = None  # table -> how the walk read it: "pages" or "sqlite"

    def frames(self, select: Select, schema: dict, pid: int) -> list[pl.DataFrame] | None:
        """The rows `select` reads of process `pid`, as frames in rowid order; None where this read was not split
        or the folder is not on this host."""
        names = self.files.get(read_key(select, schema))
        if names is None or not os.path.isdir(self.folder):
            return None
        return [pl.read_ipc(os.path.join(self.folder, name)) for name in names.get(pid, ())]

    def rows(self) -> int:
        """How many rows the split wrote (all processes, all tables)."""
        return sum(pl.scan_ipc(os.path.join(self.folder, n)).select(pl.len()).collect().item()
                   for per in self.files.values() for names in per.values() for n in names)


class WriteFailed(Exception):
    """A process's rows could not be written to the split's folder (the disk is full, the folder went away)."""


class Sink:
    """Where the slices of one read go (`Export.parallel(sink=...)`): each slice's rows of each wanted process
    to a file of their own, named by the read, the process and the slice's number."""

    def __init__(self, folder: str, number: int, process: str, by_thread: bool, pids: set[int]):
        self.folder, self.prefix, self.pids = folder, f"r{number}", pids
        self.by = (pl.col(process) & pl.lit(PID_MASK, dtype=pl.Int64)) if by_thread else pl.col(process)
        self.written: list[tuple[int, int, str]] = []  # (slice, process, file name)
        self.lock = threading.Lock()

    def __call__(self, number: int, df: pl.DataFrame) -> None:
        if not df.height:
            return
        parts = df.with_columns(self.by.alias("_process")).partition_by("_process", as_dict=True, maintain_order=True)
        for (pid,), part in parts.items():
            if pid not in self.pids:  # a process that ran no GPU work, or rows of none (NULL)
                continue
            name = f"{self.prefix}-{pid}-{number:06d}.arrow"
            try:
                part.drop("_process").write_ipc(os.path.join(self.folder, name), compression="uncompressed")
            except (OSError, pl.exceptions.PolarsError) as exc:  # (not the export's: the reader says those)
                raise WriteFailed(getattr(exc, "strerror", None) or str(exc).splitlines()[0]) from None
            with self.lock:
                self.written.append((number, pid, name))

    def reset(self) -> None:
        for _, _, name in self.written:
            os.remove(os.path.join(self.folder, name))
        self.written.clear()

    def names(self) -> dict[int, tuple[str, ...]]:
        out: dict[int, list[str]] = {}
        for _, pid, name in sorted(self.written):
            out.setdefault(pid, []).append(name)
        return {pid: tuple(names) for pid, names in out.items()}


def processes(path: str, *, pages: bool | None = None, threads: int | None = None) -> tuple[int, ...]:
    """The processes (nsys globalPid) that ran GPU work in the export at `path`, or () where its tables cannot be
    read one process at a time. `pages`, `threads`: as export.py `Export` takes them."""
    with Export(path, pages=pages, threads=threads) as ex:
        for table, column in PROCESS_COLUMNS.items():
            if table in ex.tables and column not in ex.columns(table):
                return ()
        pids = set()
        for table in GPU_TABLES:
            if table in ex.tables:
                for part in ex.parallel(Select(table, (PROCESS_COLUMNS[table],)), {"pid": pl.Int64}):
                    pids.update(distinct(part.get_column("pid")).drop_nulls().to_list())
    return tuple(sorted(pids))


def rows_to_walk(path: str) -> int:
    """How many rows `split` walks in the export at `path` (its large tables' rowid spans): a progress step's
    total."""
    with Export(path) as ex:
        return sum(hi - lo for lo, hi in (ex.row_span(t) for t in PROCESS_COLUMNS if t in ex.tables))


def split(path: str, pids, folder: str, step=None, *, pages: bool | None = None, threads: int | None = None) -> Split:
    """Walk the large tables of the export at `path` once and write the rows of each process of `pids` (globalPid)
    under `folder` (an empty folder of the caller's); `step` (a progress step) advances by the rows read. `pages`,
    `threads`: as export.py `Export` takes them."""
    ex = Export(path, pages=pages, threads=threads)
    files = {}
    try:
        strings = read_strings(ex)
        for select, schema in large_reads(ex, strings):
            column = PROCESS_COLUMNS[select.table]
            if column not in select.columns:
                continue  # (no such export is split: processes() finds none) the task reads it itself
            process = list(schema)[select.columns.index(column)]
            sink = Sink(folder, len(files), process, column == "globalTid", set(pids))
            ex.parallel(select, schema, step=step, slice_rows=SPLIT_ROWS, sink=sink)
            files[read_key(select, schema)] = sink.names()
    except WriteFailed as exc:
        raise SpecprofError(
            f"{path}: writing each process's rows to {folder} failed ({exc}); give them a folder "
            "with room (about the export's size) in $SPECPROF_SPLIT_DIR, or analyse the export in one task "
            "(without --jobs)", path) from None
    finally:
        ex.close()
    return Split(folder, files, dict(ex.read_by))
