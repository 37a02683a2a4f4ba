"""A run's settings (analyzer/model/settings.py `RunSettings`), read once from its files by
analyzer/readers/settings.py: the server log's `server_args=ServerArgs(...)` start-up line first, else the traced
command line (the sidecar header's argv, else the manifest's). On the real captures of fixtures/ (SGLang 0.5.16 and
the reference engine); the flag names against the installed SGLang 0.5.23's source; the damaged values (25 and
5,000 digits) and the adaptive speculation no capture here ran are the real SGLang K = 4 run with its log or
command line rewritten, and say so."""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from specprof.analyzer.app.run import Run
from specprof.analyzer.cli import main
from specprof.analyzer.derived.draft_shape import draft_shape, shape_notes
from specprof.analyzer.model.settings import FROM_COMMAND_LINE, FROM_SERVER_LOG, FROM_TRACER, RunSettings
from specprof.analyzer.readers import settings as reader
from specprof.analyzer.readers.inputs import manifest
from specprof.analyzer.readers.settings import LARGEST, MODEL_FLAGS, SETTINGS, read_settings, server_args
from specprof.analyzer.readers.sidecar import find, read_sidecars
from conftest import FIXTURES, ROOT

SGLANG_RUNS = sorted(p.name for p in FIXTURES.glob("sglang-*") if p.is_dir())
REFERENCE_RUNS = sorted(p.name for p in FIXTURES.glob("reference-*") if p.is_dir())


def settings_of(folder: Path, log: bool = True) -> RunSettings:
    logged = folder / "server.log"
    return read_settings(str(logged) if log and logged.exists() else None, read_sidecars(find(str(folder))),
                         manifest(str(folder)))


def steps_in_name(name: str) -> int | None:
    m = re.search(r"-k(\d+)", name)
    return int(m.group(1)) if m else None


@pytest.mark.parametrize("name", SGLANG_RUNS)
def test_every_sglang_capture_reads_what_its_server_ran(name):
    folder = FIXTURES / name
    s = settings_of(folder)
    command = manifest(str(folder))["command"]
    assert (s.engine, s.version, s.tp_size, s.continuous_steps, s.log_interval) == ("sglang", "0.5.16", 1, 1, 10)
    assert s.source("engine") == s.source("version") == FROM_TRACER and s.command_line and s.notes == ()
    assert s.source("model") == FROM_COMMAND_LINE
    assert s.target_model == command[command.index("--model-path") + 1] and s.source("target_model") == FROM_SERVER_LOG
    if name.endswith("adaptive"):  # the ramp runs with SGLang's adaptive speculation, their config named
        assert s.adaptive is True and s.adaptive_config == command[command.index("--speculative-adaptive-config") + 1]
    else:
        assert s.adaptive is False and s.adaptive_config is None
    assert s.source("adaptive") == FROM_SERVER_LOG
    assert s.setup == {"engine": "sglang", "model": s.model, "tp": 1, "topk": s.topk or 1, "continuous_steps": 1}
    if name.endswith("plain"):
        assert (s.steps, s.topk, s.draft_tokens, s.draft_model, s.tokens) == (None, None, None, None, None)
        assert s.model == {"model-path": s.target_model}
        return
    # an adaptive run: the step count its server starts with, its config's largest (scripts/sglang/adaptive_ramp.json)
    k, topk = (3, 4) if name.endswith("tree") else (3 if name.endswith("adaptive") else steps_in_name(name), 1)
    tokens = 8 if topk > 1 else k + 1
    assert (s.steps, s.topk, s.draft_tokens, s.tokens) == (k, topk, tokens, tokens)
    assert s.source("steps") == s.source("topk") == s.source("draft_tokens") == FROM_SERVER_LOG
    assert s.draft_model == command[command.index("--speculative-draft-model-path") + 1]
    # the traced command line alone says the same of every setting it holds
    argv = settings_of(folder, log=False)
    assert argv.source("steps") == FROM_COMMAND_LINE and argv.source("tp_size") is None
    for field in ("steps", "topk", "draft_tokens", "log_interval", "target_model", "draft_model"):
        assert getattr(argv, field) == getattr(s, field), field
    assert argv.setup == s.setup


@pytest.mark.parametrize("name", REFERENCE_RUNS)
def test_every_reference_capture_reads_its_command_line(name):
    s = settings_of(FIXTURES / name)
    assert (s.engine, s.steps, s.version) == ("reference", steps_in_name(name), None)
    assert s.source("steps") == FROM_COMMAND_LINE and s.source("engine") == FROM_TRACER and s.source("version") is None
    assert s.tp_size == (2 if name.endswith("tp2") else None) and s.setup["tp"] == (2 if name.endswith("tp2") else 1)
    assert (s.topk, s.draft_tokens, s.log_interval, s.target_model, s.adaptive) == (None, None, None, None, False)
    assert s.tokens == s.steps + 1 and s.notes == ()


