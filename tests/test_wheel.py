"""What installing specprof adds to a Python environment: one top-level import name, `specprof`.

The repository keeps tracer/ and analyzer/ at its top; the build maps them under `specprof` (pyproject.toml), so
that specprof never shadows another distribution's `tracer` or `analyzer` (PyPI has both). These tests build the
real wheel from a copy of the project's own files, list what it holds, install it into a folder of its own and run
the installed `python3 -m specprof`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT

BUILD_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md")
PARTS = ("specprof", "analyzer", "tracer")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in BUILD_FILES:
        shutil.copy(ROOT / name, source / name)
    for part in PARTS:
        shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "-w", str(out), str(source)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (built,) = out.glob("specprof-*.whl")
    return built


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_wheels_only_top_level_package_is_specprof(wheel):
    tops = {name.split("/", 1)[0] for name in _names(wheel)}
    assert {top for top in tops if not top.endswith((".dist-info", ".data"))} == {"specprof"}
    with zipfile.ZipFile(wheel) as archive:
        info = next(n for n in archive.namelist() if n.endswith(".dist-info/top_level.txt"))
        assert archive.read(info).decode().split() == ["specprof"]


def test_every_module_and_data_file_of_the_two_parts_is_in_the_wheel_under_specprof(wheel):
    held = set(_names(wheel))
    for part in ("analyzer", "tracer"):
        for path in (ROOT / part).rglob("*"):
            if path.is_dir() or "__pycache__" in path.parts or path.suffix in (".so", ".c", ".h", ".pyc"):
                continue
            name = "specprof/" + path.relative_to(ROOT).as_posix()
            assert name in held, f"{name} (from {path.relative_to(ROOT)}) is not in the wheel"
    assert {"specprof/__init__.py", "specprof/__main__.py"} <= held


def test_the_entry_points_name_the_installed_package(wheel):
    with zipfile.ZipFile(wheel) as archive:
        info = next(n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt"))
        text = archive.read(info).decode()
    assert "specprof = specprof.analyzer.cli:main" in text
    assert "specprof = specprof.tracer.plugin:load" in text
    assert "analyzer.cli" not in text.replace("specprof.analyzer.cli", "")


def test_the_installed_wheel_runs_as_python_m_specprof(wheel, tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                           str(site), str(wheel)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in site.iterdir() if not p.name.endswith(".dist-info") and p.name != "bin") == ["specprof"]
    env = {**os.environ, "PYTHONPATH": str(site), "SPECPROF_CACHE_DIR": str(tmp_path / "cache")}
    where = subprocess.run([sys.executable, "-c", "import specprof.analyzer.cli as c, specprof.tracer.plugin as p; "
                            "print(c.__file__); print(p.__file__)"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    assert all(line.startswith(str(site)) for line in where.stdout.split()), where.stdout
    analysis = subprocess.run([sys.executable, "-m", "specprof", "analyze", str(FIXTURES / "reference-k4"),
                               "--json", "-q"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert analysis.returncode == 0, analysis.stderr[-3000:]
    assert json.loads(analysis.stdout)["phases"]


def test_a_checkout_on_pythonpath_finds_its_own_two_parts_and_nothing_else(tmp_path):
    """Not installed (the GPU scripts put the checkout's root on PYTHONPATH): `specprof.analyzer` and
    `specprof.tracer` are the folders beside specprof/, also where an editable install maps the same names to
    another checkout; the checkout's other folders (tests, scripts) are not part of the package."""
    copy = tmp_path / "checkout"
    for part in PARTS:
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (copy / "tests").mkdir()
    (copy / "tests" / "__init__.py").write_text("")
    code = ("import importlib.util, specprof.analyzer.errors as e, specprof.tracer.plugin as p; print(e.__file__); "
            "print(p.__file__); print(importlib.util.find_spec('specprof.tests'))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(copy)})
    assert done.returncode == 0, done.stderr
    errors, plugin, tests = done.stdout.split()
    assert errors == str(copy / "analyzer" / "errors.py") and plugin == str(copy / "tracer" / "plugin.py")
    assert tests == "None"
