"""A cache of the parsed tables of an nsys export, as Parquet, so that the next analysis skips SQLite.

Every cache lives in the user's cache folder, never beside the input: `$SPECPROF_CACHE_DIR` when set, else
platformdirs' user cache folder for specprof (`~/.cache/specprof` on Linux, `$XDG_CACHE_HOME/specprof` where
that is set). The cache of an export at PATH is the folder `ROOT/traces/<hash of PATH's real path>-NAME/`:
its Trace's tables (`ops`, `api`, `ranges`, `marks`) and `key.json`, which holds

- the export's size and modification time (ns), and a SHA-256 of its first and last 64 KiB: a changed or
  replaced file, or a cache copied under another export's name, does not match;
- `CACHE_SCHEMA` and a hash of the code that makes and reads the tables (the reader, the Trace model, this
  module): a cache written by another version of specprof is not used.

A moved or renamed export has another real path, so another folder: a cache is never looked up by the name
alone. The same folder holds the cache of the analysis of those tables (analyzer/app/analysis_cache.py).

The caches together are kept under a size bound (`$SPECPROF_CACHE_MAX_GB`, default `DEFAULT_MAX_GB`): after
each write, the entries least recently used are removed until the rest fit (never the one just written).
`specprof cache info` says where the cache is and how large; `specprof cache clear` empties it.

A cache that does not match, or cannot be read, is ignored (and rewritten); a cache that cannot be written is
skipped with a note on stderr. The cache never makes an analysis fail.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

import platformdirs
import polars as pl

from analyzer.errors import SpecprofError
from analyzer.model.trace import Trace, TraceMeta

CACHE_SCHEMA = "specprof.cache/2"
TABLES = ("ops", "api", "ranges", "marks")
EDGE = 64 * 1024
ENTRIES = "traces"  # the folder of the entries, under the cache root
USED = "used"  # touched on every use: the entries least recently used go first
DEFAULT_MAX_GB = 10.0
_CODE = ("readers/nsys_sqlite.py", "model/trace.py", "readers/trace_cache.py")


def root() -> str:
    """The cache folder: $SPECPROF_CACHE_DIR, else the user's cache folder for specprof."""
    return os.environ.get("SPECPROF_CACHE_DIR") or platformdirs.user_cache_dir("specprof", appauthor=False)


def max_bytes() -> int:
    """The size bound of the whole cache: $SPECPROF_CACHE_MAX_GB (a number of GB, 0 for none), else
    DEFAULT_MAX_GB."""
    text = os.environ.get("SPECPROF_CACHE_MAX_GB")
    try:
        gb = float(text) if text else DEFAULT_MAX_GB
    except ValueError:
        gb = DEFAULT_MAX_GB
    if not math.isfinite(gb):
        gb = DEFAULT_MAX_GB
    return max(0, int(gb * 1e9))


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
    return {"schema": CACHE_SCHEMA, "code": code_hash(), "path": os.path.realpath(path), "size": st.st_size,
            "mtime_ns": st.st_mtime_ns, "edges_sha256": h.hexdigest()}


def location(path: str) -> str:
    """The folder of the cache of the export at `path`: named by a hash of its real path (and its name, to be
    read by a person)."""
    real = os.path.realpath(path)
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:16]
    return os.path.join(root(), ENTRIES, f"{digest}-{os.path.basename(real)}")


def _matching(path: str):
    """(folder, key.json's content) of the cache of `path` when its key matches the export as it is now."""
    try:
        want = key(path)
    except OSError:
        return
    folder = location(path)
    try:
        with open(os.path.join(folder, "key.json"), encoding="utf-8") as fh:
            doc = json.load(fh)
    except Exception:  # none there, or unreadable
        return
    if isinstance(doc, dict) and doc.get("key") == want:
        yield folder, doc


def _touch(folder: str) -> None:
    try:
        with open(os.path.join(folder, USED), "w", encoding="utf-8") as fh:
            fh.write(str(time.time_ns()))
    except OSError:
        pass


