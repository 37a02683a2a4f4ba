"""The cache of an attribution: the last attribution of an nsys export's cached tables, kept with them
(readers/trace_cache.py, in the user's cache folder) in `analysis-<hash>/`: the columns it adds to the ops, its
other tables, notes and category parents, keyed by the options that shape it (grouping ranges, NVTX domains,
category rules) and a hash of the code that makes it. The loader (app/analyze.py) uses it when everything
matches; like the trace cache, it never makes an analysis fail."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile

import polars as pl

from analyzer.core.attribution import Attribution
from analyzer.model.trace import Trace
from analyzer.readers.trace_cache import code_hash, evict, matching_folder

_CODE = ("core/attribution.py", "core/projection.py", "core/accounting.py", "core/summary.py",
         "core/categories.py", "model/labels.py")
# What an attribution adds and keeps: its tables, and the ops' added columns.
TABLES = ("ranges", "charges", "waits", "phases", "categories", "cycles", "cycle_phases", "launch",
                   "streams", "devices", "kernels", "unattributed", "pairs", "pair_phases", "pair_categories",
          "comm_ops")


def key(grouping, rules, domains) -> dict:
    """What shapes an attribution besides the tables: its options and the code."""
    return {"grouping": list(grouping), "domains": list(domains),
            "rules": [r.key() for r in rules], "code": code_hash(_CODE)}


def _analysis_folder(folder: str, opts: dict) -> str:
    digest = hashlib.sha256(json.dumps(opts, sort_keys=True).encode()).hexdigest()[:16]
    return os.path.join(folder, f"analysis-{digest}")


def load(path: str, opts: dict, trace: Trace) -> Attribution | None:
    """The cached attribution of `trace` (read from this cache) with options `opts` (`key`), or None."""
    folder = matching_folder(path)
    if folder is None:
        return None
    sub = _analysis_folder(folder, opts)
    try:
        with open(os.path.join(sub, "analysis.json"), encoding="utf-8") as fh:
            doc = json.load(fh)
        if doc.get("options") != opts:
            return None
        added = pl.read_parquet(os.path.join(sub, "ops_added.parquet"))
        if added.height != trace.ops.height:
            return None
        tables = {t: pl.read_parquet(os.path.join(sub, f"{t}.parquet")) for t in TABLES}
        ranges = tables["ranges"]
        kept = Trace(ops=trace.ops, api=trace.api, ranges=ranges.select(list(trace.ranges.columns)),
                     marks=trace.marks, meta=trace.meta)
        return Attribution(trace=kept, grouping=tuple(opts["grouping"]), ops=trace.ops.with_columns(added),
                        notes=list(doc["notes"]), category_parents=dict(doc["category_parents"]), **tables)
    except Exception:
        return None


def store(path: str, opts: dict, a: Attribution) -> None:
    """Keep the attribution `a` of the export at `path` (whose tables are cached) for `load`."""
    folder = matching_folder(path)
    if folder is None:
        return
    sub = _analysis_folder(folder, opts)
    tmp = None
    try:
        tmp = tempfile.mkdtemp(prefix="analysis.tmp-", dir=folder)
        added = [c for c in a.ops.columns if c not in a.trace.ops.columns]
        a.ops.select(added).write_parquet(os.path.join(tmp, "ops_added.parquet"), compression="lz4",
                                          statistics=False, row_group_size=max(1, a.ops.height))
        for t in TABLES:
            df = getattr(a, t)
            df.write_parquet(os.path.join(tmp, f"{t}.parquet"), compression="lz4", statistics=False,
                             row_group_size=max(1, df.height))
        with open(os.path.join(tmp, "analysis.json"), "w", encoding="utf-8") as fh:
            json.dump({"options": opts, "notes": a.notes, "category_parents": a.category_parents}, fh)
        for old in os.listdir(folder):  # one analysis kept per export: the latest
            if old.startswith("analysis-"):
                shutil.rmtree(os.path.join(folder, old), ignore_errors=True)
        os.replace(tmp, sub)
        evict(keep=folder)
    except Exception as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"specprof: note: the analysis of {path} was not cached ({getattr(exc, 'strerror', None) or exc})",
              file=sys.stderr)

