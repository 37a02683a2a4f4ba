"""One read of one table (`Select`), as both read paths take it, and the text it gives (`decoded`).

Both the page reader (pages.py) and SQLite (export.py) take the same `Select` and give the same rows; text comes
from either as the bytes the file holds, decoded here."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

SLICE_ROWS = 2_000_000  # rows per query of a large table: bounds what a filtered read holds at once


@dataclass(frozen=True)
class Select:
    """A read of some columns of one table, as SQL would say `SELECT c1, c2, NULL FROM table WHERE ...`.

    `columns`: column names of the table, or None for a column of NULLs (one the export lacks).
    `where`: conditions, all of which a row meets: ("in", column, ids), ("not in", column, ids) with
    non-negative integer ids, ("not null", column), or ("range", column, lo, hi): lo <= value < hi. A value
    that is not an integer (NULL, text, a real) passes "in" and "range", so that the reader refuses it
    (`Export.cast`, `Export.validate`) rather than drop its row unseen. Both read paths take this one description.
    `required`: columns nsys always fills: a row read with one of them NULL is refused (`Export.validate`)."""

    table: str
    columns: tuple[str | None, ...]
    where: tuple[tuple, ...] = ()
    required: tuple[str, ...] = ()

    def sql(self, schema: dict) -> str:
        """The SQL; a column read as text (pl.Utf8 in `schema`, by position) comes as its bytes, which
        `decoded` decodes: SQLite never checks that text is valid."""
        # (each named by its place: one export column read twice must not give two columns of one name)
        cols = ", ".join(("NULL" if c is None else f'CAST("{c}" AS BLOB)' if dtype == pl.Utf8 else f'"{c}"')
                         + f' AS "c{i}"' for i, (c, dtype) in enumerate(zip(self.columns, schema.values())))
        conds = []
        for cond in self.where:
            other = f' OR typeof("{cond[1]}") != \'integer\''  # (NULL, text, a real: read, then refused)
            if cond[0] == "not null":
                conds.append(f'"{cond[1]}" IS NOT NULL')
            elif cond[0] == "range":
                conds.append(f'("{cond[1]}" >= {int(cond[2])} AND "{cond[1]}" < {int(cond[3])}{other})')
            else:
                ids = ",".join(str(int(i)) for i in cond[2])
                conds.append(f'("{cond[1]}" IN ({ids}){other})' if cond[0] == "in" else f'"{cond[1]}" NOT IN ({ids})')
        # NOT INDEXED: the table's own B-tree, never an index, which may disagree with it (quick_check does
        # not compare them); rowid ranges still search the table's B-tree.
        return f'SELECT {cols} FROM "{self.table}" NOT INDEXED' + (" WHERE " + " AND ".join(conds) if conds else "")


def decoded(df: pl.DataFrame, schema: dict, encoding: str = "utf-8") -> pl.DataFrame:
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
