"""The Kineto (PyTorch-profiler) reader on real traces of every generation, against a plain JSON
parse of the same file; nsys and torch.profiler captures of the reference engine agree per phase;
bad inputs give one clear error. Synthetic traces appear only for edge cases no capture shows,
and each says so."""

from __future__ import annotations

import functools
import gzip
import json
import os
import shutil
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from specprof.analyzer.core import attribution
from specprof.analyzer.cli import main
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.readers.kineto import read_kineto
from conftest import FIXTURES, SHARED

TORCH_K4 = FIXTURES / "torch-k4" / "trace.json.gz"
NSYS_K4 = FIXTURES / "reference-k4" / "run.sqlite"
KINETO = sorted((SHARED / "torch_kineto").glob("*.json.gz")) if SHARED else []
ALL = KINETO + [TORCH_K4]
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
API_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}


def _load(path: Path) -> dict:
    """The oracle: the whole file through the standard json module (fine for a test)."""
    with gzip.open(path, "rb") as fh:
        return json.load(fh)


def _ns(ts: float, base: int) -> int:
    """Exact nanoseconds of the double a microsecond value parses to (Decimal holds it exactly)."""
    return int((Decimal(ts) * 1000).to_integral_value()) + base


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name[:60])
def test_every_gpu_event_range_and_launch_is_read_exactly(path):
    doc = _load(path)
    events = doc["traceEvents"]
    base = doc.get("baseTimeNanoseconds", 0)
    trace = read_kineto(str(path))
    gpu = [e for e in events if e.get("cat") in GPU_CATS and e.get("ph") == "X"]
    assert trace.ops.height == len(gpu)
    # Times: integer ns, exact for the value in the file, end = start + duration, never before it.
    want = sorted((_ns(e["ts"], base), _ns(e["ts"], base) + round(Decimal(e["dur"]) * 1000),
                   e["args"]["correlation"]) for e in gpu)
    got = sorted(trace.ops.select("start", "end", "correlation").iter_rows())
    assert got == want
    assert trace.ops.schema["start"] == pl.Int64
    assert trace.ops.filter(pl.col("end") < pl.col("start")).is_empty()
    assert trace.ops["op_id"].to_list() == list(range(trace.ops.height))
    # record_function ranges.
    ua = [e for e in events if e.get("cat") == "user_annotation" and e.get("ph") == "X"]
    assert trace.ranges.height == len(ua)
    assert sorted(trace.ranges["name"].to_list()) == sorted(e["name"] for e in ua)
    ids = trace.ranges.sort("tid", "start", pl.col("end"), descending=[False, False, True])["range_id"]
    assert ids.to_list() == list(range(trace.ranges.height))
    # Launch calls: every op whose correlation id has a runtime/driver row is joined to it, and the
    # op's pid is that call's process (the GPU event's own pid is the device).
    calls = {e["args"]["correlation"]: e["pid"] for e in events
             if e.get("cat") in API_CATS and e.get("ph") == "X" and "correlation" in e.get("args", {})}
    launched = trace.ops.join(trace.api, on=["pid", "correlation"], how="semi")
    assert launched.height == sum(1 for e in gpu if e["args"]["correlation"] in calls)
    assert all(calls[c] == p for c, p in launched.select("correlation", "pid").iter_rows())
    assert trace.api.select(pl.struct("pid", "correlation").is_unique().all()).item()
    assert trace.meta.format == "kineto-json" and trace.meta.tool_version.startswith("Kineto")
    dist = doc.get("distributedInfo") or {}
    assert trace.meta.rank == dist.get("rank")
    assert trace.meta.extra.get("base_time_ns") == doc.get("baseTimeNanoseconds")
    assert {g["device"] for g in trace.meta.gpus} == set(trace.ops["device"].unique())
    assert not trace.meta.skipped


