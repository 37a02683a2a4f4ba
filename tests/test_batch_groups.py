"""The economics per batch size and K (derived/groups.py, docs/economics.md "Per batch size"), on real captures.

The per-batch-size speedups `analyze --baseline --json` prints are checked against this file's own arithmetic over
the raw sidecar records (the JSONL lines read here, no specprof reader): per batch size, the mean start-to-start
period of consecutive decode cycles (those over 3x their batch size's median left out as idle), the accept length
(correct drafts over request-rounds, plus the bonus token), and the plain run's step at the same batch size.
The ramp captures (fixtures/sglang-ramp-*: 1, 2, 4, 8 and 16 concurrent requests in one server) span several batch
sizes; fixtures/sglang-dense-k4 against sglang-dense-plain holds one (batch 8) in its window.
"""

from __future__ import annotations

import glob
import json
import statistics

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from specprof.analyzer.cli import main

PLAIN = FIXTURES / "sglang-ramp-dense-plain"
RAMP = ["sglang-ramp-dense-k2", "sglang-ramp-dense-adaptive"]
ramp = pytest.mark.skipif(not PLAIN.exists(), reason="the ramp captures (fixtures/sglang-ramp-*) are not here")


def raw_cycles(run) -> list[dict]:
    """Every cycle record of the sidecars of the run's twins without nsys (RUN/no-nsys, RUN/no-nsys-2, ...), as
    written, with its file."""
    out = []
    for n, path in enumerate(sorted(glob.glob(str(run / "no-nsys*" / "specprof-sidecar.*.jsonl")))):
        for line in open(path):
            r = json.loads(line)
            if r.get("type") == "cycle":
                r["file"] = n
                out.append(r)
    return out


def by_batch(cycles: list[dict]) -> dict:
    """Per batch size (with 10 or more decode cycles): (mean period ns, accept length or None, K set, cycles)."""
    periods, correct, rounds, ks, count = {}, {}, {}, {}, {}
    for f in {c["file"] for c in cycles}:
        mine = sorted((c for c in cycles if c["file"] == f), key=lambda c: c["start_ns"])
        for c, nxt in zip(mine, mine[1:] + [None]):
            names = {p[0] for p in c["phases"]}
            if not names & {"verify", "decode"}:
                continue
            b = c["batch_size"]
            count[b] = count.get(b, 0) + 1
            ks.setdefault(b, set()).add(c.get("steps"))
            if nxt is not None:
                periods.setdefault(b, []).append(nxt["start_ns"] - c["start_ns"])
            if c.get("accept"):
                correct[b] = correct.get(b, 0) + sum(c["accept"]["correct_drafts"])
                rounds[b] = rounds.get(b, 0) + len(c["accept"]["correct_drafts"])
    out = {}
    for b, p in periods.items():
        if count[b] < 10:
            continue
        median = statistics.median(p)
        busy = [x for x in p if x <= 3 * median]
        accept = correct[b] / rounds[b] + 1 if rounds.get(b) else None
        out[b] = (sum(busy) / len(busy), accept, ks[b], count[b])
    return out