def test_a_runs_settings_are_its_files_and_its_manifest_alone_where_its_sidecar_is_another_runs():
    data = Run.load(str(FIXTURES / "sglang-k4")).data()
    assert data.settings == settings_of(FIXTURES / "sglang-k4")
    alone = data.manifest_settings
    assert alone == read_settings(manifest=manifest(str(FIXTURES / "sglang-k4")))
    assert alone.version == "0.5.16" and alone.steps == 4 and alone.source("steps") == FROM_COMMAND_LINE


def copy_run(tmp_path, run: str, log=None, argv=None, name: str = "run") -> Path:
    """The real capture `run` in a folder of its own (`name`), its server log's text passed through `log` and its
    traced command line (sidecar headers and manifest) through `argv`; every other file a link."""
    out = tmp_path / name
    out.mkdir()
    for name in os.listdir(FIXTURES / run):
        src = FIXTURES / run / name
        if name == "server.log" and log is not None:
            (out / name).write_text(log(src.read_text()))
        elif name.startswith("specprof-sidecar.") and name.endswith(".jsonl") and argv is not None:
            lines = src.read_text().splitlines()
            head = json.loads(lines[0])
            head["argv"] = argv(head["argv"])
            (out / name).write_text("\n".join([json.dumps(head)] + lines[1:]) + "\n")
        elif name == "manifest.json" and argv is not None:
            m = json.loads(src.read_text())
            m["command"] = argv(m["command"])
            (out / name).write_text(json.dumps(m))
        else:
            os.symlink(src, out / name)
    return out


def logged_as(field: str, value: str):
    return lambda text: re.sub(rf"(?<![\w.]){field}=[^,)]+", f"{field}={value}", text)


def flag_as(flag: str, value: str):
    return lambda argv: [value if i and argv[i - 1] == flag else a for i, a in enumerate(argv)]


@pytest.mark.parametrize("digits", [25, 5000])
def test_a_huge_count_in_a_server_log_is_not_taken_and_said(tmp_path, digits):
    # (the real K = 4 run, its log's K rewritten to a number of 25 or 5,000 digits: past polars' integers and past
    # Python's limit on converting digits; the command line's K = 4 is taken instead)
    huge = "9" * digits
    run = copy_run(tmp_path, "sglang-k4", log=logged_as("speculative_num_steps", huge))
    s = settings_of(run)
    assert s.steps == 4 and s.source("steps") == FROM_COMMAND_LINE and s.source("topk") == FROM_SERVER_LOG
    assert len(s.notes) == 1 and "speculative_num_steps" in s.notes[0] and "not taken" in s.notes[0]
    assert (huge in s.notes[0]) == (digits <= 30) and (f"a {digits:,}-digit number" in s.notes[0]) == (digits > 30)
    out = CliRunner().invoke(main, ["analyze", str(run), "--json", "-q"])
    assert out.exit_code == 0 and out.exception is None, out.output
    doc = json.loads(out.stdout)
    assert s.notes[0] in doc["notes"] and doc["draft_shape"]["steps"] == 4
    assert doc["draft_shape"]["source"] == FROM_COMMAND_LINE


def test_a_huge_count_on_the_command_line_is_not_taken_and_said(tmp_path):
    # (the real K = 4 run without its log, its command line's K and log interval rewritten to 25 digits)
    huge = "1" + "0" * 24
    run = copy_run(tmp_path, "sglang-k4", log=lambda text: "",
                   argv=lambda a: flag_as("--decode-log-interval", huge)(flag_as("--speculative-num-steps", huge)(a)))
    s = settings_of(run)
    assert s.steps is None and s.log_interval is None and s.topk == 1
    assert sorted(s.notes) == sorted([
        f"the traced command line's --speculative-num-steps {huge} is not a count from 0 to {LARGEST:,}: not taken",
        f"the traced command line's --decode-log-interval {huge} is not a count from 0 to {LARGEST:,}: not taken"])
    out = CliRunner().invoke(main, ["analyze", str(run), "--json", "-q"])
    assert out.exit_code == 0 and out.exception is None, out.output
    doc = json.loads(out.stdout)
    assert set(s.notes) <= set(doc["notes"]) and doc["draft_shape"] is None
    assert doc["economics"]["estimates"][0]["draft_steps"] is None
    # a sweep cannot fit a run whose K nothing says: one line
    swept = CliRunner().invoke(main, ["sweep", str(run), str(FIXTURES / "sglang-k2")])
    assert swept.exit_code == 2 and isinstance(swept.exception, SystemExit), swept.output
    assert "cannot tell the number of draft steps" in swept.output


