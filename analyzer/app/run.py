"""One run, loaded once (`Run`): its files found when it is loaded (readers/inputs.py `locate`), and what the user
gave besides checked; then, once the command says what it needs, its trace read and attributed through the caches
(app/analyze.py), its other files (sidecars, the run without nsys, ground truth, the server log, a baseline) read
into one `RunData` (its settings resolved there: readers/settings.py), each once, and what the command shows made
of them (derived/analysis.py): every value the renderers show (`analysis()`: an `Analysis`, made whole before
anything is written), its side of a comparison (`side()`: the trace alone), its inputs to the sweep
(`sweep_input()`: no economics), its rows for the results store (`record(analysis)`).

A run of the results store (`@ID`) is a `StoredRun`: what compare and sweep need of it, read from the store.
`open_run` gives either from what the user wrote.
"""

from __future__ import annotations

import os

from specprof.analyzer import progress
from specprof.analyzer.app import store
from specprof.analyzer.app.analyze import Options, RunInputs, attribution, read_trace
from specprof.analyzer.app.analyze import sync_timers as cached_sync_timers
from specprof.analyzer.core.attribution import Attribution
from specprof.analyzer.derived.analysis import Analysis, analyse, analyse_sidecars, pace, sweep_input, sweep_input_of
from specprof.analyzer.derived.baseline_step import given_step, sidecar_step, trace_step
from specprof.analyzer.derived.compare import Side, baseline_differences, events_side, side_of
from specprof.analyzer.derived.crosscheck import DEFAULT_LOG_INTERVAL
from specprof.analyzer.derived.sweep_runs import SweepRun, unprofiled_sweep_run
from specprof.analyzer.derived.sync_timers import SyncTimerEstimate
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.run_data import BASELINE_DIR, BaselineStep, RunData
from specprof.analyzer.readers import ground_truth as gt
from specprof.analyzer.readers.adaptive_config import read_adaptive_config
from specprof.analyzer.readers import sidecar as sc
from specprof.analyzer.readers.client import read_whole_runs
from specprof.analyzer.readers.inputs import RunFiles, locate, manifest, sidecars_only, twin_dirs
from specprof.analyzer.readers.nsys_report import exported
from specprof.analyzer.readers.settings import read_settings
from specprof.analyzer.readers.sglang_log import read_server_log


