"""The one way from a path to an Analysis, for every command: the trace read (through the Parquet cache of its
parsed tables), attributed (through the cache of its attribution), then enriched with what the run's other
files add (the cross-check, the economics, the per-rank results).

One cache policy: with `Options.cache` (the default; `--no-cache` turns it off) an nsys export's tables and
its latest attribution are kept in the user's cache folder and used when they match (readers/trace_cache.py,
app/analysis_cache.py); Kineto traces are read each time.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer import progress
from analyzer.app import analysis_cache, window_reads
from analyzer.core.attribution import ALL_DOMAINS, DEFAULT_GROUPING, Attribution, attribute
from analyzer.core.categories import Rule, default_rules, load_rules
from analyzer.core.window import Window
from analyzer.derived.analysis import Analysis
from analyzer.derived.run_files import enrich
from analyzer.readers.inputs import locate, resolve


@dataclass(frozen=True)
class Options:
    """How a trace is analysed, and whether through the caches (picklable: it travels to parallel workers)."""

    grouping: tuple[str, ...] = DEFAULT_GROUPING  # range names that group one cycle (not phases)
    domains: tuple[str, ...] = ()  # NVTX domains phases come from (ALL_DOMAINS: every one; empty: the default)
    rules: tuple[Rule, ...] = ()  # category rules, tried first; empty: the built-in ones alone
    cache: bool = True
    window: Window = Window()  # the part of each trace analysed (core/window.py); empty: all of it

    @classmethod
    def of(cls, categories_file: str | None = None, grouping=DEFAULT_GROUPING, domains=(), all_domains: bool = False,
           cache: bool = True, window: Window = Window()) -> Options:
        """Options from what a user gives: a TOML file of category rules (read here), grouping range names, NVTX
        domains or all of them."""
        return cls(grouping=tuple(grouping), domains=(ALL_DOMAINS,) if all_domains else tuple(domains),
                   rules=tuple(load_rules(categories_file)), cache=cache, window=window)

    @property
    def rule_list(self) -> list[Rule]:
        return list(self.rules) or default_rules()


@dataclass(frozen=True)
class RunInputs:
    """What the user gives besides the trace: the run's sidecars (default: the run directory's), the sidecars of
    the run without nsys (default: RUN/no-nsys/), a server log (default: RUN/server.log of a speculative run) and
    its --decode-log-interval (default: the server's, from its command line in the sidecar, else SGLang's), a
    baseline run or step time."""

    sidecars: tuple[str, ...] = ()
    baseline_sidecars: tuple[str, ...] = ()
    server_log: str | None = None
    log_interval: int | None = None
    baseline_run: str | None = None
    baseline_ms: float | None = None
    baseline_range: str | None = None  # the range marking one decode step in a baseline trace without a sidecar
    steps: int | None = None  # the draft steps K, when the traced command line does not say


def attribution(path: str, options: Options = Options()) -> Attribution:
    """The attribution of the trace at `path` (a file or a run directory), or of the part of it that
    `options.window` keeps, through the caches."""
    rules = options.rule_list
    trace = window_reads.load(path, options.window, options.grouping, options.cache)
    if not options.cache or trace.meta.format != "nsys-sqlite":
        return attribute(trace, grouping=options.grouping, rules=rules, domains=options.domains)
    export = resolve(path)
    key = analysis_cache.key(options.grouping, rules, options.domains)
    if options.window:
        key["window"] = options.window.key()
    with progress.step("reading the cached analysis"):
        cached = analysis_cache.load(export, key, trace)
    if cached is not None:
        return cached
    result = attribute(trace, grouping=options.grouping, rules=rules, domains=options.domains)
    with progress.step("caching the analysis"):
        analysis_cache.store(export, key, result)
    return result


def analyze(path: str, options: Options = Options(), inputs: RunInputs = RunInputs()) -> Analysis:
    """The Analysis of the run at `path`: a trace file, or a run directory made by `specprof capture`."""
    a = attribution(path, options)
    files = locate(path, inputs.sidecars, inputs.baseline_sidecars)
    return enrich(a, files, server_log=inputs.server_log, baseline_run=inputs.baseline_run,
                  baseline_ms=inputs.baseline_ms, log_interval=inputs.log_interval, steps=inputs.steps,
                  baseline_range=inputs.baseline_range)
