"""Reader for Nsight Systems SQLite exports (nsys 2021.x to 2026.x) -> Trace.

Tables are created lazily and columns change between versions, so every read is built from the
columns that exist. The large tables (kernels, CUDA calls, NVTX events) are read straight from the
file's B-tree pages by a small C module (`_sqlite_pages`, Arrow arrays out, several threads) where it
was built and the table is plain (no overflowing records, integers where integers are expected);
otherwise, and for everything else, through SQLite: bulk rows through ADBC (Arrow, no Python loop
over rows), the small metadata tables through the standard sqlite3 module. Both give the same rows
(tests/test_reader_pages.py).
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import polars as pl

from specprof.analyzer import progress
from specprof.analyzer.model.columns import ArrowStream, distinct, merge_order, trim_c_heap
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.readers.bounds import bounded_names, check_span, names_note
from specprof.analyzer.model.trace import (
    API_SCHEMA,
    MARKS_SCHEMA,
    OPS_SCHEMA,
    RANGES_SCHEMA,
    Trace,
    TraceMeta,
    conform,
    empty,
)

SQLITE_MAGIC = b"SQLite format 3\x00"

# ENUM_NSYS_EVENT_TYPE values used here.
NVTX_MARK = 34
NVTX_RANGES = (59, 60, 70, 71)  # PushPop, StartEnd, and their NVTXT variants
NVTX_DOMAIN_CREATE = 75

MEMCPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
                8: "DtoD", 9: "HtoH", 10: "PtoP"}

_PID_MASK = ~0xFFFFFF  # globalPid = globalTid with the low 24 (tid) bits cleared
_TIME_LIMIT = 1 << 62  # ns: no timestamp lies further from 0 (the difference of two then fits in 64 bits)

def _cores() -> int:
    """The cores this process may run on (its affinity, as `taskset` sets it), else all of them."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


READ_THREADS = max(1, min(8, _cores()))  # parallel readers of one large table
SLICE_ROWS = 2_000_000  # rows per query of a large table: bounds what a filtered read holds at once
_GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
               "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")


try:  # built by `pip install` where a C compiler is found (setup.py); optional
    from specprof.analyzer.readers import _sqlite_pages
except ImportError:  # pragma: no cover - exercised on machines without a compiler
    _sqlite_pages = None

# SPECPROF_SQLITE_PAGES=0 reads every table through SQLite (the benchmarks compare the two paths).
DIRECT_PAGES = os.environ.get("SPECPROF_SQLITE_PAGES", "1") != "0"


@dataclass(frozen=True)
class Select:
    """A read of some columns of one table, as SQL would say `SELECT c1, c2, NULL FROM table WHERE ...`.

    `columns`: column names of the table, or None for a column of NULLs (one the export lacks).
    `where`: conditions, all of which a row meets: ("in", column, ids), ("not in", column, ids) with
    non-negative integer ids, ("not null", column), or ("range", column, lo, hi): lo <= value < hi. Both read paths take this one description.
    `required`: columns nsys always fills: a row read with one of them NULL is refused (`_Export.parallel`)."""

    table: str
    columns: tuple[str | None, ...]
    where: tuple[tuple, ...] = ()
    required: tuple[str, ...] = ()

    def sql(self, schema: dict) -> str:
        """The SQL; a column read as text (pl.Utf8 in `schema`, by position) comes as its bytes, which
        `_decoded` decodes: SQLite never checks that text is valid."""
        cols = ", ".join("NULL" if c is None else f'CAST("{c}" AS BLOB)' if dtype == pl.Utf8 else f'"{c}"'
                         for c, dtype in zip(self.columns, schema.values()))
        conds = []
        for cond in self.where:
            if cond[0] == "not null":
                conds.append(f'"{cond[1]}" IS NOT NULL')
            elif cond[0] == "range":
                conds.append(f'"{cond[1]}" >= {int(cond[2])} AND "{cond[1]}" < {int(cond[3])}')
            else:
                ids = ",".join(str(int(i)) for i in cond[2])
                conds.append(f'"{cond[1]}" {"IN" if cond[0] == "in" else "NOT IN"} ({ids})')
        # NOT INDEXED: the table's own B-tree, never an index, which may disagree with it (quick_check does
        # not compare them); rowid ranges still search the table's B-tree.
        return f'SELECT {cols} FROM "{self.table}" NOT INDEXED' + (" WHERE " + " AND ".join(conds) if conds else "")


def _decoded(df: pl.DataFrame, schema: dict, encoding: str = "utf-8") -> pl.DataFrame:
    """`df` with its text columns (pl.Utf8 in `schema`), read as bytes, decoded from the export's text
    encoding (`encoding`: utf-8, or utf-16-le/-be for a database made so). SQLite stores whatever bytes a
    program gave it: names that do not decode are decoded with U+FFFD in place of the bad bytes (as
    Python's errors="replace"), so they show as such rather than break the analysis."""
    texts = [c for c, dtype in schema.items() if dtype == pl.Utf8 and df.schema.get(c) == pl.Binary]
    return df.with_columns(_text(df.get_column(c), encoding) for c in texts) if texts else df


def _text(col: pl.Series, encoding: str) -> pl.Series:
    if encoding == "utf-8":
        try:
            return col.cast(pl.Utf8)
        except pl.exceptions.ComputeError:  # not UTF-8 somewhere: decoded value by value below (rare)
            pass
    return pl.Series(col.name, [None if b is None else b.decode(encoding, "replace") for b in col.to_list()],
                     pl.Utf8)


_CODECS = {"UTF-8": "utf-8", "UTF-16le": "utf-16-le", "UTF-16be": "utf-16-be"}

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


def _uri(path: str) -> str:
    return "file:" + urllib.parse.quote(os.fsencode(os.path.abspath(path))) + "?mode=ro"


