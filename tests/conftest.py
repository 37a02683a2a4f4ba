"""Shared test fixtures: paths to real captures (the project's own under fixtures/, and the
third-party ones in ../shared/traces, which stay out of the repository)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def _shared_traces() -> Path | None:
    candidates = [os.environ.get("SPECPROF_SHARED_TRACES"), ROOT.parent / "shared" / "traces"]
    for c in candidates:
        if c and (Path(c) / "nsys_sqlite").is_dir():
            return Path(c)
    return None


SHARED = _shared_traces()
_CACHE: list[str] = []


def pytest_configure(config):
    """The analyses' cache (analyzer/readers/trace_cache.py) of this test run is a folder of its own, never the
    user's."""
    if not os.environ.get("SPECPROF_CACHE_DIR"):
        _CACHE.append(tempfile.mkdtemp(prefix="specprof-test-cache-"))
        os.environ["SPECPROF_CACHE_DIR"] = _CACHE[0]


def pytest_unconfigure(config):
    for folder in _CACHE:
        shutil.rmtree(folder, ignore_errors=True)


def shared_nsys() -> list[Path]:
    return sorted((SHARED / "nsys_sqlite").glob("*.sqlite")) if SHARED else []


def own_nsys() -> list[Path]:
    """The project's own nsys exports (fixtures/*/run.sqlite): the invariants run on these everywhere, and on
    the third-party ones too where ../shared/traces is."""
    return sorted(FIXTURES.glob("*/run.sqlite"))


def capture_id(p: Path) -> str:
    return f"{p.parent.name}/{p.name}" if p.name == "run.sqlite" else p.name


@pytest.fixture(scope="session")
def export_alone(tmp_path_factory):
    """`export_alone("reference-k4")`: that fixture's nsys export copied into a folder of its own, a plain export
    as someone else's (no sidecar, no manifest, no run directory around it)."""

    def copy(name: str) -> Path:
        path = tmp_path_factory.mktemp("alone") / f"{name}.sqlite"
        shutil.copyfile(FIXTURES / name / "run.sqlite", path)
        return path

    return copy


@pytest.fixture
def shared_dir() -> Path:
    if SHARED is None:
        pytest.skip("the third-party captures (../shared/traces) are not beside this checkout; "
                    "set SPECPROF_SHARED_TRACES to their folder")
    return SHARED
