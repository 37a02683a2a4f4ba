"""What a run's files besides its trace hold, parsed (`RunData`): the analyses of derived/ take it, and only
app/run.py reads the files into it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import polars as pl

from specprof.analyzer.model.client import WholeRunFiles
from specprof.analyzer.model.settings import RunSettings
from specprof.analyzer.model.sidecars import Sidecars

BASELINE_DIR = "no-nsys"  # in a run directory: the same workload run without the profiler


class BaselineStep(NamedTuple):
    """The plain-decode step time that the economics sets a speculative cycle against."""

    ns: int  # mean ns per step
    source: str  # where it comes from, in the user's words
    notes: list[str]
    batch: float | None  # mean requests per step, or None when unknown
    measure: object = None  # derived/intervals.py Measure: the step time with its 95 % interval (None: unknown)
    sidecars: Sidecars | None = None  # the plain run's sidecars it was measured from (None: given, or a trace)


@dataclass
class RunData:
    """The parsed files of one run besides its trace; every field None when the run does not have it."""

    path: str | None = None  # the run as the user named it
    folder: str | None = None  # its run directory (None: a trace file alone)
    sidecars: Sidecars | None = None  # the tracer's sidecars of the profiled run
    baseline: Sidecars | None = None  # the sidecars of the same workload run without the profiler
    ground_truth: pl.DataFrame | None = None  # the reference engine's CUDA events (readers/ground_truth.py)
    ground_truth_file: str | None = None  # ... and the file they were read from
    baseline_ground_truth: pl.DataFrame | None = None  # ... of the run without the profiler
    server_log: pl.DataFrame | None = None  # the `accept len` lines of SGLang's log (readers/sglang_log.py)
    log_interval: int | None = None  # iterations per `accept len` line (with `server_log`)
    # what the server ran with (readers/settings.py `read_settings`): its log's start-up line first, else the traced
    # command line (the sidecar header's, else the manifest's)
    settings: RunSettings = field(default_factory=RunSettings)
    # ... from the manifest alone: what holds where the sidecar is of another run (it does not line up with the trace)
    manifest_settings: RunSettings = field(default_factory=RunSettings)
    baseline_step: BaselineStep | None = None  # a plain decode's step time, given or measured
    # SGLang's adaptive config, where the run is adaptive and names one (readers/adaptive_config.py): its batch-size
    # thresholds, ascending (None: none read), and one sentence on what was read or why not
    adaptive_thresholds: tuple[int, ...] | None = None
    adaptive_note: str | None = None
    steps: int | None = None  # the draft steps K, given where the traced command line does not say
    manifest: dict | None = None  # what `specprof capture` recorded (the traced command line)
    # the workload as its client saw it (readers/client.py `read_whole_runs`): the run's repeated runs without nsys
    # (else its own under nsys), each with its sidecar; and the baseline run's (--baseline RUN, a run directory)
    whole_run: list[WholeRunFiles] = field(default_factory=list)
    baseline_whole_run: list[WholeRunFiles] = field(default_factory=list)
    found: list[str] = field(default_factory=list)  # files used without being given, one sentence each
