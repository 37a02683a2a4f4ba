"""The tracer in a tensor-parallel SGLang server, against the real SGLang 0.5.23 on the CPU.

SGLang starts one scheduler process per TP rank (Engine._launch_scheduler_processes: `mp.Process(target=
run_scheduler_process, args=(..., tp_rank, ...))`), and each calls `load_plugins()` first, then `publish()`es
its placement (the runtime context that `get_parallel().tp_rank` reads). Here two fresh interpreters play two
ranks' scheduler processes of one server: each runs SGLang's own `load_plugins()` (which loads the tracer
through the entry point) and `publish()` with a real ServerArgs (tp_size 2) and its SpawnRanks, then calls the
real EAGLEWorkerV2 methods the tracer wraps: `forward_batch_generation` (a cycle; its prefill branch, whose GPU
work `_forward_prefill_batch` is stood in by an instance attribute), `verify` (a phase: the real method runs
on an object without a model and raises, as a failing verify would) and `on_verify_complete_cpu` (the accept
counts, the real hook). What is checked: one sidecar per process, each carrying its own rank from tp_rank and
the capture window it was asked for, and that an exception inside SGLang passes through untouched.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import textwrap

import polars as pl
import pytest

from specprof.analyzer.readers.sidecar import read_sidecars
from tracer_helpers import ROOT

pytest.importorskip("sglang")

RANK_PROCESS = textwrap.dedent(
    """
    import json, os, sys
    from sglang.srt.plugins import load_plugins
    load_plugins()                                  # run_scheduler_process's first line
    from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish
    from sglang.srt.server_args import ServerArgs
    rank = int(sys.argv[1])
    args = ServerArgs(model_path=sys.argv[2], tp_size=2, device="cpu", skip_tokenizer_init=True)
    publish(args, role="scheduler", ranks=SpawnRanks(world_rank=rank, gpu_id=rank))
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
    from specprof.tracer import plugin
    from specprof.tracer.targets import is_wrapped

    worker = object.__new__(EAGLEWorkerV2)          # the real class, no model behind it
    worker.adaptive_controller = None
    worker.enable_dp_spec_prefill_coordination = False
    worker._forward_prefill_batch = lambda batch, on_publish, pp_proxy_tensors: "prefilled"
    batch = object.__new__(ScheduleBatch)
    batch.reqs = [object()] * (3 + rank)
    batch.forward_mode = ForwardMode.EXTEND
    batch.is_extend_in_batch = False
    results = [worker.forward_batch_generation(batch) for _ in range(4)]
    try:
        worker.verify(batch)
        raised = None
    except Exception as exc:                        # SGLang's own error, not the tracer's
        raised = type(exc).__name__
    worker.on_verify_complete_cpu([1] * len(batch.reqs), batch_size=len(batch.reqs))
    print(json.dumps({"tp_rank": get_parallel().tp_rank, "results": results, "raised": raised,
                      "session": plugin.current() is not None,
                      "wrapped": is_wrapped(EAGLEWorkerV2.forward_batch_generation, "range"),
                      "pid": os.getpid()}))
    """
)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ranks")
    model = ROOT / "tests" / "data" / "sglang_config"
    # a fresh process environment as `specprof capture` makes it (nothing of this test process's SPECPROF_*)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECPROF_")}
    env |= {"SPECPROF_TRACE": "1", "SPECPROF_PRESET": "sglang", "SPECPROF_OUT_DIR": str(out),
            "SPECPROF_CAPTURE_CYCLES": "1:2", "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", RANK_PROCESS, str(rank), str(model)], env=env, cwd=out,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr[-3000:]
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    return out, results


def test_each_scheduler_process_has_its_rank_and_its_tracer(two_ranks):
    _, results = two_ranks
    assert [r["tp_rank"] for r in results] == [0, 1]
    for r in results:
        assert r["session"] and r["wrapped"]
        assert r["results"] == ["prefilled"] * 4  # the wrapped method returned what SGLang's returned
        assert r["raised"] == "AttributeError"  # verify's own failure, passed through


def test_one_sidecar_per_rank_with_the_rank_from_tp_rank(two_ranks):
    out, results = two_ranks
    files = sorted(out.glob("specprof-sidecar.*.jsonl"))
    assert len(files) == 2
    sc = read_sidecars([str(f) for f in files])
    by_pid = {row["pid"]: row for row in sc.files.iter_rows(named=True)}
    assert {by_pid[r["pid"]]["rank"] for r in results} == {0, 1}
    for r in results:
        assert by_pid[r["pid"]]["rank"] == r["tp_rank"] and by_pid[r["pid"]]["complete"]
        header = json.loads(next(f for f in files if f".{r['pid']}." in f.name).read_text().splitlines()[0])
        assert header["rank"] == r["tp_rank"] and header["capture_cycles"] == [1, 2]
    cycles = sc.cycles.join(sc.files.select("file", file_rank="rank"), on="file")
    assert (cycles["rank"] == cycles["file_rank"]).all()
    # each rank's own batch: 3 requests on rank 0, 4 on rank 1 (only to tell them apart), 4 cycles each
    per_rank = cycles.group_by("rank").agg(n=pl.len(), size=pl.col("batch_size").unique()).sort("rank")
    assert per_rank.rows() == [(0, 4, [3]), (1, 4, [4])]


# -- the SGLang facts these paths rely on ----------------------------------------------------------------------
def test_sglang_starts_one_scheduler_process_per_tp_rank():
    # read from the file: importing sglang.srt.entrypoints.engine needs uvloop, which the CPU install lacks
    path = importlib.util.find_spec("sglang.srt.entrypoints.engine").origin
    text = open(path).read()
    engine = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "Engine")
    method = next(n for n in engine.body if getattr(n, "name", None) == "_launch_scheduler_processes")
    source = ast.get_source_segment(text, method)
    assert "for tp_rank in tp_rank_range:" in source and "mp.Process(target=target, args=args)" in source


def test_each_scheduler_process_loads_plugins_before_it_publishes_its_rank():
    from sglang.srt.managers.scheduler import run_scheduler_process

    source = inspect.getsource(run_scheduler_process)
    assert list(inspect.signature(run_scheduler_process).parameters)[:4] == [
        "server_args", "port_args", "gpu_id", "tp_rank"]
    assert 0 <= source.index("load_plugins()") < source.index("publish(")
    assert "world_rank=spawn_world_rank(server_args, tp_rank=tp_rank" in source
