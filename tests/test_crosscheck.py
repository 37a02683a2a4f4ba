"""The cross-check on the real K = 2, 4, 6 captures: each run's nsys export against its own sidecar, and
against the sidecar of the same workload run without nsys (fixtures/reference-kK/no-nsys).

Expected numbers are recomputed here from the raw files (json.loads of the sidecars, the ground-truth
files' own mean_ms, the trace's ranges), not taken from the code under test. Synthetic inputs appear only
where no capture shows the case (a distorted phase, a sidecar with mark_done_ns, an SGLang server log), and
say so."""

from __future__ import annotations

import json
import statistics

import polars as pl
import pytest
from click.testing import CliRunner

from specprof.analyzer.derived import crosscheck as cc
from specprof.analyzer.readers.load import load_trace
from specprof.analyzer.cli import main
from specprof.analyzer.readers import sglang_log
from specprof.analyzer.readers.ground_truth import read_ground_truth
from specprof.analyzer.readers.sidecar import find, read_sidecars
from specprof.analyzer.model.trace import Trace
from conftest import FIXTURES

KS = (2, 4, 6)


def run_dir(k):
    return FIXTURES / f"reference-k{k}"


@pytest.fixture(scope="module")
def traces():
    return {k: load_trace(str(run_dir(k))) for k in KS}


@pytest.fixture(scope="module")
def checks(traces):
    out = {}
    for k in KS:
        d = run_dir(k)
        out[k] = cc.crosscheck(traces[k], read_sidecars(find(str(d))), read_sidecars(find(str(d / "no-nsys"))),
                               read_ground_truth(str(d / "ground_truth.json")),
                               read_ground_truth(str(d / "no-nsys" / "ground_truth.json")))
    return out


def raw_cycles(path):
    return sorted((json.loads(line) for line in open(path) if '"type":"cycle"' in line), key=lambda c: c["index"])


# -- alignment ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", KS)
def test_the_hundred_captured_cycles_are_found_after_the_five_warmup_cycles(checks, k):
    a = checks[k].alignment.row(0, named=True)
    assert (a["sidecar_cycles"], a["trace_cycles"], a["matched_cycles"]) == (105, 100, 100)
    assert (a["first_index"], a["last_index"]) == (5, 104)
    # the nsys cycle ranges start within microseconds of the sidecar's once aligned
    assert a["residual_p50_ns"] < 1_000 and a["residual_max_ns"] < 20_000
    assert abs(a["drift_ppm"]) < 5


def test_k2_has_no_mark_in_its_capture_and_is_aligned_by_the_cycle_sequence(checks, traces):
    assert cc.clock_marks(traces[2].marks).height == 0
    a = checks[2].alignment.row(0, named=True)
    assert a["method"] == "cycle sequence" and a["marks"] == 0
    assert any("no clock-sync mark inside the capture" in n for n in checks[2].notes)


@pytest.mark.parametrize("k", (4, 6))
def test_k4_k6_are_aligned_by_their_mark_which_nsys_stamped_late(checks, traces, k):
    marks = cc.clock_marks(traces[k].marks)
    assert marks.height == 1
    a = checks[k].alignment.row(0, named=True)
    assert a["method"] == "clock_sync marks" and a["marks"] == 1
    assert a["mark_offset_ns"] == marks["ts"][0] - marks["perf_counter_ns"][0]
    # these sidecars predate mark_done_ns: the mark's own offset is late by the NVTX call (55-60 us here,
    # docs/sidecar.md), which the fit through the cycle starts removes
    assert 40_000 < a["mark_lag_ns"] < 80_000


