"""The `specprof` console script. It only parses options and calls the library."""

from __future__ import annotations

import sys

import click

from analyzer import __version__
from analyzer.errors import SpecprofError


class _Group(click.Group):
    """Turns every SpecprofError into one line on stderr and exit code 2 (never a traceback)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SpecprofError as exc:
            click.echo(f"specprof: error: {exc}", err=True)
            sys.exit(exc.exit_code)


def _remember_all_domains(ctx, param, value):
    if value:
        ctx.meta["all_domains"] = True


def _domains(domains) -> tuple[str, ...]:
    """--domain values, or the wildcard when --all-domains was given."""
    from analyzer.analysis import ALL_DOMAINS

    if click.get_current_context().meta.get("all_domains"):
        return (ALL_DOMAINS,)
    return tuple(domains)


def _analysis_options(command):
    """--categories, --group-range, --domain: how a trace is analysed (analyze, report, compare)."""
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
    )):
        command = option(command)
    return command


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="specprof")
def main():
    """specprof: where each millisecond of a speculative-decoding cycle goes."""


@main.command()
@click.argument("trace", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON contract (docs/json.md) to stdout.")
@click.option("--csv", "csv_dir", type=click.Path(file_okay=False), help="Write every table as CSV into DIR.")
@click.option("--parquet", "parquet_dir", type=click.Path(file_okay=False),
              help="Write every table as Parquet into DIR.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False),
              help="Also write the HTML report (docs/report.md) to FILE.")
@_analysis_options
@click.option("--cycles", "cycle_limit", type=int, default=10, show_default=True,
              help="How many cycles the per-cycle table shows.")
@click.option("--phases", "phase_limit", type=int, default=20, show_default=True,
              help="How many phases the terminal tables show (the JSON has all).")
@click.option("--sidecar", "sidecars", multiple=True, type=click.Path(dir_okay=False),
              help="The tracer's sidecar of this run (specprof-sidecar.*.jsonl), for the cross-check and the "
                   "economics [default: the run directory's]. Repeatable.")
@click.option("--baseline-sidecar", "baseline_sidecars", multiple=True, type=click.Path(dir_okay=False),
              help="Sidecar of the same workload run without nsys, to measure the profiler's inflation "
                   "[default: RUN_DIR/no-nsys/ when present]. Repeatable.")
@click.option("--server-log", type=click.Path(dir_okay=False),
              help="SGLang server log: reconcile its `accept len` lines with the sidecar's accept counts.")
@click.option("--log-interval", type=click.IntRange(1), default=40, show_default=True,
              help="The server's --decode-log-interval (iterations per `accept len` line).")
@click.option("--baseline", "baseline_run",
              help="A non-speculative run (run directory, sidecar or trace) whose step time is the baseline "
                   "of the economics.")
@click.option("--baseline-ms", type=float, help="The plain-decode step time in ms, for the economics.")
@click.option("--no-cache", is_flag=True,
              help="Read the export itself, not the Parquet cache of its parsed tables (nor write one).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars on stderr.")
@click.option("--db", "db_path", type=click.Path(dir_okay=False),
              help="Append the run(s) to this results database (SQLite, docs/store.md); the same run again is "
                   "left as it is.")
@click.option("--jobs", "-j", type=click.IntRange(1), default=1, show_default=True,
              help="Several traces: analyse them in parallel, one process per file.")
@click.option("--dask", "dask_address", metavar="ADDRESS",
              help="Several traces: analyse them on the Dask scheduler at ADDRESS (tcp://host:8786; "
                   "docs/multirank.md).")
def analyze(trace, as_json, csv_dir, parquet_dir, html_file, categories_file, grouping, domains, cycle_limit,
            phase_limit, sidecars, baseline_sidecars, server_log, log_interval, baseline_run, baseline_ms,
            no_cache, quiet, db_path, jobs, dask_address):
    """Attribute the GPU time of TRACE to phases and categories.

    TRACE is an nsys SQLite export, a PyTorch-profiler (Kineto) trace, or a run directory made by
    `specprof capture`. Several traces, or a directory of Kineto traces (one per rank) or of exports, give one
    result per trace (docs/kineto.md), analysed in parallel with --jobs N or on a Dask cluster with --dask;
    a capture of several GPUs adds per-rank results (docs/multirank.md). --db appends the runs to a results
    database (docs/store.md). With the tracer's
    sidecar (found in a run directory, or --sidecar) it adds the cross-check and the economics
    (docs/crosscheck.md, docs/economics.md).
    """
    from analyzer import analysis, categories
    from analyzer.render import json as json_render
    from analyzer.render import tables, terminal

    rules = categories.load_rules(categories_file)
    from analyzer import ranks

    traces = ranks.expand(trace)  # several traces (one per rank, or a folder of them): per-rank results
    if len(traces) > 1:
        from analyzer import parallel

        opts = parallel.Options(grouping=tuple(grouping), domains=_domains(domains), rules=tuple(rules),
                                cache=not no_cache, as_json=as_json, cycle_limit=cycle_limit, phase_limit=phase_limit,
                                csv_dir=csv_dir, parquet_dir=parquet_dir)
        text, stored = ranks.run(traces, opts, html_file, jobs=jobs, dask=dask_address, db=db_path,
                                 argv=sys.argv[1:])
        click.echo(text)
        _said_stored(db_path, stored)
        return
    trace = traces[0]
    from analyzer import progress

    progress.enable(progress.wanted(quiet))  # bars on stderr for the steps that take seconds
    from analyzer import cache

    result = cache.analyze(trace, tuple(grouping), rules, _domains(domains), enabled=not no_cache)
    from analyzer import runs

    files = runs.locate(trace, sidecars, baseline_sidecars)
    result = runs.enrich(result, files, server_log=server_log,
                         baseline_run=baseline_run, baseline_ms=baseline_ms, log_interval=log_interval)
    if db_path:
        from analyzer import parallel

        _said_stored(db_path, parallel.store_one(
            db_path, result, trace, files, rules, _domains(domains), sys.argv[1:], server_log=server_log,
            log_interval=log_interval, baseline_run=baseline_run, baseline_ms=baseline_ms))
    if csv_dir:
        tables.write(result, csv_dir, "csv")
    if parquet_dir:
        tables.write(result, parquet_dir, "parquet")
    if html_file:
        from analyzer.render import html

        html.write(result, html_file, manifest=analysis.manifest(trace))
    with progress.step("rendering"):
        text = json_render.render(result) if as_json else terminal.render(
            result, cycle_limit=cycle_limit, phase_limit=phase_limit)
    click.echo(text)


def _said_stored(db_path, stored) -> None:
    for path, run_id, created in stored:
        click.echo(f"specprof: {path} " + (f"stored as run @{run_id} in {db_path}" if created else
                                          f"already in {db_path} as run @{run_id} (same trace and options)"), err=True)


@main.command("runs")
@click.option("--db", "db_path", required=True, type=click.Path(dir_okay=False), help="The results database.")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON (specprof.runs/1).")
def runs_command(db_path, as_json):
    """List the runs in a results database (docs/store.md): `@ID` names one for compare and sweep."""
    from analyzer import store
    from analyzer.render import store as store_render

    db = store.connect(db_path, create=False)
    listed = store.runs(db)
    click.echo(store_render.runs_json(listed) if as_json else store_render.runs_terminal(listed, db_path))


@main.command()
@click.argument("run")
@click.option("-o", "--output", default="report.html", show_default=True, type=click.Path(dir_okay=False),
              help="The HTML file to write.")
@_analysis_options
@click.option("--baseline", "baseline_run",
              help="A non-speculative run (run directory, sidecar or trace): its step time draws the economics "
                   "panel's break-even line.")
@click.option("--baseline-ms", type=float, help="The plain-decode step time in ms, for the economics panel.")
def report(run, output, categories_file, grouping, domains, baseline_run, baseline_ms):
    """Write the HTML report of RUN: one self-contained file (docs/report.md).

    RUN is a run directory made by `specprof capture`, or an nsys SQLite export.
    """
    from analyzer import analysis, categories
    from analyzer.render import html

    rules = categories.load_rules(categories_file)
    result = analysis.analyze(analysis.load(run), grouping=tuple(grouping), rules=rules, domains=_domains(domains))
    from analyzer import runs

    # cross-check and economics when the run has a sidecar
    result = runs.enrich(result, runs.locate(run), baseline_run=baseline_run, baseline_ms=baseline_ms)
    html.write(result, output, manifest=analysis.manifest(run))
    click.echo(f"specprof: report written to {output}", err=True)


@main.command()
@click.argument("runs", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the sweep as JSON (specprof.sweep/1) to stdout.")
@click.option("--steps", "steps", multiple=True, type=click.IntRange(1),
              help="Draft steps of each run, once per run in order [default: read from the traced command line].")
@click.option("--max-steps", type=click.IntRange(1, 64),
              help="Predict up to this many draft steps [default: the largest measured + 2].")
@click.option("--db", "db_path", type=click.Path(dir_okay=False),
              help="The results database that RUNS written @ID come from (docs/store.md).")
def sweep(runs, as_json, steps, max_steps, db_path):
    """Fit the verify and draft cost model over RUNS with different numbers of draft steps.

    Each RUN is a run directory made by `specprof capture`, or @ID: a run of the results database given with
    --db that was stored from one (docs/store.md). A run directory holds the nsys export and the tracer's sidecar; a
    `no-nsys/` folder with the same workload's sidecar without nsys is used when present). Prints the fits
    with confidence intervals, the acceptance per draft position, predicted throughput per step count and a
    recommended step count (docs/economics.md).
    """
    from analyzer import runs as run_files
    from analyzer.render import checks_json, checks_terminal

    from analyzer import store

    db = store.connect(db_path, create=False) if db_path else None
    result = run_files.load_sweep(list(runs), list(steps), max_steps, db=db)
    click.echo(checks_json.dumps(checks_json.sweep(result)) if as_json else checks_terminal.sweep(result))


@main.command()
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON (specprof.compare/1).")
@click.option("--fail-if-slower", "fail_pct", type=click.FloatRange(0), metavar="PCT",
              help="Exit 1 when B's total attributed GPU time per cycle exceeds A's by more than PCT percent.")
@_analysis_options
@click.option("--db", "db_path", type=click.Path(dir_okay=False),
              help="The results database that A or B written @ID come from (docs/store.md).")
def compare(a, b, as_json, fail_pct, categories_file, grouping, domains, db_path):
    """Compare run B with run A per phase and category (attributed GPU ms per cycle).

    A and B are nsys SQLite exports, run directories, or runs of a results database written @ID (with --db;
    `specprof runs` lists them). With --fail-if-slower PCT the exit code is 1 when
    B is slower than A by more than PCT percent (for CI pipelines).
    """
    from analyzer import analysis, categories
    from analyzer import compare as comparing
    from analyzer.render import checks_json, checks_terminal

    from analyzer import store

    rules = categories.load_rules(categories_file)
    db = store.connect(db_path, create=False) if db_path else None

    def analysed(path):
        x = analysis.analyze(analysis.load(path), grouping=tuple(grouping), rules=rules, domains=_domains(domains))
        return x.trace.meta.path, x.cycles.height, x.charges

    result = comparing.compare_charges(*(store.side(x, db, analysed) for x in (a, b)))
    click.echo(checks_json.dumps(checks_json.compare(result)) if as_json else checks_terminal.compare(result))
    if fail_pct is not None and result.slower_than(fail_pct):
        click.echo(f"specprof: B is {result.change_pct:.1f}% slower than A per {result.unit} "
                   f"(more than {fail_pct:g}%)", err=True)
        sys.exit(1)


def _register_tracer_commands():
    # tracer.cli holds `capture` and `reference`; it must not import torch at module level.
    from tracer import cli as tracer_cli

    for command in tracer_cli.COMMANDS:
        main.add_command(command)


_register_tracer_commands()
