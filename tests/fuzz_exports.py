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

Every run draws a new seed and prints it (`--seed N` replays a run); the suite's runs say theirs in a failure.

    python3 tests/fuzz_exports.py --mutants 3000                # by hand: the long run
    python3 tests/fuzz_exports.py --guided 600 [--sanitize]     # by hand: coverage-guided, for 600 s
    python3 tests/fuzz_exports.py --flips 1000                  # by hand: random bytes anywhere, whole analyses
    tests/test_fuzz_exports.py                                  # the suite: a fast run, and under ASan/UBSan

The coverage-guided run builds the page reader (and the ops scan) in a temporary copy with gcc's
-fsanitize-coverage=trace-pc and a small runtime that counts each edge's hits; a mutant that reaches an edge (or
a count of hits) no mutant before it reached is kept, and later mutants are made from it as well as from the
captures: damage that gets further into the reader is built on, as AFL builds on it.
"""

from __future__ import annotations

import argparse
import os
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

if os.environ.get("SPECPROF_FUZZ_COVERAGE"):  # the coverage-guided run: its runtime before the page reader needs it
    import ctypes

    ctypes.CDLL(os.environ["SPECPROF_FUZZ_COVERAGE"], mode=ctypes.RTLD_GLOBAL)

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

    def mutant(self, rng: random.Random, data: bytes | None = None, table: str | None = None) -> tuple[str, bytes, str]:
        """Damage over the pages of one large table (`table`, else one at random) of the capture (`data`: of a
        mutant of it, where given; then no index mutant)."""
        if self.indexes and data is None and rng.random() < 0.5:
            return self.index_mutant(rng)
        table = table or rng.choice(sorted(self.tables))
        pages = self.tables[table]
        n = rng.choice(pages)
        at = (n - 1) * self.page_size
        data = bytearray(self.data if data is None else data)
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


# -- random bytes anywhere in an export, through the whole analysis --------------------------------------------------

FLIP_FIXTURE = FIXTURES / "reference-k4" / "run.sqlite"


def _analysis(path: str, pages: bool = True) -> tuple[str, object]:
    """("analysed", its JSON document without the file's own name) or ("refused", the one line) or ("raised",
    what escaped): `specprof analyze PATH --json`, in this process, the large tables read from their pages or
    through SQLite ($SPECPROF_SQLITE_PAGES, as a user picks the path)."""
    import json
    import os

    from click.testing import CliRunner

    from specprof.analyzer.cli import main as cli

    out = CliRunner().invoke(cli, ["analyze", path, "--no-cache", "-q", "--json"],
                             env={"SPECPROF_SQLITE_PAGES": "1" if pages else "0"})
    if out.exit_code == 0:
        doc = json.loads(out.stdout)
        doc.pop("source", None)
        return "analysed", json.dumps(doc, sort_keys=True).replace(path, "PATH")
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    if out.exit_code == 2 and len(lines) == 1 and lines[0].startswith("specprof: error:") and \
            (out.exception is None or isinstance(out.exception, SystemExit)):
        return "refused", lines[0]
    import traceback

    text = "".join(traceback.format_exception(out.exception)) if out.exception else out.output
    return "raised", f"exit {out.exit_code}: {text.strip().splitlines()[-1] if text.strip() else ''}"


def run_flips(mutants: int, seed: int, path: Path = FLIP_FIXTURE, log=None) -> dict:
    """`mutants` copies of the export at `path`, each with random bytes anywhere in the file (1, 2, 8 or 200 of
    them) changed, analysed whole (`specprof analyze --json`), once with the large tables read from their pages and
    once through SQLite. Each is analysed (with the original's numbers, or with others: then whether SQLite's
    integrity_check passes the file is counted), or refused in one line, alike both ways; a traceback, or numbers
    that differ between the two ways (one refused, the other analysed with numbers that are not the original's,
    or both analysed with different ones) is a failure, kept beside the temporary folder. Returns the counts."""
    rng = random.Random(seed)
    data = path.read_bytes()
    counts = {"mutants": 0, "refused": 0, "same": 0, "changed": 0, "changed_whole": 0, "failures": []}
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp) / "run.sqlite"
        where.write_bytes(data)
        original = _analysis(str(where))
        assert original[0] == "analysed", original
        for i in range(mutants):
            mutant = bytearray(data)
            count = rng.choice([1, 1, 2, 8, 200])
            for _ in range(count):
                at = rng.randrange(len(mutant))
                mutant[at] ^= rng.randrange(1, 256)
            where.write_bytes(mutant)
            kind, value = _analysis(str(where))
            other, value2 = _analysis(str(where), pages=False)
            counts["mutants"] += 1
            ways = {kind, other}
            if "raised" not in ways and (
                    (kind == other == "analysed" and value != value2) or
                    (ways == {"analysed", "refused"} and (value if kind == "analysed" else value2) != original[1])):
                kind, value = "raised", f"the read paths disagree: pages {kind}, SQLite {other}"
            elif other == "raised":
                kind, value = other, f"(SQLite) {value2}"
            if kind == "refused":
                counts["refused"] += 1
            elif kind == "analysed" and value == original[1]:
                counts["same"] += 1
            elif kind == "analysed":
                counts["changed"] += 1
                try:
                    con = sqlite3.connect(f"file:{where}?mode=ro", uri=True)
                    whole = con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
                    con.close()
                except (sqlite3.DatabaseError, UnicodeDecodeError):
                    whole = False
                counts["changed_whole"] += whole
            else:
                kept = Path(tmp).parent / f"specprof-flips-{seed}-{i}.sqlite"
                shutil.copy(where, kept)
                counts["failures"].append(f"{count} bytes: {value} (kept as {kept})")
                if log:
                    log(counts["failures"][-1])
    return counts


# -- the coverage-guided run (by hand, where time allows; not in the suite) ------------------------------------------

# What gcc's -fsanitize-coverage=trace-pc calls at every edge of the instrumented code: a hit count per (previous
# block, this block) hash, as AFL keeps them. Loaded before the page reader, which then reports to it.
COVERAGE_RUNTIME = r"""
#include <stdint.h>
#include <string.h>
#define MAP (1u << 16)
static uint8_t map[MAP];
static __thread uintptr_t prev;
void __sanitizer_cov_trace_pc(void) {
    uintptr_t pc = (uintptr_t)__builtin_return_address(0);
    uintptr_t h = (pc ^ (pc >> 15)) & (MAP - 1);
    map[(h ^ prev) & (MAP - 1)]++;
    prev = h >> 1;
}
uint8_t *cov_map(void) { return map; }
unsigned cov_size(void) { return MAP; }
void cov_reset(void) { memset(map, 0, MAP); prev = 0; }
"""

C_MODULES = (("analyzer/readers/nsys/_sqlite_pages.c", "analyzer/readers/nsys/_sqlite_pages.abi3.so"),
             ("analyzer/_scan.c", "analyzer/_scan.abi3.so"))


def build(folder: Path, flags: list[str]) -> Path:
    """A copy of the package under `folder`/pkg (with tests/fuzz_exports.py and conftest.py, and fixtures/ linked)
    whose two C modules are built with gcc and `flags`; returns the package's folder."""
    import shutil as sh
    import subprocess
    import sysconfig

    pkg = folder / "pkg"
    for part in ("specprof", "analyzer", "tracer"):
        sh.copytree(ROOT / part, pkg / part, ignore=sh.ignore_patterns("*.so", "__pycache__"))
    (pkg / "tests").mkdir()
    for name in ("fuzz_exports.py", "conftest.py"):
        sh.copy(ROOT / "tests" / name, pkg / "tests" / name)
    (pkg / "fixtures").symlink_to(FIXTURES)
    include = sysconfig.get_paths()["include"]
    for source, module in C_MODULES:
        subprocess.run(["gcc", "-shared", "-fPIC", "-std=gnu11", *flags, "-DPy_LIMITED_API=0x030B0000",
                        f"-I{include}", f"-I{pkg / 'analyzer'}", str(pkg / source), "-o", str(pkg / module)],
                       check=True)
    return pkg


