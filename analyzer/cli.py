"""The `specprof` console script. It only parses options and calls the library.

Each command imports what it uses when it runs: `specprof --help` loads click alone, and `capture` (which a GPU
server host runs with only the tracer, nvtx and click installed) loads nothing of the analysis stack (polars,
numpy, the store): tests/test_cli_imports.py checks `sys.modules`.
"""

from __future__ import annotations

import gc
import math
import sys

import click

from specprof.analyzer import __version__
from specprof.analyzer.errors import SpecprofError, clean, clean_lines


OUT_OF_MEMORY = ("specprof: error: out of memory (the address-space limit, `ulimit -v`, or the machine's memory "
                 "ran out); raise the limit, or analyse fewer traces at once (--jobs 1)")
# A crash in native code (analyzer/_scan.c fatal_line) close to a memory limit: an allocation failed there.
NATIVE_OUT_OF_MEMORY = ("specprof: error: out of memory: a crash in native code with the process close to its "
                        "memory limit (`ulimit -v`: the address space, or the data size); raise the limit, or analyse "
                        "fewer traces at once (--jobs 1)")
# Any other crash in native code is a bug: its signal named, then Python's traceback (faulthandler's).
FATAL_SIGNALS = {"SIGSEGV": "a segmentation fault", "SIGBUS": "a bus error", "SIGABRT": "an abort",
                 "SIGILL": "an illegal instruction", "SIGFPE": "an arithmetic fault"}
CRASH = ("specprof: error: {name} ({what}) in native code: a bug in specprof or in a library it uses; please report "
         "it to specprof's maintainers with the command, `specprof --version` and this output (Python's traceback "
         "follows)")
_NO_MEMORY = ("Cannot allocate memory", "failed to map segment", "can't start new thread", "out of memory",
              "std::bad_alloc")


def _out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, MemoryError) or any(text in str(exc) for text in _NO_MEMORY)


class _Group(click.Group):
    """Turns every SpecprofError into one line on stderr and exit code 2 (never a traceback), and so running
    out of memory: a MemoryError or a library's failed allocation, and (from the console script, where
    analyzer/_scan.c is built) a crash in native code."""

    console = False  # run as the console script (the process is specprof's), not by a test's CliRunner

    def main(self, args=None, *rest, **kwargs):
        if args is None:  # the console script, not a test's CliRunner: the whole process is specprof's
            _Group.console = True
            _on_crash()
        return super().main(args, *rest, **kwargs)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SpecprofError as exc:
            click.echo(f"specprof: error: {clean(exc)}", err=True)
            sys.exit(exc.exit_code)
        except (MemoryError, RuntimeError, ImportError, OSError) as exc:
            if not _out_of_memory(exc):
                raise
            click.echo(OUT_OF_MEMORY, err=True)
            sys.exit(2)


def _on_crash() -> None:
    """What a crash in native code prints (the console script only): Python's faulthandler is turned on (the
    traceback), then analyzer/_scan.c's handler goes before it: one out-of-memory line and exit 2 close to a
    memory limit, else the signal's own line (CRASH), and faulthandler's traceback after it."""
    import faulthandler
    import signal

    try:
        if not faulthandler.is_enabled():
            faulthandler.enable()
    except (RuntimeError, ValueError, OSError):  # no usable stderr
        pass
    try:
        from specprof.analyzer import _scan

        crashes = {int(getattr(signal, name)): (CRASH.format(name=name, what=what) + "\n").encode()
                   for name, what in FATAL_SIGNALS.items()}
        _scan.fatal_line((NATIVE_OUT_OF_MEMORY + "\n").encode(), crashes)
    except (ImportError, AttributeError, TypeError):  # not built, or built before this signature
        pass


def _library():
    """specprof.analyzer.app.commands, the library the commands call. The console script loads it with Python's cyclic
    garbage collector paused, then freezes what is loaded by then out of later collections (gc.freeze): the
    modules' objects (polars', numpy's, specprof's) live as long as the process, yet every full collection walks
    them, the last one at the process's exit included; frozen, they cost nothing there (0.1 to 0.2 CPU s a run,
    docs/performance.md "Start-up and exit"). Under a test's CliRunner the process is not specprof's: nothing is
    paused or frozen there."""
    if not _Group.console or "specprof.analyzer.app.commands" in sys.modules:
        from specprof.analyzer.app import commands

        return commands
    collecting = gc.isenabled()
    gc.disable()
    try:
        from specprof.analyzer.app import commands
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    return commands


