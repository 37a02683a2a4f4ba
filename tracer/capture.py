"""`specprof capture`: run a workload under Nsight Systems and leave a self-describing run directory.

Pure logic (the click command in tracer/cli.py only parses options): find nsys, build its command line, run it
forwarding SIGINT/SIGTERM, convert a left-over `.qdstrm`, export SQLite (and, when asked, NVIDIA's
`nvtx_gpu_proj_trace` reference), write `manifest.json`. Every subprocess takes an argv list: no shell strings.

Without nsys (`no_nsys`), the same command runs with the same tracer environment and leaves the same run
directory less the report: the twin run that measures what nsys itself changed (docs/crosscheck.md).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib
import json
import os
import re
import shlex
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Mapping, Sequence

from specprof.analyzer import __version__
from specprof.analyzer import safe_files
from specprof.analyzer.errors import SpecprofError, clean
from specprof.tracer import gpu_events, manifest, rotation, step_sweep, window

# -t: CUDA API + kernels, NVTX ranges, OS runtime calls. node: graph kernels one by one, carrying the
# cudaGraphLaunch's correlation id. fork-before-exec: SGLang's spawned schedulers are traced too.
# -s none / --cpuctxsw=none: no CPU sampling or context-switch tracing (overhead we do not use).
DEFAULT_FLAGS = (
    "-t", "cuda,nvtx,osrt",
    "--cuda-graph-trace=node",
    "--trace-fork-before-exec=true",
    "-s", "none",
    "--cpuctxsw=none",
)  # fmt: skip
CAPTURE_RANGES = ("cudaProfilerApi", "nvtx")
PRESETS = ("sglang", "reference")

REPORT = "run.nsys-rep"
QDSTRM = "run.qdstrm"
SQLITE = "run.sqlite"
STATS_PREFIX = "nvidia"
STATS_REPORT = "nvtx_gpu_proj_trace"
SERVER_LOG = "server.log"  # the workload's stdout and stderr, also shown as they come (`analyze` reads it there)
SIDECAR_GLOB = "specprof-sidecar.*"
BOOTSTRAP = ".bootstrap"  # the tracer's sitecustomize folder, put first on the workload's PYTHONPATH

# Standard install folders, relative to SEARCH_ROOT (tests point it elsewhere), in order of preference;
# within one pattern the newest version comes first.
SEARCH_ROOT = Path("/")
INSTALL_GLOBS = (
    "opt/nvidia/nsight-systems/*/bin/nsys",
    "usr/local/cuda*/bin/nsys",
    "usr/local/cuda*/nsight-systems-*/bin/nsys",
    "opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",  # Nsight Compute's bundled copy
)
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class CaptureFailed(SpecprofError):
    """The workload, nsys or a post-processing step failed; the run directory keeps what was captured.

    Exits with the workload's (nsys's) exit code when that failed, else 2.
    """

    def __init__(self, message: str, path: str | None = None, exit_code: int = 2):
        super().__init__(message, path)
        self.exit_code = exit_code


# ---------------------------------------------------------------------------------------------- finding nsys


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(number) for number in re.findall(r"\d+", str(path)))


def install_candidates(root: Path | None = None) -> list[Path]:
    """nsys executables in the standard install folders, in INSTALL_GLOBS order, newest version first."""
    root = SEARCH_ROOT if root is None else root
    found: list[Path] = []
    seen: set[Path] = set()
    for pattern in INSTALL_GLOBS:
        matches = [path for path in root.glob(pattern) if _is_executable(path)]
        for path in sorted(matches, key=lambda p: _version_key(p.relative_to(root)), reverse=True):
            if path.resolve() not in seen:
                seen.add(path.resolve())
                found.append(path)
    return found


def _given_executable(value: str, source: str, search_path: str | None) -> Path:
    located = shutil.which(value, path=search_path) if os.sep not in value else None
    path = Path(located or value)
    if not _is_executable(path):
        raise SpecprofError(f"{source} is {value!r}, which is not an executable nsys; fix it or leave it unset", value)
    return path


def find_nsys(explicit: str | os.PathLike | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """--nsys, then $NSYS, then PATH, then the standard install folders (SpecprofError naming them all)."""
    environ = os.environ if environ is None else environ
    search_path = environ.get("PATH", "")
    if explicit:
        return _given_executable(os.fspath(explicit), "--nsys", search_path)
    if environ.get("NSYS"):
        return _given_executable(environ["NSYS"], "$NSYS", search_path)
    on_path = shutil.which("nsys", path=search_path)
    if on_path:
        return Path(on_path)
    candidates = install_candidates()
    if candidates:
        return candidates[0]
    places = ", ".join(str(SEARCH_ROOT / pattern) for pattern in INSTALL_GLOBS)
    raise SpecprofError(
        f"nsys (Nsight Systems) not found: looked at --nsys, $NSYS, PATH and {places}; "
        "install Nsight Systems or pass --nsys PATH (Nsight Compute ships one in host/target-linux-x64/)"
    )


def nsys_version(nsys: Path) -> str | None:
    """The first line `nsys --version` prints, or None when it does not run."""
    try:
        done = subprocess.run([str(nsys), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else None


def find_qdstrm_importer(nsys: Path) -> Path | None:
    """QdstrmImporter in a folder beside nsys's own (host/linux-desktop-*/, host-linux-x64/, …)."""
    real = nsys.resolve()
    for folder in (real.parent, real.parent.parent):
        for candidate in [folder / "QdstrmImporter", *sorted(folder.glob("*/QdstrmImporter"))]:
            if _is_executable(candidate):
                return candidate
    return None


