"""The docs are checked: every command has help and is documented; README's links resolve."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from analyzer.cli import main
from conftest import ROOT

DOCS = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


@pytest.mark.parametrize("name", sorted(main.commands))
def test_every_command_has_help_and_is_documented(name):
    command = main.commands[name]
    assert command.help and len(command.help.strip()) > 20, name
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output
    assert f"specprof {name}" in DOCS, f"no doc shows `specprof {name}`"


@pytest.mark.parametrize("name", sorted(main.commands))
def test_every_option_has_help(name):
    for param in main.commands[name].params:
        if getattr(param, "help", None) is None and param.param_type_name == "option":
            # options whose meaning is their name alone are fine only if documented in the docs
            assert param.opts[0] in DOCS, f"specprof {name} {param.opts[0]} has no help and no doc"


def test_readme_links_resolve():
    readme = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)\)", readme):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def test_readme_commands_are_the_ci_ones():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = "./scripts/test"
    assert test_command in readme and ci.strip().splitlines()[-1] == test_command
    assert "python3 -m pip install -e ." in readme and "python3 -m pip install -q -e ." in ci
