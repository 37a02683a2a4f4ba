"""Differential fuzz of the nsys export reader: damaged copies of real captures, each table read both ways.

Each mutant is a real capture (fixtures/ and ../shared/traces) with random bytes written over pages of one
of the large tables the reader reads (a leaf or an interior page; now and then a record's header bytes,
where a changed serial type shifts every column after it, or a field of the page header: a cell count,
the first free block, the content area's start). The table is then read with every column, in
several threads over small slices, straight from the pages (analyzer/readers/nsys/_sqlite_pages.c) and through
SQLite. The rule (docs/robustness.md):

- both read rows: the same rows;
- one read rows and the other refused the table: the rows are the original's (the damage was in bytes the
  reader that read rows does not use, such as free space);
- both refused: fine. A refusal is a SpecprofError; anything else raised is a failure.

Each mutant is read twice each way (the outcome must not depend on which thread reads which slice).

Two more kinds of mutant:

- **Indexes** (`indexed_captures`): copies of a capture with indexes on the columns the reader filters on
  (NVTX_EVENTS.eventType, as tools that index exports add them, and the kernels' streamId) and one NVTX
  mark of 6,000 characters, which sends NVTX_EVENTS to the SQLite path. Each table with such an index is read
  filtered on the indexed column; the mutants damage the index's pages (random bytes) or make it disagree
  with its table (`stale_index`: values changed under it). Neither reader may read through an index: the
  same rule, against the undamaged table's rows.
- **The cache** (`run_cache`): the export's cached tables (readers/trace_cache.py) are written, then the export
  is damaged in place with its size and mtime kept, or one of the entry's files is; the cache must then be
  unused (the export is read again), or give exactly the undamaged tables.

    python3 tests/fuzz_exports.py --mutants 3000 --seed 1      # by hand: the long run
    tests/test_fuzz_exports.py                                  # the suite: a fast run, and under ASan/UBSan
"""

from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

import polars as pl  # noqa: E402

from specprof.analyzer.errors import SpecprofError  # noqa: E402
from specprof.analyzer.readers.nsys import Export, Select  # noqa: E402
from conftest import FIXTURES, shared_nsys  # noqa: E402

TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_MEMCPY",
          "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
SLICE_ROWS = 3000  # small slices: several threads over each table, as on a large export


STALE = 99  # the value a stale index holds for rows whose value changed under it


def captures() -> list[Path]:
    own = sorted(p for p in FIXTURES.glob("*/run.sqlite"))
    return own + shared_nsys()


def _select(con: sqlite3.Connection, table: str, where: tuple = ()):
    info = con.execute(f'PRAGMA table_info("{table}")').fetchall()
    columns = tuple(r[1] for r in info)
    schema = {f"c{i}": pl.Utf8 if "TEXT" in str(r[2]).upper() else pl.Int64 for i, r in enumerate(info)}
    return Select(table, columns, where), schema


def read(path: str, table: str, direct: bool, where: tuple = (), threads: int | None = None):
    """("rows", frame) or ("refused", message): `table` of `path`, every column, read one way (filtered by
    `where`, a Select's conditions, when given), in `threads` threads (None: the reader's default)."""
    try:
        ex = Export(path, pages=direct, threads=threads)
        try:
            select, schema = _select(ex.con, table, where)
            frames = ex.parallel(select, schema, slice_rows=SLICE_ROWS)
            df = pl.concat(frames) if frames else pl.DataFrame(schema=schema)
            return "rows", df, ex.read_by.get(table)
        finally:
            ex.close()
    except SpecprofError as exc:
        return "refused", str(exc), None
    except Exception as exc:  # noqa: BLE001 - a traceback for the user: the failure this looks for
        return "raised", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", None


def _same(a, b) -> bool:
    return a.height == b.height and a.equals(b, null_equal=True)


