"""Which ranges define phases: the tracer's domain when the trace has it, else every range.

On the real TP = 2 capture, NCCL wraps each eager all-reduce in its own NVTX range (domain NCCL):
taken as phases, those ranges would take the draft's communication away from the draft.
"""

from __future__ import annotations

import polars as pl
from click.testing import CliRunner

from specprof.analyzer.core.attribution import ALL_DOMAINS, attribute
from specprof.analyzer.readers.load import load_trace
from specprof.analyzer.cli import main
from conftest import FIXTURES

TP2 = FIXTURES / "reference-k4-tp2"


def test_tracer_domain_defines_the_phases_by_default():
    a = attribute(load_trace(str(TP2 / "run.sqlite")))
    assert set(a.phases["phase"]) == {"draft", "verify", "draft_extend", "prefill", "accept", "(cycle)",
                                      "(unattributed)"}
    draft_comm = a.categories.filter((pl.col("phase") == "draft") & (pl.col("category") == "allreduce"))
    assert draft_comm["ns"].sum() > 0
    assert any("NVTX domain specprof" in n and "NCCL" in n for n in a.notes)


def test_every_domain_on_request():
    a = attribute(load_trace(str(TP2 / "run.sqlite")), domains=(ALL_DOMAINS,))
    assert "ncclAllReduce" in set(a.phases["phase"])
    b = attribute(load_trace(str(TP2 / "run.sqlite")), domains=("NCCL",))
    assert set(b.phases["phase"]) - {"(unattributed)"} == {"ncclAllReduce"}


def test_all_domains_flag():
    out = CliRunner().invoke(main, ["analyze", str(TP2), "--no-cache", "-q", "--all-domains", "--json"])
    assert out.exit_code == 0, out.output
    assert '"name": "ncclAllReduce"' in out.output
    out = CliRunner().invoke(main, ["analyze", str(TP2), "--no-cache", "-q", "--json"])
    assert '"name": "ncclAllReduce"' not in out.output


def test_single_domain_traces_are_unchanged():
    # The shared captures have only the default domain (and NCCL's): all their ranges stay phases.
    a = attribute(load_trace(str(FIXTURES / "reference-k4" / "run.sqlite")))
    assert not any("NVTX domain specprof" in n for n in a.notes)
