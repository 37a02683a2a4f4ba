"""A cache of the parsed tables of an nsys export, as Parquet, so that the next analysis skips SQLite.

Every cache lives in the user's cache folder, never beside the input: `$SPECPROF_CACHE_DIR` when set, else
platformdirs' user cache folder for specprof (`~/.cache/specprof` on Linux, `$XDG_CACHE_HOME/specprof` where
that is set). The cache of an export at PATH is the folder `ROOT/traces/<hash of PATH's real path>-NAME/`:
its Trace's tables (`ops`, `api`, `ranges`, `marks`) and its stamp, `specprof-cache.json` (schema
`ENTRY_SCHEMA`), which marks the folder as specprof's and holds

- the key: the export's size, modification time (ns) and the SHA-256 of its whole content (a changed,
  replaced or damaged file, even one whose size and mtime were kept, or a cache copied under another export's
  name, does not match); `CACHE_SCHEMA` and the hash of the analyzer's code (code_identity.py: every module
  of the package, C modules included): a cache written by other code is not used;
- what the hash was of (`hashed`): the file's device, inode, size, mtime and ctime, and when the hashing
  began. A later run takes the hash from there while all five are unchanged and the ctime was `RACY_NS`
  older than the hash (`export_digest`), so that a cached run does not read the whole export again;
- the size and SHA-256 of each of the entry's files: each is read whole into memory (never more than the
  size listed), checked, and parsed from those same bytes, so an edited or damaged `ops.parquet` is never used.

A stamp (and every JSON file of an entry) is read to at most `JSON_MAX` bytes and `JSON_DEPTH` levels: a larger
or deeper one, or one that is not JSON of this schema, is a broken stamp: its entry is never used, `cache info`
lists it as broken, and eviction and `cache clear` remove it.

A moved or renamed export has another real path, so another folder: a cache is never looked up by the name
alone. The same folder holds the cache of the analysis of those tables (analyzer/app/analysis_cache.py).

Only stamped folders are entries, and of an entry only the files specprof writes there are removed
(`_clear_folder`): eviction and `cache clear` never touch a folder under `traces/` without a stamp, nor,
in a stamped one, a name specprof does not write, nor a table its stamp does not list (with its size, in a
folder other than its export's: a stamp copied there), unless the stamp lists none and the folder holds nothing
but specprof's names (a broken stamp, a write cut short); the folder goes once empty, else it stays, stamped,
and `cache clear` names it. Nothing is followed through a link: a `traces` that is a link holds no entries and
is never written through; each entry is opened with O_NOFOLLOW, and only its regular files and its analysis
folders are removed, relative to its folder's descriptor.

The caches together are kept under a size bound (`$SPECPROF_CACHE_MAX_GB`, default `DEFAULT_MAX_GB`): after
each write, the entries least recently used are removed until the rest fit (never the one just written).
`specprof cache info` says where the cache is and how large; `specprof cache clear` empties it.

A cache that does not match, or cannot be read, is ignored (and rewritten); a cache that cannot be written is
skipped with a note on stderr. The cache never makes an analysis fail.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import platformdirs
import polars as pl

from specprof.analyzer import safe_files
from specprof.analyzer.code_identity import code_hash
from specprof.analyzer.errors import SpecprofError, clean
from specprof.analyzer.model.trace import Trace, TraceMeta

CACHE_SCHEMA = "specprof.cache/3"
ENTRY_SCHEMA = "specprof.cache-entry/1"  # the stamp's schema: a folder holding it is specprof's
STAMP = "specprof-cache.json"
TABLES = ("ops", "api", "ranges", "marks", "syncs")
CHUNK = 8 << 20  # bytes hashed at a time
ENTRIES = "traces"  # the folder of the entries, under the cache root
USED = "used"  # touched on every use: the entries least recently used go first
DEFAULT_MAX_GB = 10.0
JSON_MAX = 16 << 20  # the most bytes a stamp (or any JSON file of an entry) is read to: a real one holds kilobytes
JSON_DEPTH = 64  # the deepest a stamp's JSON may nest: specprof writes a few levels


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


_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_LEGACY = re.compile(r"[0-9a-f]{16}-")  # entries of specprof.cache/2, before stamps: `key.json` inside
# (real path, dev, inode, size, mtime, ctime) -> (SHA-256, when its hashing began, ns), this process only
_digests: dict[tuple, tuple[str, int]] = {}
_digests_lock = threading.Lock()
# A hash is reused from a stamp only for a file whose ctime is at least this much older than the hash: a change
# made within a coarse clock's tick of the stat that preceded the hash could leave the same ctime (git's "racily
# clean" entries). 2 s is FAT's mtime resolution, the coarsest of the common file systems.
RACY_NS = 2_000_000_000
_IDENTITY = ("dev", "ino", "size", "mtime_ns", "ctime_ns")


def _identity(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _trusted(hashed, st: os.stat_result) -> str | None:
    """The SHA-256 a stamp's `hashed` record (`hash_record`) gives for the file whose stat is `st`, when that
    record is of this very file, unchanged since it was hashed: same device, inode, size, mtime and ctime (no
    write or metadata change leaves a ctime as it was, and no call sets it), and a ctime older than the hash by
    RACY_NS. None otherwise (the file is hashed again)."""
    try:
        fields = tuple(int(hashed[k]) for k in _IDENTITY)
        digest, at = hashed["sha256"], int(hashed["at_ns"])
    except (TypeError, KeyError, ValueError):
        return None
    if fields != _identity(st) or fields[4] + RACY_NS > at:
        return None
    return digest if isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest) else None


def export_digest(path: str, hashed: dict | None = None) -> tuple[os.stat_result, str]:
    """The export's stat and the SHA-256 of its whole content (OSError when it is not a regular file).
    Computed once per process for a file whose inode, size, mtime and ctime have not changed (a write keeps
    none of the ctime: a file edited with its mtime put back is hashed again), and not at all when `hashed`, a
    stamp's record of an earlier process's hash, is of this file unchanged since (`_trusted`)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO is not waited on
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path}: not a regular file")
        memo = (os.path.realpath(path), *_identity(st))
        with _digests_lock:
            known = _digests.get(memo)
        if known is not None:
            return st, known[0]
        if hashed is not None and (digest := _trusted(hashed, st)) is not None:
            with _digests_lock:
                _digests[memo] = (digest, int(hashed["at_ns"]))
            return st, digest
        at = time.time_ns()
        h = hashlib.sha256()
        with os.fdopen(os.dup(fd), "rb", buffering=0) as fh:
            while chunk := fh.read(CHUNK):
                h.update(chunk)
        with _digests_lock:
            _digests[memo] = (h.hexdigest(), at)
        return st, h.hexdigest()
    finally:
        os.close(fd)


