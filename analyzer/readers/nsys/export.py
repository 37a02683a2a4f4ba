"""An open nsys SQLite export (`Export`): which tables and columns it has, and its rows read as polars frames.

A large table is read in slices in threads (`Export.parallel`), one of two ways: straight from the file's B-tree
pages (pages.py, where the C page reader was built and the table allows it) or through SQLite, in rowid slices,
bulk rows through ADBC (Arrow, no Python loop over rows); the small metadata tables through the standard sqlite3
module. Both give the same rows (tests/test_reader_pages.py). Which of the two a read takes is the caller's
(`pages`); a caller that says nothing gets the pages, unless $SPECPROF_SQLITE_PAGES is 0 (pages.py `wanted`).
Whatever the path, a table is checked before it is trusted, and a damaged one is refused, never read in part.
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import polars as pl

from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.trace import empty
from specprof.analyzer.readers.nsys.pages import built, leaf_pages, read_table, wanted
from specprof.analyzer.readers.nsys.select import SLICE_ROWS, Select, decoded
from specprof.analyzer.readers.nsys.tables import LARGE, PROCESS_COLUMNS, READ, TIME_LIMIT

SQLITE_MAGIC = b"SQLite format 3\x00"


def _cores() -> int:
    """The cores this process may run on (its affinity, as `taskset` sets it), else all of them."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


READ_THREADS = max(1, min(8, _cores()))  # parallel readers of one large table, where a read names none

_CODECS = {"UTF-8": "utf-8", "UTF-16le": "utf-16-le", "UTF-16be": "utf-16-be"}


def _uri(path: str) -> str:
    return "file:" + urllib.parse.quote(os.fsencode(os.path.abspath(path))) + "?mode=ro"


