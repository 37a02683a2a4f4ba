"""Which files the user's arguments stand for: a trace file, a run directory made by `specprof capture`, or a
folder of traces; and the files of a run (its export, its sidecars, the run without nsys beside it).

A run directory holds the nsys export (`*.sqlite`) or a PyTorch-profiler trace, the tracer's sidecars
(`specprof-sidecar.*.jsonl`) and `manifest.json`. When it also holds `no-nsys/` (the same workload run
without nsys, tracer on: `specprof reference --trace --out RUN/no-nsys`, or any run of yours copied there),
that folder's sidecars are the baseline of the cross-check's inflation table, found automatically and named
in the output; `--baseline-sidecar` overrides it. A reference-engine `ground_truth.json` in both adds GPU-time
inflation, and a `server.log` the accept-length check. A trace file inside a run directory (`RUN/run.sqlite`:
the directory's only trace, beside its sidecars or its manifest) is that run: the directory's files count as
when the directory is given. Any other trace file gets sidecars only from `--sidecar`. A run directory with
sidecars and no trace (`specprof capture --no-nsys --gpu-events`: `sidecars_only`) is a run without nsys: its
files hold no trace (`RunFiles.trace` None), and its sidecars are analysed alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.run_data import BASELINE_DIR
from specprof.analyzer.readers import ground_truth as gt
from specprof.analyzer.readers import sidecar as sc
from specprof.analyzer.readers.files import list_dir
from specprof.analyzer.readers.kineto import is_kineto

KINETO_SUFFIXES = (".json", ".json.gz")
MANIFEST = "manifest.json"
SERVER_LOG = "server.log"  # the server's log in a run directory (scripts/sglang/serve.py writes it there)


def expand(paths) -> list[str]:
    """The traces the arguments name, in order.

    A file stays as given. A directory that holds an nsys export (`*.sqlite`, a run directory made
    by `specprof capture`) stays as given: `resolve` finds its export. A directory of several exports
    (and no manifest) stands for each export. Any other directory stands for every PyTorch-profiler trace
    in it (`*.json`, `*.json.gz` whose top level has `traceEvents`; other JSON files, such as a manifest,
    are passed over); one such trace leaves the directory as given (a run directory).
    """
    out: list[str] = []
    for path in paths:
        path = str(path)
        if not os.path.isdir(path):
            out.append(path)
            continue
        exports = [n for n in list_dir(path) if n.endswith(".sqlite")]
        if len(exports) > 1 and not os.path.isfile(os.path.join(path, MANIFEST)):
            out.extend(os.path.join(path, n) for n in exports)  # a folder of exports: each one
            continue
        if exports:
            out.append(path)
            continue
        traces = kineto_traces(path)
        if len(traces) == 1:
            out.append(path)  # a run directory: the single-run path finds its trace and sidecar
            continue
        if not traces and sidecars_only(path):
            out.append(path)  # a run made without nsys: its sidecars alone
            continue
        if not traces:
            raise SpecprofError(
                f"{path}: a directory with no nsys SQLite export (*.sqlite) and no PyTorch-profiler "
                "trace (*.json, *.json.gz with traceEvents) in it; give an export, a trace, or a run "
                "directory made by `specprof capture`", path)
        out.extend(traces)
    if not out:
        raise SpecprofError("no trace given; give an nsys export, a PyTorch-profiler trace or a directory")
    return out


def kineto_traces(folder: str) -> list[str]:
    """The PyTorch-profiler traces in `folder`, sorted by name."""
    paths = (os.path.join(folder, n) for n in list_dir(folder) if n.endswith(KINETO_SUFFIXES))
    return [p for p in paths if os.path.isfile(p) and is_kineto(p)]


def sidecars_only(path: str) -> bool:
    """Whether `path` is a run directory made without nsys (`specprof capture --no-nsys`, or a reference run's
    `no-nsys/`): the tracer's sidecars in it, and no trace (no nsys export, no PyTorch-profiler trace)."""
    if not os.path.isdir(path) or not sc.find(path):
        return False
    return not any(n.endswith(".sqlite") for n in list_dir(path)) and not kineto_traces(path)


def resolve(path: str) -> str:
    """The trace file for `path`: the file itself, or the export (or single trace) inside a run directory."""
    if not os.path.isdir(path):
        return path
    exports = [f for f in list_dir(path) if f.endswith(".sqlite")]
    if len(exports) == 1:
        return os.path.join(path, exports[0])
    if not exports:
        traces = kineto_traces(path)  # a run directory of a torch.profiler capture
        if len(traces) == 1:
            return traces[0]
        raise SpecprofError(f"{path}: a directory with no nsys SQLite export (*.sqlite) in it; give "
                            "an export, or a run directory made by `specprof capture`"
                            + (" (its PyTorch-profiler traces are several ranks: give them to "
                               "`specprof analyze`)" if traces else ""), path)
    raise SpecprofError(f"{path}: a directory with several exports ({', '.join(exports)}); give one", path)