def load(path: str) -> Trace | None:
    """The cached Trace of the export at `path`, or None when there is no matching cache."""
    for folder, doc in _matching(path):
        try:
            tables = {t: pl.read_parquet(os.path.join(folder, f"{t}.parquet")) for t in TABLES}
            meta = doc["meta"]
            meta["threads"] = {int(k): v for k, v in meta.get("threads", {}).items()}
            meta["path"] = path
            _touch(folder)
            return Trace(**tables, meta=TraceMeta(**meta))
        except Exception:  # a missing, partial or foreign cache is no cache
            continue
    return None


def store(path: str, trace: Trace) -> str | None:
    """Write the cache of `path`, then keep the whole cache under its size bound; returns the folder, or None
    (with a note on stderr) when it could not be written."""
    try:
        doc = {"key": key(path), "meta": asdict(trace.meta)}
    except OSError:
        return None
    doc["meta"]["threads"] = {str(k): v for k, v in trace.meta.threads.items()}
    folder = location(path)
    parent = os.path.dirname(folder)
    tmp = None
    try:
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=os.path.basename(folder) + ".tmp-", dir=parent)
        for t in TABLES:
            # One row group per table: read back, each column is one chunk (as a Trace keeps them), not
            # dozens to be copied together.
            df = getattr(trace, t)
            df.write_parquet(os.path.join(tmp, f"{t}.parquet"), compression="lz4", statistics=False,
                             row_group_size=max(1, df.height))
        with open(os.path.join(tmp, "key.json"), "w", encoding="utf-8") as fh:
            json.dump(doc, fh, default=str)
        _touch(tmp)
        if os.path.isdir(folder):
            shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    except Exception as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"specprof: note: the parsed tables of {path} were not cached ({parent}: "
              f"{getattr(exc, 'strerror', None) or exc}); `specprof cache info` says where the cache is",
              file=sys.stderr)
        return None
    evict(keep=folder)
    return folder


def matching_folder(path: str) -> str | None:
    """The folder of the cache of `path` that matches the export as it is now, or None."""
    return next((folder for folder, _ in _matching(path)), None)


@dataclass
class Entry:
    folder: str
    export: str | None  # the export it is the cache of, as key.json says
    bytes: int
    used_ns: int  # when it was last written or read


def _size(folder: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(folder):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def entries() -> list[Entry]:
    """Every entry of the cache, least recently used first."""
    base = os.path.join(root(), ENTRIES)
    try:
        names = os.listdir(base)
    except OSError:
        return []
    out = []
    for name in names:
        folder = os.path.join(base, name)
        if not os.path.isdir(folder) or os.path.islink(folder):
            continue
        try:
            with open(os.path.join(folder, USED), encoding="utf-8") as fh:
                used = int(fh.read().strip() or 0)
        except (OSError, ValueError):
            used = 0
        try:
            with open(os.path.join(folder, "key.json"), encoding="utf-8") as fh:
                export = json.load(fh)["key"]["path"]
        except Exception:
            export = None
        out.append(Entry(folder, export, _size(folder), used))
    return sorted(out, key=lambda e: (e.used_ns, e.folder))


def evict(keep: str | None = None, limit: int | None = None) -> list[Entry]:
    """Remove the entries least recently used until the cache fits `limit` bytes (default `max_bytes()`; 0:
    no bound), never `keep`; returns those removed."""
    limit = max_bytes() if limit is None else limit
    if not limit:
        return []
    listed = entries()
    total = sum(e.bytes for e in listed)
    removed = []
    for e in listed:
        if total <= limit:
            break
        if keep is not None and os.path.abspath(e.folder) == os.path.abspath(keep):
            continue
        shutil.rmtree(e.folder, ignore_errors=True)
        total -= e.bytes
        removed.append(e)
    return removed


def clear() -> tuple[int, int]:
    """Remove every entry of the cache; returns (entries, bytes) removed."""
    listed = entries()
    base = os.path.join(root(), ENTRIES)
    for e in listed:
        shutil.rmtree(e.folder, ignore_errors=True)
    if os.path.isdir(base):  # left-over temporary folders of interrupted writes
        for name in os.listdir(base):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    left = [e for e in listed if os.path.exists(e.folder)]
    if left:
        raise SpecprofError(f"{left[0].folder}: could not be removed; remove it by hand", left[0].folder)
    return len(listed), sum(e.bytes for e in listed)
