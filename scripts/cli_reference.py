"""Writes docs/cli.md, the command-line reference: every specprof command's --help, exactly as the CLI prints
it. tests/test_docs.py checks that docs/cli.md is what this script writes now.

    python3 scripts/cli_reference.py          # rewrite docs/cli.md
    python3 scripts/cli_reference.py --check  # exit 1 when docs/cli.md is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "cli.md"
WIDTH = 110  # columns of the help text

HEAD = """# Command-line reference

Every `specprof` command's `--help`, generated from the CLI by `python3 scripts/cli_reference.py` (and checked
by `tests/test_docs.py`: do not edit by hand). What the commands do, with examples: README.md and the pages
each help names.

Shell completion of the commands and their options (click's): the line for your shell, in its start-up file.

    eval "$(_SPECPROF_COMPLETE=bash_source specprof)"    # bash: ~/.bashrc
    eval "$(_SPECPROF_COMPLETE=zsh_source specprof)"     # zsh: ~/.zshrc
    _SPECPROF_COMPLETE=fish_source specprof | source     # fish: ~/.config/fish/completions/specprof.fish
"""


def render() -> str:
    """The reference as Markdown: `specprof --help`, then each command's, in name order."""
    from click.testing import CliRunner

    import click

    from specprof.analyzer.cli import main

    parts = [HEAD]
    commands = [[]]
    for name in sorted(main.commands):
        commands.append([name])
        command = main.commands[name]
        if isinstance(command, click.Group):  # `specprof cache info`, ...
            commands.extend([name, sub] for sub in sorted(command.commands))
    for args in commands:
        out = CliRunner().invoke(main, [*args, "--help"], prog_name="specprof", terminal_width=WIDTH)
        if out.exit_code != 0:
            raise RuntimeError(f"specprof {' '.join(args)} --help failed: {out.output}")
        title = " ".join(["specprof", *args])
        parts.append(f"## `{title}`\n\n```text\n{out.output.rstrip()}\n```\n")
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    text = render()
    if "--check" in argv:
        current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        if current != text:
            print(f"{DOC} is out of date: run python3 scripts/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
