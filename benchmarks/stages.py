"""Time one `specprof analyze` of an nsys export, step by step: wall time, CPU time and peak memory.

Runs what `specprof analyze TRACE --json --all-domains` runs (every NVTX range projected, as the peers do):
app/analyze.py's `analyze` (the read or the cache, the window, projection, categories, accounting, summaries,
the cross-check, the cycle breakdown, the economics, the per-rank results: every one a progress step of
analyzer/progress.py) and the JSON, with the cache as `specprof analyze` uses it, or --no-cache. It prints one
JSON object: total wall and CPU seconds, the process's peak RSS, per step its wall and CPU seconds and the peak
RSS sampled while it ran, and `outside_steps` (the total less the outermost steps: what no step times; start-up
is not in the total). Run it in a fresh process per measurement (benchmarks/perf_nsys.py does), so that peak
RSS means something.

    python3 benchmarks/stages.py /tmp/k4x64.sqlite [--no-cache] [--cycle-window 0:50]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


class Recorder:
    """Listens to progress steps; a sampler thread keeps the peak RSS of the steps running."""

    def __init__(self, every_s: float = 0.01):
        self.steps: list[dict] = []
        self.open: list[dict] = []
        self.every_s = every_s
        self.stop = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self):
        while not self.stop:
            rss = rss_bytes()
            with self.lock:
                for s in self.open:
                    s["peak_rss"] = max(s["peak_rss"], rss)
            time.sleep(self.every_s)

    def __call__(self, event, name, info):
        now, cpu, rss = time.perf_counter(), time.process_time(), rss_bytes()
        use = resource.getrusage(resource.RUSAGE_SELF)
        with self.lock:
            if event == "start":
                self.open.append({"step": name, "t0": now, "c0": cpu, "rss_before": rss, "peak_rss": rss,
                                  "depth": len(self.open), "s0": use.ru_stime, "f0": use.ru_minflt})
                return
            for i in range(len(self.open) - 1, -1, -1):
                if self.open[i]["step"] == name:
                    s = self.open.pop(i)
                    break
            else:
                return
        s["wall_s"] = round(now - s.pop("t0"), 3)
        s["cpu_s"] = round(cpu - s.pop("c0"), 3)
        s["sys_s"] = round(use.ru_stime - s.pop("s0"), 3)  # of it, in the kernel (page faults, reads)
        s["minor_faults"] = use.ru_minflt - s.pop("f0")
        s["peak_rss"] = max(s["peak_rss"], rss)
        s["rows"] = info.get("done") or None
        self.steps.append(s)


def measure(path: str, cache: bool = True, tracer_only: bool = False, cycle_window: str | None = None) -> dict:
    """`tracer_only`: phases from the specprof tracer's NVTX domain alone, as `specprof analyze` does by
    default when a trace has it; else every range is projected (--all-domains), as the peers do.
    `cycle_window`: `A:B`, as --cycle-window takes it."""
    from specprof.analyzer import progress
    from specprof.analyzer.app.analyze import Options
    from specprof.analyzer.app.run import Run
    from specprof.analyzer.core.attribution import ALL_DOMAINS
    from specprof.analyzer.core.window import Window
    from specprof.analyzer.render import json as json_render

    domains = () if tracer_only else (ALL_DOMAINS,)
    window = Window()
    if cycle_window:
        a, b = cycle_window.split(":")
        window = Window.of(cycles=(int(a) if a else None, int(b) if b else None))

    rec = Recorder()
    progress.listen(rec)
    t0, c0 = time.perf_counter(), time.process_time()
    with progress.step("total"):
        # as `specprof analyze` does (app/traces.py): the analysis made whole, each result a step of its own, then
        # rendered
        result = Run.load(path, Options(domains=domains, cache=cache, window=window)).analysis()
        trace = result.trace
        with progress.step("rendering JSON"):
            text = json_render.render(result)
    rec.stop = True
    steps = [s for s in rec.steps if s["step"] != "total"]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    outer = [s for s in steps if s["depth"] == 1]
    out = {
        "path": path,
        "bytes": os.path.getsize(path),
        "cache": cache,
        "window": window.describe() or None,
        "ops": result.ops.height,
        "api_rows_kept": trace.api.height,
        "ranges": trace.ranges.height,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "json_bytes": len(text),
        # how each large table was read: "pages" (the C page reader) or "sqlite" (ADBC); a cached run
        # reports how the cache was filled
        "tables_read_by": trace.meta.extra.get("tables_read_by"),
        "steps": steps,
        "outside_steps": {"wall_s": round(wall - sum(s["wall_s"] for s in outer), 3),
                          "cpu_s": round(cpu - sum(s["cpu_s"] for s in outer), 3)},
    }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--tracer-domain-only", action="store_true",
                    help="project only the tracer's ranges (the CLI's default when a trace has them), not all")
    ap.add_argument("--cycle-window", metavar="A:B", help="analyse only these cycles, as --cycle-window does")
    args = ap.parse_args(argv)
    print(json.dumps(measure(args.trace, cache=not args.no_cache, tracer_only=args.tracer_domain_only,
                             cycle_window=args.cycle_window)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
