"""The answer first: the summary at the top of `analyze` (derived/answer.py) on the real captures.

Its values are the ones the tables below it show (one number per thing), the main command's first screen holds
the verdict and the next step, `--brief` prints the summary alone, and "Where a decode cycle goes" is ordered by
the share to act on (without nsys where the run has it).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from specprof.analyzer.cli import main

MAIN = ["analyze", str(FIXTURES / "reference-k4"), "--baseline", str(FIXTURES / "reference-k0"), "-q"]
SCREEN = 24  # lines of a terminal's first screen


def _run(args: list[str]) -> str:
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.stdout


def test_the_main_commands_first_screen_holds_the_verdict_and_the_next_step():
    first = _run(MAIN).splitlines()[:SCREEN]
    assert first[0] == f"Summary of {FIXTURES / 'reference-k4'}"
    text = "\n".join(first)
    assert "does speculation pay: pays, 1.46x (1.40-1.52) against plain decoding" in text
    assert "where a cycle goes (without nsys): cycle period 4.563 ms; verify 54%" in text
    assert any(line.startswith("  next: specprof ") for line in first)
    assert "how far to trust it: attributed GPU time within 1.1% of in-stream CUDA events" in text


def test_brief_prints_the_summary_alone_in_at_most_ten_lines():
    brief = _run([*MAIN, "--brief"]).splitlines()
    assert len(brief) <= 10 and brief[0].startswith("Summary of ")
    assert not any(line.startswith("specprof analysis of") for line in brief)
    assert _run(MAIN).startswith("\n".join(brief))


@pytest.mark.parametrize("run, baseline", [("reference-k4", "reference-k0"), ("sglang-dense-k3", "sglang-dense-plain"),
                                           ("sglang-moe-k2", "sglang-moe-plain")])
def test_the_summarys_values_are_the_tables_values(run, baseline):
    doc = json.loads(_run(["analyze", str(FIXTURES / run), "--baseline", str(FIXTURES / baseline), "-q", "--json"]))
    s, econ, b = doc["summary"], doc["economics"], doc["cycle_breakdown"]
    head = econ["estimates"][0]
    assert s["pays"]["speedup"] == head["speedup"] and s["pays"]["source"] == head["source"]
    assert s["pays"]["speedup_ci"] == head["speedup_ci"] and s["pays"]["accept_len"] == head["accept_len"]
    # the cycle: the breakdown's column without nsys (these runs have a twin), its largest phases first
    assert s["cycle"]["basis"] == "without nsys"
    real = [p for p in b["phases"] if not p["phase"].startswith("(") and p["unprofiled_share"] is not None]
    want = sorted(real, key=lambda p: -p["unprofiled_share"])[:3]
    assert [(p["phase"], p["share"]) for p in s["cycle"]["phases"]] == [(p["phase"], p["unprofiled_share"])
                                                                         for p in want]
    gt = doc["crosscheck"]["ground_truth"]["rows"]
    assert s["trust"]["ground_truth_max_diff_pct"] == pytest.approx(max(abs(r["diff_pct"]) for r in gt), abs=1e-3)


def test_where_a_cycle_goes_is_ordered_by_the_share_without_nsys():
    # On the reference engine draft is the larger phase under nsys (launch-bound, stretched by CUDA tracing) and
    # verify the larger without it: the table leads with verify, the phase to act on.
    doc = json.loads(_run([*MAIN, "--json"]))
    rows = [p for p in doc["cycle_breakdown"]["phases"] if p["unprofiled_ms_per_cycle"] is not None]
    assert [p["unprofiled_ms_per_cycle"] for p in rows] == sorted((p["unprofiled_ms_per_cycle"] for p in rows),
                                                                   reverse=True)
    assert rows[0]["phase"] == "verify"
    under = {p["phase"]: p["ms_per_cycle"] for p in doc["cycle_breakdown"]["phases"]}
    assert under["draft"] > under["verify"]  # what the order under nsys would have put first


def test_a_run_without_a_baseline_names_the_command_that_adds_one():
    brief = _run(["analyze", str(FIXTURES / "sglang-k2"), "-q", "--brief"])
    assert "does speculation pay: not known (no plain-decode baseline)" in brief
    assert f"next: specprof analyze {FIXTURES / 'sglang-k2'} --baseline PLAIN_RUN" in brief