class Run:
    """The run at `path` (a trace file, a run directory made by `specprof capture`, or a trace file inside one),
    analysed with `options`, with what the user gave besides its trace (`inputs`); `files`: its files. Nothing is
    read until a command asks for what it shows, and each file is read once whatever it asks for."""

    def __init__(self, path: str, options: Options, inputs: RunInputs, files: RunFiles):
        self.path, self.options, self.inputs, self.files = path, options, inputs, files
        self._attribution: Attribution | None = None
        self._data: RunData | None = None
        self._analysis: Analysis | None = None

    @classmethod
    def load(cls, path: str, options: Options = Options(), inputs: RunInputs = RunInputs()) -> Run:
        """The run at `path`: its files found, and what the user gave besides checked, before anything is read. A
        `.nsys-rep` report given alone is its SQLite export (made with nsys when there is none: readers/nsys_report.py)."""
        path = exported(path, here=options.export_here, cache=options.cache)
        files = locate(path, inputs.check().sidecars, inputs.baseline_sidecars)
        if inputs.server_log and not files.sidecars:
            raise SpecprofError(f"{inputs.server_log}: the server log is compared with the sidecar's accept counts: "
                                "give the sidecar too (--sidecar FILE, or a run directory)", inputs.server_log)
        return cls(path, options, inputs, files)

    def attribution(self) -> Attribution:
        """The attribution of the run's trace, read and attributed on the first call (`read_attribution`)."""
        if self._attribution is None:
            self._attribution = self.read_attribution()
        return self._attribution

    def read_attribution(self) -> Attribution:
        """Read and attribute the run's trace, through the caches (app/analyze.py `attribution`). A run made without
        nsys has none: what needs it is refused in one line."""
        if self.files.trace is None:
            raise SpecprofError(f"{self.path}: a run made without nsys (its sidecars alone): this needs a capture "
                                "under nsys (`specprof capture --gpu-events -o RUN -- <the same command>`); "
                                "`specprof analyze`, `compare` and `sweep` take this run as it is", self.path)
        return attribution(self.files.trace, self.options)

    def sync_timers(self, a: Attribution) -> SyncTimerEstimate | None:
        """What synchronize timers at every phase boundary would add to the attribution `a` of the run's trace
        (derived/sync_timers.py), kept beside its cached attribution (app/analyze.py `sync_timers`)."""
        return cached_sync_timers(self.files.trace, self.options, a)

    def data(self) -> RunData:
        """The run's files besides its trace, read on the first call."""
        if self._data is None:
            with progress.step("reading the run's files"):
                self._data = read_run_data(self.files, self.inputs, self.options)
        return self._data

    def analysis(self) -> Analysis:
        """Every value the renderers show (derived/analysis.py `analyse`), made on the first call: every file read
        and every result made (or its error raised) before any output is written."""
        if self._analysis is None:
            if self.files.trace is None:  # a run made without nsys: its sidecars alone
                self._analysis = analyse_sidecars(self.data())
            else:
                self._analysis = analyse(self.attribution(), self.data(), self.sync_timers)
        return self._analysis

    def report_analysis(self) -> Analysis:
        """The analysis an HTML report draws: a trace's (its timeline, kernels and phases need one); a run made
        without nsys is refused in one line, naming what shows it."""
        a = self.analysis()
        if not a.traced:
            raise SpecprofError(f"{self.path}: a run made without nsys (its sidecars alone): the HTML report draws a "
                                "trace's timeline, kernels and phases, and needs a capture under nsys; `specprof "
                                "analyze` shows this run (its breakdown from CUDA events, accept length, "
                                "economics)", self.path)
        return a

    def side(self) -> Side:
        """This run as one side of `specprof compare`: per cycle, its headline breakdown's (derived/compare.py), from
        the trace alone where the analysis is not made."""
        if self.files.trace is None:  # a run made without nsys: its phases between their CUDA events
            return events_side(self.path, self.data().sidecars)
        a = self.attribution()
        return side_of(a, self._analysis.cycle_breakdown if self._analysis is not None else pace(a))

    def sweep_input(self) -> SweepRun:
        """This run's inputs to the sweep's fit (derived/sweep_runs.py): no economics made for them."""
        if self.files.trace is None:  # a run made without nsys: its sidecars alone
            return unprofiled_sweep_run(self.data())
        if self._analysis is not None:
            return sweep_input_of(self._analysis)
        return sweep_input(self.attribution(), self.data())

    def store_key(self) -> dict:
        """The analysis options that change this run's results, as the results store keys the run by them."""
        o, i = self.options, self.inputs
        return store.options_of(o.grouping, o.domains, o.rule_list, self.files.sidecars, self.files.baseline,
                                i.server_log, i.baseline_run, i.baseline_ms, i.log_interval if i.server_log else None,
                                window=o.window.describe() if o.window else None)

    def record(self, a: Analysis) -> store.Record:
        """This run's rows for the results store from its analysis `a`: its manifest, and the sweep's inputs when it
        has sidecars. A run made without nsys is refused in one line: the store keys a run by its trace."""
        if not a.traced:
            raise SpecprofError(f"{self.path}: a run made without nsys (its sidecars alone): the results store keys "
                                "a run by its trace and needs a capture under nsys; analyze it without --db",
                                self.path)
        sweep = sweep_input_of(a) if self.files.sidecars else None
        return store.record(a, path=self.path, trace_path=self.files.trace, options=self.store_key(),
                            manifest=a.data.manifest, sweep=sweep)


class StoredRun:
    """A run of the results store `db`, written `@ID` (`arg`): its side of a comparison and its sweep's inputs,
    read from the store."""

    def __init__(self, db, arg: str):
        self.db, self.path, self.id = db, arg, store.parse_run_id(arg)

    def side(self) -> Side:
        return store.charges(self.db, self.id)

    def sweep_input(self) -> SweepRun:
        return store.stored_sweep_run(self.db, self.path)


def open_run(arg: str, options: Options = Options(), inputs: RunInputs = RunInputs(), db=None) -> Run | StoredRun:
    """The run the user wrote: `@ID` of the results store `db`, else a path."""
    if not store.is_run_id(arg):
        return Run.load(arg, options, inputs)
    if db is None:
        raise SpecprofError(f"{arg}: a stored run: give the results database with --db FILE")
    return StoredRun(db, arg)


# -- reading a run's files ----------------------------------------------------------------------------------------