# ------------------------------------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class CaptureRange:
    """What part of the run nsys records: all of it, a cudaProfilerApi / NVTX range, delay + duration, or a
    window of decode cycles (`cycles` = (W, N): the tracer calls cudaProfilerStart after W decode cycles and
    cudaProfilerStop after N more; the mode is then cudaProfilerApi)."""

    mode: str | None = None  # "cudaProfilerApi", "nvtx" or None
    nvtx_capture: str | None = None  # RANGE@DOMAIN, with mode "nvtx"
    delay: int | None = None  # seconds
    duration: int | None = None  # seconds
    cycles: tuple[int, int] | None = None  # (W, N) decode cycles

    def __post_init__(self):
        if self.cycles is not None:
            if self.mode not in (None, "cudaProfilerApi"):
                raise SpecprofError("--capture-cycles opens and closes a cudaProfilerApi range: it does not go with "
                                    f"--capture-range {self.mode}")
            object.__setattr__(self, "mode", "cudaProfilerApi")
        if self.mode is not None and self.mode not in CAPTURE_RANGES:
            raise SpecprofError(f"--capture-range must be one of {', '.join(CAPTURE_RANGES)}, not {self.mode!r}")
        if (self.mode == "nvtx") != bool(self.nvtx_capture):
            raise SpecprofError("--capture-range nvtx and --nvtx-capture RANGE@DOMAIN go together: give both")
        if self.mode is not None and (self.delay is not None or self.duration is not None):
            raise SpecprofError("--delay/--duration and --capture-range are two ways to choose the window: pick one")

    def flags(self) -> list[str]:
        if self.mode == "cudaProfilerApi":
            return ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
        if self.mode == "nvtx":
            return ["--capture-range=nvtx", f"--nvtx-capture={self.nvtx_capture}", "--capture-range-end=stop"]
        flags = []
        if self.delay is not None:
            flags.append(f"--delay={self.delay}")
        if self.duration is not None:
            flags.append(f"--duration={self.duration}")
        return flags


@dataclass(frozen=True)
class Plan:
    """Everything a capture will run, decided before anything runs (what --dry-run prints)."""

    command: tuple[str, ...]
    run_dir: Path  # absolute
    nsys: Path | None  # None: run without nsys (the twin run)
    capture_range: CaptureRange
    extra_nsys_args: tuple[str, ...]
    preset: str | None  # None: the tracer is off
    nvidia_stats: bool
    force: bool
    env: dict[str, str]  # additions to the workload's environment
    gpu_time: bool = False  # the tracer records CUDA events at phase boundaries
    nsys_missing: bool = False  # a dry run whose nsys was not found: `nsys` stands in for it
    server_log: Path | None = None  # the workload's output is also written here (absolute); None: not kept
    sweep: tuple[tuple[int, ...], int] | None = None  # (Ks, block): the tracer rotates K (--sweep-steps)

    def profile_argv(self) -> list[str]:
        """The nsys command line, or the workload's own without nsys."""
        if self.nsys is None:
            return list(self.command)
        return [
            str(self.nsys), "profile", *DEFAULT_FLAGS, *self.capture_range.flags(), *self.extra_nsys_args,
            "-o", str(self.run_dir / Path(REPORT).stem), *self.command,
        ]  # fmt: skip

    def export_argv(self) -> list[str]:
        """Run in the run directory."""
        return [str(self.nsys), "export", "--type", "sqlite", "-o", SQLITE, REPORT]

    def stats_argv(self) -> list[str]:
        """Run in the run directory; writes nvidia_nvtx_gpu_proj_trace.csv."""
        return [str(self.nsys), "stats", "-q", "-r", STATS_REPORT, "--format", "csv", "-o", STATS_PREFIX, SQLITE]


def default_run_dir(now: datetime | None = None) -> Path:
    now = now or datetime.now(timezone.utc)
    return Path(now.strftime("specprof-run-%Y%m%dT%H%M%SZ"))