def groups_json(run, baseline) -> dict:
    result = CliRunner().invoke(main, ["analyze", str(run), *(("--baseline", str(baseline)) if baseline else ()),
                                       "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["economics"]


def check_speedups(run, baseline, sizes: set) -> dict:
    e = groups_json(FIXTURES / run, baseline)
    mine = by_batch(raw_cycles(FIXTURES / run))
    plain = by_batch(raw_cycles(baseline))
    rows = {int(g["batch_group"]): g for g in e["batch_groups"]["groups"]
            if not g["profiled"] and g["exact"]}
    assert set(mine) == set(rows) and sizes <= set(rows), (set(mine), set(rows))
    for b, (period, accept, ks, count) in mine.items():
        g = rows[b]
        assert g["cycles"] == count
        if None not in ks:  # a sidecar that records each cycle's K; an older one's K is the run's
            assert {g["steps"]} == ks
        assert g["cycle_ms"] == pytest.approx(period / 1e6, rel=0.03)
        assert g["accept_len"] == pytest.approx(accept, rel=0.03)
        assert g["baseline_ms"] == pytest.approx(plain[b][0] / 1e6, rel=0.03)
        assert g["speedup"] == pytest.approx(accept * plain[b][0] / period, rel=0.03), b
    return e


@ramp
@pytest.mark.parametrize("run", RAMP)
def test_per_batch_size_speedups_equal_the_raw_records(run):
    e = check_speedups(run, PLAIN, {1, 2, 4, 8, 16})
    g = e["batch_groups"]
    assert g["several"]
    # the headline is the per-batch-size table and the crossover in words; one overall number only as a
    # traffic-weighted mean, labelled so; the pooled speedup is not shown
    assert e["verdict"][0].startswith("per batch size, speculation ")
    assert any(v.startswith("traffic-weighted mean speedup") for v in e["verdict"])
    assert all(r["speedup"] is None for r in e["estimates"])
    # a batch size the baseline lacks has no speedup, said so, never another size's step
    lacking = [r for r in g["groups"] if r["baseline_steps"] == 0]
    assert all(r["speedup"] is None and r["baseline_ms"] is None for r in lacking)
    for r in lacking:
        assert any(f"no plain decode step at batch {r['batch_group']}" in n for n in e["notes"])


@ramp
def test_adaptive_run_loses_at_batch_16_with_k0_and_says_the_crossover():
    e = groups_json(FIXTURES / "sglang-ramp-dense-adaptive", PLAIN)
    rows = [r for r in e["batch_groups"]["groups"] if not r["profiled"]]
    at16 = next(r for r in rows if r["batch_group"] == "16")
    assert at16["steps"] == 0 and at16["accept_len"] == 1.0 and at16["outcome"] == "loses"
    assert any(v.startswith("crossover between batch 8 and batch 16") for v in e["verdict"])


@ramp
@pytest.mark.parametrize("run", ["sglang-ramp-dense-adaptive", "sglang-ramp-moe-adaptive"])
def test_adaptive_cycles_split_by_k_count_as_the_sidecar_says(run):
    """Each K's cycles in the groups (K = 0 included) add up to the sidecar's own count of decode cycles at that K
    (the raw records' `steps`); test_sglang_ramp.py checks the same counts against the server log's switches."""
    # the K split needs no baseline (the MoE ramp has no plain run of its own: a dense one is refused as its baseline)
    e = groups_json(FIXTURES / run, PLAIN) if "dense" in run else groups_json(FIXTURES / run, None)
    raw = raw_cycles(FIXTURES / run)
    want: dict = {}
    for c in raw:
        if "verify" in {p[0] for p in c["phases"]}:
            want[c["steps"]] = want.get(c["steps"], 0) + 1
    got: dict = {}
    for r in e["batch_groups"]["groups"]:
        if not r["profiled"]:
            got[r["steps"]] = got.get(r["steps"], 0) + r["cycles"]
    assert got == want and 0 in got


@ramp
def test_idle_is_outside_every_cycle():
    """The gaps while the server waits for requests (between ramp levels) are counted once as idle, and no group's
    period holds one: every group's mean period is within 2x its median."""
    e = groups_json(FIXTURES / "sglang-ramp-dense-k2", PLAIN)
    g = e["batch_groups"]
    assert g["idle_ms"] > 100 and g["idle_gaps"] >= 1
    assert any(n.startswith("idle: ") for n in e["notes"])
    raw = raw_cycles(FIXTURES / "sglang-ramp-dense-k2")
    for r in g["groups"]:
        if not r["profiled"] and r["exact"]:
            assert r["cycle_ms"] < 2 * 10.5  # a ramp level's decode cycle is 8-10 ms; an idle gap 100s of ms
    assert g["idle_ms"] * 1e6 < raw[-1]["end_ns"] - raw[0]["start_ns"]


def test_one_batch_size_is_one_group_and_changes_no_headline():
    """sglang-dense-k4's window holds batch 8 only: one group, the estimates keep their speedup, and the group's
    speedup equals the raw records' arithmetic (the twin's two repeats pooled)."""
    e = check_speedups("sglang-dense-k4", FIXTURES / "sglang-dense-plain", {8})
    g = e["batch_groups"]
    assert not g["several"] and g["crossover"] == [] and g["traffic_weighted_speedup"] is None
    assert e["estimates"][0]["speedup"] is not None


@ramp
@pytest.mark.parametrize("run", RAMP)
def test_the_idle_between_ramp_levels_is_in_no_cycle_of_the_breakdown(run):
    """Under nsys, the cycle stream's idle time while the server waits between ramp levels is taken out of the cycle
    it follows: the decode cycle's (unattributed) share is under 5 % (it was 68 % with the gaps inside), and the
    idle is reported once."""
    result = CliRunner().invoke(main, ["analyze", str(FIXTURES / run), "--json"])
    assert result.exit_code == 0, result.output
    b = json.loads(result.output)["cycle_breakdown"]
    un = next((p for p in b["phases"] if p["phase"] == "(unattributed)"), None)
    assert un is None or un["share"] < 0.05
    assert b["idle_ms"] > 100 and b["idle_gaps"] >= 1
    assert b["cycle_ms"]["mean"] < 3 * b["cycle_ms"]["median"]


ADAPTIVE_CONFIG = FIXTURES.parent / "scripts" / "sglang" / "adaptive_ramp.json"


def ramp_copy(tmp_path, config: bool = True):
    """The adaptive dense ramp's run directory copied to `tmp_path`, with the adaptive config its command line names
    (scripts/sglang/adaptive_ramp.json, at a path of the capture machine's) kept beside it when `config`."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "sglang-ramp-dense-adaptive", run)
    if config:
        shutil.copy(ADAPTIVE_CONFIG, run / "adaptive_ramp.json")
    return run


@ramp
def test_sizes_with_few_cycles_are_pooled_by_the_adaptive_configs_thresholds_and_it_is_said(tmp_path):
    """The adaptive run's config (keys 1, 3, 9: K changes at batch 3 and 9) bounds the buckets of the sizes with
    fewer than 10 cycles: the one cycle at batch 3 is in 3-7 (the bucket 3-8 less the exact 8), not in the power of
    two 3-4 (less the exact 4); the exact sizes inside a bucket (4) keep their own group; the output says which."""
    e = groups_json(ramp_copy(tmp_path), PLAIN)
    rows = [r for r in e["batch_groups"]["groups"] if not r["profiled"]]
    assert [(r["batch_group"], r["exact"], r["steps"], r["cycles"]) for r in rows] == [
        ("1", True, 3, 18), ("2", True, 3, 17), ("3-7", False, 2, 1), ("4", True, 2, 18), ("8", True, 2, 15),
        ("16", True, 0, 32)]
    said = [n for n in e["notes"] if "pooled into buckets" in n]
    assert said == [f"batch sizes with fewer than 10 decode cycles are pooled into buckets (the batch-size thresholds "
                    f"of SGLang's adaptive config {tmp_path / 'run' / 'adaptive_ramp.json'} (1, 3, 9)): 3-7"]


@ramp
def test_an_unreadable_adaptive_config_is_one_line_and_powers_of_two(tmp_path):
    """The fixture's own command line names the config at the capture machine's path, absent here: powers of two,
    said in one line; a config that is a link, too large, or not SGLang's JSON is not read either."""
    e = groups_json(FIXTURES / "sglang-ramp-dense-adaptive", PLAIN)
    assert [r["batch_group"] for r in e["batch_groups"]["groups"] if not r["profiled"]] == ["1", "2", "3", "4", "8", "16"]
    said = [n for n in e["notes"] if "adaptive config" in n]
    assert len(said) == 1 and said[0].startswith("batch sizes with fewer than 10 decode cycles are pooled into "
                                                 "buckets (powers of two; SGLang's adaptive config ")
    assert said[0].endswith("adaptive_ramp.json could not be read (no such file here)): 3")
    from specprof.analyzer.readers.adaptive_config import MAX_BYTES, read_adaptive_config

    outside = tmp_path / "elsewhere.json"
    outside.write_text(ADAPTIVE_CONFIG.read_text())
    assert read_adaptive_config(str(outside)).keys == (1, 3, 9)
    (tmp_path / "link.json").symlink_to(outside)
    got = read_adaptive_config(str(tmp_path / "link.json"))
    assert got.keys is None and "symbolic link" in got.describe()
    for name, text, why in (("big.json", "{" + " " * MAX_BYTES + "}", "larger than"), ("bad.json", "[1, 2]", "not a JSON object"),
                            ("keys.json", '{"x": {}}', "no batch size"), ("half.json", '{"1": ', "not JSON")):
        (tmp_path / name).write_text(text)
        got = read_adaptive_config(str(tmp_path / name))
        assert got.keys is None and why in got.reason, (name, got.reason)
    os_fifo = tmp_path / "fifo.json"
    import os

    os.mkfifo(os_fifo)
    assert read_adaptive_config(str(os_fifo)).reason == "not a regular file"  # (and no wait for a writer)
    # a relative path is the run directory's; the path as given wins over a copy beside the run
    assert read_adaptive_config("elsewhere.json", str(tmp_path)).keys == (1, 3, 9)
    # a link kept beside the run is not followed either
    run = ramp_copy(tmp_path / "linked", config=False)
    (run / "adaptive_ramp.json").symlink_to(outside)
    e = groups_json(run, PLAIN)
    assert [r["batch_group"] for r in e["batch_groups"]["groups"] if not r["profiled"]][2] == "3"