def hash_record(path: str) -> dict | None:
    """What a stamp keeps of this process's hash of the export at `path`, for `export_digest` in a later
    process: the file's identity when it was hashed, when the hashing began, and the hash; None when this
    process has not hashed the file as it is now."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    with _digests_lock:
        known = _digests.get((os.path.realpath(path), *_identity(st)))
    if known is None:
        return None
    return {**dict(zip(_IDENTITY, _identity(st))), "at_ns": known[1], "sha256": known[0]}


def key(path: str, hashed: dict | None = None) -> dict:
    """What identifies the export at `path` (its whole content) and the code that parses it (`hashed`: a
    stamp's record of an earlier hash, `export_digest`)."""
    st, digest = export_digest(path, hashed)
    return {"schema": CACHE_SCHEMA, "code": code_hash(), "path": os.path.realpath(path), "size": st.st_size,
            "mtime_ns": st.st_mtime_ns, "sha256": digest}


def location(path: str) -> str:
    """The folder of the cache of the export at `path`: named by a hash of its real path (and its name, to be
    read by a person)."""
    real = os.path.realpath(path)
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:16]
    return os.path.join(root(), ENTRIES, f"{digest}-{os.path.basename(real)}")


def _doc_digest(doc: dict) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


# --------------------------------------------------------------------------------- files, never through links