def environment_additions(
    run_dir: Path, preset: str | None, bootstrap: Path | None, capture_range: CaptureRange, environ: Mapping[str, str],
    gpu_time: bool = False, sweep: tuple[tuple[int, ...], int] | None = None,
) -> dict[str, str]:
    """SPECPROF_* and PYTHONPATH for the tracer (none when preset is None), and what an NVTX range needs."""
    env = {}
    if preset is not None:
        env["SPECPROF_TRACE"] = "1"
        env["SPECPROF_OUT_DIR"] = str(run_dir)
        env["SPECPROF_PRESET"] = preset
        if capture_range.cycles is not None:
            env[window.ENV] = "{}:{}".format(*capture_range.cycles)
        if gpu_time:
            env[gpu_events.ENV] = "1"
        if sweep is not None:
            env[rotation.ENV] = step_sweep.environment_value(*sweep)
        existing = environ.get("PYTHONPATH")
        env["PYTHONPATH"] = str(bootstrap) + (os.pathsep + existing if existing else "")
    if capture_range.mode == "nvtx" and "NSYS_NVTX_PROFILER_REGISTER_ONLY" not in environ:
        # nsys matches only registered NVTX strings by default; other tools' ranges are often not registered.
        env["NSYS_NVTX_PROFILER_REGISTER_ONLY"] = "0"
    return env


def _check_command(command: Sequence[str], environ: Mapping[str, str]) -> None:
    if not command:
        raise SpecprofError("no command to capture: give it after --, e.g. specprof capture -- python3 app.py")
    if command[0].startswith("-"):
        raise SpecprofError(f"the command starts with {command[0]!r}, an option: put the command after --")
    if shutil.which(command[0], path=environ.get("PATH", "")) is None:
        raise SpecprofError(f"{command[0]}: no such executable (searched PATH); check the command", command[0])


def _parse_extra(extra: str) -> tuple[str, ...]:
    try:
        args = tuple(shlex.split(extra))
    except ValueError as exc:
        raise SpecprofError(f"cannot parse --extra-nsys-args {extra!r}: {exc}") from exc
    for arg in args:
        if arg in ("-o", "--output") or arg.startswith(("-o=", "--output=")):
            raise SpecprofError(f"--extra-nsys-args may not set {arg}: the output goes into the run directory (-o DIR)")
    return args


# What --force may delete (docs/capture.md, docs/robustness.md): regular files directly in the run directory,
# each only by one of these names. OWN_NAMES by name alone (the report, the export and the manifest every capture
# writes); LISTED_NAMES and LISTED_PATTERNS (fnmatch) only where the run's manifest.json lists them: one present
# that no manifest lists is someone else's, and --force refuses. The manifest may list nothing else. And the
# bootstrap folder's sitecustomize.py with its bytecode.
OWN_NAMES = (REPORT, QDSTRM, SQLITE, manifest.MANIFEST)
LISTED_NAMES = (SERVER_LOG,)
LISTED_PATTERNS = (SIDECAR_GLOB, f"{STATS_PREFIX}_*.csv")
BOOTSTRAP_FILES = ("sitecustomize.py",)
BOOTSTRAP_PYCACHE = ("sitecustomize.*.pyc",)
MANIFEST_MAX_BYTES = 16 << 20  # a capture's manifest is a few KB


def _refuse(run_dir: Path, what: str) -> SpecprofError:
    return SpecprofError(f"{run_dir}: {what}; --force deletes only regular files a capture wrote there: "
                         "move it away or choose another -o DIR", str(run_dir))


def _is_listed_name(name: str) -> bool:
    return name in LISTED_NAMES or any(fnmatch.fnmatchcase(name, pattern) for pattern in LISTED_PATTERNS)


def _is_own_name(name: str) -> bool:
    return name in OWN_NAMES or _is_listed_name(name)


def _manifest_files(run_dir: Path) -> dict:
    """The `files` of the run's manifest.json, read without following a link and only from a regular file; {}
    when there is none or it cannot be read (JSON nested too deep included): it then lists nothing."""
    try:
        fd = os.open(run_dir / manifest.MANIFEST, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MANIFEST_MAX_BYTES + 1)
        if len(data) > MANIFEST_MAX_BYTES:
            return {}
        files = json.loads(data.decode("utf-8")).get("files") or {}
    except (OSError, ValueError, AttributeError, UnicodeDecodeError, RecursionError):
        return {}
    finally:
        os.close(fd)
    return files if isinstance(files, dict) else {}


def _listed_names(run_dir: Path) -> set[str]:
    """The names the run's manifest.json lists as its files. Each must be a plain name a capture writes
    (no folder, no `..`, not absolute): anything else is refused, never followed."""
    listed: set[str] = set()
    for key, value in _manifest_files(run_dir).items():
        if key == "server_log" and value != SERVER_LOG:
            continue  # a log the user put elsewhere (--server-log PATH): theirs, never deleted
        for name in value if isinstance(value, list) else [value]:
            if name is None:
                continue
            if not (isinstance(name, str) and name and "/" not in name and "\\" not in name and "\0" not in name
                    and name not in (".", "..") and _is_own_name(name)):
                raise _refuse(run_dir, f"its manifest.json lists {name!r}, which is not a file a capture writes")
            listed.add(name)
    return listed


def _regular_files(directory: int, names, run_dir: Path, where: str) -> list[str]:
    """Of `names` in the folder open as `directory`, those present; each must be a regular file (a link,
    a folder or anything else is refused)."""
    present = []
    for name in sorted(names):
        try:
            info = os.stat(name, dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(info.st_mode):
            kind = "a link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
            raise _refuse(run_dir, f"{where}{name} is {kind}")
        present.append(name)
    return present


def _open_folder(path: str, dir_fd: int | None = None) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)


