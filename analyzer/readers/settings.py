"""A run's settings (model/settings.py `RunSettings`), read once from its files: the server log's start-up line of
resolved settings first, else the traced command line.

SGLang logs the settings it runs with at start-up, also the ones it chose itself where the command line left them
out (`server_args=ServerArgs(... speculative_num_steps=2, speculative_eagle_topk=1, speculative_num_draft_tokens=3,
...)`, one line); a value it prints as None does not apply and says nothing. The traced command line is the
tracer's sidecar header's `argv`, else the `command` `specprof capture` recorded in the run's manifest.

This is the one module that knows the engines' flag names (SETTINGS: SGLang's, as `server_args.py` of 0.5.16 and
0.5.23 declares them, and the reference engine's): a new flag is one line there and a field of `RunSettings`.
A run's files are untrusted: a count that is not a whole number from 0 to LARGEST (a 25-digit K, a 5,000-digit
one) is not taken, and `RunSettings.notes` says so.
"""

from __future__ import annotations

import ast
import os
import re
import shlex

from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.settings import FROM_COMMAND_LINE, FROM_SERVER_LOG, FROM_TRACER, RunSettings
from specprof.analyzer.model.sidecars import Sidecars
from specprof.analyzer.readers.files import open_input

COUNT, TEXT, SWITCH = "count", "text", "switch"

# RunSettings field -> (its name in SGLang's server_args line, its flags on a command line, its kind). The first of
# the flags given on the command line counts; SGLang takes each also with underscores, the reference engine takes
# --steps and --tp.
SETTINGS = {
    "steps": ("speculative_num_steps", ("--steps", "-k", "--speculative-num-steps", "--speculative_num_steps"), COUNT),
    "topk": ("speculative_eagle_topk", ("--speculative-eagle-topk", "--speculative_eagle_topk"), COUNT),
    "draft_tokens": ("speculative_num_draft_tokens",
                     ("--speculative-num-draft-tokens", "--speculative_num_draft_tokens"), COUNT),
    "tp_size": ("tp_size", ("--tp", "--tp-size", "--tensor-parallel-size"), COUNT),
    "continuous_steps": ("num_continuous_decode_steps",
                         ("--num-continuous-decode-steps", "--num_continuous_decode_steps"), COUNT),
    "log_interval": ("decode_log_interval", ("--decode-log-interval", "--decode_log_interval"), COUNT),
    "target_model": ("model_path", ("--model-path", "--model"), TEXT),
    "draft_model": ("speculative_draft_model_path",
                    ("--speculative-draft-model-path", "--speculative-draft-model"), TEXT),
    # SGLang 0.5.16 and later: K adapts to the acceptance at run time, among the config's candidates
    "adaptive": ("speculative_adaptive", ("--speculative-adaptive",), SWITCH),
    "adaptive_config": ("speculative_adaptive_config", ("--speculative-adaptive-config",), TEXT),
}
# The command line's flags that name the model a run serves (`RunSettings.model`): SGLang's target and draft, the
# reference engine's model shape and draft error.
MODEL_FLAGS = ("--model-path", "--model", "--speculative-draft-model-path", "--hidden", "--target-layers",
               "--draft-error")
LARGEST = 2**31 - 1  # the largest count taken
SERVER_ARGS_LINES = 5000  # the line comes at start-up: a long log is not read to its end for it

_LOGGED = {logged: name for name, (logged, _, _) in SETTINGS.items()}
_SERVER_ARGS = re.compile(r"(?<![\w.])(" + "|".join(_LOGGED) + r")=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|None|True"
                          r"|False|[0-9]+(?![\w.]))")
_DIGITS = re.compile(r"[0-9]+")