_MOST = 2**62  # the largest count an option takes: beyond any trace, and within 64 bits
MAX_STEPS = 1024  # draft steps per cycle: far beyond any speculative decoder's


class _Finite(click.FloatRange):
    """A float range that refuses nan and infinity (click's FloatRange lets nan through every bound)."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number

    def _describe_range(self) -> str:
        # without bounds there is no range to show (click would print `x<=None`)
        return "" if self.min is None and self.max is None else super()._describe_range()


class _Count(click.IntRange):
    """A count of at least `least`, and at most _MOST, which the help leaves out (click would print
    `0<=x<=4611686018427387904`)."""

    def __init__(self, least: int = 0):
        super().__init__(least, _MOST)

    def convert(self, value, param, ctx):
        number = click.INT.convert(value, param, ctx)
        if number > _MOST:
            self.fail(f"{number} is more than any trace holds (at most {_MOST})", param, ctx)
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        return f"x>={self.min}"


def _remember_all_domains(ctx, param, value):
    if value:
        ctx.meta["all_domains"] = True


def _remember_export_here(ctx, param, value):
    if value:
        ctx.meta["export_here"] = True


def _options(categories_file, grouping, domains, no_cache=False):
    """How a trace is analysed (app/analyze.py `Options`), from the options of `_analysis_options` (and
    --no-cache), with the window of `_window_options` when the command has them."""
    _library()
    from specprof.analyzer.app.analyze import Options, Window

    meta = click.get_current_context().meta
    return Options.of(categories_file, grouping, domains, bool(meta.get("all_domains")), cache=not no_cache,
                      window=meta.get("window", Window()), export_here=bool(meta.get("export_here")))


def _span(kind):
    """A click callback that reads `A:B` (either side may be empty) as a pair of numbers of `kind`."""

    def parse(ctx, param, value):
        if value is None:
            return None
        a, sep, b = value.partition(":")
        try:
            pair = tuple(kind(x) if x.strip() else None for x in (a, b))
        except ValueError:
            pair = None
        if not sep or pair is None or any(x is not None and not math.isfinite(x) for x in pair):
            raise click.BadParameter(f"{value!r}: give A:B (A or B may be left out: 10: or :50)")
        return pair

    def remember(ctx, param, value):
        return _remember_window(ctx, param, parse(ctx, param, value))
    return remember


def _remember_window(ctx, param, value):
    """Collects --cycle-window, --time-window and --skip-warmup into ctx.meta["window"] (a core/window.py
    Window) once all three are parsed."""
    got = ctx.meta.setdefault("window_parts", {})
    got[param.name] = value
    if len(got) == 3:
        _library()
        from specprof.analyzer.app.analyze import Window

        time = got["time_window"]
        ns = None if time is None else tuple(None if x is None else round(x * 1e6) for x in time)
        try:
            ctx.meta["window"] = Window.of(cycles=got["cycle_window"], time_ns=ns, skip_warmup=got["skip_warmup"])
        except SpecprofError as exc:
            raise click.UsageError(str(exc)) from None


def _window_options(command):
    """--cycle-window, --time-window, --skip-warmup: the part of each trace analysed (docs/attribution.md)."""
    for option in reversed((
        click.option("--cycle-window", metavar="A:B", callback=_span(int), expose_value=False, is_eager=False,
                     help="Analyse only cycles A to B-1 of each process (numbered from 0 as in the per-cycle "
                          "table; A: or :B leave a side open). GPU work counts by its launch time."),
        click.option("--time-window", metavar="A:B", callback=_span(float), expose_value=False,
                     help="Analyse only the GPU work launched from A to B ms after the capture's start (its "
                          "first event: time 0 of the per-cycle table's start ms and of the report's timeline; A: "
                          "or :B leave a side open); the cycles at the edges may be partial."),
        click.option("--skip-warmup", type=_Count(), metavar="N", callback=_remember_window,
                     expose_value=False, help="Leave out the first N cycles of each process (the cycle window N:)."),
    )):
        command = option(command)
    return command


def _accept_list(value: str | None) -> list[float]:
    if not value:
        return []
    try:
        lengths = [float(x) for x in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"{value!r}: give accept lengths as numbers separated by commas, e.g. 2.1,2.6,2.9")
    if not all(math.isfinite(x) and x >= 1 for x in lengths):
        raise click.BadParameter(f"{value!r}: an accept length counts the bonus token: at least 1, and finite")
    return lengths


def _say(output) -> None:
    """Print a command's output (app/commands.py `Output`) and exit with its status."""
    if output.stdout is not None:
        click.echo(clean_lines(output.stdout))
    for line in output.stderr:
        click.echo(clean_lines(line), err=True)
    if output.exit_code:
        sys.exit(output.exit_code)