def read_run_data(files: RunFiles, inputs: RunInputs = RunInputs(), options: Options = Options()) -> RunData:
    """Read the files of a run (`files`, and the ones the user gave in `inputs`). A server log beside the
    capture (RUN/server.log) is used only for a run with accept counts (a speculative one); the files used
    without being given are said in `found`."""
    sidecars = sc.read_sidecars(files.sidecars) if files.sidecars else None
    baseline = sc.read_sidecars(files.baseline) if files.baseline else None
    data = RunData(path=files.path, folder=files.folder, sidecars=sidecars, baseline=baseline, steps=inputs.steps,
                   manifest=manifest(files.path))
    found_log = inputs.server_log is None and files.server_log is not None and sidecars is not None \
        and sidecars.accepts.height > 0  # a log is compared with accept counts: a speculative run's
    server_log = inputs.server_log or (files.server_log if found_log else None)
    # what the server ran with: its log's start-up line (any log of the run), else the traced command line
    data.settings = read_settings(inputs.server_log or files.server_log, sidecars, data.manifest)
    data.manifest_settings = read_settings(manifest=data.manifest)
    if data.settings.adaptive and data.settings.adaptive_config and sidecars is not None:
        config = read_adaptive_config(data.settings.adaptive_config, files.folder)
        data.adaptive_thresholds, data.adaptive_note = config.keys, config.describe()
    if server_log:  # (with sidecars: `Run.load` refuses a log given without them)
        try:
            data.server_log = read_server_log(server_log)
        except SpecprofError:
            if not found_log:
                raise
            # `specprof capture` keeps every run's output there: a log without `accept len` lines is no error
            data.found.append(f"server log found ({server_log}) but it has no `accept len:` line: accept length "
                              "not checked")
            found_log = False
        else:
            data.log_interval = inputs.log_interval or data.settings.log_interval or DEFAULT_LOG_INTERVAL
    if found_log:
        data.found.append(f"server log found: {server_log}")
    if files.baseline_auto:
        data.found.append(f"baseline (without nsys) found in {os.path.join(files.folder, BASELINE_DIR)}")
    if files.found_beside and sidecars is not None:
        data.found.insert(0, f"{files.path} lies in the run directory {files.folder}: its files were used as for "
                             "the directory")
    if files.ground_truth:
        data.ground_truth = gt.read_ground_truth(files.ground_truth)
        data.ground_truth_file = files.ground_truth
    if files.baseline_ground_truth:
        data.baseline_ground_truth = gt.read_ground_truth(files.baseline_ground_truth)
    read = {tuple(os.path.realpath(p) for p in paths): sides for paths, sides in
            ((files.sidecars, sidecars), (files.baseline, baseline)) if paths and sides is not None}
    data.whole_run = read_whole_runs(files.folder, read)
    if inputs.baseline_run is not None and os.path.isdir(inputs.baseline_run):
        data.baseline_whole_run = read_whole_runs(inputs.baseline_run)
    if inputs.baseline_ms is not None:
        data.baseline_step = given_step(inputs.baseline_ms)
    elif inputs.baseline_run is not None:
        data.baseline_step = baseline_step(inputs.baseline_run, inputs.baseline_range, options)
        differ = [] if inputs.allow_mixed else baseline_differences(  # (from the manifests, as `compare` does)
            (files.path, data.manifest_settings.setup),
            (inputs.baseline_run, read_settings(manifest=manifest(inputs.baseline_run)).setup))
        if differ:
            raise SpecprofError(f"--baseline {inputs.baseline_run} is not the plain decoding of this workload: "
                                + "; ".join(differ) + " (its step time is no baseline for this run's cycles; "
                                "--allow-mixed uses it anyway)", inputs.baseline_run)
    return data


def baseline_step(path: str, step_range: str | None = None, options: Options = Options()) -> BaselineStep:
    """The plain-decode step time of the non-speculative run at `path`: a sidecar file, a trace file, or a run
    directory (its `no-nsys/` sidecars first: no profiler; then its sidecars; then its trace's ranges, the trace
    read through the caches of `options`; derived/baseline_step.py `sidecar_step`, `trace_step`)."""
    if path.endswith(".jsonl") and os.path.isfile(path):
        paths, where = [path], "sidecar"
    elif os.path.isdir(path) and sc.find(os.path.join(path, BASELINE_DIR)):
        # the twins without nsys and their repeats; the run under nsys beside them shows their noise
        paths, where = [f for d in twin_dirs(path) for f in sc.find(d)], "sidecar without nsys"
        profiled = sc.find(path)
        return sidecar_step(sc.read_sidecars(paths), path, where,
                                      sc.read_sidecars(profiled) if profiled else None)
    elif os.path.isdir(path) and sc.find(path):
        # a run made without nsys (its sidecars alone) is one; any other run directory's were under nsys
        paths, where = sc.find(path), "sidecar without nsys" if sidecars_only(path) else "sidecar under nsys"
    else:
        return trace_step(read_trace(path, options), path, step_range)
    return sidecar_step(sc.read_sidecars(paths), path, where)