def test_values_of_other_kinds_are_read_as_sglang_prints_them(tmp_path):
    # a quoted path with a comma and an escaped quote, a switch, a value that does not apply (None)
    line = ("[2026-12-02 03:26:13] server_args=ServerArgs(model_path='/m/a, b\\'s', speculative_num_steps=None, "
            "x.tp_size=8, tp_size=2, speculative_adaptive=True, speculative_adaptive_config=None, "
            "decode_log_interval=3.5, speculative_eagle_topk='1')\n")
    (tmp_path / "server.log").write_text(line)
    notes = []
    assert server_args(str(tmp_path / "server.log"), notes) == {"target_model": "/m/a, b's", "tp_size": 2,
                                                                 "adaptive": True}
    assert notes == []
    assert server_args(str(tmp_path / "nothing.log")) == {}


def test_adaptive_speculation_is_read_from_the_log_first_and_said(tmp_path):
    # (no capture here ran SGLang's adaptive speculation: the real K = 4 run, its log and command line rewritten)
    on = copy_run(tmp_path, "sglang-k4", log=lambda text: logged_as("speculative_adaptive_config", "'/cfg/a.json'")(
        logged_as("speculative_adaptive", "True")(text)))
    s = settings_of(on)
    assert (s.adaptive, s.adaptive_config, s.source("adaptive")) == (True, "/cfg/a.json", FROM_SERVER_LOG)
    shape = draft_shape(s)
    assert shape.adaptive and "adaptive speculation (--speculative-adaptive)" in shape_notes(shape)[0]
    out = CliRunner().invoke(main, ["analyze", str(on), "--json", "-q", "--baseline-ms", "3"])
    assert out.exit_code == 0, out.output
    assert any(n.startswith("adaptive speculation") for n in json.loads(out.stdout)["economics"]["notes"])
    # on the command line alone; and a log that says the server turned it off wins over the command line

    def flags(argv):
        return argv + ["--speculative-adaptive", "--speculative-adaptive-config", "/cfg/b.json"]

    s = settings_of(copy_run(tmp_path, "sglang-k4", log=lambda text: "", argv=flags, name="argv"))
    assert (s.adaptive, s.adaptive_config, s.source("adaptive")) == (True, "/cfg/b.json", FROM_COMMAND_LINE)
    s = settings_of(copy_run(tmp_path, "sglang-k4", argv=flags, name="off"))
    assert (s.adaptive, s.source("adaptive"), s.adaptive_config) == (False, FROM_SERVER_LOG, "/cfg/b.json")
    assert shape_notes(draft_shape(s)) == []


def test_the_names_read_are_sglang_0_5_23s():
    # every server_args name specprof reads is a field SGLang 0.5.23 declares, and each SGLang flag one of its
    # command-line names (`--` and the field's name with dashes, or a declared alias)
    import sglang
    fields_dir = Path(sglang.__file__).parent / "srt" / "arg_groups" / "fields"
    source = "\n".join(p.read_text() for p in fields_dir.glob("*.py"))
    declared = set(re.findall(r"^    (\w+): A\[", source, re.M))
    aliases = set(re.findall(r'aliases=\[([^\]]*)\]', source))
    alias_names = {a.strip().strip('"') for group in aliases for a in group.split(",")}
    assert sglang.__version__ == "0.5.23"
    for name, (logged, flags, _) in SETTINGS.items():
        assert logged in declared, logged
        sglang_flags = [f for f in flags if f not in ("--steps", "-k", "--tp")]  # the reference engine's
        for flag in sglang_flags:
            assert flag.lstrip("-").replace("-", "_") in declared or flag in alias_names, flag


# The names of the engines' settings: where a module holds one as a string of its own, it parses that setting.
SETTING_NAMES = {logged for logged, _, _ in SETTINGS.values()} | {
    f for _, flags, _ in SETTINGS.values() for f in flags} | set(MODEL_FLAGS)
GENERIC = {"--steps", "-k", "--tp", "--model"}  # also specprof's own options, or too plain to tell


def named_settings(source: str) -> set[str]:
    """The setting names that `source` holds as a string constant of its own (not inside a sentence)."""
    names = SETTING_NAMES - GENERIC
    return {node.value for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and node.value in names}


def test_settings_are_parsed_in_one_module():
    # a new SGLang flag means editing readers/settings.py alone: no other analyzer module names a setting
    holders = {}
    for path in sorted((ROOT / "analyzer").rglob("*.py")):
        found = named_settings(path.read_text(encoding="utf-8"))
        if found:
            holders[str(path.relative_to(ROOT))] = found
    assert list(holders) == ["analyzer/readers/settings.py"], holders
    # the check finds a setting parsed elsewhere (a tuple of flags, a field of the server_args line)
    assert named_settings('_STEP_FLAGS = ("--steps", "-k", "--speculative-num-steps")\n'
                          'SERVER_ARGS = ("speculative_num_steps", "tp_size")') == {
        "--speculative-num-steps", "speculative_num_steps", "tp_size"}
    assert named_settings('note = f"tree draft (--speculative-eagle-topk {k})"') == set()
    assert reader.__file__.endswith(os.path.join("readers", "settings.py"))