def _analysis_options(command):
    """--categories, --group-range, --domain, --all-domains, --no-cache: how a trace is analysed."""
    for option in reversed((
        click.option("--categories", "categories_file", type=click.Path(dir_okay=False),
                     help="A TOML file of [[rule]] category/pattern entries (optional parent, match = function), "
                          "tried before the built-in ones (docs/attribution.md, section 3)."),
        click.option("--group-range", "grouping", multiple=True, default=("cycle",), show_default=True,
                     help="Range name that groups one cycle (not a phase). Repeatable."),
        click.option("--domain", "domains", multiple=True,
                     help="Take phases only from ranges of this NVTX domain. Repeatable. Default: the "
                          "specprof tracer's domain when the trace has it, else every range."),
        click.option("--all-domains", is_flag=True, expose_value=False, callback=_remember_all_domains,
                     help="Phases from ranges of every NVTX domain (NCCL's own ranges too)."),
        click.option("--export-here", is_flag=True, expose_value=False, callback=_remember_export_here,
                     help="A .nsys-rep report given alone: export it to SQLite beside it (RUN.sqlite), not into "
                          "the cache folder; either way with nsys ($SPECPROF_NSYS, $NSYS, PATH)."),
        click.option("--no-cache", is_flag=True,
                     help="Read the export itself, not the cache of its parsed tables and of its analysis in the "
                          "user's cache folder (nor write one; `specprof cache info`)."),
    )):
        command = option(command)
    return command


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="specprof")
def main():
    """specprof: where each millisecond of a speculative-decoding cycle goes."""


