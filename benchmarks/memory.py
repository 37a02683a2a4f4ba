"""Where an analysis's peak memory comes from: the resident set sampled every 5 ms while each of the analysis's
large functions runs (projection, accounting, summaries, the synchronize-timer estimate), beside
benchmarks/stages.py's steps, in one run of what `specprof analyze TRACE --json --all-domains` runs.

    python3 benchmarks/memory.py /work/bench-inputs/mix64.sqlite [--no-cache] [--most 25]

Prints the steps (CPU s, RSS before, peak RSS while it ran), then the functions by how far the RSS rose above
what it was when each was called (a call of a function inside another is listed with its depth). RSS counts
the memory the allocator keeps after a free as well, so a function's rise is an upper bound of its own
transient memory. A measurement, never a test.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from stages import measure, rss_bytes  # noqa: E402 (benchmarks/ is on the path when this runs)

FUNCTIONS = {
    "specprof.analyzer.core.projection": ["project", "range_projection", "nest", "timeline", "innermost_at_launch",
                                 "_launch_rows", "phase_names"],
    "specprof.analyzer.core.categories": ["categorize"],
    "specprof.analyzer.core.accounting": ["with_prev_end", "cpu_waits", "charges", "range_scan", "tile"],
    "specprof.analyzer.core.summary": ["stream_table", "cycle_table", "phase_table", "category_table", "launch_table",
                              "device_table", "top_kernels", "unattributed_table", "pair_tables", "range_busy",
                              "union_length"],
    "specprof.analyzer.derived.sync_timers": ["sync_timer_estimate", "_launch_rows", "_launched"],
}
# modules that import those functions by name: their names are pointed at the wrappers too
USERS = ("specprof.analyzer.core.attribution", "specprof.analyzer.core.summary", "specprof.analyzer.core.projection", "specprof.analyzer.core.accounting",
         "specprof.analyzer.app.analyze", "specprof.analyzer.derived.analysis")


class Sampler:
    def __init__(self, every_s: float = 0.005):
        self.open: list[dict] = []
        self.calls: list[dict] = []
        self.lock = threading.Lock()
        self.every_s = every_s
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            rss = rss_bytes()
            with self.lock:
                for call in self.open:
                    call["peak"] = max(call["peak"], rss)
            time.sleep(self.every_s)

    def wrap(self, module: str, name: str):
        fn = getattr(importlib.import_module(module), name)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            rss = rss_bytes()
            call = {"function": f"{module.rsplit('.', 1)[-1]}.{name}", "before": rss, "peak": rss}
            with self.lock:
                call["depth"] = len(self.open)
                self.open.append(call)
            try:
                return fn(*args, **kwargs)
            finally:
                with self.lock:
                    self.open.remove(call)
                call["after"] = rss_bytes()
                self.calls.append(call)
        return fn, wrapper


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--most", type=int, default=25, help="how many function calls to list")
    args = ap.parse_args(argv)
    sampler, wrapped = Sampler(), {}
    for module, names in FUNCTIONS.items():
        for name in names:
            fn, wrapper = sampler.wrap(module, name)
            setattr(importlib.import_module(module), name, wrapper)
            wrapped[id(fn)] = wrapper
    for module in USERS:
        m = importlib.import_module(module)
        for attr, value in list(vars(m).items()):
            if id(value) in wrapped:
                setattr(m, attr, wrapped[id(value)])
    out = measure(args.trace, cache=not args.no_cache)
    gb = 1e9
    steps = [{"step": s["step"], "depth": s["depth"], "cpu_s": s["cpu_s"], "rss_before_gb": round(s["rss_before"] / gb, 2),
              "peak_gb": round(s["peak_rss"] / gb, 2)} for s in out["steps"]]
    calls = sorted(sampler.calls, key=lambda c: c["peak"] - c["before"], reverse=True)[:args.most]
    print(json.dumps({"path": args.trace, "cache": not args.no_cache, "cpu_s": out["cpu_s"],
                      "peak_gb": round(out["peak_rss"] / gb, 3), "steps": steps,
                      "functions": [{"function": c["function"], "depth": c["depth"],
                                     "before_gb": round(c["before"] / gb, 2), "peak_gb": round(c["peak"] / gb, 2),
                                     "after_gb": round(c["after"] / gb, 2),
                                     "rise_gb": round((c["peak"] - c["before"]) / gb, 2)} for c in calls]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
