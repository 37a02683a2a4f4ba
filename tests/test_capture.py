"""`specprof capture` (tracer/capture.py, tracer/cli.py) on the CPU.

There is no nsys here. The `nsys` these tests run is a test double for nsys's command-line contract, written
by `tools()` below: a small Python script that records its argv, runs the workload, writes a dummy
`.nsys-rep` (or `.qdstrm`), and on `export` writes a SQLite file. It shows that specprof builds, runs and
follows up the right commands; it says nothing about what the real nsys records. The real nsys is exercised
by the GPU script that captures the reference engine.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
import types
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from specprof.analyzer.errors import SpecprofError
from specprof.tracer import capture, manifest

FAKE_VERSION = "NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0"

FAKE_NSYS = '''#!{python}
"""Test double for nsys's command-line contract (written by tests/test_capture.py); not nsys."""
import json, os, signal, sqlite3, subprocess, sys, time
from pathlib import Path


def log(**fields):
    with open(os.environ["FAKE_NSYS_LOG"], "a") as out:
        out.write(json.dumps({{"tool": "nsys", "argv": sys.argv[1:], "cwd": os.getcwd(), **fields}}) + "\\n")


def value(args, flag):
    return args[args.index(flag) + 1]


def profile(args):
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in ("-t", "-s", "-o") else 1
    prefix, app = value(args[:i], "-o"), args[i:]
    log(app=app)
    kind = os.environ.get("FAKE_NSYS_OUTPUT", "rep")

    def write_report():
        if kind == "rep":
            Path(prefix + ".nsys-rep").write_text("fake report")
        elif kind == "qdstrm":
            Path(prefix + ".qdstrm").write_text("fake stream")

    if os.environ.get("FAKE_NSYS_MODE") == "sleep":
        def stop(signum, frame):
            Path(os.environ["FAKE_NSYS_SIGNALS"]).write_text(signal.Signals(signum).name)
            write_report()
            sys.exit(int(os.environ.get("FAKE_NSYS_STOP_RC", "0")))

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        Path(os.environ["FAKE_NSYS_READY"]).write_text("ready")
        time.sleep(120)
        return 99
    returncode = subprocess.run(app).returncode
    write_report()
    if any(arg.startswith("--duration=") for arg in args[:i]):
        return 128 + signal.SIGTERM  # nsys's default --kill=sigterm ends the workload when the duration runs out
    return returncode


def export(args):
    log()
    if os.environ.get("FAKE_NSYS_EXPORT_MODE") == "sleep":
        def stop(signum, frame):
            Path(os.environ["FAKE_NSYS_SIGNALS"]).write_text("export " + signal.Signals(signum).name)
            sys.exit(128 + signum)

        signal.signal(signal.SIGTERM, stop)
        Path(os.environ["FAKE_NSYS_READY"]).write_text("ready")
        time.sleep(120)
        return 99
    if os.environ.get("FAKE_NSYS_EXPORT_RC"):
        return int(os.environ["FAKE_NSYS_EXPORT_RC"])
    assert Path(args[-1]).is_file(), args
    db = sqlite3.connect(value(args, "-o"))
    db.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    db.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', '2025.3.1')")
    if not os.environ.get("FAKE_NSYS_NO_KERNELS"):
        db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER)")
    db.commit()
    db.close()
    return 0


def stats(args):
    log()
    Path(value(args, "-o") + "_" + value(args, "-r") + ".csv").write_text("Name,Start\\n")
    return 0


args = sys.argv[1:]
if args == ["--version"]:
    print("{version}")
    sys.exit(0)
sys.exit({{"profile": profile, "export": export, "stats": stats}}[args[0]](args[1:]))
'''

FAKE_IMPORTER = '''#!{python}
"""Test double for QdstrmImporter's command line; not the real one."""
import json, os, sys
from pathlib import Path

with open(os.environ["FAKE_NSYS_LOG"], "a") as out:
    out.write(json.dumps({{"tool": "QdstrmImporter", "argv": sys.argv[1:], "cwd": os.getcwd()}}) + "\\n")
