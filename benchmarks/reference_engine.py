"""The warmed-up reference engine the GPU benchmarks time (tracer_overhead_gpu.py, sync_timers_gpu.py)."""

from __future__ import annotations


def warm_engine(steps: int, tiny: bool = False):
    """(cfg, worker, scheduler, batch, sync): the reference engine at `steps` draft steps (a CPU-sized one with
    `tiny`), its CUDA graphs captured and 20 cycles run; `sync` waits for the GPU (a no-op on the CPU)."""
    import torch

    from specprof.tracer.reference.engine import EngineConfig, build

    cfg = EngineConfig.tiny(steps=steps) if tiny else EngineConfig(steps=steps)
    sync = torch.cuda.synchronize if cfg.device.startswith("cuda") else (lambda: None)
    worker, sched, batch = build(cfg, ground_truth_cycles=0)
    sched.run(batch, 20)
    sync()
    return cfg, worker, sched, batch, sync
