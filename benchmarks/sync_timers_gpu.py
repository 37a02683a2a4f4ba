"""What `torch.cuda.synchronize()` timers do to a speculative engine, against specprof's unsynchronised tracer.

One process, one reference engine (tracer/reference/engine.py), blocks of `--cycles` cycles in four modes,
interleaved (the order rotates every round, so drift hits every mode alike), `--warm` untimed cycles after
each switch:

- `off`: nothing but the engine;
- `specprof`: the tracer as `specprof capture` runs it (NVTX ranges, sidecar, no CUDA events);
- `specprof_events`: the same with `--gpu-events` (CUDA events at phase boundaries, read with query() only):
  the per-phase GPU time of an undisturbed cycle, and, against `specprof`, the events' own cost;
- `sync_timers`: what a hand-made patch does: `torch.cuda.synchronize()` before and after every phase, the
  host clock in between (tracer off).

Per mode: cycles per second (the engine's acceptance is controlled, so cycles per second is decode
throughput), and per phase the time each method reports: the sync timers' own numbers, and for the tracer
the CUDA events' GPU time and the sidecar's host time. Reports medians over the rounds.

    python3 benchmarks/sync_timers_gpu.py --steps 4 --rounds 5 --cycles 200 --json sync_timers.json
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import tempfile
import time

MODES = ("off", "specprof", "specprof_events", "sync_timers")
PHASES = ("draft", "verify", "draft_extend", "accept")


def _sidecar_means(folder: str, first: int) -> tuple[dict, dict]:
    """Mean ms per phase instance of the timed cycles (index >= first) in a block's sidecar: the host time
    (phase records) and the CUDA events' GPU time (gpu_time records). Plain JSON: the GPU machine has no
    polars."""
    host: dict[str, list[int]] = {}
    gpu: dict[str, list[int]] = {}
    for path in glob.glob(os.path.join(folder, "specprof-sidecar.*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                record = json.loads(line)
                if record["type"] == "cycle" and record["index"] >= first:
                    for name, start, end in record["phases"]:
                        if end is not None:
                            host.setdefault(name, []).append(end - start)
                elif record["type"] == "range" and (record.get("cycle") or 0) >= first:
                    host.setdefault(record["name"], []).append(record["end_ns"] - record["start_ns"])
                elif record["type"] == "gpu_time" and record["cycle"] >= first:
                    for name, ns in record["phases"]:
                        gpu.setdefault(name, []).append(ns)
    mean = lambda values: {k: statistics.fmean(v) / 1e6 for k, v in values.items()}  # noqa: E731
    return mean(host), mean(gpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--warm", type=int, default=20)
    ap.add_argument("--tiny", action="store_true", help="a CPU-sized engine, to try the harness without a GPU")
    ap.add_argument("--json", dest="json_path")
    args = ap.parse_args()

    import torch

    from reference_engine import warm_engine
    from specprof.tracer import plugin
    from specprof.tracer.reference.engine import SyncTimers

    cfg, worker, sched, batch, sync = warm_engine(args.steps, args.tiny)
    cuda = cfg.device.startswith("cuda")

    def block(mode: str) -> dict:
        plugin.uninstall()
        worker.gt.timers = None
        worker.timers = SyncTimers(False)
        out = tempfile.mkdtemp(prefix=f"specprof-{mode}-")
        if mode in ("specprof", "specprof_events"):
            plugin.install("reference", out, import_modules=True, gpu_time=mode == "specprof_events")
        sched.run(batch, args.warm)
        sync()
        if mode == "sync_timers":
            worker.timers = worker.gt.timers = SyncTimers(True)
        worker.gt.cycle = -1
        t0 = time.perf_counter_ns()
        sched.run(batch, args.cycles)
        sync()
        wall = time.perf_counter_ns() - t0
        worker.gt.timers = None
        plugin.uninstall()  # closes the sidecar: the events still waiting are read or counted
        row = {"cycles_per_s": args.cycles / (wall / 1e9), "ms_per_cycle": wall / 1e6 / args.cycles}
        if mode == "sync_timers":
            rows = worker.timers.read()
            row["phase_ms"] = {p: statistics.fmean(r[f"{p}_ms"] for r in rows if f"{p}_ms" in r) for p in PHASES}
        elif mode != "off":
            host, gpu = _sidecar_means(out, first=args.warm)
            row["host_ms"] = host
            if mode == "specprof_events":
                row["gpu_ms"] = gpu
        return row

    for mode in MODES:  # every path once, unmeasured
        block(mode)
    rounds = []
    for i in range(args.rounds):
        order = MODES[i % len(MODES):] + MODES[: i % len(MODES)]
        got = {mode: block(mode) for mode in order}
        rounds.append(got)
        print(f"round {i}: " + "  ".join(f"{m} {got[m]['ms_per_cycle']:.3f} ms/cycle" for m in order), flush=True)

    def median(mode, *keys):
        values = []
        for r in rounds:
            v = r[mode]
            for k in keys:
                v = v.get(k) if isinstance(v, dict) else None
            if v is not None:
                values.append(v)
        return statistics.median(values) if values else None

    summary = {mode: {"ms_per_cycle": median(mode, "ms_per_cycle"),
                      "throughput_vs_off": statistics.median(r[mode]["cycles_per_s"] / r["off"]["cycles_per_s"]
                                                             for r in rounds)} for mode in MODES}
    summary["sync_timers"]["phase_ms"] = {p: median("sync_timers", "phase_ms", p) for p in PHASES}
    summary["specprof_events"]["gpu_ms"] = {p: median("specprof_events", "gpu_ms", p) for p in PHASES}
    summary["specprof_events"]["host_ms"] = {p: median("specprof_events", "host_ms", p) for p in PHASES}
    summary["specprof"]["host_ms"] = {p: median("specprof", "host_ms", p) for p in PHASES}
    for mode in MODES:
        s = summary[mode]
        print(f"{mode:16s} {s['ms_per_cycle']:.4f} ms/cycle, throughput {s['throughput_vs_off']:.4f} x off")
    print("per phase ms: sync timers | events (GPU, undisturbed) | sidecar host time (specprof)")
    def show(value):
        return "-" if value is None else f"{value:.4f}"

    for p in PHASES:
        print(f"  {p:13s} {show(summary['sync_timers']['phase_ms'][p])} | {show(summary['specprof_events']['gpu_ms'][p])}"
              f" | {show(summary['specprof']['host_ms'][p])}")
    result = {"benchmark": "synchronize timers vs specprof's tracer (reference engine, no nsys)",
              "gpu": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__,
              "config": {"steps": cfg.steps, "batch": cfg.batch, "hidden": cfg.hidden,
                         "target_layers": cfg.target_layers, "cycles_per_block": args.cycles, "warm": args.warm},
              "rounds": rounds, "summary": summary}
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
