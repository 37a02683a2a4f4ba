"""Windows (--cycle-window, --time-window, --skip-warmup) on real captures: what is kept, the cycles' numbers, the
tiling still whole, the same figures as the whole trace's for the same cycles, and one clear error where a
window cannot be taken."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner

from specprof.analyzer.app.analyze import Options
from specprof.analyzer.app.run import Run
from specprof.analyzer.cli import main
from specprof.analyzer.core.attribution import attribute
from specprof.analyzer.core.window import Window, select
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.readers.load import load_trace
from conftest import FIXTURES

K4 = FIXTURES / "reference-k4"
TP2 = FIXTURES / "reference-k4-tp2"


@pytest.fixture(scope="module")
def whole():
    return Run.load(str(K4), Options(cache=False)).analysis()


def windowed(path, **kw):
    return Run.load(str(path), Options(cache=False, window=Window.of(**kw))).analysis()


def per_cycle(a):
    return dict(a.cycle_phases.group_by("cycle").agg(pl.col("attributed").sum()).iter_rows())


def test_a_cycle_window_keeps_those_cycles_whole_with_their_numbers(whole):
    w = windowed(K4, cycles=(10, 20))
    assert w.cycles["index"].to_list() == list(range(10, 20))
    assert w.cycles["cycle"].to_list() == whole.cycles.filter(pl.col("index").is_between(10, 19))["cycle"].to_list()
    full, part = per_cycle(whole), per_cycle(w)
    first = w.cycles["cycle"][0]
    for cycle, ns in part.items():
        if cycle == first:  # the idle time before the window's first op is not counted
            assert 0 <= full[cycle] - ns < 50_000
        else:
            assert ns == full[cycle], cycle
    # Each cycle's ops are the same ops as in the whole trace.
    mine = w.ops.filter(pl.col("cycle").is_not_null()).select("op_id", "cycle").sort("op_id")
    theirs = whole.ops.join(mine.select("op_id"), on="op_id", how="semi").select("op_id", "cycle").sort("op_id")
    assert mine.equals(theirs)
    assert any("window cycles 10:20" in n for n in w.notes)


def test_skip_warmup_is_the_open_cycle_window(whole):
    a, b = windowed(K4, skip_warmup=90), windowed(K4, cycles=(90, None))
    assert a.cycles.equals(b.cycles) and a.charges.equals(b.charges)
    assert a.cycles.height == whole.cycles.height - 90


def test_a_time_window_keeps_the_ops_launched_in_it_and_the_tiling_stays_whole(whole):
    t0, t1 = 200_000_000, 400_000_000
    trace = load_trace(str(K4))
    part = select(trace, Window.of(time_ns=(t0, t1)))
    origin = trace.meta.start_ns  # the capture's start (tests/test_time_origin.py)
    launched = part.ops.join(trace.api.select("pid", "correlation", at="start"), on=["pid", "correlation"],
                             how="left").with_columns(at=pl.coalesce("at", "start"))
    assert launched["at"].min() >= origin + t0 and launched["at"].max() < origin + t1
    every = trace.ops.join(trace.api.select("pid", "correlation", at="start"), on=["pid", "correlation"],
                           how="left").with_columns(at=pl.coalesce("at", "start"))
    assert part.ops.height == every.filter(pl.col("at").is_between(origin + t0, origin + t1, closed="left")).height
    a = attribute(part)
    # Every nanosecond of each stream's wall time is charged once, in the window too.
    assert int(a.charges["ns"].sum()) == int(a.streams["wall"].sum())
    assert 0 < a.cycles.height < whole.cycles.height
    assert a.cycles["index"].min() > 0


def test_each_process_of_a_tp_capture_gets_its_own_cycles():
    # (the attribution: an analysis's tables are the headline rank's, docs/attribution.md)
    w = windowed(TP2, cycles=(5, 15)).attribution
    per_pid = w.cycles.group_by("pid").agg(lo=pl.col("index").min(), hi=pl.col("index").max(), n=pl.len())
    assert per_pid.height == 2
    assert per_pid["lo"].to_list() == [5, 5] and per_pid["hi"].to_list() == [14, 14] and per_pid["n"].to_list() == [10, 10]


def test_a_kineto_trace_takes_windows_too():
    w = windowed(FIXTURES / "torch-k4", skip_warmup=5)
    assert w.cycles["index"].min() == 5 and w.cycles.height == 30


def test_windows_that_cannot_be_taken_are_one_clear_error():
    # (a run's window is taken when its attribution is read)
    with pytest.raises(SpecprofError, match="no process has more than 100 cycles"):
        windowed(K4, cycles=(300, None))
    with pytest.raises(SpecprofError, match="no cycle ranges"):
        Run.load(str(K4), Options(cache=False, grouping=("nosuch",), window=Window.of(cycles=(1, 2)))).attribution()
    with pytest.raises(SpecprofError, match="holds no GPU op"):
        windowed(K4, time_ns=(10**13, None))
    with pytest.raises(SpecprofError, match="A < B"):
        Window.of(cycles=(5, 5))


@pytest.mark.parametrize("args, complaint", [
    (["--cycle-window", "3"], "give A:B"),
    (["--time-window", "a:b"], "give A:B"),
    (["--skip-warmup", "2", "--cycle-window", "3:4"], "give one of --skip-warmup and --cycle-window"),
])
def test_the_cli_refuses_a_malformed_window(args, complaint):
    out = CliRunner().invoke(main, ["analyze", str(K4), "--no-cache", *args])
    assert out.exit_code == 2 and complaint in out.output


def test_analyze_report_and_compare_take_the_window(tmp_path):
    out = CliRunner().invoke(main, ["analyze", str(K4), "--no-cache", "-q", "--json", "--cycle-window", "10:30"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["source"]["window"] == "cycles 10:30"
    assert [c["index"] for c in doc["cycles"]] == list(range(10, 30))
    report = tmp_path / "r.html"
    out = CliRunner().invoke(main, ["report", str(K4), "--no-cache", "-o", str(report), "--time-window", "100:300"])
    assert out.exit_code == 0, out.output
    assert "time 100:300 ms" in report.read_text()
    out = CliRunner().invoke(main, ["compare", str(K4), str(FIXTURES / "reference-k2"), "--no-cache", "--json",
                                    "--skip-warmup", "20"])
    assert out.exit_code == 0, out.output
    cmp = json.loads(out.stdout)
    # the breakdown's decode cycles: the 80 cycles of the window less the last one (it has no end)
    assert cmp["a"]["cycles"] == 79 and cmp["b"]["cycles"] == 79


def test_show_cycles_sets_only_the_table_length():
    out = CliRunner().invoke(main, ["analyze", str(K4), "--no-cache", "-q", "--show-cycles", "2"])
    assert out.exit_code == 0, out.output
    assert "first 2 of 100 cycles" in out.stdout
