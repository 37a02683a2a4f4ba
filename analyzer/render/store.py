"""The results store's run list (analyzer/store.py) for the terminal and as JSON (`specprof.runs/1`)."""

from __future__ import annotations

import json

import polars as pl

from analyzer.render.json import ms

SCHEMA = "specprof.runs/1"


def runs_json(runs: pl.DataFrame) -> str:
    """{"schema": "specprof.runs/1", "runs": [{"id", "ref", "imported_at", "path", "format", "ranks", "cycles",
    "wall_ms", "per_cycle_ms", "steps", "accept_len", "speedup", "captured_at", "key"}]}."""
    out = []
    for r in runs.iter_rows(named=True):
        out.append({"id": r["id"], "ref": f"@{r['id']}", "imported_at": r["imported_at"], "path": r["path"],
                    "format": r["format"], "ranks": r["ranks"], "cycles": r["cycles"], "wall_ms": ms(r["wall_ns"]),
                    "per_cycle_ms": ms(r["cycle_attributed_ns"] / r["cycles"]) if r["cycles"] else None,
                    "steps": r["steps"], "accept_len": r["accept_len"], "speedup": r["speedup"],
                    "captured_at": r["captured_at"], "key": r["key"]})
    return json.dumps({"schema": SCHEMA, "runs": out}, indent=1)


def runs_terminal(runs: pl.DataFrame, db_path: str) -> str:
    from analyzer.render.terminal import clean, f_ms, table

    if runs.is_empty():
        return f"{clean(db_path)}: no runs stored yet (`specprof analyze RUN --db {clean(db_path)}` adds one)"
    rows = [[f"@{r['id']}", (r["imported_at"] or "")[:19], clean(r["path"], 60), r["format"], str(r["ranks"]),
             f"{r['cycles']:,}", f_ms(r["wall_ns"]),
             f_ms(r["cycle_attributed_ns"] / r["cycles"]) if r["cycles"] else "-",
             "-" if r["steps"] is None else str(r["steps"]),
             "-" if r["accept_len"] is None else f"{r['accept_len']:.3f}",
             "-" if r["speedup"] is None else f"{r['speedup']:.3f}x"]
            for r in runs.iter_rows(named=True)]
    return (f"{runs.height:,} run(s) in {clean(db_path)} (docs/store.md; @ID names a run for compare and sweep)\n"
            + table(["run", "imported (UTC)", "path", "format", "ranks", "cycles", "wall ms", "per cycle ms",
                     "steps", "accept len", "speedup"], rows, "lllrrrrrrrr"))
