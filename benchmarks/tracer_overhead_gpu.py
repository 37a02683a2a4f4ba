"""The tracer's cost on decode throughput, on the reference engine on a GPU (no nsys).

One process, one engine: blocks of `--cycles` cycles alternate tracer off / on (the order flips
every pair, so drift hits both alike); the tracer is installed and removed between blocks with
`tracer.plugin.install` / `uninstall`, and `--warm` untimed cycles follow each switch, so that the
tracer's one-time start (once per server process) is not counted as per-cycle cost. Throughput is cycles per second at a fixed accept-length
process (acceptance does not depend on the tracer), so the ratio on/off of cycle rates is the
ratio of decode throughputs. Reports the median ratio over the pairs.

    python3 benchmarks/tracer_overhead_gpu.py --pairs 7 --cycles 300 --json overhead.json
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
    args = ap.parse_args()

    import torch

    from tracer import plugin
    from tracer.reference.engine import EngineConfig, build

    cfg = EngineConfig.tiny(steps=args.steps) if args.tiny else EngineConfig(steps=args.steps)
    cuda = cfg.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    worker, sched, batch = build(cfg, ground_truth_cycles=0)
    sched.run(batch, 20)
    sync()
    sidecars = tempfile.mkdtemp(prefix="specprof-overhead-")

    def block(traced: bool) -> float:
        if traced:
            plugin.install("reference", sidecars, import_modules=True)
        else:
            plugin.uninstall()
        # Steady state only: a session's one-time start (sidecar file, flusher thread, NVTX domain,
        # the first clock marks) happens once per server process, not once per 200 cycles.
        sched.run(batch, args.warm)
        sync()
        t0 = time.perf_counter_ns()
        sched.run(batch, args.cycles)
        sync()
        return args.cycles / ((time.perf_counter_ns() - t0) / 1e9)

    block(True)  # warm both paths once, unmeasured
    block(False)
    pairs = []
    for i in range(args.pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        rates = {traced: block(traced) for traced in order}
        pairs.append({"off_cycles_per_s": rates[False], "on_cycles_per_s": rates[True],
                      "ratio": rates[True] / rates[False], "order": "off,on" if i % 2 == 0 else "on,off"})
        print(f"pair {i}: off {rates[False]:8.2f} cycles/s  on {rates[True]:8.2f} cycles/s  "
              f"on/off {rates[True] / rates[False]:.4f}", flush=True)
    plugin.uninstall()
    median = statistics.median(p["ratio"] for p in pairs)
    result = {
        "benchmark": "tracer overhead on decode throughput (reference engine, no nsys)",
        "gpu": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
        "config": {"steps": cfg.steps, "batch": cfg.batch, "hidden": cfg.hidden,
                   "target_layers": cfg.target_layers, "cycles_per_block": args.cycles,
                   "untimed_cycles_after_switch": args.warm},
        "pairs": pairs,
        "median_ratio_on_off": median,
        "overhead_percent": (1.0 - median) * 100.0,
    }
    print(f"median on/off throughput ratio {median:.4f}: tracer overhead {(1 - median) * 100:.2f}%")
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
