"""The reference engine tensor-parallel (tracer/reference/engine.py `Parallel`, tracer/reference/tp.py) on the
CPU: two processes joined by gloo, the tiny config. Sharded layers compute what the whole layer computes, with
two all-reduces per layer; `specprof reference --tp 2` runs two ranks that agree with each other and with the
one-process run, and the tracer writes one sidecar per rank with its TP rank in the header."""

from __future__ import annotations

import json
import os
import pickle

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")

from specprof.analyzer.cli import main  # noqa: E402
from specprof.analyzer.readers import sidecar as sc  # noqa: E402
from specprof.tracer.reference import engine  # noqa: E402
from specprof.tracer.reference import tp as tp_launch  # noqa: E402


def _layer_check(rank: int, world: int, port: int, out: str) -> None:
    """One rank: a sharded Layer and Model against the whole ones built from the same seed."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        cfg = engine.EngineConfig.tiny()
        par = engine.Parallel(rank=rank, world=world)
        calls = []
        original = engine.Parallel.all_reduce

        def counted(self, x):
            calls.append(tuple(x.shape))
            return original(self, x)

        engine.Parallel.all_reduce = counted

        def layer(tp):
            gen = torch.Generator().manual_seed(7)
            return engine.Layer(cfg, gen, torch.float32, "cpu", tp)

        x = torch.randn(cfg.batch, 3, cfg.hidden, generator=torch.Generator().manual_seed(1))
        whole, part = layer(engine.SINGLE), layer(par)
        y_whole = whole(x)
        calls.clear()
        y_part = part(x)
        layer_calls = list(calls)
        w_full = engine.ReferenceWorker(cfg)
        w_tp = engine.ReferenceWorker(cfg, tp=par)
        tokens = torch.randint(0, cfg.vocab, (cfg.batch, 5), generator=torch.Generator().manual_seed(2))
        result = {"max_diff": float((y_whole - y_part).abs().max()), "calls": layer_calls,
                  "heads": part.heads, "qkv": tuple(part.qkv.shape), "down": tuple(part.down.shape),
                  "tokens_equal": bool(torch.equal(w_full.target(tokens), w_tp.target(tokens))),
                  "tp_rank": getattr(w_tp, "tp_rank", None), "single_has_rank": hasattr(w_full, "tp_rank")}
        with open(os.path.join(out, f"rank{rank}.pkl"), "wb") as fh:
            pickle.dump(result, fh)
    finally:
        dist.destroy_process_group()


def test_sharded_layers_compute_what_the_whole_layer_computes(tmp_path):
    import torch.multiprocessing as mp

    mp.start_processes(_layer_check, args=(2, tp_launch._free_port(), str(tmp_path)), nprocs=2, join=True,
                       start_method="spawn")
    cfg = engine.EngineConfig.tiny()
    for rank in (0, 1):
        r = pickle.loads((tmp_path / f"rank{rank}.pkl").read_bytes())
        assert r["max_diff"] < 1e-5
        # one all-reduce after attention and one after the MLP, each of the full hidden width
        assert r["calls"] == [(cfg.batch, 3, cfg.hidden)] * 2
        assert r["heads"] == cfg.heads // 2
        assert r["qkv"] == (cfg.hidden, 3 * cfg.hidden // 2) and r["down"] == (cfg.hidden, cfg.hidden)
        assert r["tokens_equal"]  # the TP=2 target picks the tokens the whole target picks
        assert r["tp_rank"] == rank and not r["single_has_rank"]


def test_one_process_has_no_group_and_the_same_weights():
    cfg = engine.EngineConfig.tiny()
    a = engine.Layer(cfg, torch.Generator().manual_seed(3), torch.float32, "cpu")
    b = engine.Layer(cfg, torch.Generator().manual_seed(3), torch.float32, "cpu", engine.Parallel())
    assert a.tp.world == 1 and torch.equal(a.qkv, b.qkv) and torch.equal(a.down, b.down)
    assert a.qkv.shape == (cfg.hidden, 3 * cfg.hidden)  # unsharded, as before tensor parallelism


def test_reference_tp2_command_traced(tmp_path, monkeypatch):
    for key in tp_launch.MULTICAST_OFF:
        monkeypatch.delenv(key, raising=False)
    for key in ("SPECPROF_TRACE", "SPECPROF_OUT_DIR", "SPECPROF_PRESET", "RANK", "WORLD_SIZE", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    base = ["reference", "--tiny", "--steps", "3", "--cycles", "4", "--warmup", "1"]
    one = CliRunner().invoke(main, [*base, "--no-trace", "--out", str(tmp_path / "tp1")])
    assert one.exit_code == 0, one.output
    for key in ("SPECPROF_TRACE", "SPECPROF_OUT_DIR"):  # the one-process run set them in this process
        monkeypatch.delenv(key, raising=False)
    two = CliRunner().invoke(main, [*base, "--tp", "2", "--trace", "--out", str(tmp_path / "tp2")])
    assert two.exit_code == 0, two.output
    assert all(os.environ.get(k) == v for k, v in tp_launch.MULTICAST_OFF.items())  # inherited by every rank
    single = json.loads((tmp_path / "tp1" / "ground_truth.json").read_text())
    ranks = [json.loads((tmp_path / "tp2" / n).read_text()) for n in ("ground_truth.json", "ground_truth.rank1.json")]
    assert [r["tp"] for r in ranks] == [{"rank": 0, "world": 2}, {"rank": 1, "world": 2}]
    assert "tp" not in single
    for r in ranks:  # every rank accepted what the one-process engine accepted
        assert r["run"]["tokens"] == single["run"]["tokens"]
        assert r["run"]["mean_accept_len"] == single["run"]["mean_accept_len"]
    sides = sc.read_sidecars(sc.find(str(tmp_path / "tp2")))
    assert sorted(sides.files["rank"].to_list()) == [0, 1]
    assert sides.cycles.group_by("rank").len().sort("rank")["len"].to_list() == [5, 5]  # warm-up + 4