def test_torch_k4_phases_graph_replays_and_gpu_names():
    trace = read_kineto(str(TORCH_K4))
    assert trace.meta.gpus == [{"device": 0, "name": "NVIDIA H200"}]
    assert trace.meta.extra["base_time_ns"] == 1790857026000000000
    # Relative timestamps with ns decimals on a base: absolute epoch nanoseconds, exact.
    assert trace.ops["start"].min() > 1790857026000000000
    names = trace.ranges.group_by("name").len()
    assert dict(names.iter_rows()) == {"cycle": 35, "draft": 35, "verify": 35, "draft_extend": 35,
                                       "accept": 35, "prefill": 1}
    assert set(trace.ranges["domain"]) == {"user_annotation"}
    a = attribution.attribute(trace)
    verify = a.ops.filter(pl.col("phase") == "verify")
    graph = verify.join(trace.api.filter(pl.col("name") == "cudaGraphLaunch"), on=["pid", "correlation"],
                        how="semi")
    # Each verify replays one CUDA graph: 109 kernels carry one cudaGraphLaunch's correlation id.
    per_launch = graph.group_by("correlation").len()
    assert per_launch.height == 35 and per_launch["len"].unique().to_list() == [109]
    assert a.phases.filter(pl.col("phase") == "verify")["ops"].item() == 35 * 121


def test_nsys_and_torch_profiler_agree_per_phase():
    """The reference engine (K=4) captured once with nsys (100 cycles) and once with torch.profiler
    (30 measured cycles plus warm-up): per-phase GPU busy time per instance within 5%."""
    k = attribution.attribute(read_kineto(str(TORCH_K4))).phases
    from specprof.analyzer.readers.nsys import read_nsys_sqlite

    n = attribution.attribute(read_nsys_sqlite(str(NSYS_K4))).phases
    per = pl.col("gpu_busy") / pl.col("instances")
    both = k.filter(pl.col("instances") > 0).select("phase", k=per, k_ops=pl.col("ops") / pl.col("instances")).join(
        n.filter(pl.col("instances") > 0).select("phase", n=per, n_ops=pl.col("ops") / pl.col("instances")),
        on="phase")
    assert set(both["phase"]) == {"draft", "verify", "draft_extend", "prefill", "accept"}
    for phase, kb, k_ops, nb, n_ops in both.iter_rows():
        assert k_ops == n_ops, phase  # the same kernels per instance
        if nb == 0:
            assert kb == 0, phase  # accept launches no GPU work
            continue
        assert abs(kb - nb) / nb < 0.05, (phase, kb, nb)


def test_nccl_collectives_and_communication_category(shared_dir):
    trace = read_kineto(str(shared_dir / "torch_kineto" / "hta_nccl_parser_config__nccl_data.json.gz"))
    coll = trace.collectives
    assert coll.height == 21
    assert set(coll["collective"]) == {"allreduce", "broadcast"}
    assert coll["group_size"].unique().to_list() == [2] and coll["pg_ranks"].unique().to_list() == ["[0, 1]"]
    assert trace.meta.rank == 0 and trace.meta.extra["world_size"] == 2
    a = attribution.attribute(trace)
    nccl = a.ops.join(coll, on="op_id")
    # NCCL <= 2.18 names (ncclKernel_AllReduce_RING_LL_Sum_float, ncclKernel_Broadcast_...): the all-reduces are
    # `allreduce`, the broadcasts `communication` (a collective of no kind of its own); the trace's own
    # collective names agree.
    assert nccl.height == 21 and nccl["name"].cast(pl.Utf8).str.starts_with("ncclKernel_").all()
    kinds = dict(nccl.group_by("collective").agg(pl.col("category").cast(pl.Utf8).unique()).rows())
    assert kinds == {"allreduce": ["allreduce"], "broadcast": ["communication"]}


def test_2022_format_capitalised_categories(shared_dir):
    trace = read_kineto(str(shared_dir / "torch_kineto" / "hta_trace_file_list__inference_rank_1.json.gz"))
    assert trace.ops.height == 4 and trace.api.height == 4 and trace.meta.rank == 1
    assert trace.meta.schema_version is None and "2022" in trace.meta.tool_version
    assert trace.ops.join(trace.api, on=["pid", "correlation"], how="semi").height == 4


def test_cpu_ops_are_ranges_only_when_asked(shared_dir):
    path = shared_dir / "torch_kineto" / "hta_critical_path__simple_add__benchmark_result_493459_1694039959_trace.json.gz"
    plain = read_kineto(str(path))
    with_ops = read_kineto(str(path), cpu_ops=True)
    assert plain.ranges.height == 8
    assert with_ops.ranges.height == 8 + 359
    assert set(with_ops.ranges["domain"]) == {"user_annotation", "cpu_op"}


