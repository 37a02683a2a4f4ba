"""The tracer's cost on decode throughput, on the reference engine on a GPU (no nsys).

One process, one engine: blocks of `--cycles` cycles alternate tracer off / on (the order flips
every pair, so drift hits both alike); the tracer is installed and removed between blocks with
`specprof.tracer.plugin.install` / `uninstall`, and `--warm` untimed cycles follow each switch, so that the
tracer's one-time start (once per server process) is not counted as per-cycle cost. Throughput is cycles per second at a fixed accept-length
process (acceptance does not depend on the tracer), so the ratio on/off of cycle rates is the
ratio of decode throughputs. Reports the median ratio over the pairs.

    python3 benchmarks/tracer_overhead_gpu.py --pairs 15 --cycles 250 --attribute --json overhead.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--cycles", type=int, default=300)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warm", type=int, default=20, help="untimed cycles after each switch")
    ap.add_argument("--json", dest="json_path")
    ap.add_argument("--tiny", action="store_true", help="a CPU-sized engine, to try the harness without a GPU")
    ap.add_argument("--attribute", action="store_true", help="also run the tracer with NVTX calls as no-ops")
    ap.add_argument("--events", action="store_true",
                    help="also run the tracer with CUDA events at phase boundaries (--gpu-events)")
    args = ap.parse_args()

    import torch

    from reference_engine import warm_engine
    from specprof.tracer import plugin

    cfg, _, sched, batch, sync = warm_engine(args.steps, args.tiny)
    cuda = cfg.device.startswith("cuda")
    sidecars = tempfile.mkdtemp(prefix="specprof-overhead-")
    from specprof.tracer.ranges import NoNvtx

    # Modes: "off" (nothing patched), "on" (the tracer as it ships), and, with --attribute, "on_no_nvtx"
    # (wrappers and sidecar, NVTX calls replaced by no-ops): the difference tells what NVTX costs; with
    # --events, "on_events" (the tracer with CUDA events at phase boundaries, read with query() only).
    modes = ["off", "on"] + (["on_no_nvtx"] if args.attribute else []) + (["on_events"] if args.events else [])

    def block(mode: str) -> tuple[float, float]:
        plugin.uninstall()
        if mode == "on":
            plugin.install("reference", sidecars, import_modules=True)
        elif mode == "on_no_nvtx":
            plugin.install("reference", sidecars, import_modules=True, nvtx_factory=NoNvtx)
        elif mode == "on_events":
            plugin.install("reference", sidecars, import_modules=True, gpu_time=True)
        # Steady state only: a session's one-time start (sidecar file, flusher thread, NVTX domain,
        # the first clock marks) happens once per server process, not once per block.
        sched.run(batch, args.warm)
        sync()
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        sched.run(batch, args.cycles)
        sync()
        wall, cpu = time.perf_counter_ns() - t0, time.thread_time_ns() - c0
        return args.cycles / (wall / 1e9), cpu / args.cycles / 1e3

    for m in modes:  # warm every path once, unmeasured
        block(m)
    rounds = []
    for i in range(args.pairs):
        order = modes[i % len(modes):] + modes[: i % len(modes)]
        got = {m: block(m) for m in order}
        row = {"order": ",".join(order)}
        for m in modes:
            row[f"{m}_cycles_per_s"], row[f"{m}_cpu_us_per_cycle"] = got[m]
        for m in modes[1:]:
            row[f"ratio_{m}"] = got[m][0] / got["off"][0]
        rounds.append(row)
        print(f"round {i}: " + "  ".join(f"{m} {got[m][0]:8.2f} cycles/s ({got[m][1]:7.1f} us CPU)" for m in order),
              flush=True)
    plugin.uninstall()
    summary = {}
    for m in modes[1:]:
        ratio = statistics.median(r[f"ratio_{m}"] for r in rounds)
        cpu = statistics.median(r[f"{m}_cpu_us_per_cycle"] - r["off_cpu_us_per_cycle"] for r in rounds)
        summary[m] = {"median_ratio": ratio, "overhead_percent": (1.0 - ratio) * 100.0,
                      "median_added_main_thread_cpu_us_per_cycle": cpu}
        print(f"{m}: median throughput ratio vs off {ratio:.4f} (overhead {(1 - ratio) * 100:.2f}%), "
              f"main-thread CPU added {cpu:.1f} us per cycle")
    result = {
        "benchmark": "tracer overhead on decode throughput (reference engine, no nsys)",
        "gpu": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
        "config": {"steps": cfg.steps, "batch": cfg.batch, "hidden": cfg.hidden,
                   "target_layers": cfg.target_layers, "cycles_per_block": args.cycles,
                   "untimed_cycles_after_switch": args.warm},
        "rounds": rounds,
        "summary": summary,
        "median_ratio_on_off": summary["on"]["median_ratio"],
        "overhead_percent": summary["on"]["overhead_percent"],
    }
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