_BUCKETS = None


def _classified(raw) -> "object":
    """Hit counts as AFL buckets them (1, 2, 3, 4-7, 8-15, 16-31, 32-127, 128+), one bit each."""
    import numpy as np

    global _BUCKETS
    if _BUCKETS is None:
        table = np.zeros(256, dtype=np.uint8)
        for lo, hi, bit in ((1, 1, 1), (2, 2, 2), (3, 3, 4), (4, 7, 8), (8, 15, 16), (16, 31, 32), (32, 127, 64),
                            (128, 255, 128)):
            table[lo:hi + 1] = bit
        _BUCKETS = table
    return _BUCKETS[raw]


def guided(seconds: float, seed: int, paths: list[Path] | None = None, log=print) -> dict:
    """The coverage-guided run, in a process whose page reader was built with -fsanitize-coverage=trace-pc and
    whose coverage runtime is loaded (`main --guided`): mutants of the captures and of the mutants that reached
    code no mutant before them reached, each checked as `check` checks one, for `seconds`. Returns counts and the
    failures (each mutant kept beside the temporary folder, as `run` keeps them)."""
    import ctypes

    import numpy as np

    from specprof.analyzer.readers.nsys import pages

    lib = ctypes.CDLL(os.environ["SPECPROF_FUZZ_COVERAGE"], mode=ctypes.RTLD_GLOBAL)
    lib.cov_map.restype = ctypes.POINTER(ctypes.c_uint8)
    size = lib.cov_size()
    raw = np.ctypeslib.as_array(lib.cov_map(), shape=(size,))
    seen = np.zeros(size, dtype=np.uint8)
    rng = random.Random(seed)
    counts = {"mutants": 0, "failures": [], "corpus": 0, "edges": 0}
    lib.cov_reset()
    caps = [c for c in (Capture(p) for p in (paths or captures())) if c.tables]  # (each read from its pages)
    if pages.reader is None or not raw.any():
        raise SystemExit("the page reader reports no coverage: run this through --guided (an instrumented build)")
    corpus = [(cap, None) for cap in caps]  # (capture, its mutant's bytes, or None for the capture itself)
    deadline = time.time() + seconds
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp) / "mutant.sqlite"
        while time.time() < deadline:
            cap, data = rng.choice(corpus)
            table, mutant, how = cap.mutant(rng, data=data if data is not None else cap.data)
            for _ in range(rng.choice([0, 0, 1, 3])):  # now and then, more damage on the same table
                table, mutant, more = cap.mutant(rng, data=mutant, table=table)
                how += f"; {more}"
            lib.cov_reset()
            broke = check(cap, table, mutant, where)
            counts["mutants"] += 1
            hit = _classified(raw)
            new = hit & ~seen
            if new.any():
                seen |= hit
                corpus.append((cap, mutant))
                counts["corpus"] = len(corpus) - len(caps)
                counts["edges"] = int(np.count_nonzero(seen))
            if broke:
                kept = Path(tmp).parent / f"specprof-fuzz-guided-{seed}-{counts['mutants']}.sqlite"
                shutil.copy(where, kept)
                counts["failures"].append(f"{cap.path} {table} {how}: {broke} (kept as {kept})")
                log(counts["failures"][-1])
            if counts["mutants"] % 500 == 0:
                log(f"{counts['mutants']} mutants, {counts['corpus']} kept for their coverage, {counts['edges']} "
                    f"edges, {len(counts['failures'])} failures")
    return counts