def test_the_file_is_streamed_never_loaded_whole(monkeypatch, shared_dir):
    path = shared_dir / "torch_kineto" / "hta_trace_diff__control__control.json.gz"
    real_loads = json.loads

    def small_loads(s, *a, **k):
        assert len(s) < 1 << 20, "json.loads of a large text"
        return real_loads(s, *a, **k)

    def no_load(*a, **k):
        raise AssertionError("json.load of the whole file")

    monkeypatch.setattr(json, "loads", small_loads)
    monkeypatch.setattr(json, "load", no_load)
    assert read_kineto(str(path)).ops.height == 9450


# --- edge cases no capture shows (synthetic, derived from a real trace where possible) -----------

def _write(path: Path, doc, compress=False) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def _small_real(shared) -> dict:
    return _load(shared / "torch_kineto" / "hta_trace_file_list__inference_rank_1.json.gz")


def test_keys_after_trace_events_and_array_format(tmp_path, shared_dir):
    # Synthetic: a real 2022 trace re-serialised with Kineto's modern tail keys after traceEvents,
    # and once as a bare array (Chrome's array format).
    doc = _small_real(shared_dir)
    doc = {"schemaVersion": 1, "traceEvents": doc["traceEvents"], "distributedInfo": {"rank": 5},
           "baseTimeNanoseconds": 1000, "traceName": "]}], \"x\": 1"}
    t = read_kineto(str(_write(tmp_path / "tail.json", doc)))
    assert t.meta.rank == 5 and t.meta.extra["base_time_ns"] == 1000 and t.meta.schema_version == "1"
    arr = read_kineto(str(_write(tmp_path / "arr.json", doc["traceEvents"])))
    assert arr.ops.height == 4 and any("array" in n for n in arr.meta.notes)
    assert arr.ops["start"].to_list() == [s - 1000 for s in t.ops["start"].to_list()]


def test_correlation_from_flows_when_args_lack_it(tmp_path, shared_dir):
    # Synthetic: the real 2022 trace with args.correlation taken off its kernels; the flow ends
    # (`async_gpu`, ph f, drawn on the kernel's row at its ts) still carry the id.
    doc = _small_real(shared_dir)
    for e in doc["traceEvents"]:
        if e.get("cat") == "Kernel":
            e["args"].pop("correlation")
    t = read_kineto(str(_write(tmp_path / "noargs.json", doc)))
    assert t.ops["correlation"].null_count() == 0
    assert t.ops.join(t.api, on=["pid", "correlation"], how="semi").height == 4


def test_rounding_never_makes_an_op_end_before_it_starts(tmp_path, shared_dir):
    # Synthetic: absolute-epoch float timestamps (0.25 us apart in float64) with sub-ns and zero
    # durations, as the 2024 ns-resolution traces have them.
    doc = _small_real(shared_dir)
    # (its profiler's end mark left out: these kernels lie in another epoch than the events it closes)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "Record Window End"]
    for i, e in enumerate(e for e in doc["traceEvents"] if e.get("cat") == "Kernel"):
        e["ts"] = 1712195495519695.8 + i * 0.3
        e["dur"] = [0.0004, 0.0, 0.0015, 1e-9][i]
    t = read_kineto(str(_write(tmp_path / "t.json.gz", doc, compress=True)))
    assert t.ops.filter(pl.col("end") < pl.col("start")).is_empty()
    assert sorted((t.ops["end"] - t.ops["start"]).to_list()) == [0, 0, 0, 2]


def test_malformed_events_are_skipped_and_counted(tmp_path, shared_dir):
    # Synthetic: events of the wrong shape among real ones.
    doc = _small_real(shared_dir)
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "Kernel")
    doc["traceEvents"] += [
        42, "x", None, [1, 2],
        {**kernel, "ts": "soon"}, {**kernel, "dur": None}, {**kernel, "args": {"correlation": "x"}},
        {**kernel, "name": {"nested": ["name"]}},  # named by its JSON text
        {"ph": "X", "cat": "user_annotation", "name": "r", "pid": "p", "tid": 1, "ts": 1, "dur": 1},
        {**kernel, "ts": 5e16}, {**kernel, "dur": 1e300}, {**kernel, "dur": -3},  # no int64 ns time
    ]
    t = read_kineto(str(_write(tmp_path / "m.json", doc)))
    assert t.ops.height == 5
    assert t.meta.skipped == {"malformed_events": 8, "gpu_events_with_bad_times": 3}
    assert '{"nested": ["name"]}' in t.ops["name"].cast(pl.Utf8).to_list()


