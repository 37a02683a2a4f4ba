"""docs/sglang.md as a newcomer follows it: the output it quotes is what the command prints, and its commands
are the ones that work (capture in --dry-run: there is no GPU and no nsys here)."""

from __future__ import annotations

import re
import shlex
import sys

from click.testing import CliRunner

from specprof.analyzer.cli import main
from conftest import ROOT

GUIDE = (ROOT / "docs" / "sglang.md").read_text(encoding="utf-8")


def section(number: int) -> str:
    return GUIDE[GUIDE.index(f"## {number}. "):GUIDE.index(f"## {number + 1}. ")]


def blocks(text: str) -> list[list[str]]:
    """The indented code blocks of `text`, their lines less the indent."""
    out, block = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("    ") and line.strip():
            block.append(line[4:].rstrip())
        elif block and not line.strip():
            out.append(block)
            block = []
    return out


def test_the_output_the_guide_quotes_is_what_analyze_prints(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(main, ["analyze", "fixtures/sglang-k4", "--baseline", "fixtures/sglang-plain",
                                       "--no-cache", "-q"])
    assert result.exit_code == 0, result.output
    printed = {line.rstrip() for line in result.stdout.splitlines()}
    quoted = [line for block in blocks(section(6)) for line in block]
    assert len(quoted) > 20
    assert [line for line in quoted if line not in printed] == []


def test_the_guide_installs_from_a_checkout_or_a_wheel_and_pipes_nothing():
    install = section(1)
    assert "python3 -m pip install .\n" in install and "python3 -m build --wheel" in install
    assert "pip install specprof " not in install and "pip install specprof\n" not in install
    assert "| tee" not in GUIDE and "mv runs/" not in GUIDE


def test_the_guides_captures_run_as_written(tmp_path, monkeypatch):
    # Sections 2 to 4, each `specprof capture` command as written, in --dry-run, from a folder without runs/.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{sys.exec_prefix}/bin:/usr/bin:/bin")
    commands = []
    for n in (2, 3, 4):
        for block in blocks(section(n)):
            text = " ".join(line.rstrip("\\").strip() for line in block)
            commands += [c.strip() for c in re.split(r"(?=specprof capture )", text) if c.startswith("specprof capture")]
    assert len(commands) == 4
    for command in commands:
        argv = shlex.split(command.replace("...same arguments...", "--model-path MODEL")
                           .replace(" -- ...", " -- python3 -m sglang.launch_server --model-path MODEL"))
        result = CliRunner().invoke(main, [argv[1], "--dry-run", *argv[2:]])
        assert result.exit_code == 0, (command, result.output)
        run = argv[argv.index("-o") + 1]
        assert f"also written to {tmp_path / run / 'server.log'}" in result.stdout
    assert not (tmp_path / "runs").exists()
