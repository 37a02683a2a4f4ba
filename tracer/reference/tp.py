"""`specprof reference --tp N`: the reference engine tensor-parallel, one process per GPU.

Processes are started the way torchrun starts them (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in
the environment, `init_process_group(init_method="env://")`), with torch.multiprocessing's spawn; under
torchrun itself (those variables already set) the process runs as the rank it was given. Backend: NCCL on
GPUs (rank r on cuda:r), gloo on the CPU (`--tiny`, the tests).

NVLink multicast (NVLS, symmetric-memory multicast) is always turned off: NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 (set in the launcher's environment, so nsys's
children and every rank inherit them).
"""

from __future__ import annotations

import os
import socket

# Always set for tensor-parallel runs: no NVLink multicast (NVLS) anywhere.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def under_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def launch(world: int, cfg, cycles: int, out_dir: str, **kw) -> list[dict]:
    """Run the engine on `world` ranks; returns each rank's summary (ground_truth*.json), rank order."""
    import json

    os.environ.update(MULTICAST_OFF)
    if under_torchrun():
        if int(os.environ["WORLD_SIZE"]) != world:
            raise ValueError(f"--tp {world} under torchrun with WORLD_SIZE={os.environ['WORLD_SIZE']}")
        return [rank_main(int(os.environ["RANK"]), world, cfg, cycles, out_dir, kw)]
    import torch.multiprocessing as mp

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(_free_port())
    os.environ["WORLD_SIZE"] = str(world)
    mp.start_processes(_spawned, args=(world, cfg, cycles, out_dir, kw), nprocs=world, join=True,
                       start_method="spawn")
    out = []
    for rank in range(world):
        name = "ground_truth.json" if rank == 0 else f"ground_truth.rank{rank}.json"
        with open(os.path.join(out_dir, name), encoding="utf-8") as fh:
            out.append(json.load(fh))
    return out


def _spawned(rank: int, world: int, cfg, cycles: int, out_dir: str, kw: dict) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank))
    rank_main(rank, world, cfg, cycles, out_dir, kw)


def rank_main(rank: int, world: int, cfg, cycles: int, out_dir: str, kw: dict) -> dict:
    """One rank: join the group, run the engine as rank `rank` of `world`, leave the group."""
    import torch
    import torch.distributed as dist

    from specprof.tracer.reference.engine import Parallel
    from specprof.tracer.reference.runner import run_reference

    os.environ.update(MULTICAST_OFF)
    cuda = cfg.device.startswith("cuda")
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world,
                                device_id=torch.device("cuda", local))
    else:
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    try:
        return run_reference(cfg, cycles, out_dir, tp=Parallel(rank=rank, world=world), **kw)
    finally:
        dist.destroy_process_group()