def test_without_its_mark_k4_is_aligned_by_the_sequence_to_the_same_offset(traces, checks):
    t = traces[4]
    bare = Trace(ops=t.ops, api=t.api, ranges=t.ranges, marks=t.marks.clear(), meta=t.meta)
    c = cc.crosscheck(bare, read_sidecars(find(str(run_dir(4)))))
    a, b = c.alignment.row(0, named=True), checks[4].alignment.row(0, named=True)
    assert a["method"] == "cycle sequence" and a["matched_cycles"] == 100
    assert abs(a["offset_ns"] - b["offset_ns"]) < 2_000
    assert c.consistency.drop("abs_diff_p90_ns").equals(checks[4].consistency.drop("abs_diff_p90_ns"))


@pytest.mark.parametrize("other", ["reference-k6", "reference-k2", "reference-k4/no-nsys"])
def test_a_sidecar_of_another_run_is_not_lined_up(traces, other):
    c = cc.crosscheck(traces[4], read_sidecars(find(str(FIXTURES / other))))
    assert c.alignment["method"].to_list() == ["none"] and c.pairs.height == 0 and c.consistency.height == 0
    assert any("not cross-checked" in n for n in c.notes)


def test_mark_done_ns_gives_the_offset_directly(traces, tmp_path):
    # Synthetic: the fixtures predate mark_done_ns; add it as the tracer now writes it (the readings +
    # the NVTX call's duration, taken here as the lag the K4 alignment measured).
    lag = 60_067
    src = find(str(run_dir(4)))[0]
    lines = []
    for line in open(src):
        r = json.loads(line)
        if r["type"] == "clock":
            r["mark_done_ns"] = r["perf_counter_ns"] + lag
        lines.append(json.dumps(r))
    path = tmp_path / "specprof-sidecar.vm.494.jsonl"
    path.write_text("\n".join(lines) + "\n")
    a = cc.crosscheck(traces[4], read_sidecars([str(path)])).alignment.row(0, named=True)
    assert a["method"] == "clock_sync marks" and abs(a["mark_lag_ns"]) < 1_000
    assert abs(a["mark_offset_ns"] - a["offset_ns"]) < 1_000


# -- consistency ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", KS)
def test_nsys_and_sidecar_durations_agree_per_phase(checks, traces, k):
    c = checks[k]
    rows = {r["phase"]: r for r in c.consistency.iter_rows(named=True)}
    assert set(rows) == {"cycle", "draft", "verify", "draft_extend", "accept", "prefill"}
    assert all(r["verdict"] == "consistent" for r in rows.values())
    for phase in ("cycle", "draft", "verify", "draft_extend", "accept"):
        assert rows[phase]["instances"] == 100
    # the nsys side, recomputed from the trace's ranges: all 100 instances of each phase are in the capture
    ranges = traces[k].ranges
    for phase in ("draft", "verify", "draft_extend", "accept", "cycle"):
        r = ranges.filter(pl.col("name") == phase)
        assert rows[phase]["nsys_ns"] == round((r["end"] - r["start"]).mean())
    # the sidecar side, recomputed from the raw records of cycles 5..104
    cycles = [c for c in raw_cycles(find(str(run_dir(k)))[0]) if 5 <= c["index"] <= 104]
    for phase in ("draft", "verify", "draft_extend"):
        mean = statistics.fmean(e - s for c in cycles for n, s, e in c["phases"] if n == phase)
        assert rows[phase]["sidecar_ns"] == round(mean)
    # agreement: within 2% on every phase (docs/crosscheck.md gives the numbers)
    assert all(abs(r["diff_pct"]) < 2.0 for r in rows.values())


@pytest.mark.parametrize("k", KS)
def test_each_sidecar_interval_lies_inside_its_nvtx_range(checks, k):
    # The tracer stamps after the NVTX push and before the pop (docs/sidecar.md): nsys >= sidecar, by us.
    p = checks[k].pairs
    assert p.height == 100 * 5 + 1
    assert p["diff_ns"].min() >= 0 and p["diff_ns"].max() < 30_000