def test_untrusted_names_stay_data(tmp_path, shared_dir):
    # Synthetic: names crafted to break out of a terminal, a format string, a shell or the JSON.
    doc = _small_real(shared_dir)
    evil = ["\x1b[2J\x1b[31mred\x07", "line\nbreak\r", "{0.__class__}%s%n", "$(touch /tmp/pwned)`id`",
            "\"}]}, \"traceEvents\": [", "x" * 100_000]
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "Kernel"]
    for e, name in zip(kernels, evil):
        e["name"] = name
    doc["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": evil[0], "pid": 1010370,
                               "tid": 1010370, "ts": 1665536373729000, "dur": 5000})
    p = _write(tmp_path / "evil.json", doc)
    result = CliRunner().invoke(main, ["analyze", str(p)])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output and "\r" not in result.output
    out = CliRunner().invoke(main, ["analyze", str(p), "--json"])
    parsed = json.loads(out.stdout)
    assert parsed["schema"] == "specprof.analysis/3"
    assert not Path("/tmp/pwned").exists()


# --- errors: one line naming the file, exit 2 ---------------------------------------------------

def _assert_clean_error(path, words):
    result = CliRunner().invoke(main, ["analyze", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("specprof: error:") and str(path) in lines[0]
    assert any(w in lines[0] for w in words), lines[0]
    with pytest.raises(SpecprofError):
        read_kineto(str(path))


def test_truncated_gzip(tmp_path):
    data = TORCH_K4.read_bytes()
    p = tmp_path / "cut.json.gz"
    p.write_bytes(data[: len(data) // 2])
    _assert_clean_error(p, ["truncated"])


def test_truncated_json(tmp_path):
    text = gzip.decompress(TORCH_K4.read_bytes())
    p = tmp_path / "cut.json"
    p.write_bytes(text[: len(text) // 3])
    _assert_clean_error(p, ["truncated", "cut short"])


def test_invalid_json(tmp_path):
    text = gzip.decompress(TORCH_K4.read_bytes())
    p = tmp_path / "bad.json"
    p.write_bytes(text[:5000] + b"\x00garbage{{{" + text[5000:])
    _assert_clean_error(p, ["not valid JSON"])


@pytest.mark.parametrize("content", [b'{"a": 1, "b": [1, 2]}', b"[1, 2, 3]", b'"text"', b"",
                                     b"\xff\xfe not json"])
def test_json_that_is_not_a_kineto_trace(tmp_path, content):
    p = tmp_path / "other.json"
    p.write_bytes(content)
    _assert_clean_error(p, ["not a PyTorch-profiler trace", "not valid"])


def test_no_gpu_events(tmp_path):
    # A real trace with its GPU events taken out (a CPU-only profile).
    doc = _load(TORCH_K4)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in GPU_CATS]
    _assert_clean_error(_write(tmp_path / "cpu.json.gz", doc, compress=True), ["no GPU events"])


# --- several ranks -------------------------------------------------------------------------------

def test_a_folder_of_unrelated_traces_is_several_runs(tmp_path, shared_dir):
    # Three real traces that say ranks 0, 1 and 3, but of different jobs (world sizes 8 and 128): three runs,
    # each on its own, not three ranks with a skew across them.
    src = shared_dir / "torch_kineto"
    names = ("hta_trace_diff__control__control.json.gz", "hta_trace_file_list__inference_rank_1.json.gz",
             "hta_trace_filter__sampled_rank-0.json.gz")
    for name in names:
        shutil.copy(src / name, tmp_path / name)
    (tmp_path / "manifest.json").write_text('{"schema": "not a trace"}')
    result = CliRunner().invoke(main, ["analyze", str(tmp_path), "--json", "--csv", str(tmp_path / "csv")])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "specprof.runs-side-by-side/1" and doc["ranks_of_one_run"] is False
    assert "world sizes differ" in doc["why"]
    assert [os.path.basename(r["path"]) for r in doc["runs"]] == sorted(names)
    assert all(r["analysis"]["schema"] == "specprof.analysis/3" for r in doc["runs"])
    assert sorted(p.name for p in (tmp_path / "csv").iterdir()) == [
        "1-hta_trace_diff__control__control", "2-hta_trace_file_list__inference_rank_1",
        "3-hta_trace_filter__sampled_rank-0"]
    text = CliRunner().invoke(main, ["analyze", str(tmp_path / names[0]), str(tmp_path / names[2])])
    assert text.exit_code == 0, text.output
    assert "2 runs, each on its own" in text.output and "Skew" not in text.output


def _rank_copy(doc: dict, rank: int, world: int, shift_ns: int = 0) -> dict:
    """A copy of a real trace that says another rank (and, shifted, another time)."""
    import copy

    out = copy.deepcopy(doc)
    out["distributedInfo"] = {**out.get("distributedInfo", {}), "rank": rank, "world_size": world}
    if shift_ns:
        out["baseTimeNanoseconds"] = out.get("baseTimeNanoseconds", 0) + shift_ns
    return out


def test_traces_are_ranks_of_one_run_only_when_they_are(tmp_path):
    # SYNTHETIC ranks: the real torch-k4 trace written again as ranks 0 and 1 of a world of 2 (the same time: one
    # run, with a skew table); then rank 0 twice, and two ranks an hour apart: two runs each.
    doc = _load(TORCH_K4)
    a = _write(tmp_path / "r0.json.gz", _rank_copy(doc, 0, 2), compress=True)
    b = _write(tmp_path / "r1.json.gz", _rank_copy(doc, 1, 2), compress=True)
    twin = _write(tmp_path / "again0.json.gz", _rank_copy(doc, 0, 2), compress=True)
    later = _write(tmp_path / "late1.json.gz", _rank_copy(doc, 1, 2, 3600 * 10**9), compress=True)
    out = CliRunner().invoke(main, ["analyze", str(b), str(a), "--json", "-q"])
    assert out.exit_code == 0, out.output
    one = json.loads(out.stdout)
    assert one["schema"] == "specprof.ranks/1" and one["ranks_of_one_run"] is True
    assert [r["rank"] for r in one["ranks"]] == [0, 1] and one["skew"]
    for pair, why in (((a, twin), "rank 0 appears 2 times"), ((a, later), "does not overlap in time")):
        out = CliRunner().invoke(main, ["analyze", *map(str, pair), "--json", "-q"])
        assert out.exit_code == 0, out.output
        several = json.loads(out.stdout)
        assert several["ranks_of_one_run"] is False and why in several["why"], several["why"]


def test_a_run_folder_with_one_trace_is_one_run():
    # fixtures/torch-k4 holds the trace, its ground truth (JSON, not a trace) and the sidecar.
    result = CliRunner().invoke(main, ["analyze", str(TORCH_K4.parent), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "specprof.analysis/3" and doc["source"]["path"].endswith("trace.json.gz")


def test_a_folder_with_no_trace(tmp_path):
    (tmp_path / "notes.json").write_text("{}")
    result = CliRunner().invoke(main, ["analyze", str(tmp_path)])
    assert result.exit_code == 2 and "no nsys SQLite export" in result.output


# -- hostile JSON: bounded memory ------------------------------------------------------------------------------------

_PEAK = """
import sys
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.readers.kineto import read_kineto
try:
    read_kineto(sys.argv[1])
    print("read")
except SpecprofError as exc:
    print("refused:", exc)
# this process's peak (VmHWM: ru_maxrss would count the parent's peak too, kept across fork and exec)
print(next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:")) // 1024)
"""


@pytest.mark.parametrize("text", [
    "[" * 100_000,  # 100 KB, nothing but openers
    '{"traceEvents": [{"ph": "X", "args": ' + "[" * 20_000 + "]" * 20_000 + "}]}",  # 40 KB, a deep event
    '{"deviceProperties": ' + "{\"a\": " * 20_000 + "1" + "}" * 20_000 + ', "traceEvents": []}',  # before events
], ids=["openers", "deep-event", "deep-head"])
def test_deep_nesting_is_refused_in_bounded_memory(tmp_path, text):
    # Synthetic (no trace nests deeper than 6): ijson's memory grows with the square of the depth; a 40 KB
    # file of depth 20,000 took 2 GB, 200 KB of `[` 22 GB. Refused before the parser goes that deep.
    import subprocess
    import sys

    path = tmp_path / "deep.json"
    path.write_text(text)
    done = subprocess.run([sys.executable, "-c", _PEAK, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    verdict, peak_mb = done.stdout.strip().splitlines()
    assert verdict.startswith(f"refused: {path}: JSON nested deeper than 64 levels"), verdict
    assert int(peak_mb) < 400, f"{peak_mb} MB"


def test_the_depth_count_skips_brackets_in_strings_across_chunks():
    # Every real trace fits at its own depth and not one below it, however its text is cut into chunks; strings
    # full of brackets, quotes and backslashes cut anywhere count for nothing.
    import random

    from specprof.analyzer.readers.kineto import _Depth

    def deepest(value, d=0):
        if isinstance(value, (dict, list)):
            inner = value.values() if isinstance(value, dict) else value
            return max([deepest(v, d + 1) for v in inner] or [d + 1])
        return d

    rng = random.Random(3)
    texts = [gzip.open(p).read() for p in ALL[:3]]
    tricky = json.dumps({"a": ["[[[{{{", "\\\"]]]", "x\\\\", {"b": "\\\\\\\"[{"}]}).encode()
    for text in [*texts, tricky]:
        depth = deepest(json.loads(text))
        for limit, fits in ((depth, True), (depth - 1, False)):
            for _ in range(3):
                d, at, ok = _Depth(limit), 0, True
                while at < len(text) and ok:
                    n = rng.choice([1, 2, 3, 7, 4096, 16384])
                    ok = d.fits(text[at:at + n])
                    at += n
                assert ok == fits, (limit, depth)


def test_only_the_collective_fields_of_an_event_are_kept(tmp_path):
    # Synthetic: an NCCL kernel whose args carry a large list and a long string besides the collective's fields.
    from specprof.analyzer.readers.kineto import _Parser

    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0,
         "args": {"correlation": 5, "Collective name": "allreduce", "In msg nelems": 1024,
                  "dtype": "x" * 100_000, "junk": list(range(100_000))}}]}))
    parser = _Parser(str(path), False)
    parser.run()
    ((row, args),) = parser.collectives
    assert args == {"Collective name": "allreduce", "In msg nelems": 1024, "dtype": "x" * 4096}


# --- values no profiler writes, on copies of torch-k4 (one event or key changed, said in each) ---------------------

@functools.lru_cache(maxsize=1)
def _torch_k4_text() -> str:
    return gzip.decompress(TORCH_K4.read_bytes()).decode()


def _torch_k4() -> dict:
    return json.loads(_torch_k4_text())


@functools.lru_cache(maxsize=1)
def _torch_k4_read():
    return read_kineto(str(TORCH_K4))


def _first(doc: dict, cat: str) -> dict:
    return next(e for e in doc["traceEvents"] if e.get("cat") == cat)


@pytest.mark.parametrize("cat, key", [("kernel", "ts"), ("kernel", "dur"), ("kernel", "correlation"),
                                      ("cuda_runtime", "tid"), ("user_annotation", "pid")])
def test_a_boolean_is_no_number(tmp_path, cat, key):
    # `"ts": true` was read as 1 us: the capture's wall time became 5e9 ms. Such an event is malformed: left out
    # and counted, as an event of the wrong shape is.
    doc = _torch_k4()
    event = _first(doc, cat)
    (event["args"] if key == "correlation" else event)[key] = True
    t = read_kineto(str(_write(tmp_path / "t.json", doc)))
    assert t.meta.skipped == {"malformed_events": 1}
    plain = _torch_k4_read()
    table = {"kernel": "ops", "cuda_runtime": "api", "user_annotation": "ranges"}[cat]
    assert getattr(t, table).height < getattr(plain, table).height or cat == "cuda_runtime"
    assert t.ops["end"].max() - t.ops["start"].min() < 2_000_000_000  # (5e18 ns before)


def test_an_op_that_is_not_a_complete_event_is_counted(tmp_path):
    # A kernel without `ph` was dropped without a word.
    doc = _torch_k4()
    _first(doc, "kernel").pop("ph")
    _first(doc, "user_annotation")["ph"] = "B"
    t = read_kineto(str(_write(tmp_path / "t.json", doc)))
    assert t.meta.skipped == {"gpu_events_without_ph_X": 1, "ranges_without_ph_X": 1}
    out = CliRunner().invoke(main, ["analyze", str(tmp_path / "t.json"), "--no-cache", "-q"])
    assert "1 rows not used: gpu events without ph X" in out.stdout


def test_an_event_outside_the_profilers_window_is_left_out_and_counted(tmp_path):
    # One kernel moved 1e12 us (11.6 days) later: inside the 2^55 ns any trace may span, but outside what the
    # profiler recorded (its "Iteration Start" and "Record Window End" marks); the capture's wall time read 1e9 ms.
    doc = _torch_k4()
    _first(doc, "kernel")["ts"] += 1e12
    _first(doc, "cuda_runtime")["ts"] -= 1e6
    t = read_kineto(str(_write(tmp_path / "t.json", doc)))
    assert t.meta.skipped == {"gpu_events_outside_the_profiler's_window": 1,
                              "api_calls_outside_the_profiler's_window": 1}
    plain = _torch_k4_read()
    assert t.ops["end"].max() - t.ops["start"].min() <= plain.ops["end"].max() - plain.ops["start"].min()
    # marks that contradict each other (the start after the end) bound nothing: no event is left out for them
    doc = _torch_k4()
    next(e for e in doc["traceEvents"] if e.get("name") == "Iteration Start: PyTorch Profiler")["ts"] += 1e9
    assert not read_kineto(str(_write(tmp_path / "marks.json", doc))).meta.skipped


def test_trace_events_twice_is_refused(tmp_path):
    # A second `traceEvents` array before the real one, holding one kernel: json.load (and HTA) keep only the
    # last array, the streaming parse read both (7,922 ops).
    text = _torch_k4_text()
    ghost = ('{"ph": "X", "cat": "kernel", "name": "ghost", "pid": 0, "tid": 7, "ts": 5109397784680.0, "dur": 5.0, '
             '"args": {"correlation": 1}}')
    p = tmp_path / "t.json"
    p.write_text(text.replace('"traceEvents": [', f'"traceEvents": [{ghost}], "traceEvents": [', 1))
    _assert_clean_error(p, ["`traceEvents` twice"])
    # the key written in a name, once more, is no second array
    p.write_text(text.replace('"name": "ProfilerStep#', '"name": "\\"traceEvents\\": [ProfilerStep#', 1)
                 .replace('"schemaVersion"', '"traceEvents-like": "traceEvents", "schemaVersion"', 1))
    assert read_kineto(str(p)).ops.height == 7921


@pytest.mark.parametrize("where", ["both-before", "before-and-after", "both-after"])
def test_a_top_level_key_given_twice_is_read_as_json_load_reads_it(tmp_path, where):
    # distributedInfo (the rank) and baseTimeNanoseconds twice: the last one counts, as for json.load and HTA.
    text = _torch_k4_text()
    first, last = '"distributedInfo": {"rank": 3}, "baseTimeNanoseconds": 1, ', \
        '"distributedInfo": {"rank": 5}, "baseTimeNanoseconds": 2, '
    before = {"both-before": first + last, "before-and-after": first, "both-after": ""}[where]
    after = {"both-before": "", "before-and-after": last, "both-after": first + last}[where]
    text = text.replace('"schemaVersion": 1,', before + '"schemaVersion": 1,', 1)
    text = text.replace('"traceName":', after + '"traceName":', 1)
    p = tmp_path / "t.json"
    p.write_text(text)
    doc = json.loads(text)
    t = read_kineto(str(p))
    assert (t.meta.rank, t.meta.extra["base_time_ns"]) == (doc["distributedInfo"]["rank"], doc["baseTimeNanoseconds"])
