"""One `specprof analyze` run, in this process, with what each kind of process of it cost: the parent (which
splits an export of several processes by process, then merges: app/process_tasks.py) and the largest of its
workers (`--jobs N`), where ab.py gives only the largest process of all.

    python3 benchmarks/process_peaks.py /work/bench-inputs/ranks8.sqlite --no-cache -q --jobs 2

Prints one JSON object: wall s; the parent's CPU s and peak RSS (RUSAGE_SELF); the workers' CPU s (all of them
together) and the largest worker's peak RSS (RUSAGE_CHILDREN: ru_maxrss is the largest child's); and the steps'
times where the run printed none. A measurement, never a test.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time


def main(argv: list[str]) -> dict:
    from specprof.analyzer.cli import main as cli

    t = time.perf_counter()
    with open(os.devnull, "w") as null:
        out, sys.stdout = sys.stdout, null
        try:
            cli.main(["analyze", *argv], standalone_mode=False)
        finally:
            sys.stdout = out
    wall = time.perf_counter() - t
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"argv": argv, "wall_s": round(wall, 3),
            "parent_cpu_s": round(me.ru_utime + me.ru_stime, 3), "parent_peak_rss_gb": round(me.ru_maxrss / 2**20, 3),
            "workers_cpu_s": round(kids.ru_utime + kids.ru_stime, 3),
            "largest_worker_peak_rss_gb": round(kids.ru_maxrss / 2**20, 3),
            "total_cpu_s": round(me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, 3),
            "load_average": os.getloadavg()}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=1))
