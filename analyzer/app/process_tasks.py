"""One nsys export of several processes (a tensor-parallel capture: one process per GPU), analysed one process per
task: with `--jobs N` or `--dask ADDRESS` and a single export whose GPU work comes from two processes or more.

First one walk of the export's large tables hands each process its rows (readers/nsys/per_process.py: each process's
GPU ops, CUDA calls and NVTX events to files of its own in a temporary folder, removed when the tasks are done or
one failed; `$SPECPROF_SPLIT_DIR` says where, else the system's temporary folder). Then each task reads only its
process's files (readers/nsys/read.py `read_nsys_sqlite(path, process=..., split=...)`), attributes them as any
trace is attributed, and returns a small output (app/traces.py `TraceOutput`: the JSON document, the terminal
text, the summary row, the attributed time per phase), never its op tables. The merge puts them in rank order
and adds the skew across them, as for the ranks of one run given as several traces (docs/multirank.md). Each
process's figures are those the one-process analysis gives that rank (`ranks` in its JSON:
tests/test_process_tasks.py on fixtures/reference-k4-tp2).

Not split (one task, as without --jobs): Kineto traces, an export of one process, a time window (measured from
the whole export's first GPU op), and the outputs written per trace (--html, --db, --csv, --parquet). Ranks are
numbered as the one-process analysis numbers them (derived/ranks.py `number_ranks`): by the sidecars' tensor-
parallel ranks when every process has a distinct one, else in device order, then process id. The
communication split into waiting and transfer needs every rank's kernels in one place: the one-process
analysis gives it.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile

from specprof.analyzer import progress
from specprof.analyzer.app import parallel
from specprof.analyzer.app import traces as many
from specprof.analyzer.app.analyze import Options, RunInputs
from specprof.analyzer.app.run import Run
from specprof.analyzer.core.attribution import Attribution, attribute
from specprof.analyzer.derived.analysis import estimate_sync_timers
from specprof.analyzer.core.window import select
from specprof.analyzer.derived.ranks import os_pid, sidecar_ranks
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.readers import nsys
from specprof.analyzer.readers import sidecar as sc
from specprof.analyzer.readers.inputs import RunFiles, locate, resolve
from specprof.analyzer.readers.load import is_kineto_file

WHY = "the processes of one export, one task each"


def wanted(path: str, options: Options, jobs: int, dask) -> bool:
    """Whether to analyse the trace at `path` one process per task (the module's docstring says when)."""
    if (jobs <= 1 and not dask) or options.window.by_time:
        return False
    try:
        export = resolve(path)
        return not is_kineto_file(export) and len(processes(export)) > 1
    except SpecprofError:  # the one-task path says what is wrong with it
        return False


def processes(export: str) -> tuple[int, ...]:
    """The processes (nsys globalPid) that ran GPU work in the export, or () where its tables cannot be read one
    process at a time (readers/nsys `processes`), looked up once per version of the file."""
    st = os.stat(export)
    return _processes(export, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _processes(export: str, size: int, mtime_ns: int) -> tuple[int, ...]:
    return nsys.processes(export)


class ProcessRun(Run):
    """One process of the export at `files.trace` (its globalPid `pid`), as a run of its own: its GPU ops, CUDA
    calls and NVTX events only, and no other file of the run (the sidecars and the run without nsys are the
    whole run's). Neither its attribution nor its synchronize-timer estimate goes through the caches, which keep
    the whole export's."""

    def __init__(self, path: str, options: Options, files: RunFiles, pid: int, split: nsys.Split | None = None):
        super().__init__(path, options, RunInputs(), files)
        self.pid = pid
        self.split = split

    def read_attribution(self) -> Attribution:
        trace = nsys.read_nsys_sqlite(self.files.trace, process=self.pid, split=self.split)
        if self.options.window:
            with progress.step("selecting the window"):
                trace = select(trace, self.options.window, self.options.grouping)
        o = self.options
        return attribute(trace, grouping=o.grouping, rules=o.rule_list, domains=o.domains)

    def sync_timers(self, a: Attribution):
        return estimate_sync_timers(a)


def analyze_all(path: str, options: Options, outputs: many.Outputs, jobs: int = 1, dask=None) -> many.Several:
    """The outputs of the processes of the export at `path` that ran GPU work, in rank order."""
    export = resolve(path)
    pids = processes(export)
    folder = _split_folder(export)
    try:
        rows = nsys.rows_to_walk(export)
        with progress.step(f"handing {len(pids)} processes their rows", rows, "rows") as step:
            split = nsys.split(export, pids, folder, step)
        tasks = [(path, export, pid, split) for pid in pids]
        with progress.step(f"analysing {len(tasks)} processes", len(tasks), "processes") as step:
            done = parallel.map_paths(_task, tasks, options, outputs, jobs=jobs, dask=dask, done=step.advance)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    ranks = _ranks([(pid, device, osp) for (_, _, pid, _), (_, device, osp) in zip(tasks, done)], locate(path))
    outs = []
    for (out, _, _), rank in zip(done, ranks):
        out.rank = rank
        outs.append(out)
    outs.sort(key=lambda o: o.rank)
    return many.Several(outs, True, WHY)


def _split_folder(export: str) -> str:
    """A new empty folder for the export's rows split by process: under $SPECPROF_SPLIT_DIR, else the system's
    temporary folder."""
    where = os.environ.get("SPECPROF_SPLIT_DIR") or None
    try:
        return tempfile.mkdtemp(prefix="specprof-split-", dir=where)
    except OSError as exc:
        raise SpecprofError(f"{export}: no folder for each process's rows could be made in {where or tempfile.gettempdir()} "
                            f"({exc.strerror}); set $SPECPROF_SPLIT_DIR to a folder with room, or analyse the export "
                            "in one task (without --jobs)", export) from None


def _task(task: tuple[str, str, int, nsys.Split], options: Options, outputs: many.Outputs):
    """One process's output, its first device and its OS process id: the unit of work, run where the export is."""
    path, export, pid, split = task
    run = ProcessRun(path, options, RunFiles(path=path, trace=export), pid, split)
    out = many.produce(run, outputs, alone=False)
    a = run.attribution()
    return out, int(a.ops["device"].min()), os_pid(a.trace.meta, pid)


def _ranks(procs: list[tuple[int, int, int]], files: RunFiles) -> list[int]:
    """Each process's rank (`procs`: globalPid, device, OS pid), as derived/ranks.py `number_ranks` numbers the
    (process, device) pairs: the sidecars' tensor-parallel ranks when every process has a distinct one, else in
    device order, then process id."""
    tp = sidecar_ranks(sc.read_sidecars(files.sidecars).files) if files.sidecars else {}
    given = [tp.get(osp) for _, _, osp in procs]
    if all(r is not None for r in given) and len(set(given)) == len(procs):
        return given
    order = sorted(range(len(procs)), key=lambda i: (procs[i][1], procs[i][0]))
    return [order.index(i) for i in range(len(procs))]