def test_a_distorted_phase_is_called_distorted(traces, tmp_path):
    # Synthetic: no capture shows a distortion; stretch every sidecar `draft` of K4 by 5%.
    src = find(str(run_dir(4)))[0]
    lines = []
    for line in open(src):
        r = json.loads(line)
        if r["type"] == "cycle":
            r["phases"] = [[n, s, s + (e - s) * 105 // 100] if n == "draft" else [n, s, e] for n, s, e in r["phases"]]
        lines.append(json.dumps(r))
    path = tmp_path / "specprof-sidecar.vm.494.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rows = {r["phase"]: r for r in cc.crosscheck(traces[4], read_sidecars([str(path)])).consistency.iter_rows(named=True)}
    assert rows["draft"]["verdict"] == "distorted" and rows["draft"]["diff_pct"] < -4
    assert rows["verify"]["verdict"] == "consistent"


# -- inflation -------------------------------------------------------------------------------------------------

def inflation_rows(check):
    return {(r["measure"], r["phase"]): r for r in check.inflation.iter_rows(named=True)}


@pytest.mark.parametrize("k", KS)
def test_gpu_inflation_is_the_ratio_of_the_cuda_event_means(checks, k):
    rows = inflation_rows(checks[k])
    with_ = json.loads((run_dir(k) / "ground_truth.json").read_text())["mean_ms"]
    without = json.loads((run_dir(k) / "no-nsys" / "ground_truth.json").read_text())["mean_ms"]
    for phase in ("draft", "verify", "draft_extend"):
        assert rows[("gpu", phase)]["ratio"] == pytest.approx(with_[phase] / without[phase], rel=1e-5)


@pytest.mark.parametrize("k", KS)
def test_the_eager_draft_is_inflated_far_more_than_the_graph_replayed_verify(checks, k):
    rows = inflation_rows(checks[k])
    draft, verify = rows[("gpu", "draft")], rows[("gpu", "verify")]
    assert 1.35 < draft["ratio"] < 1.8 and draft["verdict"] == "inflated"
    assert 1.02 < verify["ratio"] < 1.08
    assert draft["ratio_lo"] > verify["ratio_hi"]
    assert rows[("gpu", "accept")]["verdict"] == "negligible"
    # on the host: the draft's wall clock inflates like its GPU time; the cycle period by about a fifth
    assert 1.3 < rows[("cpu", "draft")]["ratio"] < 1.8
    assert 1.15 < rows[("cpu", "period")]["ratio"] < 1.3


@pytest.mark.parametrize("k", KS)
def test_cpu_inflation_is_recomputed_from_the_raw_sidecars(checks, k):
    rows = inflation_rows(checks[k])

    def mean_phase(path, phase):
        cycles = [c for c in raw_cycles(path) if 5 <= c["index"] <= 104]
        return statistics.fmean(sum(e - s for n, s, e in c["phases"] if n == phase) for c in cycles)

    def mean_period(path):
        starts = [c["start_ns"] for c in raw_cycles(path)]
        periods = [b - a for i, (a, b) in enumerate(zip(starts, starts[1:])) if 5 <= i <= 104]
        return statistics.fmean(periods)

    w, wo = find(str(run_dir(k)))[0], find(str(run_dir(k) / "no-nsys"))[0]
    for phase in ("draft", "verify", "draft_extend"):
        assert rows[("cpu", phase)]["ratio"] == pytest.approx(mean_phase(w, phase) / mean_phase(wo, phase), rel=1e-6)
    assert rows[("cpu", "period")]["ratio"] == pytest.approx(mean_period(w) / mean_period(wo), rel=1e-6)
    assert rows[("cpu", "period")]["cycles_with"] == 99  # the last cycle has no successor


def test_without_a_baseline_there_is_no_inflation_table(traces):
    c = cc.crosscheck(traces[4], read_sidecars(find(str(run_dir(4)))))
    assert c.inflation is None and c.consistency.height == 6


# -- accept length against an SGLang server log ------------------------------------------------------------------

def synthetic_log(cycles, interval=40, bonus=True, shift=0):
    """An SGLang scheduler log as metrics_reporter.py writes it (docs: /work/shared/notes/sglang.md, section 2).
    SYNTHETIC: no capture here ran SGLang, so the lines are made from a real sidecar's accept counts: one line
    per `interval` decode iterations, accept len = (correct drafts + batch) / request-rounds of the interval."""
    counts = [c["accept"]["correct_drafts"] for c in cycles][shift:]
    lines = ["[2026-11-29 15:32:28] server_args=ServerArgs(model_path='x', speculative_algorithm='EAGLE3')",
             "[2026-11-29 15:32:29 TP0] Prefill batch. #new-seq: 8, #new-token: 40, #cached-token: 0"]
    for i in range(0, len(counts) - interval + 1, interval):
        chunk = counts[i:i + interval]
        rounds = sum(len(c) for c in chunk)
        correct = sum(sum(c) for c in chunk)
        length = (correct + (rounds if bonus else 0)) / rounds
        rate = correct / (rounds * 4)
        lines.append(f"[2026-11-29 15:32:{30 + i // interval:02d} TP0] Decode batch. #running-req: 8, #token: 9000, "
                     f"token usage: 0.01, accept len: {length:.2f}, accept rate: {rate:.2f}, cuda graph: True, "
                     f"gen throughput (token/s): 3880.12, #queue-req: 0, ")
    return lines


def test_the_log_parser_reads_sglang_lines_of_several_versions():
    # Real lines of SGLang 0.5.16 (fixtures/sglang-k4/server.log: accept len and rate, no TP tag at TP 1, and a
    # decode line of the plain server without them), then, synthetic for formats no capture here shows, a TP
    # and DP prefix with `accept len` alone (<= 0.5.10) and garbage.
    real = (FIXTURES / "sglang-k4" / "server.log").read_text().splitlines()
    plain = (FIXTURES / "sglang-plain" / "server.log").read_text().splitlines()
    first = next(line for line in real if "accept len" in line)
    assert first == ("[2026-12-01 16:04:36] Decode batch, #running-req: 8, #token: 435, token usage: 0.00, "
                     "accept len: 1.58, accept rate: 0.15, cuda graph: True, gen throughput (token/s): 6.85, "
                     "#queue-req: 0")
    no_accept = next(line for line in plain if "Decode batch" in line)
    text = [
        first,
        "[2026-11-29 15:32:31 DP1 TP3] Decode batch. #running-req: 16, #token: 12, token usage: 0.00, accept len: 3.10, "
        "cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 2",
        no_accept,
        "garbage \x00\x1b[31m accept lens: nope",
    ]
    t = sglang_log.parse(text)
    assert t["line"].to_list() == [1, 2]
    assert t["accept_len"].to_list() == [1.58, 3.10] and t["accept_rate"].to_list() == [0.15, None]
    assert t["tp"].to_list() == [None, 3] and t["running"].to_list() == [8, 16]
    assert t["gen_throughput"].to_list() == [6.85, 10.0]
    assert t["time"].to_list() == ["2026-12-01 16:04:36", "2026-11-29 15:32:31"]


@pytest.fixture(scope="module")
def k4_cycles():
    return raw_cycles(find(str(run_dir(4) / "no-nsys"))[0])


@pytest.fixture(scope="module")
def k4_sidecar():
    return read_sidecars(find(str(run_dir(4) / "no-nsys")))


def test_a_log_of_the_same_counts_agrees_within_rounding(k4_cycles, k4_sidecar):
    log = sglang_log.parse(synthetic_log(k4_cycles, interval=35))  # 105 cycles = 3 whole intervals
    a = cc.reconcile_accept(k4_sidecar.cycles, log, interval=35)
    counts = [n for c in k4_cycles for n in c["accept"]["correct_drafts"]]
    assert a.sidecar_pooled == pytest.approx(sum(counts) / len(counts) + 1)
    assert a.request_rounds == len(counts) == 840 and a.log_lines == 3
    assert a.verdict == "agree" and abs(a.gap) <= 0.005


def test_a_log_without_the_bonus_token_is_explained(k4_cycles, k4_sidecar):
    log = sglang_log.parse(synthetic_log(k4_cycles, interval=35, bonus=False))
    a = cc.reconcile_accept(k4_sidecar.cycles, log, interval=35)
    assert a.verdict == "explained" and a.gap == pytest.approx(-1.0, abs=0.01)
    assert "bonus token" in a.explanations[0]


def test_a_one_iteration_shift_is_within_the_overlap_bound(k4_cycles, k4_sidecar):
    # overlap scheduling: each interval's counts are those of the iteration before (one cycle later here)
    log = sglang_log.parse(synthetic_log(k4_cycles, interval=40, shift=1))
    a = cc.reconcile_accept(k4_sidecar.cycles, log, interval=40)
    assert a.verdict in ("agree", "explained")
    assert abs(a.gap) <= 0.005 + a.overlap_bound + abs(a.sidecar_pooled - a.sidecar_per_cycle) + 0.1


def test_a_log_of_another_workload_is_unexplained(k4_sidecar):
    other = raw_cycles(find(str(run_dir(2) / "no-nsys"))[0])  # K=2: accept length 2.08, not 2.62
    a = cc.reconcile_accept(k4_sidecar.cycles, sglang_log.parse(synthetic_log(other, interval=35)), interval=35)
    assert a.verdict == "unexplained" and a.gap < -0.4


def test_cli_server_log(tmp_path, k4_cycles):
    log = tmp_path / "server.log"
    log.write_text("\n".join(synthetic_log(k4_cycles, interval=35)) + "\n")
    d = run_dir(4)
    result = CliRunner().invoke(main, ["analyze", str(d / "run.sqlite"), "--sidecar", find(str(d / "no-nsys"))[0],
                                       "--server-log", str(log), "--log-interval", "35", "--json"])
    # the no-nsys sidecar does not belong to this trace: no cycles line up, yet its accept counts meet the log
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["crosscheck"]["accept"]["verdict"] == "agree"
    assert doc["crosscheck"]["alignment"][0]["method"] == "none"
    empty = tmp_path / "empty.log"
    empty.write_text("no accept lines\n")
    bad = CliRunner().invoke(main, ["analyze", str(d), "--server-log", str(empty)])
    assert bad.exit_code == 2 and "no `accept len:` line" in bad.output


# -- CLI ------------------------------------------------------------------------------------------------------------

def test_cli_run_directory_finds_its_sidecar_and_baseline(checks):
    result = CliRunner().invoke(main, ["analyze", str(run_dir(4)), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["schema"] == "specprof.analysis/3"
    c = doc["crosscheck"]
    assert [r["verdict"] for r in c["consistency"]] == ["consistent"] * 6
    draft = next(r for r in c["inflation"]["rows"] if (r["measure"], r["phase"]) == ("gpu", "draft"))
    expected = inflation_rows(checks[4])[("gpu", "draft")]
    assert draft["ratio"] == round(expected["ratio"], 4) and draft["with_ms"] == expected["with_ns"] / 1e6
    assert c["inflation"]["baseline"] == find(str(run_dir(4) / "no-nsys"))
    assert any("found in" in n for n in c["notes"])


def test_cli_terminal_shows_the_sections():
    result = CliRunner().invoke(main, ["analyze", str(run_dir(2))])
    assert result.exit_code == 0, result.output
    for words in ("Cross-check: the trace's CPU ranges (nsys)", "the sequence of cycle durations", "Profiler inflation",
                  "inflated +", "Economics: does speculation pay?"):
        assert words in result.output


def test_cli_a_trace_file_alone_has_no_crosscheck(export_alone):
    alone = str(export_alone("reference-k4"))
    result = CliRunner().invoke(main, ["analyze", alone, "--json"])
    doc = json.loads(result.output)
    assert doc["crosscheck"] is None and doc["economics"] is None
    assert "Cross-check" not in CliRunner().invoke(main, ["analyze", alone]).output
    # with a baseline, the economics says what it can without accept counts
    doc = json.loads(CliRunner().invoke(main, ["analyze", alone, "--json", "--baseline-ms", "2.5"]).output)
    est = doc["economics"]["estimates"]
    assert doc["crosscheck"] is None and [e["source"] for e in est] == ["trace cycle ranges under nsys"]
    assert est[0]["accept_len"] is None and est[0]["speedup"] is None
    assert est[0]["break_even_accept_len"] == pytest.approx(est[0]["cycle_ms"] / 2.5, rel=1e-4)
    assert "accept length unknown" in est[0]["verdict"]


@pytest.mark.parametrize("run", ["reference-k4", "sglang-k4"])
def test_cli_a_trace_file_inside_a_run_directory_is_that_run(run):
    # RUN/run.sqlite: the directory's sidecars, no-nsys/ and server.log count as when RUN is given, and it is said
    d = FIXTURES / run
    whole = json.loads(CliRunner().invoke(main, ["analyze", str(d), "--json"]).output)
    result = CliRunner().invoke(main, ["analyze", str(d / "run.sqlite"), "--json"])
    assert result.exit_code == 0, result.output
    inner = json.loads(result.output)
    said = f"{d / 'run.sqlite'} lies in the run directory {d}: its files were used as for the directory"
    assert inner["crosscheck"]["notes"] == [said] + whole["crosscheck"]["notes"]
    for key in ("economics", "cycle_breakdown", "ranks", "phases"):
        assert inner[key] == whole[key], key
    for key in ("consistency", "inflation", "accept", "ground_truth", "alignment"):
        assert inner["crosscheck"][key] == whole["crosscheck"][key], key
    if run == "sglang-k4":
        assert inner["crosscheck"]["accept"] is not None  # its server.log, found beside the export


def test_a_torch_profiler_trace_is_cross_checked_too():
    # the real torch.profiler capture of the engine (fixtures/torch-k4): record_function ranges, no marks
    d = FIXTURES / "torch-k4"
    c = cc.crosscheck(load_trace(str(d / "trace.json.gz")), read_sidecars(find(str(d))))
    assert c.profiler == "torch.profiler"
    a = c.alignment.row(0, named=True)
    assert a["method"] == "cycle sequence" and a["sidecar_cycles"] == 35 and a["trace_cycles"] == 35
    # the first (cold) cycle's record_function opened ~0.3 ms after the tracer's stamp: off the line, left out
    assert a["matched_cycles"] == 34 and a["first_index"] == 1 and a["residual_p50_ns"] < 5_000
    rows = {r["phase"]: r for r in c.consistency.iter_rows(named=True)}
    assert all(r["verdict"] == "consistent" for r in rows.values()) and rows["draft"]["instances"] == 35
    out = CliRunner().invoke(main, ["analyze", str(d / "trace.json.gz"), "--sidecar", find(str(d))[0], "--json"])
    doc = json.loads(out.output)
    assert doc["crosscheck"]["profiler"] == "torch.profiler"
    assert doc["economics"]["estimates"][0]["source"] == "sidecar under torch.profiler"


@pytest.mark.parametrize("reader, path, words", [
    (read_ground_truth, "nope.json", "no such file"),
    (read_ground_truth, ".", "a directory, not a ground-truth file"),
    (read_ground_truth, str(FIXTURES / "reference-k4" / "manifest.json"), "not a specprof ground-truth file"),
    (read_ground_truth, str(FIXTURES / "reference-k4" / "run.sqlite"), "not JSON"),
    (sglang_log.read_server_log, "nope.log", "no such file"),
    (sglang_log.read_server_log, str(FIXTURES / "reference-k4" / "run.sqlite"), "no `accept len:` line"),
])
def test_input_errors_are_one_line(reader, path, words):
    from specprof.analyzer.errors import SpecprofError

    with pytest.raises(SpecprofError) as info:
        reader(path)
    assert words in str(info.value) and "\n" not in str(info.value)