source = Path(sys.argv[sys.argv.index("-i") + 1])
source.with_suffix(".nsys-rep").write_text("converted report")
'''

# The workload: writes a sidecar where the tracer would, dumps the tracer's environment, exits with argv[1].
WORKLOAD = """
import json, os, sys
names = ("SPECPROF_TRACE", "SPECPROF_OUT_DIR", "SPECPROF_PRESET", "PYTHONPATH", "NSYS_NVTX_PROFILER_REGISTER_ONLY")
with open(os.environ["WORKLOAD_ENV_DUMP"], "w") as out:
    json.dump({**{name: os.environ.get(name) for name in names}, "tracer_loaded": "specprof.tracer.plugin" in sys.modules}, out)
if os.environ.get("SPECPROF_OUT_DIR"):
    with open(os.path.join(os.environ["SPECPROF_OUT_DIR"], "specprof-sidecar.%d.jsonl" % os.getpid()), "w") as out:
        out.write('{"cycle": 0}\\n')
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""

DEFAULTS = ["-t", "cuda,nvtx,osrt", "--cuda-graph-trace=node", "--trace-fork-before-exec=true", "-s", "none",
            "--cpuctxsw=none"]  # fmt: skip


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _fake_nsys(path: Path) -> Path:
    return _script(path, FAKE_NSYS.format(python=sys.executable, version=FAKE_VERSION))


class Tools:
    """A fake Nsight Compute layout: host/target-linux-x64/nsys, and QdstrmImporter beside it when asked."""

    def __init__(self, root: Path):
        self.root = root
        self.nsys = _fake_nsys(root / "host" / "target-linux-x64" / "nsys")
        self.importer = root / "host" / "linux-desktop-glibc_2_11_3-x64" / "QdstrmImporter"
        self.log = root / "calls.jsonl"

    def add_importer(self) -> Path:
        return _script(self.importer, FAKE_IMPORTER.format(python=sys.executable))

    def calls(self, tool: str = "nsys") -> list[dict]:
        if not self.log.exists():
            return []
        return [row for row in map(json.loads, self.log.read_text().splitlines()) if row["tool"] == tool]


@pytest.fixture
def tools(tmp_path, monkeypatch):
    tools = Tools(tmp_path / "nsight")
    monkeypatch.setenv("FAKE_NSYS_LOG", str(tools.log))
    monkeypatch.setenv("WORKLOAD_ENV_DUMP", str(tmp_path / "workload-env.json"))
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.delenv("NSYS_NVTX_PROFILER_REGISTER_ONLY", raising=False)
    for name in ("FAKE_NSYS_OUTPUT", "FAKE_NSYS_MODE", "FAKE_NSYS_EXPORT_RC", "FAKE_NSYS_NO_KERNELS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(capture, "SEARCH_ROOT", tmp_path / "empty-root")
    return tools


class StandInPlugin:
    """Stands in for specprof.tracer.plugin.bootstrap_dir(path): makes the folder and returns it; records the calls."""

    def __init__(self):
        self.calls: list[Path] = []

    def bootstrap_dir(self, path):
        self.calls.append(Path(path))
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "sitecustomize.py").write_text("# stand-in for the tracer's bootstrap\n")
        return Path(path)


@pytest.fixture
def plugin(monkeypatch):
    stand_in = StandInPlugin()
    module = types.ModuleType("specprof.tracer.plugin")
    module.bootstrap_dir = stand_in.bootstrap_dir
    monkeypatch.setitem(sys.modules, "specprof.tracer.plugin", module)
    return stand_in


@pytest.fixture
def workload(tmp_path) -> list[str]:
    return [sys.executable, str(_script(tmp_path / "workload.py", WORKLOAD))]


def invoke(*args: str):
    return CliRunner().invoke(main, ["capture", *map(str, args)])


def read_manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


# ---------------------------------------------------------------------------------------------- discovery


def test_discovery_order_is_option_env_path_then_install_folders(tmp_path, monkeypatch):
    given = _fake_nsys(tmp_path / "given" / "nsys")
    from_env = _fake_nsys(tmp_path / "env" / "nsys")
    on_path = _fake_nsys(tmp_path / "path" / "nsys")
    installed = _fake_nsys(tmp_path / "root" / "opt/nvidia/nsight-systems/2025.3.1/bin/nsys")
    monkeypatch.setattr(capture, "SEARCH_ROOT", tmp_path / "root")

    environ = {"NSYS": str(from_env), "PATH": str(on_path.parent)}
    assert capture.find_nsys(given, environ) == given
    assert capture.find_nsys(None, environ) == from_env
    assert capture.find_nsys(None, {"PATH": str(on_path.parent)}) == on_path
    assert capture.find_nsys(None, {"PATH": str(tmp_path / "nothing-here")}) == installed


def test_install_folders_in_listed_order_newest_version_first(tmp_path):
    root = tmp_path / "root"
    expected = [
        "opt/nvidia/nsight-systems/2025.10.1/bin/nsys",
        "opt/nvidia/nsight-systems/2025.3.1/bin/nsys",
        "opt/nvidia/nsight-systems/2024.6.2/bin/nsys",
        "usr/local/cuda-12.8/bin/nsys",
        "usr/local/cuda-12.8/nsight-systems-2024.6.2/bin/nsys",
        "opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys",
        "opt/nvidia/nsight-compute/2024.1.0/host/target-linux-x64/nsys",
    ]
    for relative in reversed(expected):
        _fake_nsys(root / relative)
    not_executable = root / "opt/nvidia/nsight-systems/2026.1.0/bin/nsys"
    not_executable.parent.mkdir(parents=True)
    not_executable.write_text("not a program")

    assert capture.install_candidates(root) == [root / relative for relative in expected]


def test_missing_nsys_is_one_message_and_exit_2(tools, workload, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    result = invoke("-o", tmp_path / "run", "--", *workload)

    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    message = result.stderr
    assert "nsys (Nsight Systems) not found" in message
    for place in ("--nsys", "$NSYS", "PATH", str(tmp_path / "empty-root/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys")):
        assert place in message
    assert "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


def test_nsys_variable_that_is_not_executable_is_named(tools, workload, tmp_path, monkeypatch):
    monkeypatch.setenv("NSYS", str(tmp_path / "no-such-nsys"))
    result = invoke("-o", tmp_path / "run", "--", *workload)
    assert result.exit_code == 2
    assert "$NSYS" in result.stderr and "no-such-nsys" in result.stderr


def test_nsys_version_is_its_first_line(tools):
    assert capture.nsys_version(tools.nsys) == FAKE_VERSION


# ---------------------------------------------------------------------------------------- the nsys command


def test_default_flags(tools, workload, tmp_path):
    plan = capture.plan(workload, run_dir=tmp_path / "run", nsys=tools.nsys, tracer=False)
    assert plan.profile_argv() == [str(tools.nsys), "profile", *DEFAULTS, "-o", str(tmp_path / "run" / "run"), *workload]
    assert plan.export_argv() == [str(tools.nsys), "export", "--type", "sqlite", "-o", "run.sqlite", "run.nsys-rep"]


@pytest.mark.parametrize(
    "window, flags",
    [
        (capture.CaptureRange("cudaProfilerApi"), ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]),
        (
            capture.CaptureRange("nvtx", "cycle@specprof"),
            ["--capture-range=nvtx", "--nvtx-capture=cycle@specprof", "--capture-range-end=stop"],
        ),
        (capture.CaptureRange(delay=60, duration=70), ["--delay=60", "--duration=70"]),
        (capture.CaptureRange(delay=5), ["--delay=5"]),
        (capture.CaptureRange(duration=9), ["--duration=9"]),
    ],
)
def test_capture_range_flags(tools, workload, tmp_path, window, flags):
    plan = capture.plan(workload, run_dir=tmp_path / "run", nsys=tools.nsys, capture_range=window, tracer=False)
    argv = plan.profile_argv()
    assert argv[2 : argv.index("-o")] == DEFAULTS + flags


@pytest.mark.parametrize(
    "options, complaint",
    [
        (["--capture-range", "nvtx"], "--nvtx-capture"),
        (["--nvtx-capture", "cycle@specprof"], "--nvtx-capture"),
        (["--capture-range", "cudaProfilerApi", "--delay", "3"], "pick one"),
        (["--capture-range", "nvtx", "--nvtx-capture", "x", "--duration", "3"], "pick one"),
    ],
)
def test_conflicting_capture_ranges_are_refused(tools, workload, tmp_path, options, complaint):
    result = invoke(*options, "--nsys", tools.nsys, "-o", tmp_path / "run", "--", *workload)
    assert result.exit_code == 2
    assert complaint in result.stderr


def test_nvtx_range_lets_nsys_match_unregistered_strings(tools, workload, tmp_path, monkeypatch):
    window = capture.CaptureRange("nvtx", "cycle@specprof")
    plan = capture.plan(workload, run_dir=tmp_path / "run", nsys=tools.nsys, capture_range=window, tracer=False)
    assert plan.env == {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
    monkeypatch.setenv("NSYS_NVTX_PROFILER_REGISTER_ONLY", "1")  # the user's own choice wins
    plan = capture.plan(workload, run_dir=tmp_path / "run", nsys=tools.nsys, capture_range=window, tracer=False)
    assert plan.env == {}


def test_extra_nsys_args_are_split_never_given_to_a_shell(tools, workload, tmp_path):
    extra = "--sample=none --env-var 'A=b c' ;touch pwned"
    plan = capture.plan(workload, run_dir=tmp_path / "run", nsys=tools.nsys, extra_nsys_args=extra, tracer=False)
    argv = plan.profile_argv()
    assert argv[2 + len(DEFAULTS) : argv.index("-o")] == ["--sample=none", "--env-var", "A=b c", ";touch", "pwned"]
    for bad in ("-o elsewhere", "--output=elsewhere", "--sample 'unclosed"):
        with pytest.raises(SpecprofError):
            capture.plan(workload, run_dir=tmp_path / "run", nsys=tools.nsys, extra_nsys_args=bad, tracer=False)


def test_command_must_exist_and_follow_the_separator(tools, tmp_path):
    result = invoke("--nsys", tools.nsys, "-o", tmp_path / "run", "--", "no-such-program-xyz", "--flag")
    assert result.exit_code == 2 and "no-such-program-xyz: no such executable" in result.stderr
    with pytest.raises(SpecprofError, match="after --"):
        capture.plan(["--flag"], run_dir=tmp_path / "run", nsys=tools.nsys)


def test_default_run_dir_is_a_utc_timestamp():
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert capture.default_run_dir(moment) == Path("specprof-run-20260102T030405Z")


# ------------------------------------------------------------------------------------------------ dry run


def test_dry_run_prints_the_exact_command_and_environment_and_runs_nothing(tools, plugin, workload, tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/already/there")
    run_dir = tmp_path / "run"
    result = invoke("--dry-run", "--preset", "reference", "--capture-range", "cudaProfilerApi", "--nvidia-stats",
                    "--nsys", tools.nsys, "-o", run_dir, "--", *workload, "it's quoted")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    expected = [str(tools.nsys), "profile", *DEFAULTS, "--capture-range=cudaProfilerApi", "--capture-range-end=stop",
                "-o", str(run_dir / "run"), *workload, "it's quoted"]  # fmt: skip
    assert lines[1] == shlex.join(expected)
    assert shlex.split(lines[1]) == expected
    env = lines[lines.index("# environment additions") + 1 :]
    assert env[:4] == [
        "SPECPROF_TRACE=1",
        f"SPECPROF_OUT_DIR={run_dir}",
        "SPECPROF_PRESET=reference",
        f"PYTHONPATH={run_dir / '.bootstrap'}:/already/there",
    ]
    assert shlex.join([str(tools.nsys), "stats", "-q", "-r", "nvtx_gpu_proj_trace", "--format", "csv", "-o",
                       "nvidia", "run.sqlite"]) in lines  # fmt: skip
    assert not run_dir.exists() and tools.calls() == [] and plugin.calls == []


def test_dry_run_without_tracer_adds_no_environment(tools, workload, tmp_path):
    result = invoke("--dry-run", "--no-tracer", "--nsys", tools.nsys, "-o", tmp_path / "run", "--", *workload)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[3] == "(none)"


# ---------------------------------------------------------------------------------------------- run dirs


def test_an_existing_run_is_not_overwritten_without_force(tools, workload, tmp_path):
    run_dir = tmp_path / "run"
    first = invoke("--no-tracer", "--nsys", tools.nsys, "-o", run_dir, "--", *workload)
    assert first.exit_code == 0, first.output
    (run_dir / "notes.txt").write_text("mine")
    (run_dir / "specprof-sidecar.1.jsonl").write_text("stale")  # listed by the first run's manifest, below
    record = read_manifest(run_dir)
    record["files"]["sidecars"] = ["specprof-sidecar.1.jsonl"]
    (run_dir / "manifest.json").write_text(json.dumps(record))

    refused = invoke("--no-tracer", "--nsys", tools.nsys, "-o", run_dir, "--", *workload)
    assert refused.exit_code == 2 and "--force" in refused.stderr
    assert (run_dir / "specprof-sidecar.1.jsonl").read_text() == "stale"

    forced = invoke("--force", "--no-tracer", "--nsys", tools.nsys, "-o", run_dir, "--", *workload)
    assert forced.exit_code == 0, forced.output
    assert not (run_dir / "specprof-sidecar.1.jsonl").exists()  # the old run's sidecar would mix two runs
    assert (run_dir / "notes.txt").read_text() == "mine"  # not ours: left alone
    assert (run_dir / "run.nsys-rep").exists()


def test_force_never_deletes_a_sidecar_no_manifest_lists(tools, workload, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "specprof-sidecar.mine.jsonl").write_text("a user's own")
    (run_dir / "nvidia_mine.csv").write_text("a user's own")
    forced = invoke("--force", "--no-tracer", "--nsys", tools.nsys, "-o", run_dir, "--", *workload)
    assert forced.exit_code == 2
    assert "specprof-sidecar.mine.jsonl, nvidia_mine.csv, which no manifest.json there lists" in forced.stderr
    assert tools.calls() == []
    assert (run_dir / "specprof-sidecar.mine.jsonl").read_text() == "a user's own"
    assert (run_dir / "nvidia_mine.csv").read_text() == "a user's own"


def _a_capture(tools, workload, run_dir):
    first = invoke("--no-tracer", "--nsys", tools.nsys, "-o", run_dir, "--", *workload)
    assert first.exit_code == 0, first.output
    return read_manifest(run_dir)


def _refused_one_line(result, run_dir):
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"specprof: error: {run_dir}"), result.stderr
    return lines[0]


@pytest.mark.parametrize("listed", ["..", ".", "ABSOLUTE", "../outside.txt", "notes.txt", "sub/run.sqlite"])
def test_force_refuses_a_manifest_listing_what_a_capture_does_not_write(tools, workload, tmp_path, listed):
    parent = tmp_path / "parent"
    run_dir = parent / "run"
    record = _a_capture(tools, workload, run_dir)
    (parent / "outside.txt").write_text("a user's own")
    (run_dir / "notes.txt").write_text("a user's own")
    (run_dir / "sub").mkdir()
    (run_dir / "sub" / "run.sqlite").write_text("a user's own")
    name = str(parent / "outside.txt") if listed == "ABSOLUTE" else listed
    record["files"]["sidecars"] = [name]
    (run_dir / "manifest.json").write_text(json.dumps(record))
    before = sorted(str(path) for path in tmp_path.rglob("*"))

    forced = invoke("--force", "--no-tracer", "--nsys", tools.nsys, "-o", run_dir, "--", *workload)
    line = _refused_one_line(forced, run_dir)
    assert "not a file a capture writes" in line
    assert sorted(str(path) for path in tmp_path.rglob("*")) == before  # nothing deleted, inside RUN or out
    assert (parent / "outside.txt").read_text() == "a user's own"


@pytest.mark.parametrize("where", ["run.sqlite", "run.nsys-rep", "manifest.json", ".bootstrap",
                                   ".bootstrap/sitecustomize.py"])
def test_force_never_follows_a_link(tools, workload, tmp_path, where):
    run_dir = tmp_path / "run"
    _a_capture(tools, workload, run_dir)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "sitecustomize.py").write_text("a user's own")
    (outside / "data").write_text("a user's own")
    (run_dir / ".bootstrap").mkdir(exist_ok=True)
    link = run_dir / where
    if link.is_dir():
        for child in link.iterdir():
            child.unlink()
        link.rmdir()
    elif link.exists():
        link.unlink()
    link.symlink_to(outside if where == ".bootstrap" else outside / "data")
    profiles = len([call for call in tools.calls() if call["argv"][:1] == ["profile"]])

    forced = invoke("--force", "--no-tracer", "--nsys", tools.nsys, "-o", run_dir, "--", *workload)
    line = _refused_one_line(forced, run_dir)
    assert f"{where} is a link" in line
    assert len([call for call in tools.calls() if call["argv"][:1] == ["profile"]]) == profiles
    assert (outside / "sitecustomize.py").read_text() == "a user's own"
    assert (outside / "data").read_text() == "a user's own"
    assert link.is_symlink()


def test_force_refuses_a_folder_where_a_capture_writes_a_file(tools, workload, tmp_path):
    run_dir = tmp_path / "run"
    _a_capture(tools, workload, run_dir)
    (run_dir / "run.sqlite").unlink()
    (run_dir / "run.sqlite").mkdir()
    (run_dir / "run.sqlite" / "mine.txt").write_text("a user's own")
    forced = invoke("--force", "--no-tracer", "--nsys", tools.nsys, "-o", run_dir, "--", *workload)
    assert "run.sqlite is not a regular file" in _refused_one_line(forced, run_dir)
    assert (run_dir / "run.sqlite" / "mine.txt").read_text() == "a user's own"


def test_force_keeps_a_users_files_in_the_bootstrap_folder(tools, workload, tmp_path):
    run_dir = tmp_path / "run"
    _a_capture(tools, workload, run_dir)
    (run_dir / ".bootstrap").mkdir(exist_ok=True)
    (run_dir / ".bootstrap" / "sitecustomize.py").write_text("old")
    (run_dir / ".bootstrap" / "__pycache__").mkdir()
    (run_dir / ".bootstrap" / "__pycache__" / "sitecustomize.cpython-311.pyc").write_bytes(b"old")
    (run_dir / ".bootstrap" / "mine.py").write_text("a user's own")
    forced = invoke("--force", "--no-tracer", "--nsys", tools.nsys, "-o", run_dir, "--", *workload)
    assert forced.exit_code == 0, forced.output
    assert not (run_dir / ".bootstrap" / "sitecustomize.py").exists()
    assert not (run_dir / ".bootstrap" / "__pycache__").exists()  # emptied: removed
    assert (run_dir / ".bootstrap" / "mine.py").read_text() == "a user's own"


def test_a_run_directory_that_cannot_be_written_is_one_clear_error(tools, workload, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = invoke("--no-tracer", "--nsys", tools.nsys, "-o", blocker / "run", "--", *workload)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.startswith(f"specprof: error: {blocker / 'run'}: cannot write the run directory")


def test_an_empty_existing_directory_is_used(tools, workload, tmp_path):
    (tmp_path / "run").mkdir()
    result = invoke("--no-tracer", "--nsys", tools.nsys, "-o", tmp_path / "run", "--", *workload)
    assert result.exit_code == 0, result.output


def test_force_never_deletes_a_server_log_no_manifest_lists(tools, workload, tmp_path):
    # A server.log a user left in the folder (their own `... | tee RUN/server.log`) is not a capture's: --force
    # deletes a server log only where a manifest there lists it, and refuses before anything runs otherwise.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "server.log").write_text("a user's own log")
    forced = invoke("--force", "--no-tracer", "--nsys", tools.nsys, "-o", run_dir, "--", *workload)
    line = _refused_one_line(forced, run_dir)
    assert "holds server.log, which no manifest.json there lists" in line
    assert tools.calls() == [] and (run_dir / "server.log").read_text() == "a user's own log"
    # listed by a capture's manifest: that capture's, replaced by the next one's
    (run_dir / "server.log").unlink()
    _a_capture(tools, workload, run_dir)
    assert read_manifest(run_dir)["files"]["server_log"] == "server.log"
    forced = invoke("--force", "--no-tracer", "--nsys", tools.nsys, "-o", run_dir, "--", *workload)
    assert forced.exit_code == 0, forced.output


def test_force_with_a_manifest_nested_too_deep_reads_it_as_listing_nothing(tools, workload, tmp_path):
    # json.loads raised RecursionError on it, which was not caught: a traceback, exit 1.
    run_dir = tmp_path / "run"
    _a_capture(tools, workload, run_dir)
    (run_dir / "manifest.json").write_text("[" * 50_000)
    forced = invoke("--force", "--no-tracer", "--nsys", tools.nsys, "-o", run_dir, "--", *workload)
    assert "holds server.log, which no manifest.json there lists" in _refused_one_line(forced, run_dir)
    assert (run_dir / "server.log").exists()


def _outside(tmp_path) -> Path:
    """A file outside the run directory that a link planted in it points at."""
    target = tmp_path / "outside" / "precious.txt"
    target.parent.mkdir(exist_ok=True)
    target.write_text("a user's own, outside the run")
    return target


def test_a_link_planted_at_the_write_probe_is_never_written_through(tools, workload, tmp_path):
    # The probe that checks the run directory can be written was `.specprof-write-test.<pid>`, written with a call
    # that follows links: a link planted under that name truncated its target to 0 bytes.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    target = _outside(tmp_path)
    for pid in {os.getpid(), os.getppid()}:
        (run_dir / f".specprof-write-test.{pid}").symlink_to(target)
    forced = invoke("--force", "--no-tracer", "--nsys", tools.nsys, "-o", run_dir, "--", *workload)
    assert forced.exit_code == 0, forced.output
    assert target.read_text() == "a user's own, outside the run"
    assert (run_dir / f".specprof-write-test.{os.getpid()}").is_symlink()  # not ours: left alone


PLANTING = """
import os, sys
run, target = sys.argv[1], sys.argv[2]
for name in sys.argv[3:]:
    os.symlink(target, os.path.join(run, name))
"""


@pytest.mark.parametrize("planted", ["manifest.json", "run.sqlite"])
def test_links_the_workload_plants_in_the_run_directory_are_never_written_through(tools, workload, tmp_path,
                                                                                   planted):
    # The workload runs after the run directory was checked; a link it leaves under a name capture writes later
    # (the manifest) or has nsys write (the export) is refused there: one line, exit 2, the target untouched.
    run_dir = tmp_path / "run"
    target = _outside(tmp_path)
    planting = _script(tmp_path / "planting.py", PLANTING)
    result = invoke("--no-tracer", "--nsys", tools.nsys, "-o", run_dir, "--", sys.executable, planting, run_dir,
                    target, planted)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert target.read_text() == "a user's own, outside the run" and (run_dir / planted).is_symlink()
    if planted == "manifest.json":
        line = _refused_one_line(result, run_dir / "manifest.json")
        assert "cannot write the manifest (a symbolic link, which specprof never writes through)" in line
    else:
        assert f"{run_dir / 'run.sqlite'} became a symbolic link during the run" in result.stderr
        assert read_manifest(run_dir)["exit_codes"]["export"] is None
        assert [c["argv"][0] for c in tools.calls()] == ["profile"]


@pytest.mark.parametrize("where", ["server.log", ".bootstrap", ".bootstrap/sitecustomize.py"])
def test_links_planted_after_the_check_are_never_written_through(tools, workload, tmp_path, monkeypatch, where):
    # Planted between the run directory's check and the write (here: right after --force's deletions): refused in
    # one line before the workload runs, the target untouched.
    run_dir = tmp_path / "run"
    _a_capture(tools, workload, run_dir)
    target = _outside(tmp_path)
    delete = capture._delete_owned

    def delete_then_plant(*args):
        delete(*args)
        if where.startswith(".bootstrap/"):
            (run_dir / ".bootstrap").mkdir(exist_ok=True)
        (run_dir / where).symlink_to(target.parent if where == ".bootstrap" else target)

    monkeypatch.setattr(capture, "_delete_owned", delete_then_plant)
    forced = invoke("--force", "--preset", "reference", "--nsys", tools.nsys, "-o", run_dir, "--", *workload)
    assert target.read_text() == "a user's own, outside the run"
    assert [p.name for p in target.parent.iterdir()] == ["precious.txt"] and (run_dir / where).is_symlink()
    assert [c["argv"][0] for c in tools.calls()].count("profile") == 1  # the first capture's only
    if where == "server.log":
        line = _refused_one_line(forced, run_dir / "server.log")
        assert "cannot write the server log there (a symbolic link, which specprof never writes through)" in line
    else:
        line = _refused_one_line(forced, run_dir / ".bootstrap")
        name = where.rpartition("/")[2]
        assert f"cannot write the tracer's bootstrap folder ({name}: a symbolic link, which specprof never writes " \
               "through)" in line


# ------------------------------------------------------------------------------------------------ running


def test_manifest_and_run_directory(tools, plugin, workload, tmp_path, monkeypatch):
    smi = _script(tmp_path / "bin" / "nvidia-smi", f"#!{sys.executable}\n"
                  "print('0, NVIDIA H200, GPU-1a2b, 580.65.06, 143771 MiB')\n"
                  "print('1, NVIDIA H200, GPU-3c4d, 580.65.06, 143771 MiB')\n")  # fmt: skip
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    versions = {"torch": "2.14.1"}
    monkeypatch.setattr(manifest.importlib.metadata, "version",
                        lambda name: versions.get(name) or (_ for _ in ()).throw(
                            manifest.importlib.metadata.PackageNotFoundError(name)))  # fmt: skip
    run_dir = tmp_path / "run"
    before = datetime.now(timezone.utc)

    result = invoke("--nvidia-stats", "--capture-range", "cudaProfilerApi", "--nsys", tools.nsys, "-o", run_dir,
                    "--", *workload)  # fmt: skip
    assert result.exit_code == 0, result.output

    record = read_manifest(run_dir)
    profile = tools.calls()[0]
    assert record["schema"] == "specprof.run/1"
    assert record["command"] == workload
    assert record["nsys"] == {"path": str(tools.nsys), "version": FAKE_VERSION, "argv": [str(tools.nsys), *profile["argv"]]}
    assert "--capture-range-end=stop" in record["nsys"]["argv"]
    assert record["gpus"] == [
        {"index": 0, "name": "NVIDIA H200", "uuid": "GPU-1a2b", "driver_version": "580.65.06", "memory_total": "143771 MiB"},
        {"index": 1, "name": "NVIDIA H200", "uuid": "GPU-3c4d", "driver_version": "580.65.06", "memory_total": "143771 MiB"},
    ]  # fmt: skip
    assert record["versions"]["torch"] == "2.14.1" and record["versions"]["sglang"] is None
    assert record["host"] and record["preset"] == "sglang" and record["tracer"] is True
    start, end = datetime.fromisoformat(record["start"]), datetime.fromisoformat(record["end"])
    assert before <= start <= end <= datetime.now(timezone.utc)
    assert record["exit_codes"] == {"profile": 0, "qdstrm_import": None, "export": 0, "stats": 0}
    assert record["signals_forwarded"] == []
    sidecar = next(run_dir.glob("specprof-sidecar.*.jsonl")).name
    assert record["files"] == {"report": "run.nsys-rep", "qdstrm": None, "sqlite": "run.sqlite", "sidecars": [sidecar],
                               "nvidia_stats": ["nvidia_nvtx_gpu_proj_trace.csv"], "server_log": "server.log"}  # fmt: skip

    # export and stats ran in the run directory, on its files
    assert [(call["argv"][0], call["cwd"]) for call in tools.calls()[1:]] == [("export", str(run_dir)), ("stats", str(run_dir))]
    tables = sqlite3.connect(run_dir / "run.sqlite").execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == [("META_DATA_EXPORT",), ("CUPTI_ACTIVITY_KIND_KERNEL",)]
    assert "warning" not in result.stderr

    # the workload saw the tracer's environment, with the bootstrap folder first on PYTHONPATH
    seen = json.loads((tmp_path / "workload-env.json").read_text())
    assert plugin.calls == [run_dir / ".bootstrap"]
    assert seen["SPECPROF_TRACE"] == "1" and seen["SPECPROF_PRESET"] == "sglang"
    assert seen["SPECPROF_OUT_DIR"] == str(run_dir)
    assert seen["PYTHONPATH"] == str(run_dir / ".bootstrap")
    assert record["env"] == {k: seen[k] for k in ("SPECPROF_TRACE", "SPECPROF_OUT_DIR", "SPECPROF_PRESET", "PYTHONPATH")}


TALKING = """
import sys
print("server up: stdout line", flush=True)
print("[2026-11-29 15:32:30 TP0] Decode batch. #running-req: 8, accept len: 2.63,", file=sys.stderr, flush=True)
sys.stdout.buffer.write(b"no newline at the end, and a byte that is not UTF-8: \\xff")
"""


def test_the_server_log_is_written_into_a_new_run_folder_and_still_shown(tools, workload, tmp_path):
    # `specprof capture -o runs/eagle3 -- ... | tee runs/eagle3.server.log` lost the log when runs/ did not exist;
    # capture keeps it itself, in the run folder, where `analyze` finds it (readers/inputs.py SERVER_LOG).
    from specprof.analyzer.readers import inputs

    talking = _script(tmp_path / "talking.py", TALKING)
    run_dir = tmp_path / "runs" / "eagle3"  # runs/ does not exist yet
    result = invoke("--nsys", tools.nsys, "-o", run_dir, "--", sys.executable, talking)
    assert result.exit_code == 0, result.output
    log = (run_dir / "server.log").read_bytes()
    # stdout and stderr in the order written (one pipe, as `2>&1 | tee` had it), bytes as they are
    assert log == (b"server up: stdout line\n[2026-11-29 15:32:30 TP0] Decode batch. #running-req: 8, accept len: "
                   b"2.63,\nno newline at the end, and a byte that is not UTF-8: \xff")
    assert result.stdout_bytes == log  # and shown as it came
    assert read_manifest(run_dir)["files"]["server_log"] == "server.log"
    assert "server.log" in result.stderr.splitlines()[-1]  # "run written to ...: ..., server.log, manifest.json"
    assert capture.SERVER_LOG == inputs.SERVER_LOG
    assert inputs.locate(str(run_dir)).server_log == str(run_dir / "server.log")


def test_the_server_log_elsewhere_or_not_at_all(tools, workload, tmp_path):
    talking = _script(tmp_path / "talking.py", TALKING)
    (tmp_path / "logs").mkdir()
    result = invoke("--nsys", tools.nsys, "-o", tmp_path / "a", "--server-log", tmp_path / "logs" / "a.log", "--",
                    sys.executable, talking)
    assert result.exit_code == 0, result.output
    assert b"server up" in (tmp_path / "logs" / "a.log").read_bytes() and not (tmp_path / "a" / "server.log").exists()
    assert read_manifest(tmp_path / "a")["files"]["server_log"] == str(tmp_path / "logs" / "a.log")
    result = invoke("--nsys", tools.nsys, "-o", tmp_path / "b", "--no-server-log", "--", sys.executable, talking)
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "b" / "server.log").exists() and read_manifest(tmp_path / "b")["files"]["server_log"] is None
    # a folder that is not there is one line before anything runs
    result = invoke("--nsys", tools.nsys, "-o", tmp_path / "c", "--server-log", tmp_path / "nope" / "c.log", "--",
                    sys.executable, talking)
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert f"no folder {tmp_path / 'nope'}" in result.output and not (tmp_path / "c").exists()
    assert [c["argv"][0] for c in tools.calls()].count("profile") == 2


def test_dry_run_says_where_the_server_log_goes(tools, workload, tmp_path):
    result = invoke("--dry-run", "--nsys", tools.nsys, "-o", tmp_path / "run", "--", *workload)
    assert result.exit_code == 0
    assert f"# the command's output (stdout and stderr) is shown and also written to {tmp_path / 'run' / 'server.log'}" \
        in result.stdout.splitlines()
    assert not (tmp_path / "run").exists()


def test_no_tracer_leaves_the_environment_alone(tools, workload, tmp_path):
    result = invoke("--no-tracer", "--nsys", tools.nsys, "-o", tmp_path / "run", "--", *workload)
    assert result.exit_code == 0, result.output
    seen = json.loads((tmp_path / "workload-env.json").read_text())
    assert seen.pop("tracer_loaded") is False
    assert set(seen.values()) == {None}
    record = read_manifest(tmp_path / "run")
    assert record["tracer"] is False and record["preset"] is None and record["env"] == {}
    assert not (tmp_path / "run" / ".bootstrap").exists()


def test_failing_workload_keeps_and_exports_the_report_and_exits_with_its_code(tools, plugin, workload, tmp_path):
    run_dir = tmp_path / "run"
    result = invoke("--nsys", tools.nsys, "-o", run_dir, "--", *workload, "3")

    assert result.exit_code == 3
    assert result.stderr.count("\n") == 1
    assert shlex.join([*workload, "3"]) in result.stderr and "exited with code 3" in result.stderr
    assert str(run_dir) in result.stderr
    record = read_manifest(run_dir)
    assert record["exit_codes"]["profile"] == 3 and record["exit_codes"]["export"] == 0
    assert record["files"]["report"] == "run.nsys-rep" and record["files"]["sqlite"] == "run.sqlite"
    assert len(record["files"]["sidecars"]) == 1


def test_failing_workload_without_a_report_still_writes_the_manifest(tools, workload, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_OUTPUT", "none")
    result = invoke("--no-tracer", "--capture-range", "cudaProfilerApi", "--nsys", tools.nsys, "-o", tmp_path / "run",
                    "--", *workload, "5")  # fmt: skip
    assert result.exit_code == 5
    assert "exited with code 5" in result.stderr and "wrote no report" in result.stderr
    record = read_manifest(tmp_path / "run")
    assert record["exit_codes"] == {"profile": 5, "qdstrm_import": None, "export": None}
    assert record["files"]["report"] is None and record["commands"]["export"] is None


def test_no_report_after_a_clean_exit_is_an_error(tools, workload, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_OUTPUT", "none")
    result = invoke("--no-tracer", "--capture-range", "cudaProfilerApi", "--nsys", tools.nsys, "-o", tmp_path / "run",
                    "--", *workload)  # fmt: skip
    assert result.exit_code == 2
    assert "did the workload ever open the capture range?" in result.stderr


def test_a_failed_export_is_reported_and_the_report_kept(tools, workload, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_EXPORT_RC", "4")
    result = invoke("--no-tracer", "--nvidia-stats", "--nsys", tools.nsys, "-o", tmp_path / "run", "--", *workload)
    assert result.exit_code == 2
    assert "export --type sqlite -o run.sqlite run.nsys-rep` exited with code 4" in result.stderr
    record = read_manifest(tmp_path / "run")
    assert record["exit_codes"] == {"profile": 0, "qdstrm_import": None, "export": 4, "stats": None}
    assert record["files"]["report"] == "run.nsys-rep" and record["files"]["sqlite"] is None


def test_a_left_over_qdstrm_is_converted_beside_nsys(tools, workload, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_OUTPUT", "qdstrm")
    importer = tools.add_importer()
    run_dir = tmp_path / "run"
    result = invoke("--no-tracer", "--nsys", tools.nsys, "-o", run_dir, "--", *workload)

    assert result.exit_code == 0, result.output
    assert f"converting it with {importer}" in result.stderr
    assert tools.calls("QdstrmImporter") == [
        {"tool": "QdstrmImporter", "argv": ["-i", str(run_dir / "run.qdstrm")], "cwd": str(importer.parent)}
    ]
    assert (run_dir / "run.nsys-rep").read_text() == "converted report"
    record = read_manifest(run_dir)
    assert record["exit_codes"] == {"profile": 0, "qdstrm_import": 0, "export": 0}
    assert record["commands"]["qdstrm_import"] == [str(importer), "-i", str(run_dir / "run.qdstrm")]
    assert record["files"]["sqlite"] == "run.sqlite" and record["files"]["qdstrm"] == "run.qdstrm"


def test_a_left_over_qdstrm_without_an_importer_is_kept_and_explained(tools, workload, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_OUTPUT", "qdstrm")
    result = invoke("--no-tracer", "--nsys", tools.nsys, "-o", tmp_path / "run", "--", *workload)
    assert result.exit_code == 2
    assert "no QdstrmImporter was found" in result.stderr
    assert read_manifest(tmp_path / "run")["files"]["qdstrm"] == "run.qdstrm"


def _capture_and_signal(tools, workload, tmp_path, signals, ignore_sigint=False, stop_code=0, waits_in="profile",
                        args=()):
    """Run `specprof capture` as a process over a fake nsys whose `waits_in` step (profile or export) waits for
    a signal (the profile step then exits with stop_code); send it `signals`."""
    ready, received, run_dir = tmp_path / "ready", tmp_path / "received", tmp_path / "run"
    mode = "FAKE_NSYS_MODE" if waits_in == "profile" else "FAKE_NSYS_EXPORT_MODE"
    env = {**os.environ, mode: "sleep", "FAKE_NSYS_READY": str(ready), "FAKE_NSYS_SIGNALS": str(received),
           "FAKE_NSYS_STOP_RC": str(stop_code)}  # fmt: skip
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None
    specprof = subprocess.Popen(
        [sys.executable, "-c", "from specprof.analyzer.cli import main; main()", "capture", "--no-tracer", *args, "--nsys",
         str(tools.nsys), "-o", str(run_dir), "--", *workload],
        env=env, stderr=subprocess.PIPE, text=True, preexec_fn=ignore,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert specprof.poll() is None, specprof.communicate()[1]
            assert time.monotonic() < deadline, f"the fake nsys never started its {waits_in}"
            time.sleep(0.05)
        for signum in signals:
            specprof.send_signal(signum)
            time.sleep(0.5)
        _, stderr = specprof.communicate(timeout=60)
    finally:
        if specprof.poll() is None:
            specprof.kill()
    return specprof.returncode, stderr, received, run_dir


def test_sigterm_is_forwarded_to_nsys_and_the_report_still_exported(tools, workload, tmp_path):
    returncode, stderr, received, run_dir = _capture_and_signal(tools, workload, tmp_path, [signal.SIGTERM])
    assert received.read_text() == "SIGTERM"
    assert returncode == 0, stderr
    record = read_manifest(run_dir)
    assert record["signals_forwarded"] == ["SIGTERM"]
    assert record["files"]["report"] == "run.nsys-rep" and record["files"]["sqlite"] == "run.sqlite"


def test_a_signal_during_the_export_goes_to_the_export_and_the_manifest_is_still_written(tools, workload, tmp_path):
    returncode, stderr, received, run_dir = _capture_and_signal(tools, workload, tmp_path, [signal.SIGTERM],
                                                                waits_in="export", args=["--nvidia-stats"])
    assert received.read_text() == "export SIGTERM"  # passed on to the export, which stopped
    assert returncode == 128 + signal.SIGTERM
    assert "SIGTERM during `export`" in stderr and "Traceback" not in stderr
    record = read_manifest(run_dir)
    assert record["signals_forwarded"] == ["SIGTERM"]
    assert record["exit_codes"]["export"] == 128 + signal.SIGTERM and record["exit_codes"]["stats"] is None


def test_sigint_is_forwarded(tools, workload, tmp_path):
    returncode, stderr, received, run_dir = _capture_and_signal(tools, workload, tmp_path, [signal.SIGINT])
    assert received.read_text() == "SIGINT" and returncode == 0, stderr
    assert read_manifest(run_dir)["signals_forwarded"] == ["SIGINT"]


def test_a_workload_stopped_by_a_passed_on_signal_is_no_failure_but_keeps_its_code(tools, workload, tmp_path):
    """What the real nsys does on Ctrl-C: the workload gets SIGINT and exits 130; the report is still written."""
    returncode, stderr, received, run_dir = _capture_and_signal(tools, workload, tmp_path, [signal.SIGINT],
                                                                stop_code=130)  # fmt: skip
    assert returncode == 130
    assert "the workload exited with code 130 after the SIGINT passed on to nsys" in stderr
    assert "error" not in stderr and f"run written to {run_dir}" in stderr
    assert read_manifest(run_dir)["files"]["sqlite"] == "run.sqlite"


def test_a_sigint_ignored_at_start_stays_ignored(tools, workload, tmp_path):
    """A background job of a non-interactive shell starts with SIGINT ignored: it is not passed on; SIGTERM still is."""
    signals = [signal.SIGINT, signal.SIGTERM]
    returncode, stderr, received, run_dir = _capture_and_signal(tools, workload, tmp_path, signals, ignore_sigint=True)
    assert received.read_text() == "SIGTERM" and returncode == 0, stderr
    assert read_manifest(run_dir)["signals_forwarded"] == ["SIGTERM"]


def test_the_real_bootstrap_loads_the_tracer_in_the_workload(tools, workload, tmp_path):
    """specprof.tracer.plugin.bootstrap_dir (not a stand-in): the workload's Python imports the tracer at start-up."""
    result = invoke("--preset", "reference", "--nsys", tools.nsys, "-o", tmp_path / "run", "--", *workload)
    assert result.exit_code == 0, result.output
    seen = json.loads((tmp_path / "workload-env.json").read_text())
    assert seen["tracer_loaded"] is True
    assert (tmp_path / "run" / ".bootstrap" / "sitecustomize.py").is_file()


def test_a_report_without_kernels_is_warned_about(tools, workload, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_NO_KERNELS", "1")
    result = invoke("--no-tracer", "--nsys", tools.nsys, "-o", tmp_path / "run", "--", *workload)
    assert result.exit_code == 0, result.output
    assert "warning: run.sqlite holds no GPU kernels" in result.stderr and "capture range" in result.stderr


def test_the_workload_ended_by_duration_is_not_a_failure(tools, workload, tmp_path):
    result = invoke("--no-tracer", "--delay", "1", "--duration", "2", "--nsys", tools.nsys, "-o", tmp_path / "run",
                    "--", *workload)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "ended the workload with SIGTERM when --duration ran out" in result.stderr
    assert read_manifest(tmp_path / "run")["exit_codes"]["profile"] == 143


def test_a_workload_killed_by_sigterm_without_duration_is_a_failure(tools, workload, tmp_path):
    result = invoke("--no-tracer", "--nsys", tools.nsys, "-o", tmp_path / "run", "--", *workload, "143")
    assert result.exit_code == 143 and "exited with code 143" in result.stderr


def test_the_cli_imports_nothing_heavy():
    code = "import sys, specprof.analyzer.cli, specprof.tracer.cli, specprof.tracer.capture; print(sorted({'torch', 'sglang'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
