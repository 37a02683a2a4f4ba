"""The tracer's own per-call cost on the CPU: a do-nothing engine, traced vs untraced, in one process.

The engine has the reference engine's shape (tracer/presets/reference.py) and does no work, so what is measured
is the wrappers alone: per cycle 5 phase ranges (cycle, draft, verify, draft_extend, accept) and 1 accept-count
hook, i.e. 6 wrapped calls, with the real nvtx package (no profiler attached: its calls are no-ops, as in a run
without nsys), the torch-profiler probe (torch imported when installed, as in SGLang), and the sidecar's
background flusher writing to a temporary folder.

Blocks of `--cycles` cycles alternate tracer off / on (the order flips every pair); the tracer is installed and
removed between blocks with specprof.tracer.plugin.install / uninstall. Keep blocks short: a do-nothing engine runs
about 100 000 cycles per second, so long blocks pile up thousands of records between two flushes (every 0.1 s),
a memory load a real engine (a few hundred cycles per second) never sees. Reports, as the median over the pairs, the
nanoseconds per cycle off and on, the added nanoseconds per wrapped call, and the on/off time ratio.
Also times `specprof.tracer.plugin.load()` with SPECPROF_TRACE unset (the disabled path).

    python3 benchmarks/tracer_overhead_cpu.py [--pairs 9] [--cycles 2000] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
import types

WRAPPED_CALLS_PER_CYCLE = 6


class Batch:
    def batch_size(self) -> int:
        return 8


class ReferenceDraftWorker:
    def draft(self, batch):
        return None

    def draft_extend(self, batch, result):
        return None


class ReferenceWorker:
    tp_rank = 0
    counts = [1, 2, 0, 3, 1, 1, 2, 0]

    def __init__(self):
        self.draft_worker = ReferenceDraftWorker()

    def forward_prefill(self, batch):
        return None

    def verify(self, batch, drafts):
        return self.counts

    def forward_batch_generation(self, batch):
        drafts = self.draft_worker.draft(batch)
        result = self.verify(batch, drafts)
        self.draft_worker.draft_extend(batch, result)
        return result

    def on_verify_complete_cpu(self, num_correct_drafts_per_req_cpu, batch_size):
        return None


class ReferenceScheduler:
    def __init__(self, worker):
        self.worker = worker

    def process_batch_result(self, batch, result):
        self.worker.on_verify_complete_cpu(result, batch_size=8)

    def run(self, batch, cycles: int) -> None:
        worker = self.worker
        for _ in range(cycles):
            self.process_batch_result(batch, worker.forward_batch_generation(batch))


MODULE = "specprof_overhead_engine"


def _preset():
    """The reference preset's table, pointed at this file's classes."""
    from specprof.tracer.presets import reference
    from specprof.tracer.targets import CountsHook, Target

    def here(candidates):
        return tuple((MODULE, cls, method) for _, cls, method in candidates)

    preset = reference.PRESET
    return dataclasses.replace(
        preset,
        targets=tuple(Target(t.phase, here(t.candidates)) for t in preset.targets),
        counts=tuple(CountsHook(here(h.candidates), h.read) for h in preset.counts),
    )


def _disabled_load_ns(calls: int = 200_000) -> float:
    from specprof.tracer import plugin

    os.environ.pop("SPECPROF_TRACE", None)
    start = time.perf_counter_ns()
    for _ in range(calls):
        plugin.load()
    return (time.perf_counter_ns() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("--cycles", type=int, default=2_000, help="cycles per block (default 2000)")
    parser.add_argument("--json", dest="json_path", help="also write the result here")
    args = parser.parse_args()
    if args.pairs < 5:
        parser.error("--pairs must be at least 5")

    try:
        import torch  # noqa: F401 (as in SGLang: the profiler probe then reads torch's flag)

        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    from specprof.tracer import plugin

    module = types.ModuleType(MODULE)
    for cls in (ReferenceDraftWorker, ReferenceWorker, ReferenceScheduler):
        setattr(module, cls.__name__, cls)
    sys.modules[MODULE] = module
    preset = _preset()
    out_dir = tempfile.mkdtemp(prefix="specprof-overhead-cpu-")
    # The queue must hold a block's records between two flushes; 2 records per cycle.
    max_queue = 4 * args.cycles

    scheduler = ReferenceScheduler(ReferenceWorker())
    batch = Batch()

    def block(traced: bool) -> float:
        plugin.uninstall()
        if traced:
            plugin.install(preset, out_dir, max_queue=max_queue)
        start = time.perf_counter_ns()
        scheduler.run(batch, args.cycles)
        return (time.perf_counter_ns() - start) / args.cycles

    block(True)
    block(False)
    pairs = []
    for i in range(args.pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        per_cycle = {traced: block(traced) for traced in order}
        off, on = per_cycle[False], per_cycle[True]
        pairs.append({"off_ns_per_cycle": off, "on_ns_per_cycle": on, "ratio_on_off": on / off,
                      "added_ns_per_wrapped_call": (on - off) / WRAPPED_CALLS_PER_CYCLE})
        print(f"pair {i}: off {off:8.0f} ns/cycle  on {on:8.0f} ns/cycle  on/off {on / off:6.2f}  "
              f"+{(on - off) / WRAPPED_CALLS_PER_CYCLE:6.0f} ns per wrapped call", flush=True)
    plugin.uninstall()

    def median(key):
        return statistics.median(p[key] for p in pairs)

    result = {
        "benchmark": "tracer per-call cost on the CPU (do-nothing engine, no profiler attached)",
        "python": sys.version.split()[0],
        "torch": torch_version,
        "cycles_per_block": args.cycles,
        "wrapped_calls_per_cycle": WRAPPED_CALLS_PER_CYCLE,
        "pairs": pairs,
        "median_off_ns_per_cycle": median("off_ns_per_cycle"),
        "median_on_ns_per_cycle": median("on_ns_per_cycle"),
        "median_added_ns_per_wrapped_call": median("added_ns_per_wrapped_call"),
        "median_ratio_on_off": median("ratio_on_off"),
        "disabled_load_ns_per_call": _disabled_load_ns(),
    }
    added_cycle = result["median_added_ns_per_wrapped_call"] * WRAPPED_CALLS_PER_CYCLE
    print(
        f"median: off {result['median_off_ns_per_cycle']:.0f} ns/cycle, on {result['median_on_ns_per_cycle']:.0f} "
        f"ns/cycle (on/off {result['median_ratio_on_off']:.2f}); "
        f"+{result['median_added_ns_per_wrapped_call']:.0f} ns per wrapped call, +{added_cycle / 1000:.1f} us per "
        f"cycle = {added_cycle / 1e6 * 100:.3f}% of a 1 ms cycle, {added_cycle / 10e6 * 100:.4f}% of a 10 ms cycle"
    )
    print(f"disabled: specprof.tracer.plugin.load() {result['disabled_load_ns_per_call']:.0f} ns per call, nothing patched")
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
