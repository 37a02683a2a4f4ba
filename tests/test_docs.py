"""The docs are checked: every command has help and is documented in prose; the command-line reference
(docs/cli.md) is the CLI's own --help; every key of the JSON outputs is documented; README's links resolve."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from conftest import ROOT

# The prose docs (docs/cli.md, generated from --help, would document every command by itself).
DOCS = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
                 if p.name != "cli.md")


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


def test_the_cli_reference_is_the_clis_help():
    import importlib.util

    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "scripts" / "cli_reference.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    assert (ROOT / "docs" / "cli.md").read_text(encoding="utf-8") == reference.render(), \
        "docs/cli.md is out of date: run python3 scripts/cli_reference.py"


def test_the_help_prints_no_broken_range():
    # click writes an open range as `x<=None`, and a count's 64-bit ceiling as `0<=x<=4611686018427387904`
    import importlib.util

    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "scripts" / "cli_reference.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    text = reference.render()
    assert "None]" not in text and "4611686018427387904" not in text and "--baseline-ms MS " in text
    assert "--skip-warmup N               Leave out the first N cycles of each process (the cycle window N:).  [x>=0]" \
        in text


def test_shell_completion_works_as_documented():
    # docs/cli.md's lines turn click's completion on; asked as bash asks, it completes an option of analyze
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert 'eval "$(_SPECPROF_COMPLETE=bash_source specprof)"' in doc
    env = {"_SPECPROF_COMPLETE": "bash_complete", "COMP_WORDS": "specprof analyze --baseline-m", "COMP_CWORD": "2"}
    out = CliRunner().invoke(main, [], prog_name="specprof", env=env)
    assert out.exit_code == 0 and out.output.splitlines() == ["plain,--baseline-ms"], out.output
    out = CliRunner().invoke(main, [], prog_name="specprof", env={**env, "_SPECPROF_COMPLETE": "bash_source"})
    assert "_specprof_completion()" in out.output


def test_readme_links_resolve():
    readme = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)\)", readme):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def test_readme_commands_are_the_ci_ones():
    # The setup command makes and uses a venv in the checkout (a system Python may refuse pip, PEP 668); CI runs it
    # as written (scripts/readme_main: in a fresh copy of the checkout), then, in its own Python, exactly the
    # README's test command.
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    setup = readme.split("\n## Setup", 1)[1]
    first = next(line[4:] for line in setup.splitlines() if re.match(r"    \S", line))
    assert first.startswith("python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/specprof analyze ")
    assert "\n./scripts/readme_main\n" in ci
    test_command = "./scripts/test"
    assert f"\n    {test_command}\n" in readme and ci.strip().splitlines()[-1] == test_command
    assert "python3 -m pip install -q -e ." in ci


# Keys whose children are data (phase, category, reason names), not keys of the contract.
DATA_MAPS = {"categories", "by_reason", "by_phase"}


def _keys(value, out: set, parent: str = "") -> set:
    if isinstance(value, dict):
        data = parent in DATA_MAPS or (parent == "phases" and not isinstance(value.get("name"), str))
        for k, v in value.items():
            if not data:
                out.add(k)
            _keys(v, out, "" if data else k)
    elif isinstance(value, list):
        for v in value:
            _keys(v, out, parent)
    return out


def _undocumented(doc: dict, page: str) -> list[str]:
    text = (ROOT / "docs" / page).read_text()
    return sorted(k for k in _keys(doc, set()) if not re.search(r"\b" + re.escape(k) + r"\b", text))


def _json(*args) -> dict:
    import json

    out = CliRunner().invoke(main, [*args, "--json"])
    assert out.exit_code in (0, 1), out.output
    return json.loads(out.stdout)


def test_every_json_key_is_documented(tmp_path):
    # The real captures, with every optional part present: the cross-check with a baseline run and a server
    # log (synthetic: made from the K = 4 sidecar's own accept counts, as in tests/test_crosscheck.py), the
    # economics, two ranks with NCCL collectives, several traces, the sweep, the comparison, the store's list.
    from specprof.analyzer.readers.sidecar import find
    from conftest import FIXTURES
    from test_crosscheck import raw_cycles, synthetic_log

    k2, k4, k6 = (str(FIXTURES / f"reference-k{k}") for k in (2, 4, 6))
    log = tmp_path / "server.log"
    log.write_text("\n".join(synthetic_log(raw_cycles(find(k4)[0]), interval=35)) + "\n")
    one = _json("analyze", k4, "--server-log", str(log), "--log-interval", "35", "--baseline",
                str(FIXTURES / "reference-k0"))
    assert one["crosscheck"]["accept"] and one["crosscheck"]["inflation"] and one["economics"]
    tp2 = _json("analyze", str(FIXTURES / "reference-k4-tp2"))
    assert tp2["rank_skew"]["collectives"]
    assert _undocumented(one, "json.md") == [] and _undocumented(tp2, "json.md") == []
    assert _undocumented(_json("analyze", k2, k4, "--db", str(tmp_path / "r.db")), "json.md") == []
    assert _undocumented(_json("sweep", k2, k4, k6), "economics.md") == []
    assert _undocumented(_json("compare", k2, k4), "economics.md") == []
    assert _undocumented(_json("runs", "--db", str(tmp_path / "r.db")), "store.md") == []
