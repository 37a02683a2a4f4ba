"""`ground_truth.json` (`specprof.ground_truth/1`, written by `specprof reference`) -> a polars table.

The reference engine records CUDA events in-stream at every phase boundary and reads them after the run:
per measured cycle and phase, the GPU time between the phase's start and end events. Only the reference
engine writes this file; the cross-check uses it, when a run and its baseline both have one, to measure the
profiler's inflation of GPU phase times (docs/crosscheck.md).

Table `ground_truth`: index (measured cycle, from 0), phase, ns (integer nanoseconds, rounded from the
float milliseconds CUDA reports, which resolve about 0.5 us).
"""

from __future__ import annotations

import json
import math
import os

import polars as pl

from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.readers.files import open_input

SCHEMA = "specprof.ground_truth/1"
NAME = "ground_truth.json"
GT_SCHEMA = {"index": pl.Int64, "phase": pl.Utf8, "ns": pl.Int64}


def find(directory: str) -> str | None:
    path = os.path.join(directory, NAME)
    return path if os.path.isfile(path) else None


def read_ground_truth(path: str) -> pl.DataFrame:
    with open_input(path, "a ground-truth file", binary=True) as fh:
        data = fh.read(64 << 20)
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise SpecprofError(f"{path}: not JSON: not a specprof ground-truth file", path) from None
    except RecursionError:
        raise SpecprofError(f"{path}: JSON nested too deep to read: not a specprof ground-truth file", path) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise SpecprofError(f"{path}: not a specprof ground-truth file (schema {SCHEMA} expected)", path)
    cycles = doc.get("cycles")
    if not isinstance(cycles, list):
        raise SpecprofError(f"{path}: `cycles` must be a list", path)
    rows = []
    for n, cycle in enumerate(cycles):
        if not isinstance(cycle, dict) or not isinstance(cycle.get("index"), int):
            raise SpecprofError(f"{path}: cycle entry {n} has no integer `index`", path)
        for key, value in cycle.items():
            if not key.endswith("_ms"):
                continue
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                    or value < 0:
                raise SpecprofError(f"{path}: cycle {cycle['index']}: `{key}` must be a non-negative number",
                                    path)
            rows.append((cycle["index"], key[:-3], int(round(value * 1e6))))
    return pl.DataFrame(rows, schema=GT_SCHEMA, orient="row")