class Export:
    """An open export: which tables and columns exist, and two ways to read them.

    `pages`: read the large tables from their pages where the page reader takes them (True), or every table
    through SQLite (False); None: as $SPECPROF_SQLITE_PAGES says (pages.py `wanted`). `threads`: how many
    slices of a table are read at once (None: one per core this process may use, up to 8). `process` (a
    globalPid): read only that process's rows of the large tables; with it, `split` (per_process.py `Split`): that
    process's rows, read already by one walk of the export."""

    def __init__(self, path: str, pages: bool | None = None, threads: int | None = None,
                 process: int | None = None, split=None):
        self.path = path
        self.pages = (wanted() if pages is None else pages) and built()
        self.threads = threads or READ_THREADS
        self._pages_in_file = _check_file(path)
        try:
            self.con = sqlite3.connect(_uri(path), uri=True)
            # names that are not valid text are shown with U+FFFD, never an error
            self.con.text_factory = lambda b: b.decode("utf-8", "replace")
            self.encoding = _CODECS.get(self.con.execute("PRAGMA encoding").fetchone()[0], "utf-8")
            master = self.con.execute("SELECT type, name, rootpage, sql FROM sqlite_master").fetchall()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            # (Python decodes SQLite's error text strictly: a damaged schema's bytes in it raise UnicodeDecodeError)
            why = str(exc) if isinstance(exc, sqlite3.DatabaseError) else "its schema is not valid text"
            raise SpecprofError(
                f"{path}: the SQLite file cannot be read ({why}); it is probably truncated or "
                "corrupt: export it again with `nsys export --type sqlite`",
                path,
            ) from None
        self.tables, self.roots = _schema(path, master)
        self._owner = None  # per page of the file, which table read here holds it (`claim`)
        self._claimed: list[str] = []
        self._lock = threading.Lock()
        self._spans: dict[str, tuple[int, int]] = {}
        self._columns: dict[str, frozenset[str]] = {}
        self.read_by: dict[str, str] = {}  # table -> "pages" or "sqlite": how its rows were read
        self._checked: set[str] = set()  # tables SQLite's quick_check found whole
        self.process = process
        self.split = split
        if not self.tables & {"StringIds", "META_DATA_EXPORT", "CUPTI_ACTIVITY_KIND_KERNEL",
                              "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME"}:
            raise SpecprofError(
                f"{path}: this SQLite file is not an Nsight Systems export (no nsys tables); "
                "make one with `nsys export --type sqlite -o RUN.sqlite RUN.nsys-rep`",
                path,
            )

    def __enter__(self) -> "Export":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def columns(self, table: str) -> frozenset[str]:
        if table not in self.tables:
            return set()
        if table not in self._columns:
            self._columns[table] = frozenset(r[1] for r in self.rows(f'PRAGMA table_info("{table}")'))
        return self._columns[table]

    def rows(self, sql: str, params=()) -> list[tuple]:
        try:
            return self.con.execute(sql, params).fetchall()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise self.corrupt(exc) from None

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
            raise self.corrupt(exc) from None
        finally:
            for handle in (stmt, con, db):
                if handle is not None:
                    handle.close()
        if step is not None:
            step.advance(df.height)
        if not df.width:
            return empty(schema)
        return self.cast(decoded(df.rename(dict(zip(df.columns, schema))), schema, self.encoding), schema, table)

    def cast(self, df: pl.DataFrame, schema: dict, table: str) -> pl.DataFrame:
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
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise self.damaged(table, exc) from None
        if found != [("ok",)]:
            raise self.damaged(table, found[0][0] if found else "no answer")
        pages = leaf_pages(self, table)  # (where the page reader is built: its walk of the interior pages only)
        if pages is not None:
            self.claim(table, pages)
        self._checked.add(table)

    def claim(self, table: str, pages) -> None:
        """Records that the leaf pages `pages` (page numbers, a numpy array) hold `table`'s rows. A page that
        another table read from this export holds too is damage (two tables made to share a B-tree: each reads
        the other's rows, and neither SQLite's check of one table nor the page reader's walk of it sees it):
        one SpecprofError naming both."""
        from specprof.analyzer.model.numeric import np

        with self._lock:
            if table in self._claimed:
                return
            if self._owner is None:
                self._owner = np.zeros(self._pages_in_file + 1, dtype=np.uint8)
            pages = pages[(pages > 0) & (pages <= self._pages_in_file)]  # (others: refused where they are read)
            held = self._owner[pages]
            if held.any():
                at = int(np.flatnonzero(held)[0])
                other = self._claimed[int(held[at]) - 1]
                raise SpecprofError(
                    f"{self.path}: tables {other} and {table} share their pages (page {int(pages[at])} is in both); "
                    "the export is damaged: export it again with `nsys export --type sqlite`", self.path)
            self._claimed.append(table)
            self._owner[pages] = len(self._claimed)

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

        Straight from the B-tree pages where `self.pages` and the table allows it (pages.py `read_table`);
        else through SQLite (`read_sqlite`), in rowid slices (a range search on the B-tree, no scan) on a
        connection each, since SQLite decodes rows on one core per connection. With `self.split` (and `self.process`),
        from the process's rows that one walk of the export has read already, where it read this select.

        `sink` (per_process.py): each slice, numbered in rowid order, goes to `sink(number, frame)` in
        its reading thread instead of being returned (then none is), and `sink.reset()` forgets what it was
        given when the pages must be read again through SQLite."""
        if select.table not in self.tables:
            return []
        have = self.columns(select.table)
        missing = [c for c in (*select.columns, *(cond[1] for cond in select.where)) if c is not None and c not in have]
        if missing:
            raise SpecprofError(
                f"{self.path}: table {select.table} has no column {missing[0]}, which nsys writes there; the export is "
                "damaged or not made by nsys: export it again with `nsys export --type sqlite`", self.path)

        def checked(df: pl.DataFrame) -> pl.DataFrame:  # every row read is validated, then filtered by `keep`
            self.validate(select, schema, df)
            return keep(df) if keep is not None else df

        if self.split is not None and self.process is not None:
            frames = self.split.frames(select, schema, self.process)
            if frames is not None:
                self.read_by[select.table] = "split"
                if step is not None:
                    step.advance(sum(df.height for df in frames))
                return self.run([lambda df=df: df for df in frames], checked) if frames else []
        select = self._of_process(select)
        frames = None
        if self.pages:
            frames = read_table(self, select, schema, checked, step, slice_rows, sink)
            if frames is not None:
                self.read_by[select.table] = "pages"
        if frames is None:
            if sink is not None:
                sink.reset()
            self.check(select.table)
            self.read_by[select.table] = "sqlite"
            frames = self.read_sqlite(select, schema, checked, step, slice_rows, sink)
        return frames

    def _of_process(self, select: Select) -> Select:
        """`select` restricted to the rows of `self.process` (none: as it is): a GPU op's globalPid is the
        process's, a CUDA call's or NVTX event's globalTid lies in it (its low 24 bits are the thread's)."""
        if self.process is None:
            return select
        column = PROCESS_COLUMNS.get(select.table)
        if column is None or column not in self.columns(select.table):
            raise SpecprofError(f"{self.path}: table {select.table} has no process column, so the export cannot be "
                                "read one process at a time; analyse it whole (without --jobs)", self.path)
        span = 1 if column == "globalPid" else 1 << 24
        return Select(select.table, select.columns, (*select.where, ("range", column, self.process,
                                                                       self.process + span)), select.required)

    def validate(self, select: Select, schema: dict, df: pl.DataFrame) -> None:
        """Refuses values nsys never writes, which the analysis cannot take: NULL in a `required` column, a
        timestamp (`start`, `end`) beyond +-2^62 ns, where differences of two would overflow 64 bits, and a row
        that ends before it starts. Every row read is validated before any is left out (`parallel`'s `keep`).
        (The page reader refuses a row that ends before it starts as it reads, zones included: pages.py.)"""
        source = dict(zip(schema, select.columns))
        for name, column in source.items():
            if column in select.required and df.get_column(name).null_count():
                raise SpecprofError(
                    f"{self.path}: table {select.table}: {df.get_column(name).null_count()} rows have no "
                    f"{column} (NULL); nsys always writes it: the export is damaged: export it again with "
                    "`nsys export --type sqlite`", self.path)
        times = [name for name in ("start", "end") if source.get(name) is not None]
        if not times or not df.height:
            return
        checks = [((pl.col(name) < -TIME_LIMIT) | (pl.col(name) > TIME_LIMIT)).sum().alias(name) for name in times]
        if len(times) == 2:
            checks.append((pl.col("end") < pl.col("start")).sum().alias("order"))
        found = df.select(checks).row(0)
        for name, bad in zip(times, found):
            if bad:
                raise SpecprofError(
                    f"{self.path}: table {select.table}: {bad} rows have a {source[name]} beyond +-2^62 ns (292 "
                    "years); nsys never writes that: the export is damaged: export it again", self.path)
        if len(times) == 2 and found[2]:
            raise SpecprofError(
                f"{self.path}: table {select.table}: {found[2]} rows end before they start; nsys never writes "
                "that: the export is damaged: export it again with `nsys export --type sqlite`", self.path)

    def whole(self, select: Select, schema: dict, step=None) -> pl.DataFrame:
        """The rows of `select` as one frame (`parallel`, stacked)."""
        frames = self.parallel(select, schema, step=step)
        return pl.concat(frames) if len(frames) > 1 else frames[0] if frames else empty(schema)

    def parts(self, rows: int, slice_rows: int) -> int:
        """How many slices a read of `rows` rows is cut into: one per thread (none under 200,000 rows), and
        none over `slice_rows`."""
        return max(min(self.threads, rows // 200_000 + 1), -(-rows // slice_rows))

    def run(self, reads: list, keep, sink=None) -> list[pl.DataFrame]:
        """The frames `reads` (functions) give, each passed through `keep` or to `sink` (`parallel`), in threads."""
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
            with ThreadPoolExecutor(min(len(reads), self.threads)) as pool:
                results = list(pool.map(run, range(len(reads)), reads))
        return [df for df in results if df.height]

    def read_sqlite(self, select: Select, schema: dict, keep, step, slice_rows: int,
                    sink=None) -> list[pl.DataFrame]:
        """The rows of `select` through SQLite (`parallel`'s other path), in rowid slices read in threads."""
        lo, hi = self.row_span(select.table)
        if hi <= lo:
            return []
        parts = self.parts(hi - lo, slice_rows)
        cuts = [lo + (hi - lo) * i // parts for i in range(parts + 1)]
        sql = select.sql(schema)
        glue = " AND " if " WHERE " in sql else " WHERE "
        queries = [f"{sql}{glue}rowid >= {a} AND rowid < {b}" for a, b in zip(cuts, cuts[1:])]
        return self.run([lambda q=q: self.frame(q, schema, step=step, table=select.table) for q in queries], keep,
                        sink)

    def damaged(self, table: str, exc: Exception) -> SpecprofError:
        return SpecprofError(
            f"{self.path}: table {table} is damaged ({str(exc).split(': ', 1)[-1]}); specprof does not analyse "
            "a damaged export: export it again with `nsys export --type sqlite`", self.path)

    def corrupt(self, exc: Exception) -> Exception:
        if "Cannot allocate memory" in str(exc) or "out of memory" in str(exc):
            return MemoryError(str(exc))  # no damage: the CLI says the memory ran out
        return SpecprofError(
            f"{self.path}: reading the export failed ({str(exc).splitlines()[0]}); the file is "
            "probably truncated or corrupt: export it again with `nsys export --type sqlite`",
            self.path,
        )

    def close(self):
        self.con.close()



def _schema(path: str, master: list[tuple]) -> tuple[set[str], dict[str, int]]:
    """The tables and views of an export (`master`: sqlite_master's type, name, rootpage and sql) and the root page
    of each table the reader reads (tables.READ, named as there: SQLite's names ignore case). Refused in one line: a
    view or a virtual table where nsys writes a table (a view of the same rows reads as empty to a rowid range,
    a recursive one never ends), a large table without rowids (read in rowid slices), two tables of one name, and
    two tables or indexes on one root page (each would read the other's rows)."""
    known = {name.lower(): name for name in READ}
    large = {t.name for t in LARGE}
    tables, roots, on_page = set(), {}, {}
    for kind, name, root, sql in master:
        name = str(name)
        if kind not in ("table", "view", "index"):
            continue
        if isinstance(root, int) and root > 0:
            if root in on_page:
                raise SpecprofError(
                    f"{path}: {on_page[root]} and {name} begin at the same page ({root}), so each would read the "
                    "other's rows; the export is damaged: export it again with `nsys export --type sqlite`", path)
            on_page[root] = name
        if kind == "index":
            continue
        tables.add(name)
        ours = known.get(name.lower())
        if ours is None:
            continue
        if ours in roots:
            raise SpecprofError(f"{path}: two tables are named {ours}; the export is damaged: export it again with "
                                "`nsys export --type sqlite`", path)
        rowids = not re.search(r"\bWITHOUT\s+ROWID\s*;?\s*$", str(sql or ""), re.IGNORECASE)
        if kind != "table" or not isinstance(root, int) or root <= 0 or (ours in large and not rowids):
            what = "a view" if kind == "view" else "a table without rowids" if not rowids else "a virtual table"
            raise SpecprofError(
                f"{path}: {name} is {what} where nsys writes a {'' if rowids else 'rowid '}table; specprof reads only "
                "the tables nsys writes: "
                "export the report again with `nsys export --type sqlite`", path)
        tables.add(ours)
        roots[ours] = root
    return tables, roots


def _check_file(path: str) -> int:
    """Refuses what is not a whole SQLite file; returns its pages."""
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
    return size // page_size if page_size else 0