def manifest(path: str) -> dict | None:
    """What `specprof capture` recorded about the run (`manifest.json`, specprof.run/1) for a run
    directory, or for an export inside one; None when there is none, it cannot be opened, or it is not a JSON
    object. One that is not JSON (nested too deep to read included) is refused (SpecprofError): the run's command
    line would be silently unknown."""
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    where = os.path.join(folder, MANIFEST)
    try:
        with open(where, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError:
        return None
    except (ValueError, RecursionError) as exc:
        deep = ", nested too deep to read" if isinstance(exc, RecursionError) else ""
        raise SpecprofError(f"{where}: not valid JSON{deep}: the run's manifest is damaged; fix it, or move it "
                            "away to analyse the run without it", where) from None
    return data if isinstance(data, dict) else None


@dataclass
class RunFiles:
    """The files of one run: its trace and what lies beside it (`locate`)."""

    path: str  # as given
    trace: str | None  # the trace file; None: a run made without nsys, its sidecars alone (`sidecars_only`)
    folder: str | None = None  # the run directory: the path given, or the one a trace file given lies in
    sidecars: list[str] = field(default_factory=list)
    baseline: list[str] = field(default_factory=list)
    baseline_auto: bool = False  # found in RUN/no-nsys, not given
    ground_truth: str | None = None
    baseline_ground_truth: str | None = None
    server_log: str | None = None  # RUN/server.log: the server's own log beside its capture

    @property
    def found_beside(self) -> bool:
        """A trace file was given, and the run directory it lies in gave the rest."""
        return self.folder is not None and self.folder != self.path


def twin_dirs(path: str) -> list[str]:
    """A run directory's twins without nsys: RUN/no-nsys, then its repeats RUN/no-nsys-2, RUN/no-nsys-3, ...
    (`specprof capture --no-nsys --repeat N`), as long as they follow on."""
    out, i = [], 2
    if os.path.isdir(os.path.join(path, BASELINE_DIR)):
        out.append(os.path.join(path, BASELINE_DIR))
        while os.path.isdir(os.path.join(path, f"{BASELINE_DIR}-{i}")):
            out.append(os.path.join(path, f"{BASELINE_DIR}-{i}"))
            i += 1
    return out


def run_folder(path: str) -> str | None:
    """The run directory a trace file lies in: its folder, when the folder's only trace is this file and the
    folder holds the tracer's sidecars or `specprof capture`'s manifest; else None."""
    folder = os.path.dirname(path) or "."
    if not (sc.find(folder) or os.path.isfile(os.path.join(folder, MANIFEST))):
        return None
    try:
        return folder if os.path.samefile(resolve(folder), path) else None
    except (SpecprofError, OSError):
        return None


def locate(path: str, sidecars=(), baseline_sidecars=()) -> RunFiles:
    """The files of a run: a run directory (or a trace file inside one, `run_folder`), or a trace file plus
    the sidecars given."""
    if not os.path.exists(path):
        raise SpecprofError(f"{path}: no such file or directory", path)
    folder = path if os.path.isdir(path) else run_folder(path)
    alone = sidecars_only(path)
    files = RunFiles(path=path, trace=None if alone else resolve(path), folder=folder)
    files.sidecars = list(sidecars) or (sc.find(folder) if folder else [])
    if alone and (sidecars or baseline_sidecars):
        raise SpecprofError(f"{path}: a run made without nsys: its own sidecars are its run without the profiler; "
                            "give no --sidecar or --baseline-sidecar with it", path)
    if alone:
        pass  # its sidecars are the run without nsys: no baseline of its own
    elif baseline_sidecars:
        files.baseline = list(baseline_sidecars)
    elif folder and os.path.isdir(os.path.join(folder, BASELINE_DIR)):
        files.baseline = [f for d in twin_dirs(folder) for f in sc.find(d)]
        files.baseline_auto = bool(files.baseline)
    if folder:
        files.ground_truth = gt.find(folder)
        log = os.path.join(folder, SERVER_LOG)
        files.server_log = log if os.path.isfile(log) else None
        if files.baseline:
            files.baseline_ground_truth = gt.find(os.path.dirname(os.path.abspath(files.baseline[0])))
    return files
