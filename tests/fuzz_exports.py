"""Differential fuzz of the nsys export reader: damaged copies of real captures, each table read both ways.

Each mutant is a real capture (fixtures/ and ../shared/traces) with random bytes written over pages of one
of the large tables the reader reads (a leaf or an interior page; now and then a record's header bytes,
where a changed serial type shifts every column after it, or a field of the page header: a cell count,
the first free block, the content area's start). The table is then read with every column, in
several threads over small slices, straight from the pages (analyzer/readers/_sqlite_pages.c) and through
SQLite. The rule (docs/robustness.md):

- both read rows: the same rows;
- one read rows and the other refused the table: the rows are the original's (the damage was in bytes the
  reader that read rows does not use, such as free space);
- both refused: fine. A refusal is a SpecprofError; anything else raised is a failure.

Each mutant is read twice each way (the outcome must not depend on which thread reads which slice).

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

from analyzer.errors import SpecprofError  # noqa: E402
from analyzer.readers import nsys_sqlite  # noqa: E402
from conftest import FIXTURES, shared_nsys  # noqa: E402

TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_MEMCPY",
          "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
SLICE_ROWS = 3000  # small slices: several threads over each table, as on a large export


def captures() -> list[Path]:
    own = sorted(p for p in FIXTURES.glob("*/run.sqlite"))
    return own + shared_nsys()


def _select(con: sqlite3.Connection, table: str):
    info = con.execute(f'PRAGMA table_info("{table}")').fetchall()
    columns = tuple(r[1] for r in info)
    schema = {f"c{i}": pl.Utf8 if "TEXT" in str(r[2]).upper() else pl.Int64 for i, r in enumerate(info)}
    return nsys_sqlite.Select(table, columns), schema


def read(path: str, table: str, direct: bool):
    """("rows", frame) or ("refused", message): `table` of `path`, every column, read one way."""
    nsys_sqlite.DIRECT_PAGES = direct
    try:
        ex = nsys_sqlite._Export(path)
        try:
            select, schema = _select(ex.con, table)
            frames = ex.parallel(select, schema, slice_rows=SLICE_ROWS)
            df = pl.concat(frames) if frames else pl.DataFrame(schema=schema)
            return "rows", df, ex.read_by.get(table)
        finally:
            ex.close()
    except SpecprofError as exc:
        return "refused", str(exc), None
    except Exception as exc:  # noqa: BLE001 - a traceback for the user: the failure this looks for
        return "raised", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", None
    finally:
        nsys_sqlite.DIRECT_PAGES = True


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
            for t in TABLES:
                if t in roots and con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] > 0:
                    self.tables[t] = self._pages(roots[t])
        finally:
            con.close()
        self.original = {}
        for t in self.tables:
            kind, df, _ = read(str(path), t, True)
            assert kind == "rows", f"{path}: {t} is refused undamaged: {df}"
            self.original[t] = df

    def _pages(self, root: int) -> list[int]:
        """Every page of the table's B-tree (interior and leaf), by walking it in Python."""
        out, todo = [], [root]
        while todo:
            n = todo.pop()
            out.append(n)
            at = (n - 1) * self.page_size
            hdr = at + (100 if n == 1 else 0)
            if self.data[hdr] == 0x05:
                cells = int.from_bytes(self.data[hdr + 3:hdr + 5], "big")
                for i in range(cells):
                    off = int.from_bytes(self.data[hdr + 12 + 2 * i:hdr + 14 + 2 * i], "big")
                    todo.append(int.from_bytes(self.data[at + off:at + off + 4], "big"))
                todo.append(int.from_bytes(self.data[hdr + 8:hdr + 12], "big"))
        return out

    def mutant(self, rng: random.Random) -> tuple[str, bytes, str]:
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


def check(capture: Capture, table: str, data: bytes, where: Path) -> str | None:
    """None when the mutant's reads keep the rule, else what broke it."""
    where.write_bytes(data)
    path = str(where)
    outcomes = []
    for direct in (True, False):
        first = read(path, table, direct)
        again = read(path, table, direct)
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


def run(mutants: int, seed: int, paths: list[Path] | None = None, log=None) -> dict:
    """Fuzz `mutants` mutants spread over the captures; returns counts and the failures."""
    rng = random.Random(seed)
    caps = [Capture(p) for p in (paths or captures())]
    caps = [c for c in caps if c.tables]
    counts = {"mutants": 0, "failures": []}
    with tempfile.TemporaryDirectory() as tmp:
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutants", type=int, default=600)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    t0 = time.time()
    counts = run(args.mutants, args.seed, log=print)
    print(f"{counts['mutants']} mutants, {len(counts['failures'])} failures, {time.time() - t0:.0f} s")
    return 1 if counts["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