def _owned_files(run_dir: Path) -> list[tuple[str, ...]]:
    """What --force deletes, as paths relative to the run directory: the regular files a capture writes, by
    name (the fixed report, export and manifest names, and the server log, sidecars and CSVs the manifest
    lists), and the bootstrap folder's own files. A server log, sidecar or CSV that no manifest lists is someone
    else's; a manifest naming anything but a capture's file, or one of those names being a link or a folder:
    refused (SpecprofError) before anything is deleted."""
    owned: list[tuple[str, ...]] = []
    top = _open_folder(str(run_dir))
    try:
        owned += [(name,) for name in _regular_files(top, OWN_NAMES, run_dir, "")]  # the manifest not a link first
        listed = _listed_names(run_dir)
        present = [name for name in LISTED_NAMES if os.path.lexists(run_dir / name)]
        present += [path.name for pattern in LISTED_PATTERNS for path in sorted(run_dir.glob(pattern))]
        foreign = [name for name in present if name not in listed]
        if foreign:
            raise SpecprofError(
                f"{run_dir} holds {', '.join(foreign)}, which no manifest.json there lists as a capture's own: "
                "--force replaces only a capture's files; move them away or choose another -o DIR", str(run_dir))
        owned += [(name,) for name in _regular_files(top, listed - set(OWN_NAMES), run_dir, "")]
        try:
            info = os.stat(BOOTSTRAP, dir_fd=top, follow_symlinks=False)
        except FileNotFoundError:
            return owned
        if not stat.S_ISDIR(info.st_mode):
            raise _refuse(run_dir, f"{BOOTSTRAP} is {'a link' if stat.S_ISLNK(info.st_mode) else 'not a folder'}")
        boot = _open_folder(BOOTSTRAP, top)
        try:
            owned += [(BOOTSTRAP, name) for name in _regular_files(boot, BOOTSTRAP_FILES, run_dir, f"{BOOTSTRAP}/")]
            try:
                info = os.stat("__pycache__", dir_fd=boot, follow_symlinks=False)
            except FileNotFoundError:
                return owned
            if stat.S_ISDIR(info.st_mode):
                cache = _open_folder("__pycache__", boot)
                try:
                    names = [name for name in os.listdir(cache)
                             if any(fnmatch.fnmatchcase(name, pattern) for pattern in BOOTSTRAP_PYCACHE)]
                    owned += [(BOOTSTRAP, "__pycache__", name)
                              for name in _regular_files(cache, names, run_dir, f"{BOOTSTRAP}/__pycache__/")]
                finally:
                    os.close(cache)
        finally:
            os.close(boot)
    finally:
        os.close(top)
    return owned


def _delete_owned(run_dir: Path, owned: list[tuple[str, ...]]) -> None:
    """Unlinks each file through its folder opened without following links (a folder swapped for a link
    since the check fails to open), then removes the bootstrap folders if they are left empty."""
    for parts in owned:
        folders = []
        try:
            folders.append(_open_folder(str(run_dir)))
            for part in parts[:-1]:
                folders.append(_open_folder(part, folders[-1]))
            info = os.stat(parts[-1], dir_fd=folders[-1], follow_symlinks=False)
            if stat.S_ISREG(info.st_mode):
                os.unlink(parts[-1], dir_fd=folders[-1])
        except FileNotFoundError:
            pass
        finally:
            for folder in reversed(folders):
                os.close(folder)
    for parts in ((BOOTSTRAP, "__pycache__"), (BOOTSTRAP,)):
        top = _open_folder(str(run_dir))
        try:
            parent = top if len(parts) == 1 else _open_folder(parts[0], top)
            try:
                os.rmdir(parts[-1], dir_fd=parent)
            except OSError:
                pass  # absent, a link, or holding someone else's files: left alone
            finally:
                if parent != top:
                    os.close(parent)
        except OSError:
            pass
        finally:
            os.close(top)


def _check_run_dir(run_dir: Path, force: bool) -> None:
    if run_dir.exists() and not run_dir.is_dir():
        raise SpecprofError(f"{run_dir} exists and is not a directory; choose another -o DIR", str(run_dir))
    if run_dir.is_dir() and any(run_dir.iterdir()) and not force:
        raise SpecprofError(
            f"{run_dir} already holds files; choose another -o DIR or pass --force to replace its run", str(run_dir)
        )


