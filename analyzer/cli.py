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
@click.option("--categories", "categories_file", type=click.Path(dir_okay=False),
              help="A TOML file of [[rule]] category/pattern entries, tried before the built-in ones.")
@click.option("--group-range", "grouping", multiple=True, default=("cycle",), show_default=True,
              help="Range name that groups one cycle (not a phase). Repeatable.")
@click.option("--domain", "domains", multiple=True,
              help="Take phases only from ranges of this NVTX domain (e.g. specprof). Repeatable.")
@click.option("--cycles", "cycle_limit", type=int, default=10, show_default=True,
              help="How many cycles the per-cycle table shows.")
@click.option("--phases", "phase_limit", type=int, default=20, show_default=True,
              help="How many phases the terminal tables show (the JSON has all).")
def analyze(trace, as_json, csv_dir, parquet_dir, html_file, categories_file, grouping, domains, cycle_limit,
            phase_limit):
    """Attribute the GPU time of TRACE to phases and categories.

    TRACE is an nsys SQLite export, a PyTorch-profiler (Kineto) trace, or a run directory made by
    `specprof capture`. Several traces, or a directory of Kineto traces (one per rank), give one
    result per rank (docs/kineto.md).
    """
    from analyzer import analysis, categories
    from analyzer.render import json as json_render
    from analyzer.render import tables, terminal

    rules = categories.load_rules(categories_file)
    from analyzer import ranks

    traces = ranks.expand(trace)  # several traces (one per rank, or a folder of them): per-rank results
    if len(traces) > 1:
        click.echo(ranks.run(traces, as_json, csv_dir, parquet_dir, html_file, tuple(grouping), rules,
                             tuple(domains), cycle_limit, phase_limit))
        return
    trace = traces[0]
    result = analysis.analyze(analysis.load(trace), grouping=tuple(grouping), rules=rules,
                              domains=tuple(domains))
    if csv_dir:
        tables.write(result, csv_dir, "csv")
    if parquet_dir:
        tables.write(result, parquet_dir, "parquet")
    if html_file:
        from analyzer.render import html

        html.write(result, html_file, manifest=analysis.manifest(trace))
    if as_json:
        click.echo(json_render.render(result))
    else:
        click.echo(terminal.render(result, cycle_limit=cycle_limit, phase_limit=phase_limit))


@main.command()
@click.argument("run")
@click.option("-o", "--output", default="report.html", show_default=True, type=click.Path(dir_okay=False),
              help="The HTML file to write.")
@click.option("--categories", "categories_file", type=click.Path(dir_okay=False),
              help="A TOML file of [[rule]] category/pattern entries, tried before the built-in ones.")
@click.option("--group-range", "grouping", multiple=True, default=("cycle",), show_default=True,
              help="Range name that groups one cycle (not a phase). Repeatable.")
@click.option("--domain", "domains", multiple=True,
              help="Take phases only from ranges of this NVTX domain (e.g. specprof). Repeatable.")
def report(run, output, categories_file, grouping, domains):
    """Write the HTML report of RUN: one self-contained file (docs/report.md).

    RUN is a run directory made by `specprof capture`, or an nsys SQLite export.
    """
    from analyzer import analysis, categories
    from analyzer.render import html

    rules = categories.load_rules(categories_file)
    result = analysis.analyze(analysis.load(run), grouping=tuple(grouping), rules=rules, domains=tuple(domains))
    html.write(result, output, manifest=analysis.manifest(run))
    click.echo(f"specprof: report written to {output}", err=True)


def _register_tracer_commands():
    # tracer.cli holds `capture` and `reference`; it must not import torch at module level.
    from tracer import cli as tracer_cli

    for command in tracer_cli.COMMANDS:
        main.add_command(command)


_register_tracer_commands()
