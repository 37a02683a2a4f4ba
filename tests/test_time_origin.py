"""One time origin (model/trace.py `capture_start`, `TraceMeta.start_ns`): the per-cycle table's `start ms`,
`--time-window` and the report's timeline all count from the capture's start, on real captures, also inside a
window; the header says so."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from specprof.analyzer.core.window import Window, select
from specprof.analyzer.model.trace import capture_start
from specprof.analyzer.readers.load import load_trace
from specprof.analyzer.render import html
from conftest import FIXTURES

K4 = FIXTURES / "reference-k4"


def analyze(*args) -> str:
    result = CliRunner().invoke(main, ["analyze", str(K4), "--no-cache", "-q", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result.stdout


def start_ms(text: str) -> dict[int, float]:
    """cycle index -> its `start ms` in the per-cycle table."""
    lines = text.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("cycle  start ms"))
    rows = {}
    for line in lines[at + 2:]:
        if not line.strip():
            break
        cycle, start = line.split()[:2]
        rows[int(cycle)] = float(start)
    return rows


@pytest.mark.parametrize("run", ["reference-k4", "sglang-k4", "torch-k4"])
def test_the_capture_start_is_the_first_event_of_any_kind(run):
    trace = load_trace(str(FIXTURES / run))
    firsts = [trace.ops["start"].min(), trace.api["start"].min(), trace.ranges["start"].min()]
    if trace.marks.height:
        firsts.append(trace.marks["ts"].min())
    assert trace.meta.start_ns == capture_start(trace) == min(firsts)
    assert trace.meta.start_ns <= trace.ops["start"].min()


def test_start_ms_counts_from_the_capture_start_and_a_window_keeps_it():
    trace = load_trace(str(K4))
    cycles = trace.ranges.filter(pl.col("name") == "cycle").sort("start")["start"].to_list()
    whole = start_ms(analyze("--show-cycles", "100"))
    assert whole[0] == pytest.approx((cycles[0] - trace.meta.start_ns) / 1e6, abs=0.0005)
    assert whole[0] > 0  # the first cycle starts after the capture does (its prefill came first)
    # a cycle window shows its cycles at the same times, not from 0
    part = start_ms(analyze("--cycle-window", "10:20"))
    assert list(part) == list(range(10, 20)) and all(part[i] == whole[i] for i in part)
    assert select(trace, Window.of(cycles=(10, 20))).meta.start_ns == trace.meta.start_ns
    header = next(line for line in analyze().splitlines()[:20] if line.startswith("  time 0"))
    assert header.startswith("  time 0: the capture's start") and "--time-window" in header


def test_a_time_window_counts_from_the_same_origin_as_start_ms():
    # --time-window A:B with A, B the start ms of cycles 10 and 20 keeps what was launched from cycle 10's start to
    # cycle 20's: cycles 10 to 19, with the cycle before cut at the edge at most.
    whole = start_ms(analyze("--show-cycles", "100"))
    doc = json.loads(analyze("--time-window", f"{whole[10]}:{whole[20]}", "--json"))
    kept = [c["index"] for c in doc["cycles"]]
    assert set(range(10, 20)) <= set(kept) <= set(range(9, 21)), kept
    origin = doc["source"]["start_ns"]
    assert origin == load_trace(str(K4)).meta.start_ns
    by_index = {c["index"]: c["start_ns"] for c in doc["cycles"]}
    assert (by_index[10] - origin) / 1e6 == pytest.approx(whole[10], abs=0.0005)


def test_the_report_timeline_counts_from_the_same_origin(tmp_path):
    out = tmp_path / "r.html"
    text = CliRunner().invoke(main, ["analyze", str(K4), "--no-cache", "-q", "--html", str(out)]).stdout
    data = html.read_data(out.read_text(encoding="utf-8"))
    assert data["timeline"]["t0_ns"] == load_trace(str(K4)).meta.start_ns
    shown = start_ms(text)
    for i, ms in shown.items():
        assert data["cycles"]["start"][i] / 1e6 == pytest.approx(ms, abs=0.0005)
