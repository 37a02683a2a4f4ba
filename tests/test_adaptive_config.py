"""`specprof sweep --adaptive-config`: the adaptive config SGLang reads, chosen from the real ramp captures (a K = 2
run and an adaptive run holding K = 3, 2 and 0 at different batch sizes, against the plain run), and read back
with SGLang's own loader (sglang/srt/speculative/adaptive_spec_params.py, the installed CPU SGLang). The choice
rule's edge cases (disjoint intervals, every K below plain) are synthetic rows, said where they are."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from specprof.analyzer.derived.adaptive_config import choose
from conftest import FIXTURES

K2 = str(FIXTURES / "sglang-ramp-dense-k2")
ADAPTIVE = str(FIXTURES / "sglang-ramp-dense-adaptive")
PLAIN = str(FIXTURES / "sglang-ramp-dense-plain")

params = pytest.importorskip("sglang.srt.speculative.adaptive_spec_params")


def write(tmp_path, *runs, name="adaptive.json", extra=()):
    out = tmp_path / name
    res = CliRunner().invoke(main, ["sweep", *runs, "--baseline", PLAIN, "--adaptive-config", str(out), *extra])
    return res, out


def test_sglang_loads_the_written_config_and_routes_each_batch_size_to_the_chosen_k(tmp_path):
    res, out = write(tmp_path, K2, ADAPTIVE)
    assert res.exit_code == 0, res.output
    cfg, slots = params._load_adaptive_config(str(out))
    assert sorted(slots) == [1, 2, 4, 8, 16]
    # K = 2 and K = 3 tie at batch 1 and 2 (intervals overlap): the fewer steps; at 16 K = 2 beats the adaptive
    # run's K = 0 (0.71x of plain) by far
    assert {b: e["candidate_steps"] for b, e in slots.items()} == {1: [2], 2: [2], 4: [2], 8: [2], 16: [2]}
    server = params.AdaptiveSpeculativeParams(initial_steps=2, cfg_path=str(out))
    assert [server.get_steps_for_batch(b) for b in (1, 3, 16, 40)] == [2, 2, 2, 2]
    assert "speculative-num-steps 2" in res.output
    assert "1.38x" in res.output  # the measured speedup per row (K = 2 at batch 16 against plain)


def test_the_adaptive_run_alone_writes_plain_decoding_where_every_k_loses(tmp_path):
    res, out = write(tmp_path, ADAPTIVE)
    assert res.exit_code == 0, res.output
    _, slots = params._load_adaptive_config(str(out))
    assert {b: e["candidate_steps"] for b, e in slots.items()} == {1: [3], 2: [3], 4: [2], 8: [2], 16: [0]}
    assert params.resolve_candidate_steps_from_config(str(out)) == [0, 2, 3]
    server = params.AdaptiveSpeculativeParams(initial_steps=2, cfg_path=str(out))
    assert server.get_steps_for_batch(20) == 0 and server.get_steps_for_batch(3) == 3
    row16 = next(line for line in res.output.splitlines() if line.strip().startswith("16"))
    assert "0.71x" in row16 and "plain decoding wins" in row16
    # K = 0 inside the speculative worker against the plain step, said in the output
    assert "batch 16: 8.979 ms against 6.371 ms (1.41x)" in res.output


def test_a_k_above_k0_where_plain_wins_is_named():
    # synthetic: one group where every K loses to plain, K = 2 well above K = 0 (no capture shows this)
    import polars as pl
    from types import SimpleNamespace
    from specprof.analyzer.derived.adaptive_config import adaptive_config
    from specprof.analyzer.derived.groups import ROW_SCHEMA
    base = {c: None for c in ROW_SCHEMA}
    rows = [dict(base, source="s", batch_group="16", batch_lo=16, batch_hi=16, steps=k, cycles=30, tokens_per_s=t,
                 tokens_per_s_lo=t - 50, tokens_per_s_hi=t + 50, speedup=x, speedup_lo=x - 0.05,
                 speedup_hi=x + 0.05, cycle_ns=c, baseline_ns=6_000_000)
            for k, t, x, c in ((0, 1700, 0.7, 9_000_000), (2, 2200, 0.9, 8_000_000))]
    out = adaptive_config([("run", SimpleNamespace(rows=pl.DataFrame(rows, schema=ROW_SCHEMA, orient="row")))])
    assert out.config == {"16": {"candidate_steps": [0]}}
    assert any("K = 2 measured above K = 0" in n for n in out.notes)
    assert any("9.000 ms against 6.000 ms (1.50x)" in n for n in out.notes)


def test_json_gives_the_config_and_each_rows_speedup(tmp_path):
    res, out = write(tmp_path, ADAPTIVE, extra=["--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["schema"] == "specprof.adaptive-config/1"
    assert doc["config"] == json.loads(out.read_text())
    row = doc["rows"][-1]
    assert (row["threshold"], row["steps"], row["measured_steps"]) == (16, 0, 0)
    assert row["speedup_hi"] < 1


def test_without_a_baseline_or_through_a_link_it_refuses_in_one_line(tmp_path):
    res, out = write(tmp_path, ADAPTIVE)
    res = CliRunner().invoke(main, ["sweep", ADAPTIVE, "--adaptive-config", str(tmp_path / "x.json")])
    assert res.exit_code != 0 and "--baseline" in res.output and "Traceback" not in res.output
    target = tmp_path / "target.json"
    target.write_text("keep")
    os.symlink(target, tmp_path / "link.json")
    res, _ = write(tmp_path, ADAPTIVE, name="link.json")
    assert res.exit_code != 0 and "link" in res.output and "Traceback" not in res.output
    assert target.read_text() == "keep"


def _row(k, tps, lo, hi, s_lo=1.1, s_hi=1.3):
    # synthetic: one (batch group, K) candidate
    return {"steps": k, "tokens_per_s": tps, "tokens_per_s_lo": lo, "tokens_per_s_hi": hi, "speedup": (s_lo + s_hi) / 2,
            "speedup_lo": s_lo, "speedup_hi": s_hi}


def test_choice_rule_on_synthetic_rows():
    # disjoint intervals: the best tokens/s
    assert choose([_row(1, 100, 95, 105), _row(3, 130, 120, 140)])[1] == 3
    # overlapping: the smaller K
    assert choose([_row(1, 120, 110, 131), _row(3, 130, 120, 140)])[1] == 1
    # every speedup interval below 1: plain decoding (0), the best measured K's speedup shown
    row, k, why = choose([_row(1, 100, 95, 105, 0.8, 0.9), _row(2, 90, 85, 95, 0.7, 0.8)])
    assert (k, row["steps"]) == (0, 1) and "plain" in why
    # a wash (interval across 1) keeps the K
    assert choose([_row(2, 100, 90, 110, 0.9, 1.2)])[1] == 2
