"""`specprof compare` of two drafters (docs/economics.md, "Two drafters compared").

No fixture pair has one target and workload with two different draft models (a second draft head needs a GPU
capture): these tests compare real runs whose copied manifest names another draft model (…/draft-b) and say so.
The pair sglang-dense-k1 (A) against a copy of sglang-dense-k4 (B) differs in K too: it stands in for two drafters
whose numbers differ; the copy of sglang-dense-k3 against sglang-dense-k3 for two equal ones."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from conftest import ROOT
from specprof.analyzer.app import commands
from specprof.analyzer.app.analyze import RunInputs
from specprof.analyzer.app.run import Run
from specprof.analyzer.errors import SpecprofError

FIX = ROOT / "fixtures"
PLAIN = str(FIX / "sglang-dense-plain")


def _copy(tmp_path, name: str, old: str, new: str):
    """A copy of fixtures/NAME whose manifest says `new` where it said `old` (the draft or the target's path)."""
    out = tmp_path / f"{name}-copy"
    shutil.copytree(FIX / name, out)
    m = out / "manifest.json"
    text = m.read_text()
    assert old in text
    m.write_text(text.replace(old, new))
    return str(out)


DRAFT, DRAFT_B = "/root/sglang-runs/model-dense/draft", "/root/sglang-runs/model-dense/draft-b"
TARGET, TARGET_B = "/root/sglang-runs/model-dense/target", "/root/sglang-runs/model-dense/target-b"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    b = _copy(tmp_path_factory.mktemp("drafters"), "sglang-dense-k4", DRAFT, DRAFT_B)
    return str(FIX / "sglang-dense-k1"), b


def test_two_drafters_named_faster_with_interval_and_why(pair):
    a, b = pair
    out = commands.compare_runs(a, b, as_json=True, baseline=PLAIN)
    d = json.loads(out.stdout)["drafters"]
    assert d["a"]["draft_model"] == DRAFT and d["b"]["draft_model"] == DRAFT_B
    # the ratio is B's tokens/s over A's, each the run's own `analyze --baseline` headline
    heads = [Run.load(x, inputs=RunInputs(baseline_run=PLAIN)).analysis().economics.headline for x in (a, b)]
    ta, tb = heads[0]["tokens_per_s"], heads[1]["tokens_per_s"]
    assert d["ratio"] == pytest.approx(tb / ta, abs=1e-4)
    ra = (heads[0]["tokens_per_s_hi"] - heads[0]["tokens_per_s_lo"]) / 2 / ta
    rb = (heads[1]["tokens_per_s_hi"] - heads[1]["tokens_per_s_lo"]) / 2 / tb
    r = math.hypot(ra, rb)
    assert d["ratio_ci"] == pytest.approx([tb / ta * (1 - r), tb / ta * (1 + r)], abs=1e-4)
    assert d["faster"] == "b" and d["ratio_ci"][0] > 1
    assert d["a"]["speedup"] == pytest.approx(heads[0]["speedup"], abs=1e-4)
    assert d["b"]["speedup_ci"] is not None
    # per position: the difference of P(at least i) sums to the accept lengths' difference
    diff = sum(p["at_least_diff"] for p in d["positions"])
    assert diff == pytest.approx(d["b"]["accept_len"] - d["a"]["accept_len"], abs=0.01)
    assert [p["a_drafted"] for p in d["positions"]] == [True, False, False, False]
    text = commands.compare_runs(a, b, baseline=PLAIN).stdout
    line = next(x for x in text.splitlines() if x.startswith("- B's drafter is faster"))
    assert "x (" in line and "A's tokens/s" in line
    why = next(x for x in text.splitlines() if x.startswith("- why:"))
    assert "position 1" in why and "position 4" in why and "draft and draft_extend" in why
    assert "not drafted" in text


def test_equal_drafters_not_told_apart(tmp_path):
    a = str(FIX / "sglang-dense-k3")
    b = _copy(tmp_path, "sglang-dense-k3", DRAFT, DRAFT_B)
    d = json.loads(commands.compare_runs(a, b, as_json=True).stdout)["drafters"]
    assert d["faster"] is None and d["ratio"] == pytest.approx(1.0)
    assert d["ratio_ci"][0] < 1 < d["ratio_ci"][1]
    assert "the drafters are not told apart" in d["verdict"][0]


def test_same_drafter_is_no_drafter_comparison():
    out = commands.compare_runs(str(FIX / "sglang-dense-k3"), str(FIX / "sglang-dense-k4"), as_json=True)
    assert json.loads(out.stdout)["drafters"] is None


def test_another_target_refused_in_one_line(tmp_path):
    a = str(FIX / "sglang-dense-k3")
    b = _copy(tmp_path, "sglang-dense-k3", TARGET, TARGET_B)
    with pytest.raises(SpecprofError) as e:
        commands.compare_runs(a, b)
    assert "\n" not in str(e.value) and "different models" in str(e.value) and "--allow-mixed" in str(e.value)
    assert "model-path=" + TARGET_B in str(e.value)
    assert commands.compare_runs(a, b, allow_mixed=True).stdout  # the escape as before