def plan(
    command: Sequence[str],
    *,
    run_dir: str | os.PathLike | None = None,
    nsys: str | os.PathLike | None = None,
    capture_range: CaptureRange = CaptureRange(),
    extra_nsys_args: str = "",
    preset: str = "sglang",
    tracer: bool = True,
    nvidia_stats: bool = False,
    force: bool = False,
    environ: Mapping[str, str] | None = None,
    gpu_time: bool = False,
    no_nsys: bool = False,
    dry_run: bool = False,
    server_log: str | os.PathLike | None = SERVER_LOG,
    sweep_steps: Sequence[int] | None = None,
    block: int = 40,
) -> Plan:
    """Validate the options and find nsys (not with `no_nsys`; for a `dry_run`, a missing nsys is a placeholder
    and a note). `server_log`: where the workload's output is also written, relative to the run directory
    (default: RUN/server.log), None for nowhere. `sweep_steps`, `block`: rotate K in blocks of `block` decode cycles
    inside the one launch (tracer/step_sweep.py adds the server's adaptive settings). Runs nothing and writes
    nothing."""
    environ = os.environ if environ is None else environ
    if preset not in PRESETS:
        raise SpecprofError(f"--preset must be one of {', '.join(PRESETS)}, not {preset!r}")
    if not tracer and (capture_range.cycles is not None or gpu_time):
        raise SpecprofError("--capture-cycles and --gpu-events are done by the tracer: they do not go with --no-tracer")
    if no_nsys:
        given = [name for name, value in (
            ("--nsys", nsys), ("--capture-range", capture_range.mode if capture_range.cycles is None else None),
            ("--delay", capture_range.delay), ("--duration", capture_range.duration),
            ("--extra-nsys-args", extra_nsys_args), ("--nvidia-stats", nvidia_stats)) if value]
        if given:
            raise SpecprofError(f"--no-nsys runs the workload without nsys: {', '.join(given)} would do nothing")
    _check_command(command, environ)
    extra = _parse_extra(extra_nsys_args)
    directory = Path(run_dir if run_dir is not None else default_run_dir()).absolute()
    sweep = None
    if sweep_steps:
        step_sweep.check(command, list(sweep_steps), block, preset if tracer else None)
        sweep = (tuple(sweep_steps), block)
        command = [*command, *step_sweep.server_additions(
            command, str(directory / BOOTSTRAP / step_sweep.CONFIG_NAME))]
    _check_run_dir(directory, force)
    log = None if server_log is None else directory / server_log
    if log is not None and log.parent != directory and not log.parent.is_dir():
        raise SpecprofError(f"--server-log {log}: no folder {log.parent}; make it first, or leave the log in the "
                            f"run directory ({SERVER_LOG}, the default)", str(log))
    chosen_preset = preset if tracer else None
    bootstrap = directory / BOOTSTRAP if tracer else None
    missing = False
    if no_nsys:
        found = None
    else:
        try:
            found = find_nsys(nsys, environ)
        except SpecprofError:
            if not dry_run or nsys:
                raise
            found, missing = Path("nsys"), True
    return Plan(
        command=tuple(command),
        run_dir=directory,
        nsys=found,
        capture_range=capture_range,
        extra_nsys_args=extra,
        preset=chosen_preset,
        nvidia_stats=nvidia_stats,
        force=force,
        env=environment_additions(directory, chosen_preset, bootstrap, capture_range, environ, gpu_time, sweep),
        gpu_time=gpu_time,
        nsys_missing=missing,
        server_log=log,
        sweep=sweep,
    )


def repeat_dirs(run_dir: str | os.PathLike | None, repeat: int) -> list[Path | None]:
    """The run directories of `repeat` repeated runs without nsys: DIR, then DIR-2, DIR-3, ... (the analyzer reads
    RUN/no-nsys and RUN/no-nsys-2, ... as repeats of one run's twin, docs/economics.md). One run: [run_dir]."""
    if repeat < 1:
        raise SpecprofError(f"--repeat must be at least 1, not {repeat}")
    if repeat == 1:
        return [Path(run_dir) if run_dir is not None else None]
    if run_dir is None:
        raise SpecprofError("--repeat N writes DIR, DIR-2, ... DIR-N: give the first with -o DIR (RUN/no-nsys)")
    base = Path(run_dir)
    return [base] + [base.with_name(f"{base.name}-{i}") for i in range(2, repeat + 1)]


def describe(plan: Plan) -> str:
    """What --dry-run prints: the exact nsys command (the workload's own with --no-nsys), the environment
    additions and the steps after it."""
    if plan.nsys is None:
        lines = ["# command (no nsys)", shlex.join(plan.profile_argv())]
    else:
        lines = ["# nsys command", shlex.join(plan.profile_argv())]
        if plan.nsys_missing:
            lines.insert(1, "# nsys was not found (looked at --nsys, $NSYS, PATH and the standard install folders): "
                            "`nsys` stands in for it below")
    lines += ["# environment additions"]
    lines += [f"{name}={shlex.quote(value)}" for name, value in plan.env.items()] or ["(none)"]
    if plan.sweep is not None:
        lines += [f"# then, before it runs, the server's adaptive config (every swept K at every batch size), in "
                  f"{shlex.quote(str(plan.run_dir / BOOTSTRAP / step_sweep.CONFIG_NAME))}",
                  step_sweep.config_text(plan.sweep[0]).strip()]
    if plan.server_log is not None:
        lines += [f"# the command's output (stdout and stderr) is shown and also written to "
                  f"{shlex.quote(str(plan.server_log))}"]
    if plan.nsys is not None:
        lines += [f"# then, in {shlex.quote(str(plan.run_dir))}", shlex.join(plan.export_argv())]
        if plan.nvidia_stats:
            lines.append(shlex.join(plan.stats_argv()))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- running


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


