"""The whole run as its client saw it, beside the steady state (derived/whole_run.py, readers/client.py), on the
dense K = 3 run and its plain baseline (fixtures/sglang-dense-k3, fixtures/sglang-dense-plain)."""

from __future__ import annotations

import glob
import json
import os
import shutil

import polars as pl
import pytest

from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.readers.client import read_client, read_whole_runs
from specprof.analyzer.readers.sidecar import read_sidecars
from specprof.analyzer.derived.whole_run import PARTS, whole_run
from specprof.analyzer.render import json as json_doc
from specprof.analyzer.render import terminal

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K3, PLAIN = os.path.join(ROOT, "fixtures", "sglang-dense-k3"), os.path.join(ROOT, "fixtures", "sglang-dense-plain")


def _client_rate(folder: str) -> float:
    with open(os.path.join(folder, "client.json")) as fh:
        d = json.load(fh)
    return sum(r["output_tokens"] for r in d["responses"]) / d["workload_s"]


def test_whole_run_tokens_per_s_and_ratio_are_the_clients():
    w = whole_run(read_whole_runs(K3), read_whole_runs(PLAIN), 1.41)
    # the twins without nsys, with their client records: what a benchmark sees
    assert [os.path.basename(os.path.dirname(r.path)) for r in w.runs] == ["no-nsys", "no-nsys-2"]
    mine = [_client_rate(os.path.join(K3, d)) for d in ("no-nsys", "no-nsys-2")]
    base = [_client_rate(os.path.join(PLAIN, d)) for d in ("no-nsys", "no-nsys-2")]
    assert [r.tokens_per_s for r in w.runs] == pytest.approx(mine, rel=1e-9)
    ratio = (sum(mine) / 2) / (sum(base) / 2)
    assert w.speedup == pytest.approx(ratio, rel=1e-9)
    assert 0.9 < w.speedup < 1.0  # the client sees no gain where the steady state says 1.41x
    pairs = [a / b for a in mine for b in base]
    assert (w.speedup_lo, w.speedup_hi) == pytest.approx((min(pairs), max(pairs)))
    assert w.lines[0].startswith("the verdict is about the steady state (1.41x")
    # without prefill and stalls, the decode part alone is near the steady state again
    assert 1.3 < w.decode_speedup < 1.45


def test_split_is_measured_from_the_sidecar():
    runs = read_whole_runs(K3)
    w = whole_run(runs)
    for f, r in zip(runs, w.runs):
        s = r.split
        assert s is not None and s.aligned == "clock"
        assert sum(s.parts[p] for p in PARTS) == s.wall_ns == f.client.wall_ns
        assert all(s.parts[p] >= 0 for p in PARTS)
        # own arithmetic: the cycles that start inside the client's clock, periods to the next start
        c = f.sidecars.cycles.sort("start")
        offset = int((f.sidecars.clocks["time_ns"] - f.sidecars.clocks["perf_counter_ns"]).median())
        t0 = f.client.start_ns - offset
        starts, ends, decode = c["start"].to_list(), c["end"].to_list(), c["decode"].to_list()
        periods = [b - a for a, b in zip(starts, starts[1:])] + [ends[-1] - starts[-1]]
        inside = [i for i, t in enumerate(starts) if t0 <= t <= t0 + f.client.wall_ns]
        assert s.cycles == len(inside)
        assert s.parts["prefill"] == sum(periods[i] for i in inside if not decode[i])
        steady = sorted(periods[i] for i in inside if decode[i])
        med = steady[len(steady) // 2] if len(steady) % 2 else (steady[len(steady) // 2 - 1] + steady[len(steady) // 2]) / 2
        long = [i for i in inside if decode[i] and periods[i] > 3 * med]
        assert s.stalls == len(long) >= 2
        # the first cycles at the full batch of 8 are among the stalls (the warm-up)
        full = [i for i in inside if decode[i] and c["batch_size"][i] == 8]
        assert full[0] in long
        assert s.parts["stalls"] == sum(periods[i] - int(med) for i in long)
        assert s.parts["capture"] == 0 and s.parts["idle"] == 0


def test_a_run_under_nsys_shows_the_capture_start_and_stop(tmp_path):
    """A run directory with only the run under nsys: its client's clock holds the capture's own stalls."""
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(os.path.join(K3, "client.json"), d)
    for f in glob.glob(os.path.join(K3, "specprof-sidecar.*.jsonl")):
        shutil.copy(f, d)
    w = whole_run(read_whole_runs(str(d)))
    r = w.runs[0]
    assert r.profiled
    sc = read_sidecars(glob.glob(os.path.join(K3, "specprof-sidecar.*.jsonl")))
    edges = sc.capture["after_cycle"].to_list()
    c = sc.cycles.sort("start").with_columns(period=pl.col("start").shift(-1) - pl.col("start"))
    long = c.filter(pl.col("index").is_in(edges))["period"].to_list()
    assert r.split.parts["capture"] == sum(p - r.split.steady_ns for p in long)
    assert r.split.parts["capture"] > 8e9  # nsys's start and stop: most of the 9.7 s
    assert any("under nsys" in line for line in w.lines)


@pytest.mark.parametrize("content, says", [
    ("{", "not JSON"),
    ('{"responses": []}', "no list of responses"),
    ('{"responses": [{"output_tokens": 3, "seconds": 1}], "workload_s": "x"}', "workload_s"),
    ('{"responses": [{"output_tokens": -1, "seconds": 1}], "workload_s": 1}', "output_tokens"),
    ('{"responses": [{"output_tokens": 1, "seconds": 1e308}], "workload_s": 1}', "seconds"),
])
def test_a_broken_client_file_is_one_line(tmp_path, content, says):
    p = tmp_path / "client.json"
    p.write_text(content)
    with pytest.raises(SpecprofError) as e:
        read_client(str(p))
    assert str(p) in str(e.value) and says in str(e.value) and "\n" not in str(e.value)


def test_analyze_shows_both_speedups():
    from specprof.analyzer.app.analyze import RunInputs
    from specprof.analyzer.app.run import Run
    a = Run.load(K3, inputs=RunInputs(baseline_run=PLAIN)).analysis()
    assert a.whole_run is not None and a.whole_run.steady_speedup == pytest.approx(
        a.economics.headline["speedup"])
    text = terminal.render(a)
    assert "Whole run as the client saw it" in text and "the verdict is about the steady state" in text
    doc = json_doc.document(a)["whole_run"]
    assert doc["speedup"] == pytest.approx(a.whole_run.speedup, rel=1e-5)
    assert set(doc["runs"][0]["split"]["parts_ms"]) == set(PARTS)