@main.command("analyze")
@click.argument("trace", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON contract (docs/json.md) to stdout.")
@click.option("--csv", "csv_dir", type=click.Path(file_okay=False), help="Write every table as CSV into DIR (times in ns; docs/tables.md).")
@click.option("--parquet", "parquet_dir", type=click.Path(file_okay=False),
              help="Write every table as Parquet into DIR (times in ns; docs/tables.md).")
@click.option("--html", "html_file", type=click.Path(dir_okay=False),
              help="Also write the HTML report (docs/report.md) to FILE.")
@_analysis_options
@_window_options
@click.option("--show-cycles", "cycle_limit", type=_Count(), default=10, show_default=True,
              metavar="N",
              help="How many rows the per-cycle table shows (what is analysed: --cycle-window).")
@click.option("--phases", "phase_limit", type=_Count(), default=20, show_default=True, metavar="N",
              help="How many phases the terminal tables show (the JSON has all).")
@click.option("--brief", is_flag=True,
              help="Print the summary alone: where the cycle goes, whether speculation pays, how far to trust it, "
                   "and the next command.")
@click.option("--sidecar", "sidecars", multiple=True, type=click.Path(dir_okay=False),
              help="The tracer's sidecar of this run (specprof-sidecar.*.jsonl), for the cross-check and the "
                   "economics [default: the run directory's]. Repeatable.")
@click.option("--baseline-sidecar", "baseline_sidecars", multiple=True, type=click.Path(dir_okay=False),
              help="Sidecar of the same workload run without nsys, to measure the profiler's inflation "
                   "[default: RUN_DIR/no-nsys/ when present]. Repeatable.")
@click.option("--server-log", type=click.Path(dir_okay=False),
              help="SGLang server log: reconcile its `accept len` lines with the sidecar's accept counts.")
@click.option("--log-interval", type=click.IntRange(1),
              help="The server's --decode-log-interval (iterations per `accept len` line) [default: from the "
                   "server's command line in the sidecar, else SGLang's default, 40].")
@click.option("--baseline", "baseline_run", metavar="RUN",
              help="A non-speculative run (run directory, sidecar, or any nsys or Kineto trace) whose step time "
                   "is the baseline of the economics.")
@click.option("--baseline-range", metavar="NAME",
              help="In a --baseline trace without a sidecar, the range that marks one decode step [default: "
                   "cycle, then decode].")
@click.option("--baseline-ms", type=_Finite(), metavar="MS",
              help="The plain-decode step time in ms, for the economics.")
@click.option("--allow-mixed", is_flag=True,
              help="Use a --baseline run of another engine, model or tensor-parallel size anyway.")
@click.option("--steps", type=click.IntRange(0, MAX_STEPS), metavar="K",
              help="Draft steps per cycle, when the traced command line does not say (a cycle accepts at most "
                   "K + 1 tokens per request: the economics checks the break-even against it).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars on stderr.")
@click.option("--db", "db_path", type=click.Path(dir_okay=False),
              help="Append the run(s) to this results database (SQLite, docs/store.md); the same run again is "
                   "left as it is.")
@click.option("--jobs", "-j", type=click.IntRange(1), default=1, show_default=True,
              help="Several traces: analyse them in parallel, one process per file; one nsys export of several "
                   "processes (a TP capture): one task per process (docs/multirank.md).")
@click.option("--dask", "dask_address", metavar="ADDRESS",
              help="Several traces, or the processes of one nsys export: analyse them on the Dask scheduler at "
                   "ADDRESS (tcp://host:8786; docs/multirank.md).")
def analyze_command(trace, as_json, csv_dir, parquet_dir, html_file, categories_file, grouping, domains, no_cache,
                    cycle_limit, phase_limit, brief, sidecars, baseline_sidecars, server_log, log_interval, baseline_run,
                    baseline_range, baseline_ms, allow_mixed, steps, quiet, db_path, jobs, dask_address):
    """Attribute the GPU time of TRACE to phases and categories.

    TRACE is an nsys SQLite export, a PyTorch-profiler (Kineto) trace, or a run directory made by
    `specprof capture`. Several traces, or a directory of Kineto traces or of exports, give one result per
    trace, as ranks of one run only when they are (distinct ranks of one world size, at the same time), else as
    runs side by side (docs/kineto.md), analysed in parallel with --jobs N or on a Dask cluster with --dask;
    a capture of several GPUs adds per-rank results (docs/multirank.md). --db appends the runs to a results
    database (docs/store.md). With the tracer's
    sidecar (found in a run directory, or --sidecar) it adds the cross-check and the economics
    (docs/crosscheck.md, docs/economics.md).
    """
    commands = _library()
    from specprof.analyzer.app.analyze import RunInputs
    from specprof.analyzer.app.traces import Outputs

    _say(commands.analyze_traces(
        trace, _options(categories_file, grouping, domains, no_cache),
        RunInputs(sidecars=tuple(sidecars), baseline_sidecars=tuple(baseline_sidecars), server_log=server_log,
                  log_interval=log_interval, baseline_run=baseline_run, baseline_ms=baseline_ms,
                  baseline_range=baseline_range, steps=steps, allow_mixed=allow_mixed),
        Outputs(as_json=as_json, cycle_limit=cycle_limit, phase_limit=phase_limit, brief=brief, csv_dir=csv_dir,
                parquet_dir=parquet_dir),
        html_file=html_file, db_path=db_path, jobs=jobs, dask=dask_address, argv=sys.argv[1:], quiet=quiet))


@main.command("runs")
@click.option("--db", "db_path", required=True, type=click.Path(dir_okay=False), help="The results database.")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON (specprof.runs/1).")
def runs_command(db_path, as_json):
    """List the runs in a results database (docs/store.md): `@ID` names one for compare and sweep."""
    commands = _library()

    _say(commands.list_runs(db_path, as_json))


@main.command("report")
@click.argument("run")
@click.option("-o", "--output", default="report.html", show_default=True, type=click.Path(dir_okay=False),
              help="The HTML file to write.")
@_analysis_options
@_window_options
@click.option("--baseline", "baseline_run", metavar="RUN",
              help="A non-speculative run (run directory, sidecar or trace): its step time draws the economics "
                   "panel's break-even line.")
@click.option("--baseline-ms", type=_Finite(), metavar="MS",
              help="The plain-decode step time in ms, for the economics panel.")
@click.option("--allow-mixed", is_flag=True,
              help="Use a --baseline run of another engine, model or tensor-parallel size anyway.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars on stderr.")
def report_command(run, output, categories_file, grouping, domains, no_cache, baseline_run, baseline_ms, allow_mixed,
                   quiet):
    """Write the HTML report of RUN: one self-contained file (docs/report.md).

    RUN is a run directory made by `specprof capture`, or an nsys SQLite export.
    """
    commands = _library()
    from specprof.analyzer.app.analyze import RunInputs

    _say(commands.write_report(run, output, _options(categories_file, grouping, domains, no_cache),
                               RunInputs(baseline_run=baseline_run, baseline_ms=baseline_ms, allow_mixed=allow_mixed),
                               quiet=quiet))


@main.command("sweep")
@click.argument("runs", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the sweep as JSON (specprof.sweep/1) to stdout.")
@click.option("--steps", "steps", multiple=True, type=click.IntRange(1),
              help="Draft steps of each run, once per run in order [default: read from the traced command line].")
@click.option("--max-steps", type=click.IntRange(1, 64),
              help="Predict up to this many draft steps [default: the largest measured + 2].")
@click.option("--db", "db_path", type=click.Path(dir_okay=False),
              help="The results database that RUNS written @ID come from (docs/store.md).")
@click.option("--no-cache", is_flag=True,
              help="Read the exports themselves, not the cache of their parsed tables and of their analysis in "
                   "the user's cache folder (nor write one; `specprof cache info`).")
@click.option("--accept", "accept", callback=lambda ctx, param, value: _accept_list(value), metavar="L1,L2,...",
              help="Each run's mean accept length (bonus token included), in the order of the runs, when their "
                   "sidecars have no accept counts.")
@click.option("--server-log", "server_logs", multiple=True, type=click.Path(dir_okay=False),
              help="Each run's SGLang server log, once per run in order: its `accept len` lines give the run's "
                   "accept length.")
@click.option("--extrapolate", is_flag=True,
              help="Recommend among every predicted step count, not only the measured ones.")
@click.option("--baseline", "baseline_run", metavar="RUN",
              help="A plain-decode run (run directory, sidecar or trace): the best K is stated against it, with its "
                   "interval [default: a K = 0 run among RUNS].")
@click.option("--allow-mixed", is_flag=True,
              help="Fit runs of different engines, models, batch sizes, tensor-parallel sizes or draft tree widths "
                   "(--speculative-eagle-topk) anyway.")
@click.option("--adaptive-config", "adaptive_out", type=click.Path(dir_okay=False), metavar="OUT.json",
              help="Instead of the fit: per batch size, the K whose tokens/s measured best against --baseline (0 "
                   "where plain decoding wins), written to OUT.json as SGLang's --speculative-adaptive-config, "
                   "with its speedup per row; RUNS may be one run that rotated K (docs/economics.md).")
def sweep_command(runs, as_json, steps, max_steps, db_path, no_cache, accept, server_logs, extrapolate,
                  baseline_run, allow_mixed, adaptive_out):
    """Fit the verify and draft cost model over RUNS with different numbers of draft steps.

    Each RUN is a run directory made by `specprof capture`, an nsys export or Kineto trace, or @ID: a run of the
    results database given with --db (docs/store.md). A run directory holds the nsys export and the tracer's
    sidecar (its accept counts); a `no-nsys/` folder with the same workload run without nsys is used when
    present (its cycle period, its CUDA events). Without accept counts give --accept or --server-log, or get
    the cost models alone. Prints the fits with confidence intervals (a per-unit cost whose interval includes
    zero is "not resolvable"), the acceptance per draft position, predicted throughput per step count and the
    best measured step count (docs/economics.md).
    """
    commands = _library()
    from specprof.analyzer.app.analyze import Options

    if adaptive_out:
        _say(commands.write_adaptive_config(list(runs), baseline_run, adaptive_out, db_path, as_json,
                                            Options(cache=not no_cache)))
        return
    _say(commands.fit_sweep_runs(list(runs), list(steps), max_steps, db_path, as_json, Options(cache=not no_cache),
                                 accept, list(server_logs), extrapolate, baseline_run, allow_mixed))


@main.command("compare")
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON (specprof.compare/1).")
@click.option("--fail-if-slower", "fail_pct", type=_Finite(0), metavar="PCT",
              help="Exit 1 when B's total attributed GPU time per cycle (or phase instance) exceeds A's by more than "
                   "PCT percent.")
@_analysis_options
@_window_options
@click.option("--db", "db_path", type=click.Path(dir_okay=False),
              help="The results database that A or B written @ID come from (docs/store.md).")
@click.option("--allow-mixed", is_flag=True,
              help="Compare runs of different engines, target models, tensor-parallel sizes or draft shapes (chain "
                   "and tree, --speculative-eagle-topk) anyway.")
@click.option("--baseline", "baseline_run", metavar="RUN",
              help="A non-speculative run of the same target and workload: with two drafters (runs that differ in "
                   "their draft model alone), each one's speedup against it.")
def compare_command(a, b, as_json, fail_pct, categories_file, grouping, domains, no_cache, db_path, allow_mixed,
                    baseline_run):
    """Compare run B with run A per phase and category (attributed GPU ms per cycle; per phase instance where
    either run has no cycles, docs/economics.md).

    A and B are nsys SQLite exports, run directories, or runs of a results database written @ID (with --db;
    `specprof runs` lists them). With --fail-if-slower PCT the exit code is 1 when
    B is slower than A by more than PCT percent (for CI pipelines). Two runs of one target and workload with
    different draft models are also compared as drafters: per-position acceptance, accept length, cycle and
    draft cost, tokens/s (and speedup with --baseline), and which drafter is faster, with its interval.
    """
    commands = _library()

    _say(commands.compare_runs(a, b, _options(categories_file, grouping, domains, no_cache), db_path, as_json,
                               fail_pct, allow_mixed, baseline_run))


@main.command("export")
@click.argument("trace")
@click.option("--perfetto", "perfetto_file", required=True, type=click.Path(dir_okay=False),
              help="Write the attributed timeline to FILE as a Perfetto trace (protobuf), for ui.perfetto.dev.")
@_analysis_options
@_window_options
@click.option("--quiet", "-q", is_flag=True, help="No progress bars on stderr.")
def export_command(trace, perfetto_file, categories_file, grouping, domains, no_cache, quiet):
    """Export the attributed timeline of TRACE for a trace viewer (docs/perfetto.md).

    TRACE is an nsys SQLite export, a PyTorch-profiler (Kineto) trace, or a run directory made by `specprof
    capture`. The Perfetto trace holds each GPU stream's ops and its tiling by phase and category (idle
    included), each thread's ranges and launch calls, and a flow from each launch to its ops.
    """
    commands = _library()

    _say(commands.export_trace(trace, perfetto_file, _options(categories_file, grouping, domains, no_cache), quiet))


@main.group("cache")
def cache_group():
    """The cache of parsed nsys exports and their analyses, in the user's cache folder
    ($SPECPROF_CACHE_DIR to move it, $SPECPROF_CACHE_MAX_GB to bound it; docs/performance.md)."""


@cache_group.command("info")
def cache_info_command():
    """Where the cache is, how large, and which exports it holds."""
    commands = _library()

    _say(commands.cache_info())


@cache_group.command("clear")
def cache_clear_command():
    """Remove every entry of the cache (the next analysis of each export reads it again)."""
    commands = _library()

    _say(commands.cache_clear())


def _register_tracer_commands():
    # specprof.tracer.cli holds `capture` and `reference`; it must not import torch at module level.
    from specprof.tracer import cli as tracer_cli

    for command in tracer_cli.COMMANDS:
        main.add_command(command)


_register_tracer_commands()
