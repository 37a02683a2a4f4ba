"""The direct page reader: the rows of a table straight from the export's B-tree pages, through the C module
`_sqlite_pages` (Arrow arrays out, in threads over slices of the table's leaves). This module is the only one that
touches the C module.

Where it was built and the table is plain (no overflowing records, integers where integers are expected, no
write-ahead log) it reads what SQLite would (tests/test_reader_pages.py); otherwise `read_table` answers None and
the caller (export.py `Export.parallel`) reads the table through SQLite. Damaged pages are refused, never read in
part. `PartialReads` reads part of a table (the zones a window needs, or a set of rowids: window.py)."""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

import polars as pl

from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.columns import ArrowStream
from specprof.analyzer.readers.nsys.select import SLICE_ROWS, Select, decoded

try:  # built by `pip install` where a C compiler is found (setup.py); optional
    from specprof.analyzer.readers.nsys import _sqlite_pages as reader
except ImportError:  # pragma: no cover - exercised on machines without a compiler
    reader = None

ENVIRONMENT = "SPECPROF_SQLITE_PAGES"  # 0: every table is read through SQLite (the benchmarks compare the two)


def built() -> bool:
    """Whether the C page reader is here (built at install where a C compiler was found)."""
    return reader is not None


def wanted() -> bool:
    """The read path of a read that names none: the pages where the page reader is built, unless
    $SPECPROF_SQLITE_PAGES is 0. Read where the read's default is chosen (export.py `Export`), never kept."""
    return built() and os.environ.get(ENVIRONMENT, "1") != "0"


# A column default the page reader fills in itself; any other is an expression, for SQLite to evaluate.
_NOT_LITERAL = object()


def _literal(text: str | None, encoding: str):
    """A column's declared default (`PRAGMA table_xinfo`'s dflt_value) as the page reader takes it: None (no
    default, or NULL), an int, bytes (a string literal, in the export's encoding), or _NOT_LITERAL."""
    if text is None or text.strip().upper() == "NULL":
        return None
    text = text.strip()
    if re.fullmatch(r"[+-]?[0-9]+", text):
        value = int(text)
        return value if -(1 << 63) <= value < 1 << 63 else _NOT_LITERAL
    if len(text) >= 2 and text[0] == text[-1] == "'" and "'" not in text[1:-1].replace("''", ""):
        return text[1:-1].replace("''", "'").encode(encoding)
    return _NOT_LITERAL


