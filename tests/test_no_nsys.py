"""A run made without nsys (`specprof capture --no-nsys --gpu-events`), analysed on its own: every SGLang capture's
`no-nsys/` gives, through `specprof analyze`, the per-phase times, the period, the accept length and the economics
(the cycle, the speedup with its interval against the plain capture's `no-nsys/`) that its capture under nsys shows
for that sidecar (its column and row without nsys); what needs a trace is said once, in one line."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from conftest import FIXTURES

RUNS = sorted(p.parent.name for p in FIXTURES.glob("sglang-*/no-nsys"))
# each speculative capture's plain-decode capture of the same setup (the ramp's MoE runs have none)
PLAIN = {"sglang-dense": "sglang-dense-plain", "sglang-moe": "sglang-moe-plain", "sglang": "sglang-plain",
         "sglang-ramp-dense": "sglang-ramp-dense-plain", "sglang-ramp-moe": None}


def plain_of(name: str) -> str | None:
    return PLAIN[name.rsplit("-", 1)[0]]


def invoke(*args) -> str:
    result = CliRunner().invoke(main, [*args])
    assert result.exit_code == 0, result.output
    return result.output


def analyze_json(*args) -> dict:
    return json.loads(invoke("analyze", *map(str, args), "-q", "--json"))


def test_every_sglang_capture_has_a_run_without_nsys():
    assert len(RUNS) >= 12, RUNS


@pytest.mark.parametrize("name", RUNS)
def test_a_run_without_nsys_gives_what_its_capture_under_nsys_reads_from_it(name):
    run = FIXTURES / name
    twin = run / "no-nsys"
    plain = None if name.endswith("-plain") else plain_of(name)
    baseline = ("--baseline", FIXTURES / plain / "no-nsys") if plain else ()
    alone = analyze_json(twin, *baseline)
    sidecar = sorted(twin.glob("specprof-sidecar.*.jsonl"))
    under = analyze_json(run, "--baseline-sidecar", *sidecar, *baseline)
    assert alone["needs_nsys"] and "capture under nsys" in alone["needs_nsys"]
    assert alone["phases"] is None and alone["streams"] is None and alone["launch"] is None
    # the breakdown: each phase between its CUDA events, and the period, as the capture's column without nsys
    b, u = alone["cycle_breakdown"], under["cycle_breakdown"]
    mine = {p["phase"]: (p["unprofiled_ms_per_cycle"], p["unprofiled_share"]) for p in b["phases"]}
    theirs = {p["phase"]: (p["unprofiled_ms_per_cycle"], p["unprofiled_share"]) for p in u["phases"]
              if p["unprofiled_ms_per_cycle"] is not None}
    assert mine and mine == theirs
    assert b["cycle_ms"]["unprofiled_mean"] == u["cycle_ms"]["unprofiled_mean"] is not None
    assert b["untimed_unprofiled_ms"] == u["untimed_unprofiled_ms"]
    assert b["cycle_ms"]["mean"] is None and b["phases"][0]["ms_per_cycle"] is None
    # the economics: the row of the sidecar without nsys, every figure and interval
    row = alone["economics"]["estimates"]
    assert [r["source"] for r in row] == ["sidecar without nsys"]
    twin_row = [r for r in under["economics"]["estimates"] if r["source"] == "sidecar without nsys"]
    assert row == twin_row
    assert alone["economics"]["baseline_ms"] == under["economics"]["baseline_ms"]
    assert alone["economics"]["baseline_ms_ci"] == under["economics"]["baseline_ms_ci"]
    groups = alone["economics"]["batch_groups"]
    if plain and groups is not None and groups["several"]:
        # a run over several batch sizes (the ramps) has no pooled speedup: its speedups are per batch-size group,
        # the same ones as its capture's rows of the run without nsys
        mine = [g for g in groups["groups"] if g["source"] == "sidecar without nsys"]
        theirs = [g for g in under["economics"]["batch_groups"]["groups"] if g["source"] == "sidecar without nsys"]
        assert mine and mine == theirs and all(g["speedup"] is not None for g in mine if g["baseline_ms"])
    elif plain:
        assert row[0]["speedup"] is not None and row[0]["speedup_ci"] is not None
    if plain:
        assert row[0]["accept_len"] is not None and row[0]["accept_len_ci"] is not None
    assert alone["draft_shape"] == under["draft_shape"]


def test_terminal_says_once_what_needs_nsys():
    out = invoke("analyze", str(FIXTURES / "sglang-dense-k4" / "no-nsys"), "-q", "--baseline",
                 str(FIXTURES / "sglang-dense-plain" / "no-nsys"))
    assert out.count("capture under nsys") == 1
    assert "Where a decode cycle goes (without nsys" in out
    assert "sidecar without nsys" in out and "Accept length cross-check" in out
    # the plain run's no-nsys/ is a baseline without nsys, and says so
    assert "sidecar-plain" not in out and "no-nsys: sidecar without nsys" in out


def test_reference_run_without_nsys_takes_its_ground_truth_events():
    doc = analyze_json(FIXTURES / "reference-k4" / "no-nsys")
    assert doc["cycle_breakdown"] is not None and doc["cycle_breakdown"]["phases"]
    assert any("ground truth" in n for n in doc["notes"])


def test_a_folder_without_sidecars_or_trace_is_still_refused(tmp_path):
    result = CliRunner().invoke(main, ["analyze", str(tmp_path), "-q"])
    assert result.exit_code != 0
    assert "run directory made by `specprof capture`" in result.output


def test_compare_two_runs_without_nsys():
    doc = json.loads(invoke("compare", str(FIXTURES / "sglang-dense-k2" / "no-nsys"),
                            str(FIXTURES / "sglang-dense-k4" / "no-nsys"), "--json"))
    k4 = analyze_json(FIXTURES / "sglang-dense-k4" / "no-nsys")
    events = {p["phase"]: p["unprofiled_ms_per_cycle"] for p in k4["cycle_breakdown"]["phases"]}
    # each phase per cycle: the same number `analyze` shows for the run
    assert {p["phase"]: p["b_ms"] for p in doc["phases"]} == pytest.approx(events, abs=2e-6)
    assert doc["b"]["cycles"] == k4["cycle_breakdown"]["cycles"]


def test_compare_refuses_a_run_without_nsys_against_a_capture():
    result = CliRunner().invoke(main, ["compare", str(FIXTURES / "sglang-dense-k4" / "no-nsys"),
                                       str(FIXTURES / "sglang-dense-k4")])
    assert result.exit_code != 0 and "measure different things" in result.output
    assert "Traceback" not in result.output


def test_sweep_over_runs_without_nsys():
    runs = [str(FIXTURES / f"sglang-dense-k{k}" / "no-nsys") for k in (1, 2, 3, 4, 6)]
    plain = str(FIXTURES / "sglang-dense-plain" / "no-nsys")
    doc = json.loads(invoke("sweep", *runs, "--baseline", plain, "--json"))
    k4 = analyze_json(runs[3], "--baseline", plain)
    head = k4["economics"]["estimates"][0]
    row = next(r for r in doc["runs"] if r["steps"] == 4)
    # each run's accept length and cycle: the ones `analyze` gives it
    assert row["accept_len"] == pytest.approx(head["accept_len"], abs=1e-4)
    assert row["period_unprofiled_ms"] == pytest.approx(head["cycle_ms"], abs=2e-6)
    assert row["accept_source"] == "sidecar without nsys"
    assert doc["recommended_steps"] is not None
    out = invoke("sweep", *runs, "--baseline", plain)
    assert "rest and cycle: CUDA events and the period without nsys" in out


def test_sweep_refuses_runs_without_nsys_mixed_with_captures():
    result = CliRunner().invoke(main, ["sweep", str(FIXTURES / "sglang-dense-k2" / "no-nsys"),
                                       str(FIXTURES / "sglang-dense-k4")])
    assert result.exit_code != 0 and "different things" in result.output
    assert "Traceback" not in result.output


def test_tables_say_what_needs_nsys(tmp_path):
    invoke("analyze", str(FIXTURES / "sglang-dense-k4" / "no-nsys"), "-q", "--csv", str(tmp_path))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "needs_nsys.csv" in names and "cycle_breakdown.csv" in names and "economics_estimates.csv" in names
    assert "phases.csv" not in names and "ops.csv" not in names
    assert "capture under nsys" in (tmp_path / "needs_nsys.csv").read_text()


@pytest.mark.parametrize("command", [["report", "-o", "{tmp}/r.html"], ["analyze", "--db", "{tmp}/s.db"]])
def test_report_and_store_refuse_in_one_line(tmp_path, command):
    args = [c.format(tmp=tmp_path) for c in command]
    result = CliRunner().invoke(main, [args[0], str(FIXTURES / "sglang-dense-k4" / "no-nsys"), *args[1:]])
    assert result.exit_code != 0 and "needs a capture under nsys" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
