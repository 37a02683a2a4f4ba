"""What the console script imports: each command loads what it uses when it runs (analyzer/cli.py).

A GPU server host runs `python3 -m analyzer capture` from a folder that holds only the tracer, nvtx and click
(scripts/sglang/stage.sh): there `capture` must work with the analysis stack absent. These tests run the real
command in a fresh Python whose import system refuses the analysis stack (as a host without it would) and that
records every attempt to import it; `capture` runs the test double of nsys from tests/test_capture.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from test_capture import WORKLOAD, Tools, _script

# The analysis stack: none of it is on a GPU server host.
ANALYSIS_STACK = ("polars", "numpy", "pyarrow", "pandas", "adbc_driver_manager", "adbc_driver_sqlite", "ijson",
                  "plotly", "platformdirs", "sqlite_utils")

# Runs `python3 -m analyzer ARGS...` with the analysis stack refused, then prints what was asked for (a refused
# import, or one of the specprof modules that need it) as JSON on the last line of stdout.
PROBE = '''
import atexit, json, runpy, sys

STACK = set({stack!r})
asked = []

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in STACK:
            asked.append(name)
            raise ModuleNotFoundError(f"No module named {{name!r}} (refused: not on a GPU server host)")
        return None

sys.meta_path.insert(0, Refuse())

def report():
    heavy = sorted(m for m in sys.modules if m.startswith(("specprof.analyzer.app", "specprof.analyzer.core", "specprof.analyzer.derived",
                                                           "specprof.analyzer.readers", "specprof.analyzer.render", "specprof.analyzer.model")))
    sys.stdout.write("\\n" + json.dumps({{"refused": sorted(set(asked)), "analysis_modules": heavy}}) + "\\n")

atexit.register(report)
sys.argv = ["specprof", *{args!r}]
runpy.run_module("specprof", run_name="__main__", alter_sys=True)
'''


def _run(args: list[str], env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    code = PROBE.format(stack=ANALYSIS_STACK, args=[str(a) for a in args])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    return done, seen


def _env(tools: Tools, tmp_path: Path) -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("NSYS", "NSYS_NVTX_PROFILER_REGISTER_ONLY")}
    env["FAKE_NSYS_LOG"] = str(tools.log)
    env["WORKLOAD_ENV_DUMP"] = str(tmp_path / "workload-env.json")
    return env


def test_capture_runs_without_the_analysis_stack(tmp_path):
    """The whole capture (nsys profile, export, manifest, the tracer's bootstrap) with polars, numpy and the other
    analysis packages absent: it succeeds, tried to import none of them, and loaded none of the analyzer's
    analysis modules."""
    tools = Tools(tmp_path / "nsight")
    workload = [sys.executable, str(_script(tmp_path / "workload.py", WORKLOAD))]
    done, seen = _run(["capture", "--preset", "reference", "--nsys", tools.nsys, "-o", tmp_path / "run", "--",
                       *workload], env=_env(tools, tmp_path))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "manifest.json").is_file() and (tmp_path / "run" / "run.sqlite").is_file()
    assert json.loads((tmp_path / "workload-env.json").read_text())["tracer_loaded"] is True
    assert seen == {"refused": [], "analysis_modules": []}


def test_capture_dry_run_and_help_without_the_analysis_stack(tmp_path):
    tools = Tools(tmp_path / "nsight")
    for args in (["capture", "--dry-run", "--nsys", tools.nsys, "-o", tmp_path / "run", "--", "true"],
                 ["capture", "--help"], ["--help"], ["--version"]):
        done, seen = _run(args, env=_env(tools, tmp_path))
        assert done.returncode == 0, (args, done.stderr)
        assert seen == {"refused": [], "analysis_modules": []}, args


def test_the_probe_sees_an_import_of_the_analysis_stack(tmp_path):
    """The probe itself: `analyze` needs polars, so there it is refused, and the one clear failure is seen (this
    is what `capture` did when cli.py imported the analysis stack at start-up)."""
    done, seen = _run(["analyze", "fixtures/reference-k4", "--no-cache"])
    assert done.returncode != 0 and "polars" in seen["refused"]


# In a fresh Python: the threads after numpy is loaded the analysis's way, and whether the environment kept the
# OpenBLAS setting (a captured workload started afterwards inherits os.environ).
NUMPY_PROBE = '''
import json, os
from specprof.analyzer.model.numeric import np
np.zeros(1)
print(json.dumps({"threads": len(os.listdir("/proc/self/task")), "env": os.environ.get("OPENBLAS_NUM_THREADS")}))
'''


def _numpy_probe(env: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", NUMPY_PROBE], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_numpy_is_loaded_with_one_blas_thread_and_the_environment_left_as_it_was():
    """numpy's OpenBLAS starts a thread per core when it loads (and lets it spin: about 0.1 CPU s a process);
    the analysis loads numpy through specprof.analyzer.model.numeric, which gives OpenBLAS one thread and puts the
    environment back, so a workload `capture` starts afterwards does not inherit the setting. A setting the user
    made is theirs: kept, and obeyed."""
    import os

    if not os.path.isdir("/proc/self/task"):
        import pytest

        pytest.skip("counts threads through /proc")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    seen = _numpy_probe(env)
    assert seen["threads"] == 1 and seen["env"] is None, seen
    # the user's own setting is kept (on a machine of one core OpenBLAS starts no thread either way)
    users = _numpy_probe({**env, "OPENBLAS_NUM_THREADS": "2"})
    assert users["env"] == "2" and users["threads"] == (2 if os.cpu_count() > 1 else 1), users


# The console script, with what the collector holds at exit printed last (atexit runs before the final collection).
GC_PROBE = '''
import atexit, gc, json, runpy, sys
atexit.register(lambda: print(json.dumps({{"frozen": gc.get_freeze_count(), "enabled": gc.isenabled()}})))
sys.argv = ["specprof", *{args!r}]
runpy.run_module("specprof", run_name="__main__", alter_sys=True)
'''


def test_the_console_script_freezes_the_loaded_library_out_of_the_collector():
    """Run as the console script, `analyze` loads the library with the cyclic collector paused, then freezes it
    (the modules' objects are walked by no later collection, the one at exit included) and turns the collector
    back on; `--help` loads nothing and freezes nothing."""
    code = GC_PROBE.format(args=["analyze", "fixtures/reference-k4", "--no-cache", "-q"])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["enabled"] and seen["frozen"] > 10_000, seen
    done = subprocess.run([sys.executable, "-c", GC_PROBE.format(args=["--help"])], capture_output=True, text=True,
                          timeout=60)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"frozen": 0, "enabled": True}


def test_a_cli_runner_leaves_the_collector_as_it_was():
    """Under a test's CliRunner the process is not specprof's: nothing is paused, nothing frozen."""
    import gc

    from click.testing import CliRunner

    from specprof.analyzer.cli import main

    before = gc.get_freeze_count()
    result = CliRunner().invoke(main, ["analyze", "fixtures/reference-k4", "--no-cache", "-q"])
    assert result.exit_code == 0, result.output
    assert gc.isenabled() and gc.get_freeze_count() == before