class Capture:
    """One capture: its bytes, page size, and for each large table its pages and original rows."""

    def __init__(self, path: Path):
        self.path = path
        self.data = path.read_bytes()
        self.page_size = int.from_bytes(self.data[16:18], "big") or 65536
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            roots = dict(con.execute("SELECT name, rootpage FROM sqlite_master WHERE type = 'table'"))
            self.tables = {}
            self.indexes = {}  # table -> (index name, its column, its pages): an index the reads filter on
            self.where = {}  # table -> the Select conditions it is read with
            for t in TABLES:
                if t in roots and con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] > 0:
                    self.tables[t] = self._pages(roots[t])
                    self._index(con, t)
        finally:
            con.close()
        self.original = {}
        for t in self.tables:
            kind, df, _ = read(str(path), t, True, self.where.get(t, ()))
            assert kind == "rows", f"{path}: {t} is refused undamaged: {df}"
            self.original[t] = df

    def _index(self, con: sqlite3.Connection, table: str) -> None:
        """The first index on one integer column of small values (an id, a type, a stream) of `table`: the
        table is then read filtered on that column, with about half of its values, which SQLite would
        answer from the index."""
        for name, root in con.execute("SELECT name, rootpage FROM sqlite_master WHERE type = 'index' AND "
                                      "tbl_name = ? AND rootpage > 0 ORDER BY name", (table,)).fetchall():
            cols = [r[2] for r in con.execute(f'PRAGMA index_info("{name}")')]
            if len(cols) != 1 or cols[0] is None:
                continue
            values = [v for (v,) in con.execute(f'SELECT DISTINCT "{cols[0]}" FROM "{table}" NOT INDEXED')]
            if not values or not all(isinstance(v, int) and 0 <= v < 1 << 20 for v in values):
                continue
            kept = tuple(sorted(values)[::2]) + (STALE,)
            self.indexes[table] = (name, cols[0], self._pages(root))
            self.where[table] = (("in", cols[0], kept),)
            return

    def _pages(self, root: int) -> list[int]:
        """Every page of the table's B-tree (interior and leaf), by walking it in Python."""
        out, todo = [], [root]
        while todo:
            n = todo.pop()
            out.append(n)
            at = (n - 1) * self.page_size
            hdr = at + (100 if n == 1 else 0)
            if self.data[hdr] in (0x05, 0x02):  # an interior page of a table, or of an index
                cells = int.from_bytes(self.data[hdr + 3:hdr + 5], "big")
                for i in range(cells):
                    off = int.from_bytes(self.data[hdr + 12 + 2 * i:hdr + 14 + 2 * i], "big")
                    todo.append(int.from_bytes(self.data[at + off:at + off + 4], "big"))
                todo.append(int.from_bytes(self.data[hdr + 8:hdr + 12], "big"))
        return out

    def mutant(self, rng: random.Random) -> tuple[str, bytes, str]:
        if self.indexes and rng.random() < 0.5:
            return self.index_mutant(rng)
        table = rng.choice(sorted(self.tables))
        pages = self.tables[table]
        n = rng.choice(pages)
        at = (n - 1) * self.page_size
        data = bytearray(self.data)
        what = rng.random()
        hdr = at + (100 if n == 1 else 0)
        if what < 0.1:  # a field of the page header: first free block, cell count, content start, fragments
            field = hdr + rng.choice([1, 2, 3, 4, 5, 6, 7])
            data[field] = rng.choice([0, 1, data[field] ^ 1, rng.randrange(256)])
            return table, bytes(data), f"page {n}: header byte {field - hdr}"
        if what < 0.35 and data[hdr] == 0x0D:  # a record header byte of one cell: a serial type, usually
            cells = int.from_bytes(data[hdr + 3:hdr + 5], "big")
            if cells:
                off = int.from_bytes(data[hdr + 8 + 2 * rng.randrange(cells):][:2], "big")
                data[at + off + rng.randrange(2, 14)] = rng.randrange(256)
                return table, bytes(data), f"page {n}: a record header byte"
        count = rng.choice([1, 1, 2, 4, 32])
        for _ in range(count):
            data[at + rng.randrange(self.page_size)] = rng.randrange(256)
        return table, bytes(data), f"page {n}: {count} random bytes"

    def index_mutant(self, rng: random.Random) -> tuple[str, bytes, str]:
        """An index the reads filter on, damaged (random bytes over one of its pages) or made to disagree
        with its table (a value changed under it); the table itself intact."""
        table = rng.choice(sorted(self.indexes))
        name, column, pages = self.indexes[table]
        if rng.random() < 0.5:
            n = rng.choice(pages)
            data = bytearray(self.data)
            count = rng.choice([1, 4, 32])
            for _ in range(count):
                data[(n - 1) * self.page_size + rng.randrange(self.page_size)] = rng.randrange(256)
            return table, bytes(data), f"index {name}, page {n}: {count} random bytes"
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "stale.sqlite"
            path.write_bytes(self.data)
            every = rng.choice([2, 3, 7, 50])
            stale_index(str(path), table, name, column, every)
            return table, path.read_bytes(), f"index {name}: stale for one row in {every}"