@contextmanager
def _folder(path: str, dir_fd: int | None = None):
    """A folder opened without following a link (OSError when it is one, or is not a folder)."""
    fd = os.open(path, _NOFOLLOW_DIR, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def _read_bytes(name: str, dir_fd: int, limit: int) -> bytes:
    """The bytes of the regular file `name` in the folder open as `dir_fd`, never through a link; ValueError,
    without reading it, when it holds more than `limit` bytes (a stamp of gigabytes is a broken one)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{name}: not a regular file")
        data = fh.read(limit + 1) if st.st_size <= limit else b""
        if st.st_size > limit or len(data) > limit:  # (one that grew since its stat is not read past limit)
            raise ValueError(f"{name}: more than {limit} bytes")
        return data


def _write_bytes(name: str, data: bytes, dir_fd: int) -> None:
    safe_files.replace(name, data, dir_fd=dir_fd, mode=0o644)  # a new file renamed over `name`: never through a link


def read_json(name: str, dir_fd: int, limit: int = JSON_MAX):
    """The JSON document `name` of the folder open as `dir_fd` (`_read_bytes`, at most `limit` bytes);
    ValueError for one that is too large, not UTF-8, not JSON, or nested deeper than JSON_DEPTH (which
    specprof never writes, and which could not be compared or hashed again without running out of stack)."""
    data = _read_bytes(name, dir_fd, limit)
    try:
        doc = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError(f"{name}: JSON nested too deep") from None
    level, todo = 0, [doc]
    while todo:  # one level at a time, no recursion
        level += 1
        if level > JSON_DEPTH:
            raise ValueError(f"{name}: JSON nested more than {JSON_DEPTH} deep")
        todo = [v for x in todo if isinstance(x, (dict, list)) for v in (x.values() if isinstance(x, dict) else x)
                if isinstance(v, (dict, list))]
    return doc


def write_tables(dir_fd: int, tables: dict) -> dict:
    """Write each DataFrame of `tables` as NAME.parquet into the folder open as `dir_fd`; returns what the
    stamp keeps of them: {file: {"bytes", "sha256"}}."""
    files = {}
    for name, df in tables.items():
        buffer = io.BytesIO()
        # One row group per table: read back, each column is one chunk (as a Trace keeps them), not dozens
        # to be copied together.
        df.write_parquet(buffer, compression="lz4", statistics=False, row_group_size=max(1, df.height))
        data = buffer.getvalue()
        del buffer
        _write_bytes(f"{name}.parquet", data, dir_fd)
        files[f"{name}.parquet"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return files


def read_tables(dir_fd: int, files: dict, names) -> dict:
    """The tables `names` of the folder open as `dir_fd`, each file checked against `files` (write_tables'
    record) before it is parsed from the very bytes checked; ValueError when one does not match."""
    out = {}
    for name in names:
        want = files.get(f"{name}.parquet") if isinstance(files, dict) else None
        size = want.get("bytes") if isinstance(want, dict) else None
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"{name}.parquet is not listed")
        data = _read_bytes(f"{name}.parquet", dir_fd, size)  # (a larger file is not read)
        if len(data) != size or \
                hashlib.sha256(data).hexdigest() != want.get("sha256"):
            raise ValueError(f"{name}.parquet does not match its checksum")
        out[name] = pl.read_parquet(io.BytesIO(data))
        del data
    return out


def _stamp(dir_fd: int) -> dict | None:
    """The stamp of the folder open as `dir_fd` when it is specprof's, else None."""
    try:
        doc = read_json(STAMP, dir_fd)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("schema") == ENTRY_SCHEMA else None


def _write_stamp(dir_fd: int, doc: dict) -> None:
    """Replace the folder's stamp at once (a reader sees the old one or the new one)."""
    _write_bytes(STAMP + ".new", json.dumps(doc, default=str).encode(), dir_fd)
    os.replace(STAMP + ".new", STAMP, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def _is_complete(doc: dict) -> bool:
    return doc.get("complete") is True and doc.get("digest") == _stamped(doc)["digest"]


@contextmanager
def _folder_or_none(path: str, dir_fd: int | None = None):
    """`path` (relative to `dir_fd`) opened as a folder without following a link; None when it is absent, a
    link (never followed), or not a folder."""
    try:
        fd = os.open(path, _NOFOLLOW_DIR, dir_fd=dir_fd)
    except OSError:
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def _entries_folder():
    """ROOT/traces (`_folder_or_none`)."""
    return _folder_or_none(os.path.join(root(), ENTRIES))


# ------------------------------------------------------------------------------------------------- use


@contextmanager
def _entry(path: str):
    """The entry folder of the export at `path`, opened (under ROOT/traces) without following a link; None
    when there is none."""
    with _entries_folder() as base:
        if base is None:
            yield None
            return
        with _folder_or_none(os.path.basename(location(path)), base) as fd:
            yield fd


def _matching(path: str):
    """(folder, stamp) of the cache of `path` when its key matches the export as it is now."""
    with _entry(path) as fd:
        doc = None if fd is None else _stamp(fd)
    if doc is None or not _is_complete(doc):
        return
    try:
        want = key(path, doc.get("hashed"))
    except OSError:
        return
    if doc.get("key") == want:
        yield location(path), doc


def _touch(dir_fd: int) -> None:
    try:
        _write_bytes(USED, str(time.time_ns()).encode(), dir_fd)
    except OSError:
        pass


def load(path: str) -> Trace | None:
    """The cached Trace of the export at `path`, or None when there is no matching cache (the export's whole
    content is hashed in a thread while the entry's files are read and checked)."""
    try:
        with _entry(path) as fd:
            doc = None if fd is None else _stamp(fd)
            if doc is None or not _is_complete(doc):
                return None
            digest: dict = {}

            def hash_export():
                try:
                    digest["key"] = key(path, doc.get("hashed"))
                except OSError:
                    pass

            hasher = threading.Thread(target=hash_export, name="specprof-cache-hash", daemon=True)
            hasher.start()
            try:
                tables = read_tables(fd, doc["files"], TABLES)
            finally:
                hasher.join()
            if digest.get("key") != doc.get("key"):
                return None
            meta = dict(doc["meta"])
            meta["threads"] = {int(k): v for k, v in meta.get("threads", {}).items()}
            meta["path"] = path
            _rehashed(fd, doc, path)
            _touch(fd)
            return Trace(**tables, meta=TraceMeta(**meta))
    except Exception:  # a missing, partial, edited or foreign cache is no cache
        return None


def _stamped(doc: dict) -> dict:
    """The complete stamp of an entry whose `key`, `meta`, `files` and `hashed` are `doc`'s."""
    body = {k: doc.get(k) for k in ("key", "meta", "files", "hashed")}
    return {"schema": ENTRY_SCHEMA, "complete": True, **body, "digest": _doc_digest(body)}


def _rehashed(dir_fd: int, doc: dict, path: str) -> None:
    """Keep in the stamp `doc` the record of the hash this process made of the export (a file cached right
    after it was written is hashed again by the next run, `RACY_NS`; once it is older, that run's record lets
    the runs after it skip the hash)."""
    record = hash_record(path)
    if record is None or record == doc.get("hashed"):
        return
    try:
        _write_stamp(dir_fd, _stamped({**doc, "hashed": record}))
    except OSError:
        pass


def _note(path: str, where: str, why) -> None:
    print(clean(f"specprof: note: the parsed tables of {path} were not cached ({where}: {why}); "
                "`specprof cache info` says where the cache is"), file=sys.stderr)


def store(path: str, trace: Trace) -> str | None:
    """Write the cache of `path`, then keep the whole cache under its size bound; returns the folder, or None
    (with a note on stderr) when it could not be written."""
    try:
        doc = {"key": key(path), "meta": asdict(trace.meta), "hashed": hash_record(path)}
    except OSError:
        return None
    doc["meta"]["threads"] = {str(k): v for k, v in trace.meta.threads.items()}
    folder = location(path)
    parent, name = os.path.split(folder)
    tmp = None
    try:
        os.makedirs(parent, exist_ok=True)
        if os.path.islink(parent):
            _note(path, parent, "a link, which specprof does not write through")
            return None
        with _folder(parent) as base:
            tmp = os.path.basename(tempfile.mkdtemp(prefix=name + ".tmp-", dir=parent))
            with _folder(tmp, base) as fd:
                _write_stamp(fd, {"schema": ENTRY_SCHEMA, "complete": False})  # first: a left-over is specprof's
                doc["files"] = write_tables(fd, {t: getattr(trace, t) for t in TABLES})
                _write_stamp(fd, _stamped(doc))
                _touch(fd)
            try:
                info = os.stat(name, dir_fd=base, follow_symlinks=False)
            except FileNotFoundError:
                info = None
            if info is not None:
                if not (stat.S_ISDIR(info.st_mode) and _remove(base, name)):
                    _note(path, folder, "a folder or file there is not specprof's, and is left alone")
                    shutil.rmtree(tmp, dir_fd=base, ignore_errors=True)
                    return None
            os.replace(tmp, name, src_dir_fd=base, dst_dir_fd=base)
    except Exception as exc:
        if tmp is not None:
            shutil.rmtree(os.path.join(parent, tmp), ignore_errors=True)
        _note(path, parent, getattr(exc, "strerror", None) or exc)
        return None
    evict(keep=folder)
    return folder


def matching_folder(path: str) -> str | None:
    """The folder of the cache of `path` that matches the export as it is now, or None."""
    return next((folder for folder, _ in _matching(path)), None)


# ---------------------------------------------------------------------------------------- entries, eviction


@dataclass
class Entry:
    folder: str
    export: str | None  # the export it is the cache of, as its stamp says
    bytes: int
    used_ns: int  # when it was last written or read
    complete: bool = True  # False: a write still going on, or one interrupted, or a broken stamp
    broken: bool = False  # its stamp cannot be read (too large, not JSON, nested too deep, another schema)
    elsewhere: bool = False  # its folder is not the one its export's cache is kept in (a stamp copied there)


BROKEN = {"broken": True, "complete": False}  # what `_specprofs` gives for a folder whose stamp cannot be read


def _specprofs(base: int, name: str) -> dict | None:
    """What marks `name` (in the folder open as `base`) as a cache entry: its stamp (BROKEN for a stamp that
    cannot be read), or for an entry of the schema before stamps, its key.json (under a `<16 hex digits>-`
    name); None for anything else."""
    try:
        with _folder(name, base) as fd:
            doc = _stamp(fd)
            if doc is not None:
                return doc
            try:
                if stat.S_ISREG(os.stat(STAMP, dir_fd=fd, follow_symlinks=False).st_mode):
                    return dict(BROKEN)
            except FileNotFoundError:
                pass
            if _LEGACY.match(name):
                legacy = read_json("key.json", fd)
                if isinstance(legacy, dict) and str(legacy.get("key", {}).get("schema", "")).startswith(
                        "specprof.cache/"):
                    return {"key": legacy["key"], "complete": True, "legacy": True}
    except (OSError, ValueError, AttributeError):
        pass
    return None


# What specprof writes in an entry, and so what it removes: the stamp and its next version, USED, the tables;
# key.json, the stamp of the schema before stamps; and the analysis of the tables (app/analysis_cache.py), in
# folders `analysis-<16 hex digits>` (`analysis.tmp-*` while written), each holding `analysis.json` (which lists
# its tables as a stamp does), its tables, and the results kept beside it (`NAME.json`, `NAME.json.tmp-PID`); and
# the new file of any of these whose write was cut short (`.NAME.<12 hex digits>.tmp`, specprof.analyzer.safe_files).
_BOOKKEEPING = {STAMP, STAMP + ".new", USED}
_ANALYSIS_FOLDER = re.compile(r"analysis-[0-9a-f]{16}|analysis\.tmp-[A-Za-z0-9_]+")
_ANALYSIS_STAMP = "analysis.json"
_ANALYSIS_FILE = re.compile(r"[a-z_]+\.parquet|[a-z_]+\.json(\.tmp-[0-9]+)?")


def _listed(doc) -> dict[str, int]:
    """The files a stamp (or an analysis.json) lists, with their sizes."""
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict):
        return {}
    return {k: v["bytes"] for k, v in files.items() if isinstance(k, str) and isinstance(v, dict)
            and isinstance(v.get("bytes"), int)}


def _clear_folder(fd: int, stamp: str, doc, names, sized: bool) -> list[str]:
    """Remove from the folder open as `fd` the files specprof wrote there: its bookkeeping files (`names`) and
    its tables (`*.parquet`), each table only where the folder's stamp (`doc`, read from `stamp`) lists it (and
    with its size, where `sized`), or where that stamp lists none (cannot be read, or a write cut short) and the
    folder holds nothing but names specprof writes; and, the same way, its analysis folders, each once empty.
    The stamp goes last, and only when nothing else is left. Returns what is left (besides the stamp): names
    specprof did not write, never followed or removed. A regular file or a folder alone is removed, never a
    link."""
    listed = _listed(doc) if isinstance(doc, dict) and doc.get("complete", True) is not False else {}
    kinds = {}
    for name in os.listdir(fd):
        try:
            kinds[name] = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
    analysis = stamp == _ANALYSIS_STAMP

    def ours(name, st) -> bool:
        if stat.S_ISDIR(st.st_mode):
            return not analysis and _ANALYSIS_FOLDER.fullmatch(name) is not None
        if not stat.S_ISREG(st.st_mode):
            return False
        name = safe_files.temporary_of(name) or name  # the new file of a write cut short is as its name's
        return name in names or (_ANALYSIS_FILE.fullmatch(name) is not None if analysis else
                                 name in {f"{t}.parquet" for t in TABLES})

    unlisted = not listed and all(ours(n, st) for n, st in kinds.items() if n != stamp)
    left = []
    for name, st in sorted(kinds.items()):
        if name == stamp or not ours(name, st):
            if name != stamp:
                left.append(name)
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                with _folder(name, fd) as sub:
                    try:
                        sub_doc = read_json(_ANALYSIS_STAMP, sub)
                    except (OSError, ValueError):
                        sub_doc = None
                    inner = _clear_folder(sub, _ANALYSIS_STAMP, sub_doc, {_ANALYSIS_STAMP}, sized)
                if not inner:
                    os.rmdir(name, dir_fd=fd)
                    continue
                left.extend(f"{name}/{x}" for x in inner)
            except FileNotFoundError:
                pass
            except OSError:
                left.append(name)
            continue
        table = name.endswith(".parquet")
        if table and not unlisted and (name not in listed or (sized and listed[name] != st.st_size)):
            left.append(name)
            continue
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        except OSError:
            left.append(name)
    if not left and stamp in kinds:
        try:
            os.unlink(stamp, dir_fd=fd)
        except FileNotFoundError:
            pass
    return left


def _size(base: int, name: str) -> int:
    """The bytes of the entry `name`; 0 for one gone since it was listed (another process's write renames its
    folder, or its eviction removes it, at any moment: several workers share the cache)."""
    total = 0
    try:
        for _, _, files, fd in os.fwalk(name, dir_fd=base):  # never into a link
            for f in files:
                try:
                    total += os.stat(f, dir_fd=fd, follow_symlinks=False).st_size
                except OSError:
                    pass
    except OSError:  # (fwalk's own stat and open of the entry, which no onerror covers)
        return 0
    return total


def _remove(base: int, name: str) -> bool:
    """Remove the entry `name` of the folder open as `base` (`_removed`); returns whether it is gone."""
    return _removed(base, name) == []


def _removed(base: int, name: str) -> list[str] | None:
    """Remove the entry `name` of the folder open as `base`, if it is one (stamped): the files specprof wrote
    there (`_clear_folder`), then the folder once empty; never through a link. Returns what is left in it (an
    empty list: the entry is gone), or None when `name` is no entry. A table the stamp lists is removed
    whatever its size (a damaged one included) in the folder where specprof keeps its export's cache
    (`location`), and only at the size the stamp lists anywhere else (a stamp copied into another folder)."""
    doc = _specprofs(base, name)
    if doc is None:
        return None
    try:
        with _folder(name, base) as fd:
            if doc.get("legacy"):
                left = _clear_folder(fd, "key.json", None, _BOOKKEEPING, True)
            elif doc.get("broken"):
                left = _clear_folder(fd, STAMP, None, _BOOKKEEPING, True)
            else:
                left = _clear_folder(fd, STAMP, doc, _BOOKKEEPING, not _at_home(doc, name))
        if not left:
            os.rmdir(name, dir_fd=base)
    except FileNotFoundError:
        return []
    except OSError as exc:
        return [exc.strerror or str(exc)]
    return left


def _at_home(doc: dict, name: str) -> bool:
    """Whether the entry `name`, stamped `doc`, is in the folder where specprof keeps the cache of the export its
    stamp names."""
    export = doc.get("key", {}).get("path") if isinstance(doc.get("key"), dict) else None
    try:
        return isinstance(export, str) and os.path.basename(location(export)) == name
    except (ValueError, OSError):  # (a path with a NUL in it)
        return False


def _list(base: int) -> list[Entry]:
    out = []
    where = os.path.join(root(), ENTRIES)
    for name in os.listdir(base):
        doc = _specprofs(base, name)
        if doc is None:
            continue
        try:
            with _folder(name, base) as fd:
                used = int(_read_bytes(USED, fd, 64).decode().strip() or 0)
        except (OSError, ValueError):
            used = 0
        export = doc.get("key", {}).get("path") if isinstance(doc.get("key"), dict) else None
        export = export if isinstance(export, str) else None
        complete = bool(doc.get("legacy")) or (not doc.get("broken") and _is_complete(doc))
        elsewhere = export is not None and not doc.get("legacy") and not _at_home(doc, name)
        out.append(Entry(os.path.join(where, name), export, _size(base, name), used, complete,
                         bool(doc.get("broken")), elsewhere))
    return sorted(out, key=lambda e: (e.used_ns, e.folder))


def entries() -> list[Entry]:
    """Every entry of the cache (every stamped folder under ROOT/traces), least recently used first."""
    with _entries_folder() as base:
        return [] if base is None else _list(base)


def evict(keep: str | None = None, limit: int | None = None) -> list[Entry]:
    """Remove the entries least recently used until the cache fits `limit` bytes (default `max_bytes()`; 0:
    no bound), never `keep`, nor a write still going on; returns those removed."""
    limit = max_bytes() if limit is None else limit
    if not limit:
        return []
    with _entries_folder() as base:
        if base is None:
            return []
        listed = _list(base)
        total = sum(e.bytes for e in listed)
        removed = []
        for e in listed:
            if total <= limit:
                break
            if (not e.complete and not e.broken) or \
                    (keep is not None and os.path.abspath(e.folder) == os.path.abspath(keep)):
                continue
            if _remove(base, os.path.basename(e.folder)):
                total -= e.bytes
                removed.append(e)
    return removed


def clear() -> tuple[int, int]:
    """Remove every entry of the cache (left-over writes and broken entries included; of each, only the files
    specprof wrote: `_clear_folder`); returns (entries, bytes) removed. SpecprofError naming an entry that holds
    anything else, which is left there, once every other entry is removed."""
    with _entries_folder() as base:
        if base is None:
            return 0, 0
        listed = _list(base)
        left = [(e, rest) for e in listed if (rest := _removed(base, os.path.basename(e.folder)))]
    if left:
        (e, rest), more = left[0], len(left) - 1
        shown = ", ".join(rest[:3]) + (", ..." if len(rest) > 3 else "")
        raise SpecprofError(f"{e.folder}: not removed: it holds files that are not the cache's ({shown}), left "
                            f"as they were; move them out of the cache folder, or remove the folder by hand"
                            + (f" (and {more} more such folder(s): `specprof cache info` lists them)" if more else ""),
                            e.folder)
    return len(listed), sum(e.bytes for e in listed)