def _guided_in_a_build(seconds: float, seed: int, sanitize: bool) -> int:
    """Builds the instrumented copy (and the coverage runtime) in a temporary folder and runs `guided` there."""
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        flags = ["-O1", "-g", "-fsanitize-coverage=trace-pc"]
        if sanitize:
            flags += ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"]
        pkg = build(folder, flags)
        runtime = folder / "coverage.c"
        runtime.write_text(COVERAGE_RUNTIME)
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", str(runtime), "-o", str(folder / "libcoverage.so")],
                       check=True)
        env = {**os.environ, "PYTHONPATH": str(pkg), "SPECPROF_FUZZ_COVERAGE": str(folder / "libcoverage.so")}
        if sanitize:
            asan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
            env.update(LD_PRELOAD=asan, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0",
                       UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
        return subprocess.run([sys.executable, str(pkg / "tests" / "fuzz_exports.py"), "--guided-here", str(seconds),
                               "--seed", str(seed)], env=env, cwd=folder).returncode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutants", type=int, default=600)
    ap.add_argument("--seed", type=int, default=None, help="the run's seed [default: a new one, printed]")
    ap.add_argument("--guided", type=float, metavar="SECONDS",
                    help="the coverage-guided run for SECONDS instead (the page reader built with gcc's "
                         "-fsanitize-coverage=trace-pc in a temporary copy)")
    ap.add_argument("--sanitize", action="store_true", help="with --guided: also ASan and UBSan")
    ap.add_argument("--flips", type=int, metavar="N",
                    help="instead: N copies of reference-k4's export with random bytes anywhere changed, analysed whole")
    ap.add_argument("--guided-here", type=float, help=argparse.SUPPRESS)  # (in the instrumented copy)
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    print(f"seed {seed} (run again with --seed {seed})", flush=True)
    t0 = time.time()
    if args.guided is not None:
        return _guided_in_a_build(args.guided, seed, args.sanitize)
    if args.flips is not None:
        counts = run_flips(args.flips, seed, log=print)
        print(f"{counts['mutants']} mutants: {counts['refused']} refused, {counts['same']} analysed with the "
              f"original's numbers, {counts['changed']} with others ({counts['changed_whole']} of them passing SQLite's "
              f"integrity_check), {len(counts['failures'])} failures; {time.time() - t0:.0f} s")
        return 1 if counts["failures"] else 0
    if args.guided_here is not None:
        counts = guided(args.guided_here, seed)
        print(f"{counts['mutants']} mutants, {counts['corpus']} kept for their coverage, {counts['edges']} edges, "
              f"{len(counts['failures'])} failures; {time.time() - t0:.0f} s")
        return 1 if counts["failures"] else 0
    counts = run(args.mutants, seed, log=print)
    cached = run_cache(max(1, args.mutants // 20), seed, log=print)
    print(f"{counts['mutants']} mutants, {len(counts['failures'])} failures; {cached['mutants']} cache mutants, "
          f"{len(cached['failures'])} failures; {time.time() - t0:.0f} s")
    return 1 if counts["failures"] or cached["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