def plan(ex, select: Select, schema: dict):
    """(root page, record column per output column, kinds, filters, defaults, NOT NULL flags, the record columns
    of `start` and `end`, or (-1, -1)) for the page reader to read `select` of the export `ex`, or None when the
    table is not a plain rowid table whose records hold the columns in declared order. A value that is not an
    integer passes an "in" or "range" condition (select.py `Select`): NULL here, text or a real through SQLite,
    which the page reader leaves such a table to."""
    root = ex.roots.get(select.table)  # (export.py: a table of its own, never a view)
    try:
        info = ex.rows(f'PRAGMA table_xinfo("{select.table}")')
    except SpecprofError:
        return None
    if not root or any(r[6] for r in info) or len(info) > 250:
        return None  # hidden or generated columns, or more columns than the reader takes
    at = {r[1]: r[0] for r in info}
    pk = [r for r in info if r[5]]
    rowid_alias = pk[0][1] if len(pk) == 1 and str(pk[0][2]).upper() == "INTEGER" else None
    # what a record written before a column was added holds there: the column's default
    defaults = tuple(_literal(r[4], ex.encoding) for r in info)
    used = [c for c in select.columns if c is not None] + [cond[1] for cond in select.where]
    if any(c in at and defaults[at[c]] is _NOT_LITERAL for c in used):
        return None  # a default that is an expression: SQLite evaluates it
    defaults = tuple(None if d is _NOT_LITERAL else d for d in defaults)
    index, kinds = [], ""
    for name, dtype in zip(select.columns, schema.values()):
        if name is not None and (name not in at or name == rowid_alias):
            return None  # the rowid alias is stored as NULL in the record: SQLite fills it in
        kinds += "b" if dtype == pl.Utf8 else "i"
        index.append(at[name] if name is not None else len(info))  # past the record's end: NULL
    filters = []
    for cond in select.where:
        if cond[1] not in at or cond[1] == rowid_alias:
            return None
        col = at[cond[1]]
        if cond[0] == "not null":
            filters.append((col, b"", True, False))
            continue
        if cond[0] == "range":  # a bit per value from lo (the filter's base) to hi - 1
            lo, hi = int(cond[2]), int(cond[3])
            if not 0 < hi - lo <= 1 << 27:
                return None
            bits = bytearray(b"\xff" * ((hi - lo) // 8))
            if (hi - lo) % 8:
                bits.append((1 << ((hi - lo) % 8)) - 1)
            filters.append((col, bytes(bits), False, True, lo))
            continue
        ids = sorted({int(i) for i in cond[2]})
        if ids and ids[0] < 0:
            return None
        bits = bytearray((ids[-1] // 8 + 1) if ids else 0)
        for i in ids:
            bits[i >> 3] |= 1 << (i & 7)
        if cond[0] == "in":
            filters.append((col, bytes(bits), False, True))
        else:  # not in: every id but these; NULL is never kept (SQL's NULL NOT IN (...) is NULL)
            filters.append((col, bytes(b ^ 0xFF for b in bits), True, False))
    notnull = bytes(1 if r[3] else 0 for r in info)
    # a row that ends before it starts is refused as the page is read (export.py `Export.validate` says why)
    names = list(schema)
    order = (-1, -1)
    if "start" in names and "end" in names and None not in (select.columns[names.index("start")],
                                                             select.columns[names.index("end")]):
        order = (index[names.index("start")], index[names.index("end")])
    return int(root), tuple(index), kinds, tuple(filters), defaults, notnull, order


def read_table(ex, select: Select, schema: dict, keep, step, slice_rows: int,
               sink=None) -> list[pl.DataFrame] | None:
    """The direct page read of `select` of the export `ex` (as `Export.parallel` reads it: frames cast to
    `schema`, each passed through `keep`, or to `sink`), or None when this table must be read through SQLite
    (a record that overflows its page, a value of an unexpected type, a write-ahead log, a layout the page
    reader does not know): then nothing of it has been kept. A table whose pages are damaged is refused
    (`Export.damaged`), never read in part or passed to SQLite to read as it can."""
    found = plan(ex, select, schema)
    if found is None:
        return None
    root, index, kinds, filters, defaults, notnull, order = found
    size = reader.LEAF_SIZE
    try:
        leaves = reader.leaves(ex.path, root)
    except reader.Unsupported:
        return None
    except reader.Corrupt as exc:
        raise ex.damaged(select.table, exc) from None
    except OSError as exc:
        raise ex.corrupt(exc) from None
    ex.claim(select.table, pages_of(leaves))
    n = len(leaves) // size
    if n == 0:
        return []
    lo, hi = ex.row_span(select.table)
    parts = max(1, min(n, ex.parts(hi - lo, slice_rows)))  # (a damaged span can be empty)
    cuts = [size * (n * i // parts) for i in range(parts + 1)]
    view = memoryview(leaves)
    names = list(schema)
    done = []

    def read(a: int, b: int) -> pl.DataFrame:
        capsule = reader.read(ex.path, view[a:b], index, kinds.encode(), filters, defaults, notnull, 0, *order)
        df = pl.DataFrame(ArrowStream(capsule))
        df = decoded(df.rename(dict(zip(df.columns, names))), schema, ex.encoding)
        done.append(df.height)
        if step is not None:
            step.advance(df.height)
        return ex.cast(df, schema, select.table)

    try:
        return ex.run([lambda a=a, b=b: read(a, b) for a, b in zip(cuts, cuts[1:])], keep, sink)
    except reader.Unsupported:
        if step is not None:
            step.advance(-sum(done))  # the SQLite read counts these rows again
        return None
    except reader.Corrupt as exc:
        raise ex.damaged(select.table, exc) from None
    except OSError as exc:
        raise ex.corrupt(exc) from None


def pages_of(leaves) -> "np.ndarray":
    """The page numbers of the leaves `leaves()` listed (the first four bytes of each entry)."""
    from specprof.analyzer.model.numeric import np

    return np.frombuffer(leaves, dtype=np.uint32).reshape(-1, reader.LEAF_SIZE // 4)[:, 0]


def leaf_pages(ex, table: str):
    """The leaf pages of `table` (a numpy array of page numbers), from a walk of its interior pages; None where the
    page reader is not built or does not take the table (a write-ahead log; pages it finds damaged, which
    SQLite's own check of the table accepted)."""
    root = ex.roots.get(table)
    if reader is None or not root:
        return None
    try:
        return pages_of(reader.leaves(ex.path, root))
    except (reader.Unsupported, reader.Corrupt, OSError):
        return None


ROWID = "_rowid"  # the column of each row's rowid in a partial read
ZONE_LEAVES = 32  # leaf pages per zone (about 1,500 kernel rows): the unit that is read, or not


class Unreadable(Exception):
    """A table is not readable from its pages (no page reader, a layout it does not take): read it whole."""


class PartialReads:
    """Reads of some columns of a table of the export `ex` from its pages, each row with its rowid (`ROWID`):
    the rows of some zones (runs of ZONE_LEAVES leaves, rowid order), or of a set of rowids (only the leaves that
    can hold them: the rowids the interior pages allow each leaf, which the page reader checks every row
    against); and the zones of a table (`zones`: per zone its rows and each column's least and greatest value).
    Where the table cannot be read so (or `ex` does not read pages), `Unreadable`."""

    def __init__(self, ex):
        self.ex = ex
        self.leaves: dict[str, memoryview] = {}
        self.plans: dict[tuple, tuple | None] = {}  # per read: the page reader's plan, made once (two SQL queries)

    def _plan(self, select: Select, schema: dict):
        if not self.ex.pages:
            raise Unreadable(select.table)
        key = (select, tuple(schema.items()))
        if key not in self.plans:
            self.plans[key] = plan(self.ex, select, schema)
        found = self.plans[key]
        if found is None:
            raise Unreadable(select.table)
        if select.table not in self.leaves:
            leaves = self._call(select.table, reader.leaves, self.ex.path, found[0])
            self.ex.claim(select.table, pages_of(leaves))
            self.leaves[select.table] = memoryview(leaves)
        return found, self.leaves[select.table]

    def _call(self, table: str, fn, *args):
        try:
            return fn(*args)
        except reader.Unsupported:
            raise Unreadable(table) from None
        except reader.Corrupt as exc:
            raise self.ex.damaged(table, exc) from None
        except OSError as exc:
            raise self.ex.corrupt(exc) from None

    def zones(self, select: Select, schema: dict) -> pl.DataFrame:
        """Per zone of `select`'s table (the rows its conditions keep): `rows`, and per column (and `_rowid`)
        `min_C`, `max_C`, `mask_C` (bit v: the value v in 0..63 occurs), `flags_C` (1: a NULL, 2: a value outside
        0..63). The table's pages are read in threads, as a full read reads them, but no row is kept."""
        from specprof.analyzer.model.numeric import np

        (root, index, kinds, filters, defaults, notnull, order), leaves = self._plan(select, schema)
        size = reader.LEAF_SIZE
        n = len(leaves) // size
        names = [*schema, ROWID]
        fields = [("rows", "<i8")] + [(f"{k}_{c}", t) for c in names
                                      for k, t in (("min", "<i8"), ("max", "<i8"), ("mask", "<u8"), ("flags", "<u8"))]
        if n == 0:
            return pl.DataFrame(schema={f: pl.Int64 if t == "<i8" else pl.UInt64 for f, t in fields})
        ex = self.ex
        per = max(1, -(-n // (4 * ex.threads * ZONE_LEAVES))) * ZONE_LEAVES  # leaves per task: whole zones

        def read(a: int) -> bytes:
            return self._call(select.table, reader.read, ex.path, leaves[a * size:min(n, a + per) * size],
                              (*index, -1), (kinds + "i").encode(), filters, defaults, notnull, ZONE_LEAVES, *order)

        if n <= per:
            blobs = [read(0)]
        else:
            with ThreadPoolExecutor(ex.threads) as pool:
                blobs = list(pool.map(read, range(0, n, per)))
        ex.read_by[select.table] = "pages"
        rec = np.frombuffer(b"".join(blobs), dtype=np.dtype(fields))
        return pl.DataFrame({f: rec[f] for f, _ in fields})

    def read(self, select: Select, schema: dict, rowids: pl.Series | None = None,
             zones: list[int] | None = None) -> list[pl.DataFrame]:
        """The rows of `select` (cast to `schema`, plus `_rowid`) in rowid order: those of the zones `zones`
        (numbered from 0), or those whose rowid is in `rowids` (sorted)."""
        (root, index, kinds, filters, defaults, notnull, order), leaves = self._plan(select, schema)
        size = reader.LEAF_SIZE
        n = len(leaves) // size
        if rowids is not None:
            runs = _leaf_runs(leaves, n, rowids) if n and not rowids.is_empty() else []
        else:
            runs = _runs([z * ZONE_LEAVES + i for z in zones for i in range(ZONE_LEAVES) if z * ZONE_LEAVES + i < n])
        total = sum(b - a for a, b in runs)
        if not total:
            return []
        ex = self.ex
        # cut into a share per reading thread, as a full read is
        lo, hi = ex.row_span(select.table)
        parts = max(1, min(total, ex.parts((hi - lo) * total // n, SLICE_ROWS)))
        pieces = []
        for a, b in runs:
            k = max(1, min(b - a, round(parts * (b - a) / total)))
            pieces.extend((a + (b - a) * i // k, a + (b - a) * (i + 1) // k) for i in range(k))
        names = [*schema, ROWID]

        def read(a: int, b: int) -> pl.DataFrame:
            capsule = reader.read(ex.path, leaves[a * size:b * size], (*index, -1), (kinds + "i").encode(),
                                  filters, defaults, notnull, 0, *order)
            df = pl.DataFrame(ArrowStream(capsule))
            df = df.rename(dict(zip(df.columns, names)))
            rid = df.get_column(ROWID)
            df = ex.cast(decoded(df.drop(ROWID), schema, ex.encoding), schema, select.table)
            ex.validate(select, schema, df)
            df = df.with_columns(rid)
            if rowids is not None:
                df = df.join(pl.DataFrame({ROWID: rowids}), on=ROWID, how="semi", maintain_order="left")
            return df

        frames = self._call(select.table, ex.run, [lambda a=a, b=b: read(a, b) for a, b in pieces], None)
        ex.read_by[select.table] = "pages"
        return frames


def _runs(at) -> list[tuple[int, int]]:
    """Sorted distinct integers as runs [a, b) of consecutive ones."""
    runs = []
    for i in at:
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return [tuple(r) for r in runs]


def _leaf_runs(leaves: memoryview, n: int, rowids: pl.Series) -> list[tuple[int, int]]:
    """The runs [a, b) of leaves that can hold `rowids` (sorted): leaf k holds the rowids in (lo_k, hi_k] that
    the interior pages give it (an end not bounded there is open)."""
    from specprof.analyzer.model.numeric import np

    leaf = np.dtype([("page", "<u4"), ("bounded", "<u4"), ("lo", "<i8"), ("hi", "<i8")])
    if leaf.itemsize != reader.LEAF_SIZE:
        raise Unreadable("leaf layout")
    rec = np.frombuffer(leaves, dtype=leaf, count=n)
    his = np.where(rec["bounded"] & 2, rec["hi"], np.iinfo(np.int64).max)
    if np.any(his[1:] < his[:-1]):
        raise Unreadable("leaf bounds out of order")  # (the page reader refuses such a tree when it reads it)
    at = np.unique(np.minimum(np.searchsorted(his, rowids.to_numpy(), side="left"), n - 1))
    return _runs(at.tolist())
