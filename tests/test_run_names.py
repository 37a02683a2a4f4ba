"""Run names in the tables that set runs side by side (analyzer/render/names.py): the part of each path that tells
it from the others, in sweep, compare and several traces; on the real reference captures, copied under a long path
(the case where cutting every name to one width left the same prefix three times)."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from specprof.analyzer.render.names import distinct
from conftest import FIXTURES


def test_distinct_keeps_what_differs():
    assert distinct(["/a/b/runs/k2/run.sqlite", "/a/b/runs/k4/run.sqlite"]) == (["k2", "k4"], "/a/b/runs")
    assert distinct(["runs/k2", "runs/k4", "other/k6"]) == (["runs/k2", "runs/k4", "other/k6"], "")
    assert distinct(["x/k2/run.sqlite", "x/k2/run.sqlite"]) == (["x/k2/run.sqlite", "x/k2/run.sqlite"], "")
    assert distinct(["/only/one/run"]) == (["/only/one/run"], "")
    assert distinct(["/r/k2", "/r/k2/sub"]) == (["/r/k2", "/r/k2/sub"], "")  # one would be left with nothing


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs") / "a-long-folder-name-that-cut-every-run-to-the-same-prefix" / "fixtures"
    for k in (2, 4, 6):
        shutil.copytree(FIXTURES / f"reference-k{k}", root / f"reference-k{k}")
    return root


def invoke(*args):
    result = CliRunner().invoke(main, [*map(str, args)])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_sweep_names_each_run_by_what_differs(deep):
    out = invoke("sweep", *(deep / f"reference-k{k}" for k in (2, 4, 6)), "--no-cache").splitlines()
    assert out[1] == f"  runs in {deep}"
    rows = [line.split()[0] for line in out[4:7]]
    assert rows == ["reference-k2", "reference-k4", "reference-k6"]


def test_compare_names_a_and_b_by_what_differs_and_keeps_the_paths(deep):
    out = invoke("compare", deep / "reference-k2", deep / "reference-k4", "--no-cache").splitlines()
    # (per cycle: the breakdown's decode cycles, the last of the 100 left out)
    assert out[0] == f"A: reference-k2, 99 cycles ({deep / 'reference-k2' / 'run.sqlite'})"
    assert out[1] == f"B: reference-k4, 99 cycles ({deep / 'reference-k4' / 'run.sqlite'})"


def test_several_traces_side_by_side_are_told_apart(deep):
    out = invoke("analyze", deep / "reference-k2", deep / "reference-k4", "--no-cache", "-q").splitlines()
    rows = [line.split()[:2] for line in out if line.startswith("#")]
    assert rows[:2] == [["#1", "reference-k2"], ["#2", "reference-k4"]]
