"""The cache of an analysis: the last analysis of an nsys export's cached tables, kept beside them
(readers/trace_cache.py) in `analysis-<hash>/`: the columns the analysis adds to the ops, its other tables
and notes, keyed by the options that shape it (grouping ranges, NVTX domains, category rules) and a hash of
the analysis code. `analyze` uses it when everything matches; like the trace cache, it never makes an
analysis fail."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile

import polars as pl

from analyzer.model.trace import Trace
from analyzer.readers.trace_cache import code_hash, matching_folder

_ANALYSIS_CODE = ("analysis.py", "projection.py", "accounting.py", "summary.py", "categories.py")
# What an analysis adds and keeps: tables of Analysis, and the ops' added columns.
ANALYSIS_TABLES = ("ranges", "charges", "waits", "phases", "categories", "cycles", "cycle_phases", "launch",
                   "streams", "devices", "kernels", "unattributed")


def options(grouping, rules, domains) -> dict:
    """What shapes an analysis besides the tables: its options and the code."""
    return {"grouping": list(grouping), "domains": list(domains),
            "rules": [[r.category, r.pattern] for r in rules], "code": code_hash(_ANALYSIS_CODE)}


def _analysis_folder(folder: str, opts: dict) -> str:
    digest = hashlib.sha256(json.dumps(opts, sort_keys=True).encode()).hexdigest()[:16]
    return os.path.join(folder, f"analysis-{digest}")


def load_analysis(path: str, opts: dict, trace: Trace):
    """The cached analysis of `trace` (read from this cache) with options `opts`, or None."""
    from analyzer.analysis import Analysis

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
        tables = {t: pl.read_parquet(os.path.join(sub, f"{t}.parquet")) for t in ANALYSIS_TABLES}
        ranges = tables["ranges"]
        kept = Trace(ops=trace.ops, api=trace.api, ranges=ranges.select(list(trace.ranges.columns)),
                     marks=trace.marks, meta=trace.meta)
        return Analysis(trace=kept, grouping=tuple(opts["grouping"]), ops=trace.ops.with_columns(added),
                        notes=list(doc["notes"]), **tables)
    except Exception:
        return None


def store_analysis(path: str, opts: dict, a) -> None:
    """Keep analysis `a` of the export at `path` (whose tables are cached) for `load_analysis`."""
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
        for t in ANALYSIS_TABLES:
            df = getattr(a, t)
            df.write_parquet(os.path.join(tmp, f"{t}.parquet"), compression="lz4", statistics=False,
                             row_group_size=max(1, df.height))
        with open(os.path.join(tmp, "analysis.json"), "w", encoding="utf-8") as fh:
            json.dump({"options": opts, "notes": a.notes}, fh)
        for old in os.listdir(folder):  # one analysis kept per export: the latest
            if old.startswith("analysis-"):
                shutil.rmtree(os.path.join(folder, old), ignore_errors=True)
        os.replace(tmp, sub)
    except Exception as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"specprof: note: the analysis of {path} was not cached ({getattr(exc, 'strerror', None) or exc})",
              file=sys.stderr)


def analyze(path: str, grouping, rules, domains=(), enabled: bool = True):
    """`analysis.analyze(analysis.load(path), ...)`, through the cache when `enabled` (nsys exports)."""
    from analyzer import analysis, progress
    from analyzer.readers.inputs import resolve
    from analyzer.readers.load import load_trace

    if not enabled:
        return analysis.analyze(load_trace(path), grouping=grouping, rules=rules, domains=domains)
    trace = load_trace(path, cache=True)
    if trace.meta.format != "nsys-sqlite":
        return analysis.analyze(trace, grouping=grouping, rules=rules, domains=domains)
    export = resolve(path)
    opts = options(grouping, rules, domains)
    with progress.step("reading the cached analysis"):
        cached = load_analysis(export, opts, trace)
    if cached is not None:
        return cached
    result = analysis.analyze(trace, grouping=grouping, rules=rules, domains=domains)
    with progress.step("caching the analysis"):
        store_analysis(export, opts, result)
    return result