class SignalRelay:
    """For a whole capture, profiling and post-processing alike: each SIGINT/SIGTERM we get goes on to the
    child running at that moment (nsys, then each export step), or to the next one started, and is
    remembered; our handlers stay until the manifest is written, so a signal never ends specprof between a
    child and its manifest. A signal ignored when we started (a background job's SIGINT) stays ignored.
    Handlers are installed only from the main thread."""

    def __init__(self):
        self.child: subprocess.Popen | None = None
        self.pending: list[int] = []
        self.seen: list[str] = []
        self._previous: dict = {}

    def __enter__(self) -> "SignalRelay":
        if threading.current_thread() is threading.main_thread():
            wanted = [signum for signum in FORWARDED_SIGNALS if signal.getsignal(signum) is not signal.SIG_IGN]
            self._previous = {signum: signal.signal(signum, self._forward) for signum in wanted}
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _forward(self, signum, _frame) -> None:
        self.seen.append(signal.Signals(signum).name)
        if self.child is None:
            self.pending.append(signum)
        else:
            self.child.send_signal(signum)

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None,
            own_group: bool = False, log: Path | None = None) -> int:
        """Run argv (in its own process group with `own_group`, so that a terminal's Ctrl-C reaches it once,
        through us); its exit code, 128+N when killed by signal N. OSError when it cannot start. With `log`, its
        stdout and stderr, as one stream in the order written, go to our stdout and into that file (`_Tee`)."""
        tee = _Tee(log) if log is not None else None
        try:
            child = subprocess.Popen(list(argv), env=None if env is None else dict(env), cwd=cwd,
                                     process_group=0 if own_group else None,
                                     stdout=subprocess.PIPE if tee else None, stderr=subprocess.STDOUT if tee else None)
        except OSError:
            if tee:
                tee.close()
            raise
        self.child = child
        try:
            if tee:
                tee.start(child)
            while self.pending:
                child.send_signal(self.pending.pop(0))
            return _exit_code(child.wait())
        finally:
            self.child = None
            if tee:
                tee.close()


class _Tee:
    """Copies a child's output (its stdout and stderr as one pipe, so the order stays) to our stdout and into a
    log file, chunk by chunk as it comes: what `2>&1 | tee FILE` did, without a shell and without losing the log
    when FILE's folder is missing. The thread ends at the pipe's end; a process the child left behind that still
    holds the pipe is waited for TEE_GRACE_S."""

    TEE_GRACE_S = 5.0

    def __init__(self, path: Path):
        try:
            self.file = safe_files.created(path)  # a new file: a link at `path` is refused, never written through
        except OSError as exc:
            raise SpecprofError(f"{path}: cannot write the server log there ({exc.strerror}); choose another "
                                "--server-log FILE", str(path)) from None
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def start(self, child: subprocess.Popen) -> None:
        thread = threading.Thread(target=self._copy, args=(child.stdout, sys.stdout), daemon=True)
        thread.start()
        self.threads.append(thread)

    def _copy(self, pipe, ours) -> None:
        out = getattr(ours, "buffer", None)
        try:
            while chunk := os.read(pipe.fileno(), 65536):
                with self.lock:
                    if self.file.closed:  # given up on after TEE_GRACE_S
                        return
                    self.file.write(chunk)
                    self.file.flush()
                if ours is None:
                    continue
                try:
                    if out is not None:
                        out.write(chunk)
                        out.flush()
                    else:
                        ours.write(chunk.decode("utf-8", "replace"))
                        ours.flush()
                except (OSError, ValueError):  # our terminal is gone: the log still gets everything
                    ours = None
        except OSError:
            pass

    def close(self) -> None:
        for thread in self.threads:
            thread.join(self.TEE_GRACE_S)
        with self.lock:
            self.file.close()


def _bootstrap(plan: Plan) -> Plan:
    """Make the tracer's bootstrap folder (specprof.tracer.plugin.bootstrap_dir) and point PYTHONPATH at it."""
    try:
        plugin = importlib.import_module("specprof.tracer.plugin")
    except ImportError as exc:
        raise SpecprofError(f"the tracer cannot be loaded ({exc}); capture with --no-tracer instead") from exc
    try:
        made = Path(plugin.bootstrap_dir(plan.run_dir / BOOTSTRAP))
    except OSError as exc:
        name = os.path.basename(os.fspath(exc.filename or BOOTSTRAP))
        raise SpecprofError(f"{plan.run_dir / BOOTSTRAP}: cannot write the tracer's bootstrap folder ({name}: "
                            f"{exc.strerror or exc}); move it away, or capture with --no-tracer",
                            str(plan.run_dir / BOOTSTRAP)) from None
    env = environment_additions(plan.run_dir, plan.preset, made, plan.capture_range, os.environ, plan.gpu_time,
                                plan.sweep)
    if plan.sweep is not None:
        try:
            safe_files.replace(made / step_sweep.CONFIG_NAME, step_sweep.config_text(plan.sweep[0]), mode=0o644)
        except OSError as exc:
            raise SpecprofError(f"{made / step_sweep.CONFIG_NAME}: cannot write the adaptive config of the step "
                                f"sweep ({exc.strerror or exc})", str(made)) from None
    return dataclasses.replace(plan, env=env)


