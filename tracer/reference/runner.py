"""`specprof reference`: run the reference engine, with or without the tracer, and write results.

Writes into the output folder (SPECPROF_OUT_DIR under `specprof capture`, else `--out`):
- `ground_truth.json` (schema `specprof.ground_truth/1`): per cycle and phase, the GPU time between
  CUDA events recorded in-stream at the phase's boundaries, read after the run;
- the tracer's sidecar, when tracing is on.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile

from specprof.analyzer import safe_files
from specprof.tracer.reference.engine import PHASE_ORDER, SINGLE, EngineConfig, Parallel, run

GROUND_TRUTH_SCHEMA = "specprof.ground_truth/1"


def enable_tracer(preset: str = "reference") -> None:
    """Turn the tracer on in this process, as `specprof capture` does for a child."""
    os.environ["SPECPROF_TRACE"] = "1"
    os.environ.setdefault("SPECPROF_PRESET", preset)


def run_reference(cfg: EngineConfig, cycles: int, out_dir: str, warmup: int = 5,
                  ground_truth: bool = True, profile_range: bool = False,
                  torch_trace: str | None = None, tp: Parallel = SINGLE, sync_timers: bool = False) -> dict:
    """Run the engine and write ground_truth.json (under tensor parallelism: rank 0's; rank r > 0 writes
    ground_truth.rank<r>.json); returns the summary written."""
    # SGLang calls load_plugins() in every scheduler; the engine does the same. It patches
    # nothing unless SPECPROF_TRACE=1.
    from specprof.tracer import plugin

    safe_files.make_folders(out_dir)
    os.environ.setdefault("SPECPROF_OUT_DIR", out_dir)  # where the sidecar goes
    plugin.load()
    if torch_trace:
        import torch

        activities = [torch.profiler.ProfilerActivity.CPU]
        if cfg.device.startswith("cuda"):
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            result = run(cfg, cycles, warmup=warmup, ground_truth=ground_truth,
                         profile_range=profile_range, tp=tp, sync_timers=sync_timers)
        _export_chrome_trace(prof, torch_trace)
    else:
        result = run(cfg, cycles, warmup=warmup, ground_truth=ground_truth,
                     profile_range=profile_range, tp=tp, sync_timers=sync_timers)
    means = {}
    if result.ground_truth:
        for phase in PHASE_ORDER:
            means[phase] = statistics.fmean(r[f"{phase}_ms"] for r in result.ground_truth)
    summary = {
        "schema": GROUND_TRUTH_SCHEMA,
        "method": "torch.cuda.Event(enable_timing=True) recorded on the current stream at the start "
                  "and end of each phase method, no synchronize inside the loop; elapsed_time read "
                  "after torch.cuda.synchronize() at the end of the run",
        "config": result.config,
        "traced": os.environ.get("SPECPROF_TRACE") == "1",
        "run": {
            "cycles": result.cycles,
            "wall_ns": result.wall_ns,
            "tokens": result.tokens,
            "tokens_per_s": result.tokens_per_s,
            "mean_accept_len": result.mean_accept_len,
        },
        "mean_ms": means,
        "cycles": result.ground_truth,
    }
    if result.sync_timers:
        summary["sync_timers"] = {
            "method": "torch.cuda.synchronize() before and after each phase, time.perf_counter_ns() between "
                      "(what a hand-made timing patch does)",
            "mean_ms": {phase: statistics.fmean(r[f"{phase}_ms"] for r in result.sync_timers
                                                if f"{phase}_ms" in r)
                        for phase in PHASE_ORDER if any(f"{phase}_ms" in r for r in result.sync_timers)},
            "cycles": result.sync_timers,
        }
    name = "ground_truth.json"
    if tp.world > 1:
        summary["tp"] = {"rank": tp.rank, "world": tp.world}
        name = "ground_truth.json" if tp.rank == 0 else f"ground_truth.rank{tp.rank}.json"
    safe_files.replace(os.path.join(out_dir, name), json.dumps(summary, indent=1))
    return summary


def _export_chrome_trace(prof, path: str) -> None:
    """torch's export, into a folder of our own beside `path` (made by mkdtemp: no one else can plant a link in
    it), then renamed to `path`: a link there is refused, never written through."""
    folder = tempfile.mkdtemp(prefix=".specprof-trace-", dir=os.path.dirname(os.path.abspath(path)))
    try:
        inside = os.path.join(folder, os.path.basename(path))
        prof.export_chrome_trace(inside)
        safe_files.put(inside, path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
