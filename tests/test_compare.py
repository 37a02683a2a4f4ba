"""specprof compare on the real captures: a run against itself, K=4 against K=6, the --fail-if-slower exit
code, and per-cycle totals recomputed from each analysis's own per-cycle table."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner

from specprof.analyzer.core.attribution import attribute
from specprof.analyzer.readers.load import load_trace
from specprof.analyzer.app.run import Run
from specprof.analyzer.cli import main
from specprof.analyzer.derived.compare import compare
from conftest import FIXTURES

K2, K4, K6 = (str(FIXTURES / f"reference-k{k}") for k in (2, 4, 6))


@pytest.fixture(scope="module")
def analyses():
    return attribute(load_trace(K4)), attribute(load_trace(K6))


def per_cycle_total(a):
    return a.cycle_phases["attributed"].sum() / a.cycles.height


def test_a_run_against_itself_changes_nothing(analyses):
    c = compare(analyses[0], analyses[0])
    assert c.change_pct == 0 and not c.slower_than(0)
    assert (c.phases["diff_ns"] == 0).all() and set(c.phases["ratio"].drop_nulls().to_list()) == {1.0}


def test_k6_against_k4_per_phase_and_category(analyses):
    a, b = analyses
    c = compare(a, b)
    assert c.unit == "cycle" and (c.a_cycles, c.b_cycles) == (100, 100)
    assert c.a_total_ns == pytest.approx(per_cycle_total(a), abs=4)
    assert c.b_total_ns == pytest.approx(per_cycle_total(b), abs=4)
    rows = {r["phase"]: r for r in c.phases.iter_rows(named=True)}
    # two more eager draft steps: the draft grows by ~1 ms, verify (one graph replay) by ~1%
    assert 0.8e6 < rows["draft"]["diff_ns"] < 1.2e6 and 1.0 < rows["verify"]["ratio"] < 1.02
    expected = a.cycle_phases.filter(pl.col("phase") == "draft")["attributed"].sum() / 100
    assert rows["draft"]["a_ns"] == pytest.approx(expected, abs=1)
    # categories add up to their phase
    cats = c.categories.group_by("phase").agg(pl.col("b_ns").sum())
    for phase, ns in cats.iter_rows():
        assert ns == pytest.approx(rows[phase]["b_ns"], abs=len(c.categories))
    assert 15 < c.change_pct < 20 and c.slower_than(10) and not c.slower_than(20)


def test_fail_if_slower_exit_codes():
    runner = CliRunner()
    slower = runner.invoke(main, ["compare", K4, K6, "--fail-if-slower", "5"])
    assert slower.exit_code == 1 and "B is 17.7% slower than A per cycle" in slower.output
    assert runner.invoke(main, ["compare", K4, K6, "--fail-if-slower", "25"]).exit_code == 0
    faster = runner.invoke(main, ["compare", K6, K4, "--fail-if-slower", "0"])
    assert faster.exit_code == 0 and "faster" in faster.output
    assert runner.invoke(main, ["compare", K4, K4, "--fail-if-slower", "0"]).exit_code == 0
    assert runner.invoke(main, ["compare", K4, K6, "--fail-if-slower", "-1"]).exit_code == 2


def test_json(analyses):
    out = CliRunner().invoke(main, ["compare", K4, K6, "--json"])
    assert out.exit_code == 0
    doc = json.loads(out.output)
    assert doc["schema"] == "specprof.compare/1" and doc["unit"] == "cycle"
    assert doc["total"]["change_pct"] == pytest.approx(17.71, abs=0.01)
    # per cycle: the headline breakdown's cycle (one rank's decode cycles on its cycle stream)
    assert doc["total"]["a_ms"] == pytest.approx(Run.load(K4).analysis().cycle_breakdown.mean_ns / 1e6, abs=1e-5)
    # the named phases, and the time charged to no phase ("(cycle)": the worker between its phases;
    # "(unattributed)": the engine between cycles)
    assert {p["phase"] for p in doc["phases"]} == {"draft", "verify", "draft_extend", "accept", "(cycle)",
                                                  "(unattributed)"}
    assert all(set(r) == {"phase", "category", "a_ms", "b_ms", "diff_ms", "ratio"} for r in doc["categories"])


def test_missing_input_is_a_clean_error(tmp_path):
    out = CliRunner().invoke(main, ["compare", K4, str(tmp_path / "nope.sqlite")])
    assert out.exit_code == 2 and "specprof: error:" in out.output and "Traceback" not in out.output


def test_runs_without_cycles_compare_per_phase_instance(shared_dir, analyses):
    # a third-party capture (no `cycle` ranges) against K4: per instance of the phases both have, or refused
    from specprof.analyzer.errors import SpecprofError

    for path in sorted((shared_dir / "nsys_sqlite").glob("*.sqlite"))[:3]:
        other = attribute(load_trace(str(path)))
        named = set(other.phases.filter(pl.col("instances") > 0)["phase"]) & set(analyses[0].phases["phase"])
        if not named:
            with pytest.raises(SpecprofError, match="no phase range that both runs have"):
                compare(other, analyses[0])
            continue
        c = compare(other, analyses[0])
        assert c.unit == "instance" and any("no `cycle` ranges" in n and str(path) in n for n in c.notes)


def test_without_cycles_the_length_of_the_capture_does_not_count():
    # The same run (K4) without its cycle ranges (--group-range nosuch), whole and cut to its first 30 cycles: per
    # phase instance they agree (a total per run would call the short one 70% faster).
    args = ["--group-range", "nosuch", "--no-cache", "--json"]
    out = CliRunner().invoke(main, ["compare", K4, K4, *args])
    assert out.exit_code == 0, out.output
    whole = json.loads(out.stdout)
    assert whole["unit"] == "instance" and whole["total"]["change_pct"] == 0
    a = attribute(load_trace(K4), grouping=("nosuch",))
    verify = a.phases.filter(pl.col("phase") == "verify").row(0, named=True)
    got = next(p for p in whole["phases"] if p["phase"] == "verify")
    assert got["a_ms"] == pytest.approx(verify["attributed"] / verify["instances"] / 1e6, abs=1e-6)
    out = CliRunner().invoke(main, ["compare", K4, K4, *args, "--time-window", ":200", "--fail-if-slower", "5"])
    assert out.exit_code == 0, out.output  # not slower: the same work per instance
    cut = json.loads(out.stdout)
    assert abs(cut["total"]["change_pct"]) < 5


def test_runs_with_nothing_to_compare_are_refused():
    out = CliRunner().invoke(main, ["compare", K4, K2, "--domain", "nosuch", "--no-cache", "--fail-if-slower", "5"])
    assert out.exit_code == 2 and "no phase range that both runs have" in out.output
