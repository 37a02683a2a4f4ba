"""How a run is analysed (`Options`) and what the user gives besides its trace (`RunInputs`), and the one way from a
trace to its attribution, for every command (`attribution`): the trace read (through the Parquet cache of its
parsed tables), then attributed (through the cache of its attribution). app/run.py's `Run` is loaded with them.

One cache policy: with `Options.cache` (the default; `--no-cache` turns it off) an nsys export's tables and
its latest attribution are kept in the user's cache folder and used when they match (readers/trace_cache.py,
app/analysis_cache.py); Kineto traces are read each time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from specprof.analyzer import progress
from specprof.analyzer.app import analysis_cache, window_reads
from specprof.analyzer.code_identity import code_hash
from specprof.analyzer.core.attribution import ALL_DOMAINS, DEFAULT_GROUPING, Attribution, attribute
from specprof.analyzer.core.categories import Rule, default_rules, load_rules
from specprof.analyzer.core.window import Window
from specprof.analyzer.derived.analysis import estimate_sync_timers
from specprof.analyzer.derived.sync_timers import SyncTimerEstimate
from specprof.analyzer.derived.baseline_step import given_step
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.trace import Trace
from specprof.analyzer.readers.inputs import resolve
from specprof.analyzer.readers.load import load_trace


@dataclass(frozen=True)
class Options:
    """How a trace is analysed, and whether through the caches (picklable: it travels to parallel workers)."""

    grouping: tuple[str, ...] = DEFAULT_GROUPING  # range names that group one cycle (not phases)
    domains: tuple[str, ...] = ()  # NVTX domains phases come from (ALL_DOMAINS: every one; empty: the default)
    rules: tuple[Rule, ...] = ()  # category rules, tried first; empty: the built-in ones alone
    cache: bool = True
    window: Window = Window()  # the part of each trace analysed (core/window.py); empty: all of it
    export_here: bool = False  # a .nsys-rep given alone is exported beside it, not into the cache

    @classmethod
    def of(cls, categories_file: str | None = None, grouping=DEFAULT_GROUPING, domains=(), all_domains: bool = False,
           cache: bool = True, window: Window = Window(), export_here: bool = False) -> Options:
        """Options from what a user gives: a TOML file of category rules (read here), grouping range names, NVTX
        domains or all of them."""
        return cls(grouping=tuple(grouping), domains=(ALL_DOMAINS,) if all_domains else tuple(domains),
                   rules=tuple(load_rules(categories_file)), cache=cache, window=window, export_here=export_here)

    @property
    def rule_list(self) -> list[Rule]:
        return list(self.rules) or default_rules()


def baseline_exists(path: str) -> str:
    """`path` of --baseline, when it exists; one line naming what --baseline takes when it does not."""
    if not os.path.exists(path):
        raise SpecprofError(f"--baseline {path}: no such file or directory; give the non-speculative run's directory, "
                            "its sidecar (specprof-sidecar.*.jsonl), or its trace (an nsys export or report, a Kineto "
                            "trace)", path)
    return path


@dataclass(frozen=True)
class RunInputs:
    """What the user gives besides the trace: the run's sidecars (default: the run directory's), the sidecars of
    the run without nsys (default: RUN/no-nsys/), a server log (default: RUN/server.log of a speculative run) and
    its --decode-log-interval (default: the server's, from its command line in the sidecar, else SGLang's), a
    baseline run or step time. Several traces take the ones that hold for any run (`for_each_trace`)."""

    sidecars: tuple[str, ...] = ()
    baseline_sidecars: tuple[str, ...] = ()
    server_log: str | None = None
    log_interval: int | None = None
    baseline_run: str | None = None
    baseline_ms: float | None = None
    baseline_range: str | None = None  # the range marking one decode step in a baseline trace without a sidecar
    steps: int | None = None  # the draft steps K, when the traced command line does not say

    def check(self) -> RunInputs:
        """These inputs, when they make sense before any file is read (a baseline step time is positive)."""
        if self.baseline_ms is not None and self.baseline_run is not None:
            raise SpecprofError(f"--baseline {self.baseline_run} and --baseline-ms {self.baseline_ms:g} both give the "
                                "plain-decode step: give one of them")
        if self.baseline_ms is not None:
            given_step(self.baseline_ms)
        if self.baseline_run is not None:
            baseline_exists(self.baseline_run)
        return self

    def for_each_trace(self) -> RunInputs:
        """These inputs for each of several traces: the ones that hold for any run (a baseline, the draft steps,
        the log interval of each run's own server log) as they are; the files of one run (its sidecars, its run
        without nsys, its server log) refused in one line."""
        given = [flag for name, flag in _ONE_RUN if getattr(self, name)]
        if given:
            one = len(given) == 1
            raise SpecprofError(f"{' and '.join(given)} {'belongs' if one else 'belong'} to one run, and several "
                                f"traces were given: give {'it' if one else 'them'} with one trace, or give run "
                                "directories (each one's sidecars, no-nsys/ and server.log are found in it)")
        return self.check()


# The inputs that are files of one run (RunInputs field, its option).
_ONE_RUN = (("sidecars", "--sidecar"), ("baseline_sidecars", "--baseline-sidecar"), ("server_log", "--server-log"))


def read_trace(path: str, options: Options = Options()) -> Trace:
    """The trace at `path` (a file or a run directory), through the cache of its parsed tables when
    `options.cache`."""
    return load_trace(path, cache=options.cache)


def _cache_key(options: Options, rules) -> dict:
    key = analysis_cache.key(options.grouping, rules, options.domains)
    if options.window:
        key["window"] = options.window.key()
    return key


def sync_timers(path: str, options: Options, a: Attribution) -> SyncTimerEstimate | None:
    """The synchronize-timer estimate of the attribution `a` of the trace at `path` (derived/sync_timers.py), kept
    beside the cached attribution (app/analysis_cache.py) and read from there when it matches."""
    if not options.cache or a.trace.meta.format != "nsys-sqlite":
        return estimate_sync_timers(a)
    export, key, code = resolve(path), _cache_key(options, options.rule_list), code_hash()
    with progress.step("reading the cached synchronize-timer estimate"):
        doc = analysis_cache.load_result(export, key, "sync_timers", code)
    if doc is not None:
        try:
            return None if doc["none"] else SyncTimerEstimate(**{**doc["fields"],
                                                                 "phases": analysis_cache.doc_frame(doc["phases"])})
        except Exception:
            pass
    est = estimate_sync_timers(a)
    phases = analysis_cache.frame_doc(est.phases) if est is not None else None
    if est is None or phases is not None:
        fields_ = {} if est is None else {f.name: getattr(est, f.name) for f in fields(est) if f.name != "phases"}
        analysis_cache.store_result(export, key, "sync_timers", code,
                                    {"none": est is None, "fields": fields_, "phases": phases})
    return est


def attribution(path: str, options: Options = Options()) -> Attribution:
    """The attribution of the trace at `path` (a file or a run directory), or of the part of it that
    `options.window` keeps, through the caches."""
    rules = options.rule_list
    trace = window_reads.load(path, options.window, options.grouping, options.cache)
    if not options.cache or trace.meta.format != "nsys-sqlite":
        return attribute(trace, grouping=options.grouping, rules=rules, domains=options.domains)
    export = resolve(path)
    key = _cache_key(options, rules)
    with progress.step("reading the cached analysis"):
        cached = analysis_cache.load(export, key, trace)
    if cached is not None:
        return cached
    result = attribute(trace, grouping=options.grouping, rules=rules, domains=options.domains)
    with progress.step("caching the analysis"):
        analysis_cache.store(export, key, result)
    return result
