"""Scale a real nsys SQLite export N-fold into a valid, larger export.

Each copy i of the GPU activity, CUDA API and NVTX rows is shifted in time by i x (the capture's
span + 1 ms) and gets fresh ids where ids must stay unique: correlation ids (so each copy's ops
join to their own launch calls), NVTX range ids. String ids, threads, processes, devices, streams
and CUDA-graph node ids are shared by all copies (a copy is a later replay of the same program).
Tables the analysis does not read are copied once. The result is what nsys would have written for
a capture N times as long.

    python3 benchmarks/scale_nsys.py fixtures/reference-k4/run.sqlite 64 /tmp/k4x64.sqlite
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time

# Tables whose rows are replicated; the value lists the columns that get an id offset.
REPLICATED = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("correlationId",),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("correlationId",),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("correlationId",),
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": ("correlationId",),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("correlationId",),
    "NVTX_EVENTS": ("rangeId",),
}
TIME_COLUMNS = ("start", "end")
DOMAIN_CREATE = 75  # NVTX domain-creation rows stay single


def scale(src: str, factor: int, dst: str) -> dict:
    if os.path.exists(dst):
        os.remove(dst)
    con = sqlite3.connect(dst)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    con.execute("ATTACH DATABASE ? AS src", (src,))
    tables = [r[0] for r in con.execute("SELECT name FROM src.sqlite_master WHERE type = 'table'")]
    for name in tables:
        ddl = con.execute("SELECT sql FROM src.sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()[0]
        con.execute(ddl)
    span_lo, span_hi, max_corr, max_range = _extent(con, tables)
    shift = (span_hi - span_lo) + 1_000_000
    for name in tables:
        cols = [r[1] for r in con.execute(f'PRAGMA src.table_info("{name}")')]
        col_list = ", ".join(f'"{c}"' for c in cols)
        if name not in REPLICATED:
            con.execute(f'INSERT INTO main."{name}" SELECT * FROM src."{name}"')
            continue
        for i in range(factor):
            exprs = []
            for c in cols:
                if c in TIME_COLUMNS:
                    exprs.append(f'"{c}" + {i * shift}')
                elif c in REPLICATED[name]:
                    off = i * ((max_corr if c == "correlationId" else max_range) + 1)
                    exprs.append(f'"{c}" + {off}')
                else:
                    exprs.append(f'"{c}"')
            where = f" WHERE eventType != {DOMAIN_CREATE}" if name == "NVTX_EVENTS" and i else ""
            con.execute(f'INSERT INTO main."{name}" ({col_list}) SELECT {", ".join(exprs)} FROM src."{name}"{where}')
        con.commit()
    con.commit()
    counts = {t: con.execute(f'SELECT count(*) FROM main."{t}"').fetchone()[0] for t in REPLICATED if t in tables}
    con.close()
    return {"path": dst, "factor": factor, "bytes": os.path.getsize(dst), "rows": counts}


def _extent(con, tables):
    lo, hi, corr, rng = None, None, 0, 0
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
              "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
        if t not in tables:
            continue
        where = " WHERE eventType NOT IN (34, 75)" if t == "NVTX_EVENTS" else ""  # marks, domains
        a, b = con.execute(f'SELECT min(start), max(coalesce("end", start)) FROM src."{t}"{where}').fetchone()
        if a is not None:
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
        if t != "NVTX_EVENTS":
            corr = max(corr, con.execute(f'SELECT coalesce(max(correlationId), 0) FROM src."{t}"').fetchone()[0])
    if "NVTX_EVENTS" in tables:
        rng = con.execute('SELECT coalesce(max(rangeId), 0) FROM src."NVTX_EVENTS"').fetchone()[0]
    return lo or 0, hi or 0, corr, rng


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source")
    ap.add_argument("factor", type=int)
    ap.add_argument("dest")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    info = scale(args.source, args.factor, args.dest)
    info["seconds"] = round(time.perf_counter() - t0, 2)
    print(info, file=sys.stderr)


if __name__ == "__main__":
    main()
