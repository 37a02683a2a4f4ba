"""Scale a real nsys SQLite export N-fold into a valid, larger export.

Each copy i of the GPU activity, CUDA API and NVTX rows is shifted in time by i x (the capture's
span + 1 ms) and gets fresh ids where ids must stay unique: correlation ids (so each copy's ops
join to their own launch calls), NVTX range ids. String ids, threads, processes, devices, streams
and CUDA-graph node ids are shared by all copies (a copy is a later replay of the same program).
Tables the analysis does not read are copied once. The result is what nsys would have written for
a capture N times as long.

    python3 benchmarks/scale_nsys.py fixtures/reference-k4/run.sqlite 64 /tmp/k4x64.sqlite

Two options shape the mix of rows, always from real rows:

- `--add SRC2:N` appends N copies of another real capture after the main copies (later in time; its
  string ids are offset past the main capture's, its correlation and range ids past every id used
  so far; tables are copied by the columns both exports have). With an NVTX-heavy capture this raises
  the share of NVTX ranges per kernel.
- `--api-rows TOTAL` adds copies of the main capture's own CUDA calls that launched nothing
  (cuKernelGetName, cudaStreamIsCapturing, cudaEventRecord, ...), at their own instants in each copy,
  with fresh correlation ids that match no GPU op, until the runtime table holds about TOTAL rows. A
  reader must scan them, as it must in a real capture, and drops them.

The 10-million-kernel benchmark input (10.4 M kernels, 20 M API rows, 1.33 M NVTX ranges; benchmarks/perf_nsys.py
builds it and its 1/4, 1/16 and 1/64 scale versions):

    python3 benchmarks/scale_nsys.py fixtures/reference-k4/run.sqlite 512 /tmp/mix64.sqlite \\
        --add ../shared/traces/nsys_sqlite/nsysai_h100_2gpu_1s.sqlite:64 --api-rows 20000000
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


def scale(src: str, factor: int, dst: str, add=(), api_rows: int = 0) -> dict:
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
    for extra, copies in add or ():
        _append(con, extra, copies)
    if api_rows and "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        _add_api_rows(con, tables, factor, shift, api_rows)
    counts = {t: con.execute(f'SELECT count(*) FROM main."{t}"').fetchone()[0] for t in REPLICATED if t in tables}
    con.close()
    return {"path": dst, "factor": factor, "bytes": os.path.getsize(dst), "rows": counts}


# Columns that hold StringIds ids, per table (offset when another capture's rows are appended).
STRING_COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("demangledName", "shortName", "mangledName"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("nameId",),
    "NVTX_EVENTS": ("textId", "jsonTextId"),
    "ThreadNames": ("nameId",),
}
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
              "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")


def _max(con, sql) -> int:
    return int(con.execute(sql).fetchone()[0] or 0)


def _add_api_rows(con, tables, factor: int, shift: int, total: int) -> None:
    """Copies of the source's CUDA calls that launched nothing, with fresh correlation ids, until the
    runtime table holds about `total` rows."""
    have = _max(con, "SELECT count(*) FROM main.CUPTI_ACTIVITY_KIND_RUNTIME")
    gpu = " UNION ".join(f'SELECT correlationId FROM src."{t}"' for t in GPU_TABLES if t in tables)
    con.execute("CREATE TEMP TABLE idle_calls AS SELECT * FROM src.CUPTI_ACTIVITY_KIND_RUNTIME "
                f"WHERE correlationId NOT IN ({gpu}) ORDER BY rowid")
    per_copy = _max(con, "SELECT count(*) FROM idle_calls")
    if not per_copy or total <= have:
        return
    need = total - have
    cols = [r[1] for r in con.execute('PRAGMA src.table_info("CUPTI_ACTIVITY_KIND_RUNTIME")')]
    base = _max(con, "SELECT max(correlationId) FROM main.CUPTI_ACTIVITY_KIND_RUNTIME") + 1
    step = _max(con, "SELECT max(correlationId) FROM idle_calls") + 1
    rounds = -(-need // (per_copy * factor))  # passes over the idle calls per copy
    n = 0
    for r in range(rounds):
        for i in range(factor):
            limit = min(per_copy, need - n)
            if limit <= 0:
                break
            exprs = []
            for c in cols:
                if c in TIME_COLUMNS:
                    exprs.append(f'"{c}" + {i * shift}')
                elif c == "correlationId":
                    exprs.append(f'"{c}" + {base + (r * factor + i) * step}')
                else:
                    exprs.append(f'"{c}"')
            con.execute(f'INSERT INTO main.CUPTI_ACTIVITY_KIND_RUNTIME ({", ".join(chr(34) + c + chr(34) for c in cols)}) '
                        f'SELECT {", ".join(exprs)} FROM idle_calls LIMIT {limit}')
            n += limit
        con.commit()
    con.execute("DROP TABLE idle_calls")


def _append(con, extra: str, copies: int) -> None:
    """`copies` time-shifted copies of another capture, after everything already in the export."""
    con.execute("ATTACH DATABASE ? AS add2", (extra,))
    theirs = {r[0] for r in con.execute("SELECT name FROM add2.sqlite_master WHERE type = 'table'")}
    ours = {r[0] for r in con.execute("SELECT name FROM main.sqlite_master WHERE type = 'table'")}
    str_off = _max(con, "SELECT max(id) FROM main.StringIds") + 1
    corr_off = max(_max(con, f'SELECT max(correlationId) FROM main."{t}"')
                   for t in (*GPU_TABLES, "CUPTI_ACTIVITY_KIND_RUNTIME") if t in ours) + 1
    range_off = (_max(con, "SELECT max(rangeId) FROM main.NVTX_EVENTS") + 1) if "NVTX_EVENTS" in ours else 0
    ends = [_max(con, f'SELECT max(coalesce("end", start)) FROM main."{t}"')
            for t in (*GPU_TABLES, "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS") if t in ours]
    lo2, hi2, corr2, range2 = _extent_of(con, "add2", theirs)
    span2 = (hi2 - lo2) + 1_000_000
    first = max(ends) + 1_000_000 - lo2
    con.execute(f"INSERT INTO main.StringIds (id, value) SELECT id + {str_off}, value FROM add2.StringIds")
    for name in ("ThreadNames", "PROCESSES"):
        if name in theirs and name in ours:
            _insert(con, name, 0, {}, str_off, f'"{name}"')
    for name in REPLICATED:
        if name not in theirs or name not in ours:
            continue
        for i in range(copies):
            where = f" WHERE eventType != {DOMAIN_CREATE}" if name == "NVTX_EVENTS" and i else ""
            _insert(con, name, first + i * span2,
                    {"correlationId": corr_off + i * (corr2 + 1), "rangeId": range_off + i * (range2 + 1)},
                    str_off, f'"{name}"', where)
        con.commit()
    con.commit()
    con.execute("DETACH DATABASE add2")


def _insert(con, name, shift, offsets, str_off, table, where="") -> None:
    mine = [r[1] for r in con.execute(f'PRAGMA main.table_info({table})')]
    theirs = {r[1] for r in con.execute(f'PRAGMA add2.table_info({table})')}
    cols = [c for c in mine if c in theirs]
    exprs = []
    for c in cols:
        if c in TIME_COLUMNS and shift:
            exprs.append(f'"{c}" + {shift}')
        elif c in offsets:
            exprs.append(f'"{c}" + {offsets[c]}')
        elif c in STRING_COLUMNS.get(name, ()):
            exprs.append(f'"{c}" + {str_off}')
        else:
            exprs.append(f'"{c}"')
    con.execute(f'INSERT INTO main.{table} ({", ".join(chr(34) + c + chr(34) for c in cols)}) '
                f'SELECT {", ".join(exprs)} FROM add2.{table}{where}')


def _extent_of(con, schema, tables):
    lo, hi, corr, rng = None, None, 0, 0
    for t in (*GPU_TABLES, "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
        if t not in tables:
            continue
        where = " WHERE eventType NOT IN (34, 75)" if t == "NVTX_EVENTS" else ""
        a, b = con.execute(f'SELECT min(start), max(coalesce("end", start)) FROM {schema}."{t}"{where}').fetchone()
        if a is not None:
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
        if t != "NVTX_EVENTS":
            corr = max(corr, _max(con, f'SELECT max(correlationId) FROM {schema}."{t}"'))
    if "NVTX_EVENTS" in tables:
        rng = _max(con, f'SELECT max(rangeId) FROM {schema}."NVTX_EVENTS"')
    return lo or 0, hi or 0, corr, rng


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
    ap.add_argument("--add", action="append", default=[], metavar="SRC2:N",
                    help="append N copies of another real capture after the main copies")
    ap.add_argument("--api-rows", type=int, default=0, metavar="TOTAL",
                    help="add copies of the capture's own non-launching CUDA calls up to about TOTAL runtime rows")
    args = ap.parse_args(argv)
    add = [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in args.add]
    t0 = time.perf_counter()
    info = scale(args.source, args.factor, args.dest, add=add, api_rows=args.api_rows)
    info["seconds"] = round(time.perf_counter() - t0, 2)
    print(info, file=sys.stderr)


if __name__ == "__main__":
    main()