def read_settings(server_log: str | None = None, sidecars: Sidecars | None = None,
                  manifest: dict | None = None) -> RunSettings:
    """The run's settings from its server log at `server_log` (its start-up line; a log that cannot be read, or has
    no such line, says nothing), its sidecars' headers (the traced argv, the tracer's preset, SGLang's version) and
    its manifest (the same, as `specprof capture` recorded them)."""
    notes: list[str] = []
    logged = server_args(server_log, notes) if server_log else {}
    headers = sidecars.headers if sidecars is not None else []
    argv = next((a for a in (_argv(h.get("argv")) for h in headers if isinstance(h, dict)) if a is not None), None)
    if argv is None and isinstance(manifest, dict):
        argv = _argv(manifest.get("command"))
    values, sources = {}, {}
    for name, (_, flags, kind) in SETTINGS.items():
        value, source = logged.get(name), FROM_SERVER_LOG
        if value is None and argv is not None:
            value, source = _flag(argv, flags, kind, notes), FROM_COMMAND_LINE
        if value is not None:
            values[name], sources[name] = value, source
    preset = None
    if headers and sidecars.files.height and "preset" in sidecars.files.columns:
        preset = sidecars.files["preset"][0]
    if not isinstance(preset, str) or not preset:
        preset = manifest.get("preset") if isinstance(manifest, dict) else None
    engine = preset if isinstance(preset, str) and preset else None
    if engine is not None:
        sources["engine"] = FROM_TRACER
    elif argv:
        engine = next((a for a in argv if "sglang" in a or a == "reference"), os.path.basename(argv[0]))
        sources["engine"] = FROM_COMMAND_LINE
    version = next((v for v in (_version(h) for h in headers if isinstance(h, dict)) if v is not None), None)
    if version is None and isinstance(manifest, dict):
        version = _version(manifest)
    if version is not None:
        sources["version"] = FROM_TRACER
    model = {}
    if argv is not None:
        for flag in MODEL_FLAGS:
            text = _flag(argv, (flag,), TEXT, notes)
            if text:
                model[flag.lstrip("-")] = text
    if model:
        sources["model"] = FROM_COMMAND_LINE
    return RunSettings(engine=engine, version=version, model=model, command_line=argv is not None, sources=sources,
                       notes=tuple(dict.fromkeys(notes)), adaptive=bool(values.pop("adaptive", False)), **values)


def server_args(path: str, notes: list[str] | None = None) -> dict:
    """RunSettings field -> value, from the server log's `server_args=ServerArgs(...)` start-up line (the first
    within SERVER_ARGS_LINES lines); {} when the log has none or cannot be read. Values printed as None are left
    out; `notes` gets a sentence for each value not taken."""
    notes = notes if notes is not None else []
    try:
        with open_input(path, "a server log") as fh:
            for i, line in enumerate(fh):
                if i >= SERVER_ARGS_LINES:
                    break
                if "server_args=ServerArgs(" in line:
                    return _logged(line, path, notes)
    except SpecprofError:
        return {}
    return {}


def _logged(line: str, path: str, notes: list[str]) -> dict:
    out: dict = {}
    for logged, text in _SERVER_ARGS.findall(line):
        name = _LOGGED[logged]
        kind, value = SETTINGS[name][2], None
        if name in out or text == "None":
            continue
        if kind == COUNT:
            if text[:1].isdigit():
                value = _count(text, f"{path}: its server_args line's {logged}={_shown(text)}", notes)
        elif kind == SWITCH:
            value = {"True": True, "False": False}.get(text)
        elif text[:1] in ("'", '"'):
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                value = None
        if value is not None:
            out[name] = value
    return out


def _argv(argv) -> list[str] | None:
    """A command line as its arguments: a list of str, or a str split as a shell would; None otherwise."""
    if isinstance(argv, str):
        try:
            argv = shlex.split(argv)
        except ValueError:  # an unclosed quote
            return None
    if not isinstance(argv, list) or not all(isinstance(x, str) for x in argv):
        return None
    return argv


def _flag(argv: list[str], names: tuple[str, ...], kind: str, notes: list[str]):
    """The value of the first of the flags `names` on the command line `argv` (`--flag value` or `--flag=value`;
    a switch: True where given), or None."""
    for i, arg in enumerate(argv):
        for name in names:
            if kind == SWITCH:
                if arg == name:
                    return True
                continue
            value = None
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg[len(name) + 1:]
            if value is not None:
                if kind == COUNT:
                    return _count(value, f"the traced command line's {name} {_shown(value)}", notes)
                return value
    return None


def _count(text: str, what: str, notes: list[str]) -> int | None:
    """`text` as a count from 0 to LARGEST; else None, and a note saying `what` was not taken."""
    text = text.strip()
    if _DIGITS.fullmatch(text) and len(text) <= len(str(LARGEST)) and int(text) <= LARGEST:
        return int(text)
    notes.append(f"{what} is not a count from 0 to {LARGEST:,}: not taken")
    return None


def _shown(text: str) -> str:
    """A value as a note shows it: whole when short, else its length."""
    text = text.strip()
    if len(text) <= 30:
        return text
    return f"(a {len(text):,}-digit number)" if _DIGITS.fullmatch(text) else f"(a value of {len(text):,} characters)"


def _version(head: dict) -> str | None:
    versions = head.get("versions")
    version = versions.get("sglang") if isinstance(versions, dict) else None
    return version if isinstance(version, str) else None
