"""The cache of an attribution: the last attribution of an nsys export's cached tables, kept with them
(readers/trace_cache.py, in the user's cache folder) in `analysis-<hash>/`: the columns it adds to the ops, its
other tables, notes and category parents, keyed by the options that shape it (grouping ranges, NVTX domains,
category rules) and the hash of the analyzer's code (code_identity.py). Its `analysis.json` holds the size and
SHA-256 of each of its files (each checked before it is parsed from the bytes checked) and a digest of its own
content. The loader (app/analyze.py) uses it when everything matches; like the trace cache, it never makes an analysis
fail."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile

import polars as pl

from specprof.analyzer import safe_files
from specprof.analyzer.code_identity import code_hash
from specprof.analyzer.core.attribution import Attribution
from specprof.analyzer.errors import clean
from specprof.analyzer.model.trace import Trace
from specprof.analyzer.readers.trace_cache import evict, matching_folder, read_json, read_tables, write_tables

# What an attribution adds and keeps: its tables, and the ops' added columns.
TABLES = ("ranges", "charges", "waits", "phases", "categories", "cycles", "cycle_phases", "launch",
                   "streams", "devices", "kernels", "unattributed", "pairs", "pair_phases", "pair_categories",
          "comm_ops")


def key(grouping, rules, domains) -> dict:
    """What shapes an attribution besides the tables: its options and the code."""
    return {"grouping": list(grouping), "domains": list(domains),
            "rules": [r.key() for r in rules], "code": code_hash()}


def _analysis_folder(folder: str, opts: dict) -> str:
    digest = hashlib.sha256(json.dumps(opts, sort_keys=True).encode()).hexdigest()[:16]
    return os.path.join(folder, f"analysis-{digest}")


def _digest(doc: dict) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def load(path: str, opts: dict, trace: Trace) -> Attribution | None:
    """The cached attribution of `trace` (read from this cache) with options `opts` (`key`), or None."""
    folder = matching_folder(path)
    if folder is None:
        return None
    sub = _analysis_folder(folder, opts)
    try:
        fd = os.open(sub, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            doc = read_json("analysis.json", fd)
            body = {k: doc.get(k) for k in ("options", "notes", "category_parents", "files")}
            if doc.get("options") != opts or doc.get("digest") != _digest(body):
                return None
            tables = read_tables(fd, doc["files"], ("ops_added", *TABLES))
        finally:
            os.close(fd)
        added = tables.pop("ops_added")
        if added.height != trace.ops.height:
            return None
        ranges = tables["ranges"]
        kept = Trace(ops=trace.ops, api=trace.api, ranges=ranges.select(list(trace.ranges.columns)),
                     marks=trace.marks, meta=trace.meta, syncs=trace.syncs)
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
        fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            files = write_tables(fd, {"ops_added": a.ops.select(added), **{t: getattr(a, t) for t in TABLES}})
            body = {"options": opts, "notes": a.notes, "category_parents": a.category_parents, "files": files}
            safe_files.replace("analysis.json", json.dumps({**body, "digest": _digest(body)}), dir_fd=fd, mode=0o644)
        finally:
            os.close(fd)
        for old in os.listdir(folder):  # one analysis kept per export: the latest
            if old.startswith("analysis-"):
                shutil.rmtree(os.path.join(folder, old), ignore_errors=True)
        os.replace(tmp, sub)
        evict(keep=folder)
    except Exception as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        print(clean(f"specprof: note: the analysis of {path} was not cached "
                    f"({getattr(exc, 'strerror', None) or exc})"), file=sys.stderr)


# -- results computed from a cached attribution, kept beside it ---------------------------------------------------

_FRAME_TYPES = {"String": pl.Utf8, "Int64": pl.Int64, "UInt32": pl.UInt32, "Float64": pl.Float64,
                "Boolean": pl.Boolean}


def _analysis_digest(fd: int) -> str | None:
    doc = read_json("analysis.json", fd)
    return doc.get("digest") if isinstance(doc, dict) else None


def load_result(path: str, opts: dict, name: str, code: str):
    """The result `name` kept by `store_result` beside the cached attribution of `path` with options `opts`, made by
    code of hash `code`: a dataclass instance as stored (its tables as polars frames), or None."""
    folder = matching_folder(path)
    if folder is None:
        return None
    try:
        fd = os.open(_analysis_folder(folder, opts), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            doc = read_json(f"{name}.json", fd)
            body = {k: doc.get(k) for k in ("options", "code", "analysis", "value")}
            if doc.get("digest") != _digest(body) or body["options"] != opts or body["code"] != code or \
                    body["analysis"] != _analysis_digest(fd):
                return None
        finally:
            os.close(fd)
        return body["value"]
    except Exception:
        return None


def store_result(path: str, opts: dict, name: str, code: str, value: dict) -> None:
    """Keep `value` (JSON: `frame_doc`'s for tables) as the result `name` of the cached attribution of `path` with
    options `opts` (nothing when that attribution is not cached): bound to that attribution's digest and to `code`,
    written whole or not at all."""
    folder = matching_folder(path)
    if folder is None:
        return
    try:
        fd = os.open(_analysis_folder(folder, opts), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        body = {"options": opts, "code": code, "analysis": _analysis_digest(fd), "value": value}
        safe_files.replace(f"{name}.json", json.dumps({**body, "digest": _digest(body)}), dir_fd=fd, mode=0o644)
    except Exception:
        pass
    finally:
        os.close(fd)


def frame_doc(df: pl.DataFrame) -> dict | None:
    """A small table as JSON (its columns and their types), or None where a type is not one `doc_frame` reads."""
    types = {c: str(t) for c, t in df.schema.items()}
    if any(t not in _FRAME_TYPES for t in types.values()):
        return None
    return {"types": types, "columns": df.to_dict(as_series=False)}


def doc_frame(doc: dict) -> pl.DataFrame:
    return pl.DataFrame(doc["columns"], schema={c: _FRAME_TYPES[t] for c, t in doc["types"].items()})
