"""`specprof analyze` on this project's tensor-parallel capture (fixtures/reference-k4-tp2: the reference engine at
TP = 2 on two H200s, NCCL all-reduce after attention and after the MLP, one sidecar per rank), through the
public command and its JSON only: one entry per rank, numbered from the sidecars, all-reduce time per phase and
rank split into wait and transfer, the collectives matched across the ranks, the straggler named."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from conftest import FIXTURES

RUN = FIXTURES / "reference-k4-tp2"


@pytest.fixture(scope="module")
def doc():
    out = CliRunner().invoke(main, ["analyze", str(RUN), "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def test_one_entry_per_rank_numbered_by_the_sidecars(doc):
    ranks = doc["ranks"]
    assert [(r["rank"], r["device"], r["rank_source"]) for r in ranks] == [(0, 0, "sidecar"), (1, 1, "sidecar")]
    assert len({r["os_pid"] for r in ranks}) == 2
    names = {p["name"] for p in doc["phases"]}
    for r in ranks:
        assert {"draft", "verify", "draft_extend"} <= {p["name"] for p in r["phases"]} <= names


def test_allreduce_per_phase_and_rank_split_into_wait_and_transfer(doc):
    for r in doc["ranks"]:
        comm = r["communication"]
        assert comm["unmatched_ms"] == 0.0 and set(comm["by_kind"]) == {"allreduce"}
        assert comm["ms"] == pytest.approx(comm["wait_ms"] + comm["transfer_ms"], abs=1e-5)
        by_phase = comm["by_phase"]
        assert {"draft", "verify", "draft_extend"} <= set(by_phase)
        for part in ("ms", "wait_ms", "transfer_ms"):
            assert sum(p[part] for p in by_phase.values()) == pytest.approx(comm[part], abs=1e-4)
    rank0, rank1 = doc["ranks"]
    # the numbers docs/multirank.md reads: rank 0 waits for rank 1; the transfer is alike on both
    assert round(rank0["communication"]["wait_ms"], 3) == 489.038
    assert rank0["communication"]["wait_ms"] > 100 * rank1["communication"]["wait_ms"]
    assert rank0["communication"]["transfer_ms"] == pytest.approx(rank1["communication"]["transfer_ms"], rel=0.01)


def test_the_collectives_are_matched_across_ranks_and_the_straggler_named(doc):
    skew = doc["rank_skew"]
    (collective,) = skew["collectives"]
    assert collective["kind"] == "allreduce" and collective["ranks"] == 2
    assert collective["instances"] == 2618 and collective["unmatched"] == 0
    assert skew["straggler"]["rank"] == 1 and skew["straggler"]["share"] > 0.6
    assert {p["name"] for p in skew["phases"]} >= {"draft", "verify", "draft_extend"}
    assert all(p["ranks"] == 2 for p in skew["phases"])