def stale_index(path: str, table: str, index: str, column: str, every: int) -> None:
    """Make the index `index` on `table`(`column`) disagree with its table, the table left as it was: one row
    in `every` is given the value STALE, the index rebuilt, and those rows put back while SQLite believes the
    index is on another column (so the UPDATE leaves it alone); then its definition is restored.
    PRAGMA quick_check still passes; integrity_check does not."""
    con = sqlite3.connect(path)
    other = next(r[1] for r in con.execute(f'PRAGMA table_info("{table}")') if r[1] != column)
    sql = con.execute("SELECT sql FROM sqlite_master WHERE name = ?", (index,)).fetchone()[0]
    kept = con.execute(f'SELECT rowid, "{column}" FROM "{table}" NOT INDEXED WHERE rowid % ? = 0',
                       (every,)).fetchall()
    con.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid % ? = 0', (STALE, every))
    con.execute(f'REINDEX "{index}"')
    con.commit()
    con.close()

    def define(text: str) -> None:
        con = sqlite3.connect(path)
        con.execute("PRAGMA writable_schema = ON")
        con.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?", (text, index))
        con.commit()
        con.close()

    define(f'CREATE INDEX "{index}" ON "{table}"("{other}")')
    con = sqlite3.connect(path)
    con.executemany(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = ?', [(v, r) for r, v in kept])
    con.commit()
    con.close()
    define(sql)


def indexed_captures(folder: Path, names=("reference-k4", "sglang-k4")) -> list[Path]:
    """Copies of fixtures with an index on each column the reader filters on or that tools index
    (NVTX_EVENTS.eventType, the kernels' streamId), and one NVTX mark of 6,000 characters: its record
    overflows its page, which sends NVTX_EVENTS to the SQLite path, where an index could be used."""
    out = []
    for name in names:
        path = folder / f"indexed-{name}.sqlite"
        shutil.copy(FIXTURES / name / "run.sqlite", path)
        con = sqlite3.connect(path)
        start, tid = con.execute("SELECT min(start), min(globalTid) FROM NVTX_EVENTS").fetchone()
        con.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid) VALUES (?, 34, ?, ?)",
                    (start, "m" * 6000, tid))
        con.execute("CREATE INDEX fuzz_nvtx_type ON NVTX_EVENTS(eventType)")
        con.execute("CREATE INDEX fuzz_kernel_stream ON CUPTI_ACTIVITY_KIND_KERNEL(streamId)")
        con.commit()
        con.close()
        out.append(path)
    return out


def check(capture: Capture, table: str, data: bytes, where: Path) -> str | None:
    """None when the mutant's reads keep the rule, else what broke it."""
    where.write_bytes(data)
    path = str(where)
    outcomes = []
    conds = capture.where.get(table, ())
    for direct in (True, False):
        first = read(path, table, direct, conds)
        again = read(path, table, direct, conds)
        if first[0] != again[0] or (first[0] == "rows" and not _same(first[1], again[1])):
            return f"{'pages' if direct else 'sqlite'}: two reads differ ({first[0]}, then {again[0]})"
        if first[0] == "raised":
            return f"{'pages' if direct else 'sqlite'}: raised {first[1]}"
        outcomes.append(first)
    (pk, pv, _), (sk, sv, _) = outcomes
    original = capture.original[table]
    if pk == sk == "rows" and not _same(pv, sv):
        return f"both read rows, and they differ ({pv.height} rows from the pages, {sv.height} through SQLite)"
    if pk == "rows" and sk == "refused" and not _same(pv, original):
        return f"SQLite refused ({sv}), the pages gave rows that are not the original's"
    if sk == "rows" and pk == "refused" and not _same(sv, original):
        return f"the pages refused ({pv}), SQLite gave rows that are not the original's"
    return None


def run(mutants: int, seed: int, paths: list[Path] | None = None, log=None, indexed: bool = True) -> dict:
    """Fuzz `mutants` mutants spread over the captures (and, with `indexed`, the indexed copies of two
    fixtures); returns counts and the failures."""
    rng = random.Random(seed)
    counts = {"mutants": 0, "failures": []}
    with tempfile.TemporaryDirectory() as tmp:
        extra = indexed_captures(Path(tmp)) if indexed else []
        caps = [Capture(p) for p in (paths or captures()) + extra]
        caps = [c for c in caps if c.tables]
        where = Path(tmp) / "mutant.sqlite"
        for i in range(mutants):
            cap = caps[i % len(caps)]
            table, data, how = cap.mutant(rng)
            broke = check(cap, table, data, where)
            counts["mutants"] += 1
            if broke:
                kept = Path(tmp).parent / f"specprof-fuzz-{seed}-{i}.sqlite"
                shutil.copy(where, kept)
                counts["failures"].append(f"{cap.path} {table} {how}: {broke} (kept as {kept})")
                if log:
                    log(counts["failures"][-1])
    return counts


