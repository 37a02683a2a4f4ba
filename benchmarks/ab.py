"""Two or more commands side by side, in turn, N rounds: wall, CPU (user and system), peak RSS, page faults.

    python3 benchmarks/ab.py --rounds 3 --name before --cmd "specprof analyze X --no-cache --json" \
        --name after --cmd "PYTHONPATH=/other/checkout specprof analyze X --no-cache --json"

Each command runs in a fresh shell (`bash -c`), its output thrown away; each round runs every command once, in
the order given, so that a machine's drift lands on all of them alike. Prints one JSON object: per command each
round's numbers and their medians, the ratios of the medians to the first command's, and the load average
before and after (the machine is shared: ratios in one run are what is compared). The peak RSS is the largest
of the command's processes (ru_maxrss of the children: a worker's, where it forks workers).
The commands run without PYTHONDONTWRITEBYTECODE (which the development VM sets): Python then reads the
modules' bytecode from __pycache__, as an installed specprof does (pip compiles it at install), instead of
compiling every source on every start (about 0.3 CPU s of specprof's own modules). `--as-is` keeps the
environment as it is. Compile each checkout once before a run (`python3 -m compileall -q analyzer tracer`), so
that no round pays for writing it.
Timings are never asserted in CI; this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

_PROBE = r"""
import json, resource, subprocess, sys, time
t = time.perf_counter()
rc = subprocess.run(["bash", "-c", sys.argv[1]], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE).returncode
w = time.perf_counter() - t
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": rc, "wall_s": round(w, 3), "user_s": round(r.ru_utime, 3), "sys_s": round(r.ru_stime, 3),
                  "cpu_s": round(r.ru_utime + r.ru_stime, 3), "peak_rss_gb": round(r.ru_maxrss / 2**20, 3),
                  "minor_faults": r.ru_minflt}))
"""


def once(cmd: str, env: dict | None = None) -> dict:
    """One run of `cmd` in a fresh measuring process (so that RUSAGE_CHILDREN is this command's alone)."""
    done = subprocess.run([sys.executable, "-c", _PROBE, cmd], capture_output=True, text=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(named: list[tuple[str, str]], rounds: int, bytecode: bool = True) -> dict:
    runs = {name: [] for name, _ in named}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} if bytecode else None
    load_before = os.getloadavg()
    for _ in range(rounds):
        for name, cmd in named:
            runs[name].append(once(cmd, env))
    med = {name: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "user_s", "sys_s", "cpu_s",
                                                                     "peak_rss_gb", "minor_faults")}
           for name, rs in runs.items()}
    first = named[0][0]
    ratios = {name: {k: round(m[k] / med[first][k], 3) if med[first][k] else None for k in ("wall_s", "cpu_s",
                                                                                          "peak_rss_gb")}
              for name, m in med.items()}
    return {"commands": dict(named), "rounds": rounds, "bytecode": bytecode, "runs": runs, "median": med, "ratio_to_" + first: ratios,
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
            "cores": len(os.sched_getaffinity(0)), "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", action="append", required=True)
    ap.add_argument("--cmd", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--as-is", action="store_true", help="keep PYTHONDONTWRITEBYTECODE where it is set")
    args = ap.parse_args(argv)
    if len(args.name) != len(args.cmd):
        ap.error("give one --name per --cmd")
    result = compare(list(zip(args.name, args.cmd)), args.rounds, bytecode=not args.as_is)
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    print(json.dumps({"median": result["median"], "ratios": result["ratio_to_" + args.name[0]],
                      "load": [result["load_before"], result["load_after"]]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
