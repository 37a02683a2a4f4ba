"""specprof's Kineto reader against HolisticTraceAnalysis (HTA) on the same traces, side by side.

Each measurement is a fresh subprocess that imports its tool, then times only the parse:
- specprof: `specprof.analyzer.readers.kineto.read_kineto(path)` (a Trace: ops, API calls, ranges, joined);
- hta: `TraceAnalysis(trace_files={0: path})` with HTA's defaults (its JSON parser backend), which
  parses the file into its DataFrame and symbol table and links launches to kernels;
- hta-ijson (with --hta-ijson): the same with HTA's fastest ijson backend (IJSON_BATCH_AND_COMPRESS).
Peak RSS is the child's own maximum resident set (VmHWM in /proc/self/status, imports included;
os.wait4's ru_maxrss is recorded too, but on Linux it also counts the parent's resident set at fork).
The replica is generated in a subprocess, so that this parent stays small. Runs alternate
between the tools so both see the same machine load; the medians of --repeats runs are reported.

    python3 benchmarks/kineto_vs_hta.py                  # largest shared trace + a 10x replica
    python3 benchmarks/kineto_vs_hta.py --copies 20 --repeats 5 --out benchmarks/results/kineto_vs_hta.json

No timing is asserted anywhere; this prints numbers (docs/performance.md quotes them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = [Path(os.environ.get("SPECPROF_SHARED_TRACES", ROOT.parent / "shared" / "traces")),
          Path("/work/shared/traces")]
LARGEST = "hta_negative_queue_length_values_check__rank0.json.gz"

CHILD = r"""
import json, logging, os, sys, time
tool, path = sys.argv[1], sys.argv[2]
if tool == "specprof":
    from specprof.analyzer.readers.kineto import read_kineto
    t, c = time.perf_counter(), time.process_time()
    trace = read_kineto(path)
    dt, dc = time.perf_counter() - t, time.process_time() - c
    rows = trace.ops.height
else:
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis
    if tool == "hta-ijson":
        from hta.common.trace_parser import set_default_trace_parsing_backend
        from hta.configs.parser_config import ParserBackend
        set_default_trace_parsing_backend(ParserBackend.IJSON_BATCH_AND_COMPRESS)
    t, c = time.perf_counter(), time.process_time()
    ta = TraceAnalysis(trace_files={0: path}, trace_dir=os.path.dirname(path))
    dt, dc = time.perf_counter() - t, time.process_time() - c
    rows = len(ta.t.get_trace(0))
with open("/proc/self/status") as fh:  # VmHWM: this process's own peak RSS since exec
    hwm = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
print(json.dumps({"seconds": dt, "cpu_seconds": dc, "rows": rows, "hwm_kb": hwm}))
"""


def run_child(tool: str, path: str) -> dict:
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, tool, path], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=ROOT)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.stdout.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{tool} failed on {path} (exit {proc.returncode})")
    res = json.loads(out)
    # The child's own VmHWM. (Its ru_maxrss from wait4 also counts the parent's resident set at
    # fork time, which Linux carries across exec; kept as a cross-check.)
    res.update(wall=wall, peak_mb=res.pop("hwm_kb") / 1024, maxrss_mb=usage.ru_maxrss / 1024)
    return res


def shared_trace() -> Path:
    for base in SHARED:
        p = base / "torch_kineto" / LARGEST
        if p.is_file():
            return p
    raise SystemExit(f"{LARGEST} not found under ../shared/traces; set SPECPROF_SHARED_TRACES")


def bench(path: str, tools: list[str], repeats: int) -> dict:
    runs = {t: [] for t in tools}
    for _ in range(repeats):
        for t in tools:  # alternate, so that both tools see the same load
            runs[t].append(run_child(t, path))
    keys = ("seconds", "cpu_seconds", "wall", "peak_mb", "maxrss_mb")
    med = {t: {k: statistics.median(r[k] for r in rs) for k in keys}
           for t, rs in runs.items()}
    for t in tools:
        med[t]["rows"] = runs[t][0]["rows"]
        med[t]["all_seconds"] = [round(r["seconds"], 3) for r in runs[t]]
    return med


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", help="traces to measure [default: the largest shared trace and a replica]")
    ap.add_argument("--copies", type=int, default=10, help="copies in the generated replica (0: none)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--hta-ijson", action="store_true", help="also measure HTA's ijson backend")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    tools = ["specprof", "hta"] + (["hta-ijson"] if args.hta_ijson else [])
    traces = [Path(t) for t in args.traces]
    tmp = None
    if not traces:
        src = shared_trace()
        traces = [src]
        if args.copies:
            tmp = tempfile.TemporaryDirectory()
            big = Path(tmp.name) / f"replica_x{args.copies}.json"
            made = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_large_kineto.py"), str(src),
                                   str(big), "--copies", str(args.copies)], capture_output=True, check=True)
            info = json.loads(made.stdout)
            print(f"generated {big.name}: {info['events']:,} events, {info['bytes'] / 1e6:,.0f} MB "
                  f"({args.copies} time-shifted copies of {src.name}, fresh correlation ids)", flush=True)
            traces.append(big)
    results = []
    for path in traces:
        size = path.stat().st_size
        med = bench(str(path), tools, args.repeats)
        base = med["specprof"]
        print(f"\n{path.name} ({size / 1e6:,.1f} MB on disk), median of {args.repeats}:")
        print(f"  {'tool':10} {'parse s':>9} {'parse cpu s':>12} {'process s':>10} {'peak RSS MB':>12} {'rows':>10}"
              "   parse runs (s)")
        for t in tools:
            m = med[t]
            print(f"  {t:10} {m['seconds']:9.3f} {m['cpu_seconds']:12.3f} {m['wall']:10.3f} {m['peak_mb']:12.0f} "
                  f"{m['rows']:10,}   {m['all_seconds']}")
        for t in tools[1:]:
            print(f"  {t} / specprof: parse {med[t]['seconds'] / base['seconds']:.2f}x slower "
                  f"(CPU time {med[t]['cpu_seconds'] / base['cpu_seconds']:.2f}x), "
                  f"process {med[t]['wall'] / base['wall']:.2f}x, peak RSS {med[t]['peak_mb'] / base['peak_mb']:.2f}x "
                  f"(specprof uses {100 * base['peak_mb'] / med[t]['peak_mb']:.0f}% of it)")
        results.append({"trace": path.name, "bytes": size, "repeats": args.repeats, "median": med})
    if args.out:
        Path(args.out).write_text(json.dumps({"python": sys.version.split()[0], "results": results}, indent=1))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
