"""Make a large Kineto trace by replicating a real one: N time-shifted copies of its events.

Copy k of every event is shifted by k x (the trace's time span + 1 ms), and its ids are made fresh:
correlation ids (`args.correlation` and the `ac2g` / `async_*` flow ids), `External id` and the
`fwdbwd` flow ids move by k x (the largest id + 1), so that launches still join to their own kernels
and no two copies share an id. Metadata events (`ph: M`) and the profiler's own span are written
once. The top-level keys (device properties, distributedInfo, baseTimeNanoseconds) are kept.

    python3 benchmarks/make_large_kineto.py SRC.json.gz OUT.json --copies 10

The source is read whole (it is a small real trace); the output is written event by event.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os

ID_ARGS = ("correlation", "External id", "external id")
FLOW_CATS = {"ac2g", "async_cpu_to_gpu", "async_gpu", "fwdbwd"}


def _load(path: str) -> dict:
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as fh:
        doc = json.load(fh)
    return {"traceEvents": doc} if isinstance(doc, list) else doc


def _int_ids(events) -> int:
    top = 0
    for e in events:
        args = e.get("args") or {}
        for k in ID_ARGS:
            v = args.get(k)
            if isinstance(v, int):
                top = max(top, v)
        if e.get("cat") in FLOW_CATS and isinstance(e.get("id"), int):
            top = max(top, e["id"])
    return top + 1


def make(src: str, out: str, copies: int) -> dict:
    doc = _load(src)
    events = doc["traceEvents"]
    timed = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M"]
    ends = [e["ts"] + e["dur"] for e in events
            if isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]
    span = max(ends + timed) - min(timed) + 1000  # us
    stride = _int_ids(events)
    once = [e for e in events if e.get("ph") == "M" or e.get("cat") == "Trace"]
    repeated = [e for e in events if not (e.get("ph") == "M" or e.get("cat") == "Trace")]
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    n = 0
    opener = gzip.open if out.endswith(".gz") else open
    with opener(out, "wt", encoding="utf-8") as fh:
        fh.write("{\n")
        for k, v in head.items():
            fh.write(f"  {json.dumps(k)}: {json.dumps(v)},\n")
        fh.write('  "traceEvents": [\n')
        first = True
        for e in once:
            fh.write(("" if first else ",\n") + "  " + json.dumps(e))
            first = False
            n += 1
        for k in range(copies):
            dt = k * span
            di = k * stride
            for e in repeated:
                c = dict(e)
                if isinstance(c.get("ts"), (int, float)):
                    c["ts"] = c["ts"] + dt
                if c.get("cat") in FLOW_CATS and isinstance(c.get("id"), int):
                    c["id"] = c["id"] + di
                args = c.get("args")
                if isinstance(args, dict) and any(isinstance(args.get(a), int) for a in ID_ARGS):
                    args = dict(args)
                    for a in ID_ARGS:
                        if isinstance(args.get(a), int):
                            args[a] = args[a] + di
                    c["args"] = args
                fh.write(("" if first else ",\n") + "  " + json.dumps(c))
                first = False
                n += 1
        fh.write("\n  ]\n}\n")
    return {"events": n, "bytes": os.path.getsize(out), "copies": copies, "span_us": span, "id_stride": stride}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("out", help="output .json or .json.gz")
    ap.add_argument("--copies", type=int, default=10)
    args = ap.parse_args()
    print(json.dumps(make(args.src, args.out, args.copies)))


if __name__ == "__main__":
    main()