def _same_trace(a, b) -> bool:
    from specprof.analyzer.readers.trace_cache import TABLES as CACHED

    return all(_same(getattr(a, t), getattr(b, t)) for t in CACHED) and a.meta == b.meta


def run_cache(mutants: int, seed: int, paths: list[Path] | None = None, log=None) -> dict:
    """The cache's mutants: an export's tables cached, then the export damaged in place with its size and
    mtime put back (random bytes over a page of a large table, anywhere in the file), or one of the cache
    entry's own files damaged or replaced by another valid table. The cache must then give nothing (and the
    export is read again), or exactly the undamaged tables. Returns counts and the failures."""
    import os

    import polars as pl

    from specprof.analyzer.readers import trace_cache
    from specprof.analyzer.readers.nsys import read_nsys_sqlite

    rng = random.Random(seed)
    counts = {"mutants": 0, "failures": []}
    sources = paths or [FIXTURES / n / "run.sqlite" for n in ("reference-k4", "sglang-k4", "reference-k4-tp2")]
    old = os.environ.get("SPECPROF_CACHE_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SPECPROF_CACHE_DIR"] = str(Path(tmp) / "cache")
        try:
            for i in range(mutants):
                source = sources[i % len(sources)]
                path = Path(tmp) / f"{i % len(sources)}" / "run.sqlite"
                path.parent.mkdir(exist_ok=True)
                shutil.copy(source, path)
                original = read_nsys_sqlite(str(path))
                folder = trace_cache.store(str(path), original)
                assert folder is not None and trace_cache.load(str(path)) is not None
                st = os.stat(path)
                if rng.random() < 0.5:  # the export, damaged in place
                    cap = Capture.__new__(Capture)
                    cap.data = path.read_bytes()
                    cap.page_size = int.from_bytes(cap.data[16:18], "big") or 65536
                    con = sqlite3.connect(path)
                    roots = dict(con.execute("SELECT name, rootpage FROM sqlite_master WHERE type = 'table'"))
                    con.close()
                    table = rng.choice([t for t in TABLES if t in roots])
                    n = rng.choice(cap._pages(roots[table]))
                    data = bytearray(cap.data)
                    data[(n - 1) * cap.page_size + rng.randrange(cap.page_size)] ^= 1 << rng.randrange(8)
                    path.write_bytes(data)
                    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
                    how = f"{table} page {n}: one bit flipped, size and mtime kept"
                else:  # one of the entry's files
                    name = rng.choice(sorted(f for f in os.listdir(folder) if f.endswith(".parquet")))
                    target = Path(folder) / name
                    if rng.random() < 0.5:
                        raw = bytearray(target.read_bytes())
                        raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
                        target.write_bytes(raw)
                        how = f"cache {name}: one bit flipped"
                    else:
                        df = pl.read_parquet(target)
                        df.slice(0, max(0, df.height - 1)).write_parquet(target)
                        how = f"cache {name}: a valid table, its last row gone"
                trace_cache._digests.clear()  # a write within one clock tick keeps ctime: this process's memo
                got = trace_cache.load(str(path))
                counts["mutants"] += 1
                if got is not None and not (path.read_bytes() == source.read_bytes() and _same_trace(got, original)):
                    counts["failures"].append(f"{source} {how}: the cache gave tables")
                    if log:
                        log(counts["failures"][-1])
        finally:
            if old is None:
                os.environ.pop("SPECPROF_CACHE_DIR", None)
            else:
                os.environ["SPECPROF_CACHE_DIR"] = old
    return counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutants", type=int, default=600)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    t0 = time.time()
    counts = run(args.mutants, args.seed, log=print)
    cached = run_cache(max(1, args.mutants // 20), args.seed, log=print)
    print(f"{counts['mutants']} mutants, {len(counts['failures'])} failures; {cached['mutants']} cache mutants, "
          f"{len(cached['failures'])} failures; {time.time() - t0:.0f} s")
    return 1 if counts["failures"] or cached["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
