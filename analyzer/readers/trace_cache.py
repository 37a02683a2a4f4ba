"""A cache of the parsed tables of an nsys export, as Parquet, so that the next analysis skips SQLite.

The cache of `DIR/RUN.sqlite` is the folder `DIR/.RUN.sqlite.specprof-cache/` (or, where DIR cannot
be written, `$XDG_CACHE_HOME/specprof/<hash of the path>-RUN.sqlite/`, ~/.cache by default). It holds
the Trace's tables (`ops`, `api`, `ranges`, `marks`) and `key.json`:

- the export's size and modification time (ns), and a SHA-256 of its first and last 64 KiB: a
  changed or replaced file, or a cache copied beside another export, does not match;
- `CACHE_SCHEMA` and a hash of the code that makes and reads the tables (the reader, the Trace
  model, this module): a cache written by another version of specprof is not used.

The same folder holds the cache of the analysis of those tables (analyzer/app/analysis_cache.py).

A cache that does not match, or cannot be read, is ignored (and rewritten); a cache that cannot be
written is skipped with a note on stderr. The cache never makes an analysis fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict

import polars as pl

from analyzer.model.trace import Trace, TraceMeta

CACHE_SCHEMA = "specprof.cache/1"
TABLES = ("ops", "api", "ranges", "marks")
SUFFIX = ".specprof-cache"
EDGE = 64 * 1024
_CODE = ("readers/nsys_sqlite.py", "model/trace.py", "readers/trace_cache.py")


def code_hash(files=_CODE) -> str:
    """A hash of the source files `files` (paths inside analyzer/)."""
    h = hashlib.sha256()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for rel in files:
        try:
            with open(os.path.join(here, rel), "rb") as fh:
                h.update(fh.read())
        except OSError:
            h.update(rel.encode())
    return h.hexdigest()[:16]


def key(path: str) -> dict:
    """What identifies the export at `path` and the code that parses it."""
    st = os.stat(path)
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        h.update(fh.read(EDGE))
        if st.st_size > EDGE:
            fh.seek(max(EDGE, st.st_size - EDGE))
            h.update(fh.read(EDGE))
    return {"schema": CACHE_SCHEMA, "code": code_hash(), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "edges_sha256": h.hexdigest()}


def locations(path: str) -> list[str]:
    """Where the cache of `path` may be: beside it, then in the user's cache folder."""
    path = os.path.abspath(path)
    folder, name = os.path.split(path)
    user = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    digest = hashlib.sha256(os.fsencode(path)).hexdigest()[:16]
    return [os.path.join(folder, f".{name}{SUFFIX}"), os.path.join(user, "specprof", f"{digest}-{name}")]


def _matching(path: str):
    """(folder, key.json's content) of each cache of `path` whose key matches the export as it is now."""
    try:
        want = key(path)
    except OSError:
        return
    for folder in locations(path):
        try:
            with open(os.path.join(folder, "key.json"), encoding="utf-8") as fh:
                doc = json.load(fh)
        except Exception:  # none there, or unreadable
            continue
        if isinstance(doc, dict) and doc.get("key") == want:
            yield folder, doc


def load(path: str) -> Trace | None:
    """The cached Trace of the export at `path`, or None when there is no matching cache."""
    for folder, doc in _matching(path):
        try:
            tables = {t: pl.read_parquet(os.path.join(folder, f"{t}.parquet")) for t in TABLES}
            meta = doc["meta"]
            meta["threads"] = {int(k): v for k, v in meta.get("threads", {}).items()}
            meta["path"] = path
            return Trace(**tables, meta=TraceMeta(**meta))
        except Exception:  # a missing, partial or foreign cache is no cache
            continue
    return None


def store(path: str, trace: Trace) -> str | None:
    """Write the cache of `path`; returns its folder, or None (with a note on stderr) when no
    location could be written."""
    try:
        doc = {"key": key(path), "meta": asdict(trace.meta)}
    except OSError:
        return None
    doc["meta"]["threads"] = {str(k): v for k, v in trace.meta.threads.items()}
    errors = []
    for folder in locations(path):
        parent = os.path.dirname(folder)
        tmp = None
        try:
            os.makedirs(parent, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix=os.path.basename(folder) + ".tmp-", dir=parent)
            for t in TABLES:
                # One row group per table: read back, each column is one chunk (as a Trace keeps
                # them), not dozens to be copied together.
                df = getattr(trace, t)
                df.write_parquet(os.path.join(tmp, f"{t}.parquet"), compression="lz4", statistics=False,
                                 row_group_size=max(1, df.height))
            with open(os.path.join(tmp, "key.json"), "w", encoding="utf-8") as fh:
                json.dump(doc, fh, default=str)
            if os.path.isdir(folder):
                shutil.rmtree(folder, ignore_errors=True)
            os.replace(tmp, folder)
            return folder
        except Exception as exc:
            errors.append(f"{parent}: {getattr(exc, 'strerror', None) or exc}")
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
    print(f"specprof: note: the parsed tables of {path} were not cached ({'; '.join(errors)})", file=sys.stderr)
    return None


def matching_folder(path: str) -> str | None:
    """The folder of the cache of `path` that matches the export as it is now, or None."""
    return next((folder for folder, _ in _matching(path)), None)