def run_files(run_dir: Path, server_log: Path | None = None) -> dict:
    """Which of a capture's files exist, by role (names relative to the run directory; a server log kept
    elsewhere, by its absolute path)."""

    def present(name: str) -> str | None:
        return name if (run_dir / name).is_file() else None

    return {
        "report": present(REPORT),
        "qdstrm": present(QDSTRM),
        "sqlite": present(SQLITE),
        "sidecars": sorted(path.name for path in run_dir.glob(SIDECAR_GLOB) if path.is_file()),
        "nvidia_stats": sorted(path.name for path in run_dir.glob(f"{STATS_PREFIX}_*.csv")),
        "server_log": (str(server_log) if server_log is not None and server_log.parent != run_dir
                       and server_log.is_file() else present(SERVER_LOG)),
    }


def _prepare_run_dir(plan: Plan) -> None:
    _check_run_dir(plan.run_dir, plan.force)  # again: it may have filled since the plan was made
    try:
        plan.run_dir.mkdir(parents=True, exist_ok=True)
        _delete_owned(plan.run_dir, _owned_files(plan.run_dir))
        safe_files.probe(plan.run_dir)
    except OSError as exc:
        raise SpecprofError(f"{plan.run_dir}: cannot write the run directory ({exc.strerror or exc}); "
                            "choose a writable -o DIR", str(plan.run_dir)) from None


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _stderr(message: str) -> None:
    print(clean(f"specprof: {message}"), file=sys.stderr)


class _Steps:
    """The argv and exit code of each step, as manifest.json records them (None: the step did not run). Steps
    run through the capture's SignalRelay; once a signal has come during post-processing, no further step
    starts."""

    def __init__(self, names: Sequence[str], relay: SignalRelay):
        self.commands: dict[str, list[str] | None] = dict.fromkeys(names)
        self.codes: dict[str, int | None] = dict.fromkeys(names)
        self.relay = relay
        self.stopped_by: str | None = None  # the signal that stopped post-processing

    def call(self, name: str, argv: Sequence[str], cwd: Path) -> str | None:
        """Run one step; a sentence for the error message when it fails or was stopped."""
        if self.stopped_by is not None:
            return f"{self.stopped_by} during post-processing: `{name}` not run"
        seen = len(self.relay.seen)
        self.commands[name] = list(argv)
        try:
            self.codes[name] = self.relay.run(argv, cwd=cwd)
        except OSError as exc:
            self.codes[name] = 127
            return f"`{shlex.join(argv)}` could not start: {exc.strerror or exc}"
        if len(self.relay.seen) > seen:
            self.stopped_by = self.relay.seen[-1]
            return f"{self.stopped_by} during `{name}` (passed on to it; it exited with code {self.codes[name]})"
        return f"`{shlex.join(argv)}` exited with code {self.codes[name]}" if self.codes[name] else None


def _facts(plan: Plan) -> dict:
    """The manifest's description of the run, known before it starts."""
    return {
        "schema": manifest.SCHEMA,
        "command": list(plan.command),
        "run_dir": str(plan.run_dir),
        "nsys": None if plan.nsys is None
        else {"path": str(plan.nsys), "version": nsys_version(plan.nsys), "argv": plan.profile_argv()},
        "preset": plan.preset,
        "tracer": plan.preset is not None,
        "env": plan.env,
        "gpus": manifest.gpus(),
        "versions": {
            "sglang": manifest.package_version("sglang"),
            "torch": manifest.package_version("torch"),
            "specprof": __version__,
        },
        "host": manifest.host(),
        "start": _utc_now(),
    }


def _workload_problem(plan: Plan, code: int, signals: list[str], say: Callable[[str], None]) -> str | None:
    """How nsys's exit code reads: None when it is no failure (said instead when worth saying)."""
    if code != 0 and signals:
        say(f"the workload exited with code {code} after the {', '.join(signals)} passed on to nsys")
    elif code == 128 + signal.SIGTERM and plan.capture_range.duration is not None:
        say("nsys ended the workload with SIGTERM when --duration ran out (its default, --kill=sigterm)")
    elif code != 0:
        under = "under nsys " if plan.nsys is not None else ""
        return (
            f"`{shlex.join(plan.command)}` {under}exited with code {code}; "
            "run the command without specprof to see whether it fails on its own"
        )
    return None


def _has_kernels(sqlite: Path) -> bool:
    with closing(sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)) as db:
        query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'CUPTI_ACTIVITY_KIND_KERNEL'"
        return db.execute(query).fetchone() is not None


