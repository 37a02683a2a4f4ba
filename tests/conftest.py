"""Shared test fixtures: paths to real captures (the project's own under fixtures/, and the
third-party ones in ../shared/traces, which stay out of the repository)."""

from __future__ import annotations

import os
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


def shared_nsys() -> list[Path]:
    return sorted((SHARED / "nsys_sqlite").glob("*.sqlite")) if SHARED else []


@pytest.fixture
def shared_dir() -> Path:
    if SHARED is None:
        pytest.skip("the third-party captures (../shared/traces) are not beside this checkout; "
                    "set SPECPROF_SHARED_TRACES to their folder")
    return SHARED
