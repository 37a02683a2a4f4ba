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


def _register_tracer_commands():
    # tracer.cli holds `capture` and `reference`; it must not import torch at module level.
    from tracer import cli as tracer_cli

    for command in tracer_cli.COMMANDS:
        main.add_command(command)


try:
    _register_tracer_commands()
except ImportError:  # pragma: no cover - only while tracer.cli does not exist yet
    pass
