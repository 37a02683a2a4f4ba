"""Make one nsys SQLite export of R ranks from a real single-process export: what `specprof capture` writes for a
tensor-parallel server (one process per GPU, every rank in one report).

Each rank is a copy of the source's rows at the same instants (the ranks run together), as another process
(globalPid and globalTid moved by rank << 24: another OS process id) on another GPU (deviceId + rank), with the
same correlation ids (CUPTI numbers them per process). The large tables' rows are written in time order across
the ranks, as nsys interleaves the processes of one capture. PROCESSES, ThreadNames and TARGET_INFO_GPU get a
row per rank; every other table is copied once.

    python3 benchmarks/scale_nsys.py fixtures/reference-k4/run.sqlite 64 /tmp/k4x64.sqlite    # 1.3 M kernels
    python3 benchmarks/ranks_nsys.py /tmp/k4x64.sqlite 8 /tmp/ranks8.sqlite                    # 8 ranks of it

Then, side by side (one task, then a task per process in 2 workers):

    python3 benchmarks/ab.py --name jobs1 --cmd "specprof analyze /tmp/ranks8.sqlite --no-cache -q --jobs 1" \\
        --name jobs2 --cmd "specprof analyze /tmp/ranks8.sqlite --no-cache -q --jobs 2"
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time

# per table: column -> how a rank's copy moves it (k: the rank)
MOVED = {
    "CUPTI_ACTIVITY_KIND_KERNEL": {"globalPid": "globalPid + (k << 24)", "deviceId": "deviceId + k"},
    "CUPTI_ACTIVITY_KIND_MEMCPY": {"globalPid": "globalPid + (k << 24)", "deviceId": "deviceId + k"},
    "CUPTI_ACTIVITY_KIND_MEMSET": {"globalPid": "globalPid + (k << 24)", "deviceId": "deviceId + k"},
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": {"globalPid": "globalPid + (k << 24)", "deviceId": "deviceId + k"},
    "CUPTI_ACTIVITY_KIND_RUNTIME": {"globalTid": "globalTid + (k << 24)"},
    "NVTX_EVENTS": {"globalTid": "globalTid + (k << 24)", "endGlobalTid": "endGlobalTid + (k << 24)"},
    "PROCESSES": {"globalPid": "globalPid + (k << 24)", "pid": "pid + k"},
    "ThreadNames": {"globalTid": "globalTid + (k << 24)"},
    "TARGET_INFO_GPU": {"id": "id + k"},
}
TIME_ORDERED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")


def build(src: str, ranks: int, dst: str) -> dict:
    if os.path.exists(dst):
        os.remove(dst)
    t0 = time.perf_counter()
    con = sqlite3.connect(dst)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    con.execute("ATTACH DATABASE ? AS src", (src,))
    tables = [r[0] for r in con.execute("SELECT name FROM src.sqlite_master WHERE type = 'table'")]
    rows = {}
    for name in tables:
        ddl = con.execute("SELECT sql FROM src.sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()[0]
        con.execute(ddl)
        cols = [r[1] for r in con.execute(f'PRAGMA src.table_info("{name}")')]
        moved = MOVED.get(name)
        if moved is None:
            con.execute(f'INSERT INTO main."{name}" SELECT * FROM src."{name}"')
            continue
        values = ", ".join(f"({k})" for k in range(ranks))
        select = ", ".join(moved.get(c, f'"{c}"') if c in moved else f'"{c}"' for c in cols)
        order = " ORDER BY start, k" if name in TIME_ORDERED and "start" in cols else ""
        names = ", ".join(f'"{c}"' for c in cols)
        con.execute(f'INSERT INTO main."{name}" ({names}) SELECT {select} FROM src."{name}", '
                    f"(WITH r(k) AS (VALUES {values}) SELECT k FROM r){order}")
        rows[name] = con.execute(f'SELECT count(*) FROM main."{name}"').fetchone()[0]
    con.commit()
    con.execute("DETACH DATABASE src")
    con.close()
    return {"path": dst, "ranks": ranks, "bytes": os.path.getsize(dst), "rows": rows,
            "seconds": round(time.perf_counter() - t0, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source")
    ap.add_argument("ranks", type=int)
    ap.add_argument("dest")
    args = ap.parse_args(argv)
    print(build(args.source, args.ranks, args.dest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