def _post_process(plan: Plan, steps: _Steps, say: Callable[[str], None]) -> list[str]:
    """Convert a left-over .qdstrm, export SQLite, run NVIDIA's stats report; the problems met."""
    report, qdstrm = plan.run_dir / REPORT, plan.run_dir / QDSTRM
    if not report.exists() and qdstrm.exists():
        problem = _convert_qdstrm(plan, steps, say)
        if problem:
            return [problem]
    if not report.exists():
        window = " (did the workload ever open the capture range?)" if plan.capture_range.mode else ""
        return [f"nsys wrote no report{window}; see nsys's output above"]
    planted = _planted_link(plan.run_dir, SQLITE)
    if planted:
        return [planted]
    problem = steps.call("export", plan.export_argv(), plan.run_dir)
    if problem:
        return [problem]
    if not _has_kernels(plan.run_dir / SQLITE):
        say(
            f"warning: {SQLITE} holds no GPU kernels. nsys keeps CUDA activity only once it is flushed: at the end "
            "of a capture range or a normal exit, not when the workload is stopped by a signal; use a capture range"
        )
    if plan.nvidia_stats:
        problem = _planted_link(plan.run_dir, f"{STATS_PREFIX}_{STATS_REPORT}.csv") \
            or steps.call("stats", plan.stats_argv(), plan.run_dir)
        if problem:
            return [problem]
    return []


def _planted_link(run_dir: Path, name: str) -> str | None:
    """nsys writes its outputs itself, by name: a link put in the run directory under one of those names since it
    was prepared would be written through, so that step does not run (the sentence for the error message)."""
    if os.path.islink(run_dir / name):
        return (f"{run_dir / name} became a symbolic link during the run; specprof never lets a write go through a "
                f"link: it was not written")
    return None


def _convert_qdstrm(plan: Plan, steps: _Steps, say: Callable[[str], None]) -> str | None:
    """nsys left run.qdstrm and no report (its importer failed): convert it with QdstrmImporter."""
    qdstrm = plan.run_dir / QDSTRM
    importer = find_qdstrm_importer(plan.nsys)
    if importer is None:
        return (
            f"nsys left {QDSTRM} but no report, and no QdstrmImporter was found beside {plan.nsys}; "
            f"convert it with `QdstrmImporter -i {qdstrm}` run from the importer's folder"
        )
    say(f"nsys left {QDSTRM} without a report (its importer failed); converting it with {importer}")
    problem = steps.call("qdstrm_import", [str(importer), "-i", str(qdstrm)], importer.parent)
    if problem or not (plan.run_dir / REPORT).exists():
        return problem or f"`{shlex.join(steps.commands['qdstrm_import'])}` wrote no {REPORT}"
    say(f"converted {QDSTRM} to {REPORT}")
    return None


def run(plan: Plan, say: Callable[[str], None] = _stderr) -> dict:
    """Capture, convert, export, write manifest.json; return the manifest.

    Raises CaptureFailed (after writing the manifest) when the workload under nsys fails, no report was written,
    or a conversion or export failed; whatever was captured stays in the run directory. A workload stopped by a
    signal passed on to nsys is no failure (see exit_status)."""
    _prepare_run_dir(plan)
    if plan.preset is not None:
        plan = _bootstrap(plan)
    names = ["profile"] if plan.nsys is None else \
        ["profile", "qdstrm_import", "export", *(["stats"] if plan.nvidia_stats else [])]
    record = _facts(plan)
    problems: list[str] = []
    workload = None
    written = ran = False
    with SignalRelay() as relay:
        steps = _Steps(names, relay)
        try:
            argv = plan.profile_argv()
            steps.commands["profile"] = argv
            try:
                steps.codes["profile"] = relay.run(argv, {**os.environ, **plan.env}, own_group=True,
                                                   log=plan.server_log)
            except OSError as exc:
                raise SpecprofError(f"could not start {argv[0]}: {exc.strerror or exc}", argv[0]) from exc
            workload = _workload_problem(plan, steps.codes["profile"], list(relay.seen), say)
            problems = [workload] if workload else []
            if plan.nsys is not None:
                problems += _post_process(plan, steps, say)
            ran = True
        finally:
            record.update(end=_utc_now(), exit_codes=steps.codes, commands=steps.commands,
                          signals_forwarded=list(relay.seen), files=run_files(plan.run_dir, plan.server_log))
            try:
                manifest.write(plan.run_dir, record)
                written = True
            except OSError as exc:
                unwritten = f"{plan.run_dir / manifest.MANIFEST}: cannot write the manifest ({exc.strerror or exc})"
                if ran:
                    problems.insert(0, unwritten)
                else:  # another error is on its way out: this one is said beside it
                    say(f"error: {unwritten}")
    if problems:
        code = steps.codes["profile"]
        stopped = steps.stopped_by
        raise CaptureFailed(
            "; ".join(problems) + f"; what was captured is kept in {plan.run_dir}"
            + (f" (see {manifest.MANIFEST})" if written else ""),
            str(plan.run_dir),
            exit_code=128 + signal.Signals[stopped] if stopped else code if workload and 0 < code < 256 else 2,
        )
    return record


def exit_status(record: dict) -> int:
    """The exit status of a capture that raised nothing: nsys's when a signal we passed on stopped it, else 0."""
    return record["exit_codes"]["profile"] if record["signals_forwarded"] else 0