class _Export:
    """An open export: which tables and columns exist, and two ways to query it."""

    def __init__(self, path: str):
        self.path = path
        _check_file(path)
        try:
            self.con = sqlite3.connect(_uri(path), uri=True)
            # names that are not valid text are shown with U+FFFD, never an error
            self.con.text_factory = lambda b: b.decode("utf-8", "replace")
            self.encoding = _CODECS.get(self.con.execute("PRAGMA encoding").fetchone()[0], "utf-8")
            rows = self.con.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            raise SpecprofError(
                f"{path}: the SQLite file cannot be read ({exc}); it is probably truncated or "
                "corrupt: export it again with `nsys export --type sqlite`",
                path,
            ) from None
        self.tables = {r[0] for r in rows}
        self._spans: dict[str, tuple[int, int]] = {}
        self.read_by: dict[str, str] = {}  # table -> "pages" or "sqlite": how its rows were read
        self._checked: set[str] = set()  # tables SQLite's quick_check found whole
        self.process: int | None = None  # read only this process's rows (its globalPid) from the large tables
        # with `process`: that process's rows of the large tables, read already (readers/nsys_split.py Split)
        self.split = None
        if not self.tables & {"StringIds", "META_DATA_EXPORT", "CUPTI_ACTIVITY_KIND_KERNEL",
                              "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME"}:
            raise SpecprofError(
                f"{path}: this SQLite file is not an Nsight Systems export (no nsys tables); "
                "make one with `nsys export --type sqlite -o RUN.sqlite RUN.nsys-rep`",
                path,
            )

    def columns(self, table: str) -> set[str]:
        if table not in self.tables:
            return set()
        return {r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')}

    def rows(self, sql: str, params=()) -> list[tuple]:
        try:
            return self.con.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._corrupt(exc) from None

    def frame(self, sql: str, schema: dict, step=None, table: str = "") -> pl.DataFrame:
        """Run `sql` and return its rows as a polars frame cast to `schema`, through Arrow.

        Each call opens its own ADBC connection, so calls can run in parallel threads (the driver
        and polars release the GIL while SQLite steps through rows and Arrow arrays are imported).
        The stream goes straight from the driver into polars (the Arrow C stream interface): no
        pyarrow. `step` (a progress step) advances by the rows read.
        """
        import adbc_driver_manager as adbc
        import adbc_driver_sqlite

        db = con = stmt = None
        try:
            db = adbc.AdbcDatabase(driver=adbc_driver_sqlite._driver_path(), uri=_uri(self.path))
            con = adbc.AdbcConnection(db)
            stmt = adbc.AdbcStatement(con)
            # One Arrow batch per slice (parallel() bounds a query to SLICE_ROWS): one chunk per column.
            stmt.set_options(**{adbc_driver_sqlite.StatementOptions.BATCH_ROWS.value: str(SLICE_ROWS)})
            stmt.set_sql_query(sql)
            stream, _ = stmt.execute_query()
            df = pl.DataFrame(stream)
        except adbc.Error as exc:  # the driver's own DatabaseError hierarchy
            raise self._corrupt(exc) from None
        finally:
            for handle in (stmt, con, db):
                if handle is not None:
                    handle.close()
        if step is not None:
            step.advance(df.height)
        if not df.width:
            return empty(schema)
        return self._cast(_decoded(df.rename(dict(zip(df.columns, schema))), schema, self.encoding), schema, table)

    def _cast(self, df: pl.DataFrame, schema: dict, table: str) -> pl.DataFrame:
        """`df` cast to `schema`; a value that is not what nsys writes there (text in an integer column) is
        one SpecprofError naming the table and column. (The column's type is looked at, never its values:
        text SQLite gives may not be valid UTF-8.)"""
        for (name, dtype), column in zip(schema.items(), df.columns):
            got = df.schema[column]
            if dtype == pl.Int64 and not (got.is_integer() or got == pl.Null):
                raise SpecprofError(
                    f"{self.path}: table {table or '?'} holds values that are not integers in the column read as "
                    f"{name}; nsys never writes that: the export is damaged or not made by nsys: export it "
                    "again with `nsys export --type sqlite`", self.path)
        return df.cast(schema)

    def check(self, table: str) -> None:
        """SQLite's quick_check of `table` (its B-tree pages, cells and records), once: a table read through
        SQLite is read only when whole; otherwise one SpecprofError naming it."""
        if table in self._checked or table not in self.tables:
            return
        try:
            found = self.con.execute(f'PRAGMA quick_check("{table}")').fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._damaged(table, exc) from None
        if found != [("ok",)]:
            raise self._damaged(table, found[0][0] if found else "no answer")
        self._checked.add(table)

    def row_span(self, table: str) -> tuple[int, int]:
        """(lowest rowid, highest rowid + 1) of `table`: both ends of its B-tree, no scan.

        Two scalar subqueries: SQLite answers a lone min() or max() from the B-tree's edge, but
        `SELECT min(rowid), max(rowid)` scans the whole table (0.7 s for 10 M kernels)."""
        if table not in self._spans:
            lo, hi = self.rows(f'SELECT (SELECT min(rowid) FROM "{table}"), '
                               f'(SELECT max(rowid) FROM "{table}")')[0]
            self._spans[table] = (0, 0) if lo is None else (int(lo), int(hi) + 1)
        return self._spans[table]

    def parallel(self, select: Select, schema: dict, keep=None, step=None,
                 slice_rows: int = SLICE_ROWS, sink=None) -> list[pl.DataFrame]:
        """The rows of `select`, in rowid order, as frames cast to `schema` (by position), each passed
        through `keep` (a frame -> frame filter) first when given, so that a large table filtered
        slice by slice is never held whole. Slices are read in threads.

        Straight from the B-tree pages where the C module is built and the table allows it (`_pages`);
        else through SQLite, in rowid slices (a range search on the B-tree, no scan) on a connection
        each, since SQLite decodes rows on one core per connection. With `self.split` (and `self.process`),
        from the process's rows that one walk of the export has read already, where it read this select.

        `sink` (readers/nsys_split.py): each slice, numbered in rowid order, goes to `sink(number, frame)` in
        its reading thread instead of being returned (then none is), and `sink.reset()` forgets what it was
        given when the pages must be read again through SQLite."""
        if select.table not in self.tables:
            return []
        if self.split is not None and self.process is not None:
            frames = self.split.frames(select, schema, self.process)
            if frames is not None:
                self.read_by[select.table] = "split"
                if step is not None:
                    step.advance(sum(df.height for df in frames))
                frames = self._run([lambda df=df: df for df in frames], keep) if frames else []
                for df in frames:
                    self._validate(select, schema, df)
                return frames
        select = self._of_process(select)
        frames = None
        if _sqlite_pages is not None and DIRECT_PAGES:
            frames = self._pages(select, schema, keep, step, slice_rows, sink)
            if frames is not None:
                self.read_by[select.table] = "pages"
        if frames is None:
            if sink is not None:
                sink.reset()
            self.check(select.table)
            self.read_by[select.table] = "sqlite"
            frames = self._slices(select, schema, keep, step, slice_rows, sink)
        for df in frames:
            self._validate(select, schema, df)
        return frames

    def _of_process(self, select: Select) -> Select:
        """`select` restricted to the rows of `self.process` (none: as it is): a GPU op's globalPid is the
        process's, a CUDA call's or NVTX event's globalTid lies in it (its low 24 bits are the thread's)."""
        if self.process is None:
            return select
        column = _PROCESS_COLUMNS.get(select.table)
        if column is None or column not in self.columns(select.table):
            raise SpecprofError(f"{self.path}: table {select.table} has no process column, so the export cannot be "
                                "read one process at a time; analyse it whole (without --jobs)", self.path)
        span = 1 if column == "globalPid" else 1 << 24
        return Select(select.table, select.columns, (*select.where, ("range", column, self.process,
                                                                       self.process + span)), select.required)

    def _validate(self, select: Select, schema: dict, df: pl.DataFrame) -> None:
        """Refuses values nsys never writes, which the analysis cannot take: NULL in a `required` column, a
        timestamp (`start`, `end`) beyond +-2^62 ns, where differences of two would overflow 64 bits."""
        source = dict(zip(schema, select.columns))
        for name, column in source.items():
            if column in select.required and df.get_column(name).null_count():
                raise SpecprofError(
                    f"{self.path}: table {select.table}: {df.get_column(name).null_count()} rows have no "
                    f"{column} (NULL); nsys always writes it: the export is damaged: export it again with "
                    "`nsys export --type sqlite`", self.path)
            if name in ("start", "end"):
                bad = df.select(((pl.col(name) < -_TIME_LIMIT) | (pl.col(name) > _TIME_LIMIT)).sum()).item()
                if bad:
                    raise SpecprofError(
                        f"{self.path}: table {select.table}: {bad} rows have a {column} beyond +-2^62 ns (292 "
                        "years); nsys never writes that: the export is damaged: export it again", self.path)

    def whole(self, select: Select, schema: dict, step=None) -> pl.DataFrame:
        """The rows of `select` as one frame (`parallel`, stacked)."""
        frames = self.parallel(select, schema, step=step)
        return pl.concat(frames) if len(frames) > 1 else frames[0] if frames else empty(schema)

    def _parts(self, rows: int, slice_rows: int) -> int:
        return max(min(READ_THREADS, rows // 200_000 + 1), -(-rows // slice_rows))

    def _run(self, reads: list, keep, sink=None) -> list[pl.DataFrame]:
        def run(number: int, read) -> pl.DataFrame:
            df = read()
            df = keep(df) if keep is not None and df.height else df
            if sink is not None:
                sink(number, df)
                return df.clear()
            return df

        if len(reads) == 1:
            results = [run(0, reads[0])]
        else:
            with ThreadPoolExecutor(min(len(reads), READ_THREADS)) as pool:
                results = list(pool.map(run, range(len(reads)), reads))
        return [df for df in results if df.height]

    def _slices(self, select: Select, schema: dict, keep, step, slice_rows: int, sink=None) -> list[pl.DataFrame]:
        lo, hi = self.row_span(select.table)
        if hi <= lo:
            return []
        parts = self._parts(hi - lo, slice_rows)
        cuts = [lo + (hi - lo) * i // parts for i in range(parts + 1)]
        sql = select.sql(schema)
        glue = " AND " if " WHERE " in sql else " WHERE "
        queries = [f"{sql}{glue}rowid >= {a} AND rowid < {b}" for a, b in zip(cuts, cuts[1:])]
        return self._run([lambda q=q: self.frame(q, schema, step=step, table=select.table) for q in queries], keep,
                         sink)

    def _pages(self, select: Select, schema: dict, keep, step, slice_rows: int,
               sink=None) -> list[pl.DataFrame] | None:
        """The direct page read of `select`, or None when this table must be read through SQLite (a
        record that overflows its page, a value of an unexpected type, a write-ahead log, a layout
        the page reader does not know): then nothing of it has been kept. A table whose pages are
        damaged is refused (`_damaged`), never read in part or passed to SQLite to read as it can."""
        plan = self._page_plan(select, schema)
        if plan is None:
            return None
        root, index, kinds, filters, defaults, notnull = plan
        size = _sqlite_pages.LEAF_SIZE
        try:
            leaves = _sqlite_pages.leaves(self.path, root)
        except _sqlite_pages.Unsupported:
            return None
        except _sqlite_pages.Corrupt as exc:
            raise self._damaged(select.table, exc) from None
        except OSError as exc:
            raise self._corrupt(exc) from None
        n = len(leaves) // size
        if n == 0:
            return []
        lo, hi = self.row_span(select.table)
        parts = max(1, min(n, self._parts(hi - lo, slice_rows)))  # (a damaged span can be empty)
        cuts = [size * (n * i // parts) for i in range(parts + 1)]
        view = memoryview(leaves)
        names = list(schema)
        done = []

        def read(a: int, b: int) -> pl.DataFrame:
            capsule = _sqlite_pages.read(self.path, view[a:b], index, kinds.encode(), filters, defaults, notnull)
            df = pl.DataFrame(ArrowStream(capsule))
            df = _decoded(df.rename(dict(zip(df.columns, names))), schema, self.encoding)
            done.append(df.height)
            if step is not None:
                step.advance(df.height)
            return self._cast(df, schema, select.table)

        try:
            return self._run([lambda a=a, b=b: read(a, b) for a, b in zip(cuts, cuts[1:])], keep, sink)
        except _sqlite_pages.Unsupported:
            if step is not None:
                step.advance(-sum(done))  # the SQLite read counts these rows again
            return None
        except _sqlite_pages.Corrupt as exc:
            raise self._damaged(select.table, exc) from None
        except OSError as exc:
            raise self._corrupt(exc) from None

    def _page_plan(self, select: Select, schema: dict):
        """(root page, record column per output column, kinds, filters, defaults, NOT NULL flags) for the page
        reader, or None when the table is not a plain rowid table whose records hold the columns in declared
        order."""
        try:
            root = self.rows("SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?",
                             (select.table,))
            info = self.rows(f'PRAGMA table_xinfo("{select.table}")')
        except SpecprofError:
            return None
        if not root or not root[0][0] or any(r[6] for r in info) or len(info) > 250:
            return None  # a view, hidden or generated columns, or more columns than the reader takes
        at = {r[1]: r[0] for r in info}
        pk = [r for r in info if r[5]]
        rowid_alias = pk[0][1] if len(pk) == 1 and str(pk[0][2]).upper() == "INTEGER" else None
        # what a record written before a column was added holds there: the column's default
        defaults = tuple(_literal(r[4], self.encoding) for r in info)
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
                filters.append((col, bytes(bits), False, False, lo))
                continue
            ids = sorted({int(i) for i in cond[2]})
            if ids and ids[0] < 0:
                return None
            bits = bytearray((ids[-1] // 8 + 1) if ids else 0)
            for i in ids:
                bits[i >> 3] |= 1 << (i & 7)
            if cond[0] == "in":
                filters.append((col, bytes(bits), False, False))
            else:  # not in: every id but these; NULL is never kept (SQL's NULL NOT IN (...) is NULL)
                filters.append((col, bytes(b ^ 0xFF for b in bits), True, False))
        notnull = bytes(1 if r[3] else 0 for r in info)
        return int(root[0][0]), tuple(index), kinds, tuple(filters), defaults, notnull

    def _damaged(self, table: str, exc: Exception) -> SpecprofError:
        return SpecprofError(
            f"{self.path}: table {table} is damaged ({str(exc).split(': ', 1)[-1]}); specprof does not analyse "
            "a damaged export: export it again with `nsys export --type sqlite`", self.path)

    def _corrupt(self, exc: Exception) -> Exception:
        if "Cannot allocate memory" in str(exc) or "out of memory" in str(exc):
            return MemoryError(str(exc))  # no damage: the CLI says the memory ran out
        return SpecprofError(
            f"{self.path}: reading the export failed ({str(exc).splitlines()[0]}); the file is "
            "probably truncated or corrupt: export it again with `nsys export --type sqlite`",
            self.path,
        )

    def close(self):
        self.con.close()


def _check_file(path: str) -> None:
    if not os.path.exists(path):
        raise SpecprofError(f"{path}: no such file; give the path of an nsys SQLite export", path)
    if os.path.isdir(path):
        raise SpecprofError(f"{path}: is a directory; give the path of an nsys SQLite export", path)
    if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or a device would be waited on, or read for ever
        raise SpecprofError(f"{path}: not a regular file (a pipe, socket or device); give the path of an nsys "
                            "SQLite export", path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(100)
    except OSError as exc:
        raise SpecprofError(f"{path}: cannot be read ({exc.strerror})", path) from None
    if not head.startswith(SQLITE_MAGIC):
        raise SpecprofError(
            f"{path}: not a SQLite file; export the report with "
            "`nsys export --type sqlite -o RUN.sqlite RUN.nsys-rep` and analyze RUN.sqlite",
            path,
        )
    if len(head) < 100:
        raise SpecprofError(f"{path}: the SQLite file is truncated (under 100 bytes)", path)
    # The header stores the page count; a file shorter than that was cut off.
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    size = os.path.getsize(path)
    if pages and page_size and size < pages * page_size:
        raise SpecprofError(
            f"{path}: the SQLite file is truncated ({size} bytes, its header says "
            f"{pages * page_size}); copy or export it again",
            path,
        )


_PROCESS_COLUMNS = {**{t: "globalPid" for t in _GPU_TABLES}, "CUPTI_ACTIVITY_KIND_RUNTIME": "globalTid",
                     "NVTX_EVENTS": "globalTid"}


def read_nsys_sqlite(path: str, process: int | None = None, split=None) -> Trace:
    """Read an nsys SQLite export into a Trace; with `process` (a globalPid), only that process's GPU ops, CUDA
    calls and NVTX events (app/process_tasks.py), and with `split` (readers/nsys_split.py), its rows of the large
    tables from there, where one walk of the export put them, instead of a walk of its own."""
    ex = _Export(path)
    ex.process = process
    ex.split = split
    try:
        meta = _read_meta(ex)
        strings = _read_strings(ex)
        value, cut = bounded_names(strings.get_column("value"))
        if cut:
            strings = strings.with_columns(value)
            meta.notes.append(names_note(cut, "strings (names of kernels, calls or ranges)"))
        gpu = sum(hi - lo for lo, hi in (ex.row_span(t) for t in _GPU_TABLES if t in ex.tables))
        with progress.step("reading GPU ops", gpu, "rows") as step:
            ops = _read_ops(ex, strings, step)
        trim_c_heap()  # the driver's freed batches
        calls = "CUPTI_ACTIVITY_KIND_RUNTIME"
        span = ex.row_span(calls) if calls in ex.tables else (0, 0)
        with progress.step("reading CUDA API calls", span[1] - span[0], "rows") as step:
            api = _read_api(ex, strings, ops, step)
        trim_c_heap()
        span = ex.row_span("NVTX_EVENTS") if "NVTX_EVENTS" in ex.tables else (0, 0)
        with progress.step("reading NVTX ranges", span[1] - span[0], "rows") as step:
            ranges, marks = _read_nvtx(ex, strings, meta, step)
        meta.extra["tables_read_by"] = dict(ex.read_by)
    finally:
        ex.close()
    trim_c_heap()
    check_span(path, {"GPU ops": ops, "CUDA API calls": api, "NVTX ranges": ranges}, "export it again")
    if not ops.is_empty():
        known_gpus = {g["device"] for g in meta.gpus}
        for device in distinct(ops.get_column("device")).drop_nulls().to_list():
            if device not in known_gpus:
                meta.gpus.append({"device": device, "name": None})
    return Trace(ops=ops, api=api, ranges=ranges, marks=marks, meta=meta)


def _read_meta(ex: _Export) -> TraceMeta:
    meta = TraceMeta(path=ex.path, format="nsys-sqlite")
    for table in ("META_DATA_EXPORT", "TARGET_INFO_GPU", "PROCESSES", "ThreadNames", "StringIds"):
        ex.check(table)  # small tables, read through SQLite: whole, or refused
    if "META_DATA_EXPORT" in ex.tables:
        kv = dict(ex.rows("SELECT CAST(name AS TEXT), CAST(value AS TEXT) FROM META_DATA_EXPORT NOT INDEXED"))
        meta.tool_version = kv.get("EXPORT_PRODUCT_VERSION")
        meta.schema_version = kv.get("EXPORT_SCHEMA_VERSION")
    if "TARGET_INFO_GPU" in ex.tables and {"id", "name"} <= ex.columns("TARGET_INFO_GPU"):
        for device, name in _integers(ex, "TARGET_INFO_GPU", ex.rows(
                "SELECT DISTINCT id, CAST(name AS TEXT) FROM TARGET_INFO_GPU NOT INDEXED ORDER BY id"), 1):
            meta.gpus.append({"device": device, "name": name})
    if "PROCESSES" in ex.tables:
        for gpid, pid, name in _integers(ex, "PROCESSES", ex.rows(
                "SELECT globalPid, pid, CAST(name AS TEXT) FROM PROCESSES NOT INDEXED"), 2):
            meta.processes.append({"pid": gpid, "os_pid": pid, "name": name})
    if "ThreadNames" in ex.tables and "StringIds" in ex.tables:
        for tid, name in _integers(ex, "ThreadNames", ex.rows(
            "SELECT t.globalTid, CAST(s.value AS TEXT) FROM ThreadNames t NOT INDEXED "
            "JOIN StringIds s NOT INDEXED ON s.id = t.nameId"
        ), 1):
            meta.threads[tid] = name
    return meta


def _integers(ex: _Export, table: str, rows: list[tuple], count: int) -> list[tuple]:
    """`rows` whose first `count` values are integers (or NULL), else one SpecprofError naming the table:
    text or a BLOB where nsys writes an id is damage, never a value to show."""
    for row in rows:
        if not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in row[:count]):
            raise SpecprofError(
                f"{ex.path}: table {table} holds a value that is not an integer where nsys writes an id; the "
                "export is damaged or not made by nsys: export it again with `nsys export --type sqlite`",
                ex.path)
    return rows


def _read_strings(ex: _Export) -> pl.DataFrame:
    """StringIds, with `value` dictionary-encoded: joining it onto millions of rows stays cheap."""
    schema = {"id": pl.Int64, "value": pl.Utf8}
    if "StringIds" not in ex.tables:
        return pl.DataFrame(schema=schema).with_columns(pl.col("value").cast(pl.Categorical))
    ex.check("StringIds")
    return ex.frame("SELECT id, CAST(value AS BLOB) FROM StringIds NOT INDEXED", schema,
                    table="StringIds").with_columns(pl.col("value").cast(pl.Categorical))


def _name_table(strings: pl.DataFrame) -> pl.Series | None:
    """The names laid out by string id (nsys numbers strings from 0), or None when the ids are
    spread too wide for that."""
    ids = strings.get_column("id")
    lo, hi = (ids.min(), ids.max()) if ids.len() else (None, None)
    if lo is None or lo < 0 or hi >= _DENSE_IDS:
        return None
    return pl.DataFrame({"id": pl.int_range(hi + 1, eager=True, dtype=pl.Int64)}).join(
        strings, on="id", how="left", maintain_order="left").get_column("value")


def _name_of(df: pl.DataFrame, strings: pl.DataFrame, id_col: str, out: str,
             table: pl.Series | None = None) -> pl.DataFrame:
    """Replace integer string-id column `id_col` by its text in column `out` (same row order).

    With `table` (`_name_table(strings)`), each row's name is a gather, no hash join over millions
    of rows; otherwise one join on the id column. The frame's other columns are not copied."""
    if table is not None:
        at = df.get_column(id_col)
        inside = ((at >= 0) & (at < table.len())).fill_null(False)
        names = table.gather(at.zip_with(inside, pl.Series([None], dtype=pl.Int64)))
        return df.with_columns(names.alias(out)).drop(id_col)
    lookup = strings.rename({"id": id_col, "value": out})
    names = df.select(id_col).join(lookup, on=id_col, how="left", maintain_order="left").get_column(out)
    return df.with_columns(names).drop(id_col)


_DENSE_IDS = 1 << 24  # string ids below this are looked up in a table indexed by id


def _have(cols: set[str], name: str) -> str | None:
    """`name` when the table has that column, else None (a column of NULLs)."""
    return name if name in cols else None


_OP_REQUIRED = ("start", "end", "deviceId", "streamId", "globalPid")  # what every GPU op row of nsys has
_OP_COLUMNS = {"start": pl.Int64, "end": pl.Int64, "device": pl.Int64, "stream": pl.Int64, "pid": pl.Int64,
               "correlation": pl.Int64}


def _kernel_read(cols: set[str]) -> tuple[Select, dict]:
    """The read of the kernel table (its select and the schema it is read as); names stay string ids."""
    name_col = "demangledName" if "demangledName" in cols else "shortName"
    short_col = "shortName" if "shortName" in cols else name_col
    return (Select("CUPTI_ACTIVITY_KIND_KERNEL", ("start", "end", "deviceId", "streamId", _have(cols, "globalPid"),
                                                   _have(cols, "correlationId"), name_col, short_col,
                                                   _have(cols, "graphNodeId")), required=_OP_REQUIRED),
            {**_OP_COLUMNS, "name_id": pl.Int64, "short_id": pl.Int64, "graph_node": pl.Int64})


def _memcpy_read(cols: set[str]) -> tuple[Select, dict]:
    return (Select("CUPTI_ACTIVITY_KIND_MEMCPY", ("start", "end", "deviceId", "streamId", _have(cols, "globalPid"),
                                                   _have(cols, "correlationId"), _have(cols, "copyKind"),
                                                   _have(cols, "graphNodeId")), required=_OP_REQUIRED),
            {**_OP_COLUMNS, "copy_kind": pl.Int64, "graph_node": pl.Int64})


def _memset_read(cols: set[str]) -> tuple[Select, dict]:
    return (Select("CUPTI_ACTIVITY_KIND_MEMSET", ("start", "end", "deviceId", "streamId", _have(cols, "globalPid"),
                                                   _have(cols, "correlationId"), _have(cols, "graphNodeId")),
                   required=_OP_REQUIRED),
            {**_OP_COLUMNS, "graph_node": pl.Int64})


def _graph_read(cols: set[str]) -> tuple[Select, dict]:
    """--cuda-graph-trace=graph: one row per graph launch, no kernel rows."""
    return (Select("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", ("start", "end", _have(cols, "deviceId"), "streamId",
                                                        _have(cols, "globalPid"), _have(cols, "correlationId"),
                                                        _have(cols, "graphId")), required=_OP_REQUIRED),
            {**_OP_COLUMNS, "graph_id": pl.Int64})


def large_reads(ex: _Export, strings: pl.DataFrame) -> list[tuple[Select, dict]]:
    """Every read of a large table that `read_nsys_sqlite` makes of the export (the tables it has), each as the
    select and the schema it is read as: what readers/nsys_split.py splits by process in one walk."""
    reads = []
    for table, make in (("CUPTI_ACTIVITY_KIND_KERNEL", _kernel_read), ("CUPTI_ACTIVITY_KIND_MEMCPY", _memcpy_read),
                        ("CUPTI_ACTIVITY_KIND_MEMSET", _memset_read), ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", _graph_read),
                        ("CUPTI_ACTIVITY_KIND_RUNTIME", lambda cols: _api_read(strings, cols)),
                        ("NVTX_EVENTS", _nvtx_read)):
        cols = ex.columns(table)
        if cols:
            reads.append(make(cols))
    return reads


def _read_ops(ex: _Export, strings: pl.DataFrame, step=None) -> pl.DataFrame:
    parts = []
    k = "CUPTI_ACTIVITY_KIND_KERNEL"
    cols = ex.columns(k)
    if cols:
        table = _name_table(strings)

        def named(df: pl.DataFrame) -> pl.DataFrame:  # per slice, in the reading thread
            df = _name_of(df, strings, "name_id", "name", table)
            return _name_of(df, strings, "short_id", "short_name", table)

        frames = ex.parallel(*_kernel_read(cols), keep=named, step=step)
        parts.extend(f.with_columns(kind=pl.lit("kernel", dtype=pl.Categorical)) for f in frames)  # a part per slice
        del frames
    m = "CUPTI_ACTIVITY_KIND_MEMCPY"
    cols = ex.columns(m)
    if cols:
        df = ex.whole(*_memcpy_read(cols), step=step)
        kinds = pl.DataFrame({"copy_kind": list(MEMCPY_KINDS), "k": list(MEMCPY_KINDS.values())})
        df = df.join(kinds, on="copy_kind", how="left").with_columns(
            name=(pl.lit("[CUDA memcpy ") + pl.col("k").fill_null("Unknown") + pl.lit("]")).cast(pl.Categorical)
        ).drop("copy_kind", "k")
        parts.append(df.with_columns(short_name=pl.col("name"), kind=pl.lit("memcpy", dtype=pl.Categorical)))
    s = "CUPTI_ACTIVITY_KIND_MEMSET"
    cols = ex.columns(s)
    if cols:
        df = ex.whole(*_memset_read(cols), step=step)
        memset = pl.lit("[CUDA memset]").cast(pl.Categorical)
        parts.append(df.with_columns(name=memset, short_name=memset, kind=pl.lit("memset", dtype=pl.Categorical)))
    g = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
    cols = ex.columns(g)
    if cols:
        # --cuda-graph-trace=graph: one row per graph launch, no kernel rows.
        df = ex.whole(*_graph_read(cols), step=step)
        df = df.with_columns(
            name=(pl.lit("[CUDA graph ") + pl.col("graph_id").cast(pl.Utf8).fill_null("?") + pl.lit("]"))
            .cast(pl.Categorical),
            graph_node=pl.lit(None, dtype=pl.Int64),
        ).drop("graph_id")
        parts.append(df.with_columns(short_name=pl.col("name"), kind=pl.lit("graph", dtype=pl.Categorical)))
    parts = [conform(p, {c: t for c, t in OPS_SCHEMA.items() if c != "op_id"}) for p in parts if p.height]
    if not parts:
        return empty(OPS_SCHEMA)
    # (in start order now: polars' sorted flag says so to the analyses that need it)
    return _stack_sorted(parts).with_row_index("op_id").with_columns(pl.col("op_id").cast(pl.Int64)).set_sorted("start")


def _stack_sorted(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """The parts (same columns) stacked into one frame in (start, end) order, ties in part order.

    Built one column at a time, each column's pieces stacked into one chunk (and put in order) on
    their own: the rows are never held twice (stacking whole frames, then sorting them, held 2x the
    ops: 1.8 GB at 11 M). op_id follows this order. Each part is usually in it already (a table of an
    export, or a slice of one): then their merge order comes from one pass in C (`columns.merge_order`)
    instead of a sort of all the rows."""
    names = list(parts[0].columns)
    pieces = {name: [p.drop_in_place(name) for p in parts] for name in names}  # no copy
    parts.clear()

    def stack(name: str) -> pl.Series:
        return pl.concat(pieces.pop(name), rechunk=True)

    lengths = [s.len() for s in pieces["start"]]
    out = {"start": stack("start"), "end": stack("end")}
    key = pl.DataFrame(out)
    order = None
    if not _in_order(key, "start", "end"):
        order = merge_order(out["start"], out["end"], lengths)
        if order is None:  # a part out of order itself, or too many parts: sort
            order = key.select(pl.arg_sort_by("start", "end", maintain_order=True)).to_series()
    del key

    def place(name: str) -> tuple[str, pl.Series]:
        column = out.pop(name) if name in out else stack(name)
        return name, column if order is None else column.gather(order)

    # Columns are stacked and gathered in parallel threads (polars releases the GIL while it copies;
    # each thread works on Series of its own): as many columns at once as there are readers.
    with ThreadPoolExecutor(READ_THREADS) as pool:
        placed = dict(pool.map(place, names))
    return pl.DataFrame({name: placed[name] for name in names})


def _in_order(df: pl.DataFrame, first: str, second: str | None = None) -> bool:
    """Whether `df` is sorted by (first, second), nulls first; one vectorised pass."""
    if df.height < 2:
        return True
    a = pl.col(first)
    up = a.shift(1)
    ok = (a > up) | (a == up) | up.is_null()
    if second is not None:
        ok = (a > up) | ((a == up) & (pl.col(second) >= pl.col(second).shift(1))) | up.is_null()
    nulls = df.select(pl.col(first).is_null().any()).item()
    return not nulls and bool(df.select(ok.all()).item())


_VERSION_SUFFIX = r"_v\d+$"  # cudaLaunchKernel_v7000 is cudaLaunchKernel


def _read_api(ex: _Export, strings: pl.DataFrame, ops: pl.DataFrame, step=None) -> pl.DataFrame:
    """CUDA runtime and driver calls that launched the ops (joined later by pid + correlation).

    The table also holds every other CUDA call (syncs, queries, allocations): it is read in
    parallel rowid slices, and each slice keeps only the calls whose (process, correlation id)
    an op carries: one gather per row in a bitmap with a bit per (process number, id).
    """
    r = "CUPTI_ACTIVITY_KIND_RUNTIME"
    cols = ex.columns(r)
    if not cols or ops.is_empty():
        return empty(API_SCHEMA)
    corr = ops.get_column("correlation").drop_nulls()
    if corr.is_empty():
        return empty(API_SCHEMA)
    lo, hi = int(corr.min()), int(corr.max())
    op_pids = distinct(ops.get_column("pid"))
    stride = hi + 1
    select, schema = _api_read(strings, cols)
    pid_of = pl.col("tid") & pl.lit(_PID_MASK, dtype=pl.Int64)
    by_process = lo >= 0 and not op_pids.has_nulls() and stride * op_pids.len() < 1 << 32
    if by_process:
        # One bit per (process, correlation id) that an op carries: the process's number x
        # stride + the id. Each slice keeps its calls by one gather in that bitmap.
        number = list(range(op_pids.len()))

        def keys(pid: pl.Series, c: pl.Series) -> pl.Series:
            n = pid.replace_strict(op_pids, number, default=None, return_dtype=pl.Int64)
            ok = (n.is_not_null() & (c >= 0) & (c <= hi)).fill_null(False)
            return (n * stride + c).zip_with(ok, pl.Series([None], dtype=pl.Int64))

        bitmap = pl.Series("m", [False], pl.Boolean).extend_constant(False, stride * op_pids.len() - 1)
        bitmap = bitmap.scatter(keys(ops.get_column("pid"), ops.get_column("correlation")).drop_nulls(), True)

        def keep(batch: pl.DataFrame) -> pl.DataFrame:
            at = keys(batch.get_column("pid"), batch.get_column("correlation"))
            return batch.filter(bitmap.gather(at).fill_null(False))
    elif lo >= 0 and hi < 1 << 31:  # ops of no known process: the correlation id alone, then the process
        bitmap = pl.Series("m", [False], pl.Boolean).extend_constant(False, hi).scatter(corr, True)

        def keep(batch: pl.DataFrame) -> pl.DataFrame:
            c = batch.get_column("correlation")
            batch = batch.filter((c >= 0) & (c <= hi))
            return batch.filter(bitmap.gather(batch.get_column("correlation")))
    else:  # ids beyond a bitmap's reach (no export seen has them): a hash lookup per slice
        wanted = corr.unique()

        def keep(batch: pl.DataFrame) -> pl.DataFrame:
            return batch.filter(pl.col("correlation").is_in(wanted.implode()))

    parts = ex.parallel(select, schema, keep=lambda batch: keep(batch.with_columns(pid=pid_of)), step=step)
    if not parts:
        return empty(API_SCHEMA)
    df = pl.concat(parts)
    del parts
    if not by_process:
        # The same correlation id in another process launched nothing here.
        if op_pids.len() == 1 and op_pids[0] is not None:
            df = df.filter(pl.col("pid") == op_pids[0])
        else:
            df = _launched_here(df, ops)
    names = strings.join(df.select(pl.col("name_id").alias("id")).unique(), on="id", how="semi")
    names = names.with_columns(pl.col("value").cast(pl.Utf8).str.replace(_VERSION_SUFFIX, "").cast(pl.Categorical))
    df = _name_of(df, names, "name_id", "name", _name_table(names))
    if not _in_order(df, "start"):
        df = df.sort("start", maintain_order=True)
    # A runtime call and the driver call it makes can share a correlation id: keep the outer one
    # (the earlier). Whether any id occurs twice is checked on one sorted integer column (a hash over
    # the rows costs hundreds of MB); only then are the repeated ids found and de-duplicated.
    key = _process_correlation_key(df)
    if key is not None:
        ordered = key.sort()
        repeated = bool((ordered == ordered.shift(1)).any())
        del ordered
    else:
        repeated = True
    twice = df.select(pl.struct("pid", "correlation").is_duplicated().alias("d")).get_column("d") \
        if repeated else None
    if twice is not None and twice.any():
        df = pl.concat([df.filter(~twice),
                        df.filter(twice).unique(["pid", "correlation"], keep="first", maintain_order=True)])
        df = df.sort("start", maintain_order=True)
    return df


def _api_read(strings: pl.DataFrame, cols: set[str]) -> tuple[Select, dict]:
    """The read of the CUDA API table: the calls that can have launched something (`_not_launches`)."""
    return (Select("CUPTI_ACTIVITY_KIND_RUNTIME", ("start", "end", "globalTid", "correlationId", "nameId"),
                   (("not null", "correlationId"), *_not_launches(strings, cols)),
                   required=("start", "end", "globalTid")),
            {"start": pl.Int64, "end": pl.Int64, "tid": pl.Int64, "correlation": pl.Int64, "name_id": pl.Int64})


# CUDA calls that never launch GPU work (no kernel, memcpy, memset or graph record carries their
# correlation id): queries, events, stream and device synchronisation, capture state, module and library
# loading. A real capture has more of them than launches (reference-k4: cuKernelGetName,
# cuKernelGetAttribute and cudaStreamIsCapturing alone are 3 of every 5 runtime rows). SQLite skips
# them in the query, so the driver never converts them; leaving one out of this list costs time, never
# a result (tests/test_reader_nsys.py reads every capture with and without it).
NOT_LAUNCHES = frozenset({
    "cuKernelGetName", "cuKernelGetAttribute", "cuKernelSetAttribute", "cuKernelGetFunction",
    "cuLibraryLoadData", "cuLibraryGetKernel", "cuLibraryUnload", "cuModuleLoadData", "cuModuleGetFunction",
    "cuModuleUnload", "cuFuncGetAttribute", "cuFuncSetAttribute", "cuGetProcAddress",
    "cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxSynchronize", "cuProfilerStart", "cuProfilerStop",
    "cuStreamIsCapturing", "cuStreamGetCaptureInfo", "cuStreamSynchronize", "cuStreamQuery", "cuStreamWaitEvent",
    "cuEventCreate", "cuEventRecord", "cuEventRecordWithFlags", "cuEventSynchronize", "cuEventQuery",
    "cuEventDestroy", "cuPointerGetAttribute", "cuPointerGetAttributes", "cuMemGetInfo",
    "cudaStreamIsCapturing", "cudaStreamGetCaptureInfo", "cudaStreamSynchronize", "cudaStreamQuery",
    "cudaStreamWaitEvent", "cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority",
    "cudaStreamDestroy", "cudaEventCreate", "cudaEventCreateWithFlags", "cudaEventRecord",
    "cudaEventRecordWithFlags", "cudaEventSynchronize", "cudaEventQuery", "cudaEventDestroy",
    "cudaEventElapsedTime", "cudaDeviceSynchronize", "cudaGetDevice", "cudaSetDevice", "cudaGetDeviceCount",
    "cudaGetDeviceProperties", "cudaDeviceGetAttribute", "cudaGetLastError", "cudaPeekAtLastError",
    "cudaFuncGetAttributes", "cudaFuncSetAttribute", "cudaPointerGetAttributes", "cudaMemGetInfo",
    "cudaProfilerStart", "cudaProfilerStop", "cudaGetDriverEntryPoint", "cudaGetDriverEntryPointByVersion",
})


def _not_launches(strings: pl.DataFrame, cols: set[str]) -> tuple[tuple, ...]:
    """The condition `nameId NOT IN (...)`: the string ids of NOT_LAUNCHES in this export (version
    suffixes ignored), or none when there are none."""
    if "nameId" not in cols or strings.is_empty():
        return ()
    ids = strings.filter(pl.col("value").cast(pl.Utf8).str.replace(_VERSION_SUFFIX, "").is_in(list(NOT_LAUNCHES)))
    ids = tuple(sorted(int(i) for i in ids.get_column("id").to_list()))
    return (("not in", "nameId", ids),) if ids else ()


def _process_correlation_key(df: pl.DataFrame, pids: pl.Series | None = None) -> pl.Series | None:
    """(pid, correlation) packed into one Int64 (process number << 40 | correlation id; processes
    numbered in `pids`, default df's), or None when correlation ids do not fit in 40 bits."""
    lo, hi = df.select(lo=pl.col("correlation").min(), hi=pl.col("correlation").max()).row(0)
    if lo is None or lo < 0 or hi >= 1 << 40:
        return None
    pids = distinct(df.get_column("pid")).drop_nulls() if pids is None else pids
    rank = pl.DataFrame({"pid": pids, "_n": pl.int_range(pids.len(), eager=True).cast(pl.Int64) * (1 << 40)})
    return df.select("pid", "correlation").join(rank, on="pid", how="left", maintain_order="left").select(
        k=pl.col("_n") + pl.col("correlation")).get_column("k")


def _launched_here(df: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """The rows of `df` whose (pid, correlation) an op carries, in df's order. Membership by an as-of
    join of two sorted integer columns: a hash table over tens of millions of op keys costs GBs."""
    pids = pl.concat([distinct(df.get_column("pid")), distinct(ops.get_column("pid"))]).unique().drop_nulls().sort()
    mine, theirs = _process_correlation_key(df, pids), _process_correlation_key(ops, pids)
    if mine is None or theirs is None:
        return df.join(ops.select("pid", "correlation").unique(), on=["pid", "correlation"], how="semi",
                       maintain_order="left")
    right = pl.DataFrame({"k": theirs.drop_nulls().sort()}).with_columns(hit=pl.col("k")).set_sorted("k")
    left = pl.DataFrame({"k": mine, "_row": pl.int_range(df.height, eager=True)}).drop_nulls("k").sort("k")
    found = left.join_asof(right, on="k", strategy="backward", check_sortedness=False)
    rows = found.filter(pl.col("hit") == pl.col("k")).get_column("_row").sort()
    return df[rows]


def _nvtx_read(cols: set[str]) -> tuple[Select, dict]:
    return (Select("NVTX_EVENTS", ("start", "end", "eventType", "globalTid", _have(cols, "endGlobalTid"),
                                   _have(cols, "text"), _have(cols, "textId"), _have(cols, "domainId")),
                   (("in", "eventType", (*NVTX_RANGES, NVTX_MARK, NVTX_DOMAIN_CREATE)),),
                   required=("start", "globalTid")),
            {"start": pl.Int64, "end": pl.Int64, "event_type": pl.Int64, "tid": pl.Int64, "end_tid": pl.Int64,
             "text": pl.Utf8, "text_id": pl.Int64, "domain_id": pl.Int64})


def _read_nvtx(ex: _Export, strings: pl.DataFrame, meta: TraceMeta, step=None):
    n = "NVTX_EVENTS"
    cols = ex.columns(n)
    if not cols:
        return empty(RANGES_SCHEMA), empty(MARKS_SCHEMA)
    df = ex.whole(*_nvtx_read(cols), step=step)
    text, cut = bounded_names(df.get_column("text"))
    if cut:
        df = df.with_columns(text)
        meta.notes.append(names_note(cut, "NVTX range or mark names"))
    # Names stay dictionary-encoded (the registered strings are; inline texts are encoded here), so a name
    # repeated on every range is held once.
    df = df.join(strings.rename({"id": "text_id", "value": "registered"}), on="text_id", how="left")
    df = df.with_columns(
        name=pl.coalesce(pl.col("text").cast(pl.Categorical), pl.col("registered").cast(pl.Categorical)),
        pid=pl.col("tid") & pl.lit(_PID_MASK, dtype=pl.Int64),
        domain_id=pl.col("domain_id").fill_null(0),
    )
    domains = (
        df.filter(pl.col("event_type") == NVTX_DOMAIN_CREATE)
        .select("pid", "domain_id", pl.col("name").alias("domain"))
        .unique(["pid", "domain_id"], keep="last")
    )
    df = df.filter(pl.col("event_type") != NVTX_DOMAIN_CREATE).join(
        domains, on=["pid", "domain_id"], how="left"
    )
    unnamed = df.filter((pl.col("domain_id") != 0) & pl.col("domain").is_null())
    if unnamed.height:
        meta.notes.append(
            f"{unnamed.height} NVTX events use a domain whose creation was not captured "
            "(the export is a window); they are shown as domain '<id N>'"
        )
    cat = pl.Categorical
    df = df.with_columns(
        domain=pl.when(pl.col("domain_id") == 0)
        .then(pl.lit("", dtype=cat))
        .when(pl.col("domain").is_not_null())
        .then(pl.col("domain"))
        .otherwise((pl.lit("<id ") + pl.col("domain_id").cast(pl.Utf8) + pl.lit(">")).cast(cat))
    )
    marks = df.filter(pl.col("event_type") == NVTX_MARK).select(
        "pid", "tid", pl.col("start").alias("ts"), pl.col("name").cast(pl.Utf8).fill_null(""), "domain"
    )
    ranges = df.filter(pl.col("event_type").is_in(NVTX_RANGES))
    cross = ranges.filter(pl.col("end_tid").is_not_null() & (pl.col("end_tid") != pl.col("tid")))
    if cross.height:
        meta.skipped["ranges_ending_on_another_thread"] = cross.height
        ranges = ranges.filter(pl.col("end_tid").is_null() | (pl.col("end_tid") == pl.col("tid")))
    open_ranges = ranges.filter(pl.col("end").is_null()).height
    if open_ranges:
        # As NVIDIA's nvtx_gpu_proj_trace does: a range still open at the end ends with the trace.
        meta.notes.append(f"{open_ranges} NVTX ranges were still open at the end of the capture; "
                          "they are closed at the trace's last timestamp")
        last = ranges.select(pl.max_horizontal(pl.col("start").max(), pl.col("end").max())).item()
        ranges = ranges.with_columns(pl.col("end").fill_null(last))
    ranges = (
        ranges.select("pid", "tid", "start", "end", pl.col("name").fill_null(pl.lit("", dtype=pl.Categorical)), "domain")
        .sort("tid", "start", pl.col("end"), descending=[False, False, True])
        .with_row_index("range_id")
        .with_columns(pl.col("range_id").cast(pl.Int64))
    )
    return ranges, marks
