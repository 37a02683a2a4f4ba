"""Every SQL query documented in docs/store.md runs against a store of real captures and returns rows; the
outputs the doc quotes are the store's."""

from __future__ import annotations

import re
import sqlite3

import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from conftest import FIXTURES, ROOT

QUERIES = re.findall(r"```sql\n(.*?)```", (ROOT / "docs" / "store.md").read_text(), re.S)


@pytest.fixture(scope="module")
def db(tmp_path_factory, request):
    from conftest import SHARED

    if SHARED is None:
        pytest.skip("the third-party captures (../shared/traces) are not beside this checkout")
    path = str(tmp_path_factory.mktemp("docs") / "results.db")
    runs = [[str(FIXTURES / f"reference-k{k}") for k in (2, 4, 6)],
            [str(SHARED / "nsys_sqlite" / f"nsysai_mfu_2gpu_{w}.sqlite") for w in ("after", "before")]]
    for group in runs:
        out = CliRunner().invoke(main, ["analyze", *group, "--db", path, "--json"])
        assert out.exit_code == 0, out.output
    return path


def test_the_doc_has_queries():
    assert len(QUERIES) >= 10


@pytest.mark.parametrize("sql", QUERIES, ids=[f"query{i}" for i in range(len(QUERIES))])
def test_each_documented_query_runs_and_returns_rows(db, sql):
    with sqlite3.connect(db) as conn:
        rows = conn.execute(sql).fetchall()
    assert rows


def test_the_quoted_outputs(db):
    with sqlite3.connect(db) as conn:
        econ = conn.execute(QUERIES[2]).fetchall()
        ranks = conn.execute(QUERIES[4]).fetchall()
    assert econ == [(2, "sidecar without nsys", 3.987, 2.076, 4166.0), (4, "sidecar without nsys", 4.563, 2.625, 4603.0),
                    (6, "sidecar without nsys", 5.209, 2.698, 4143.0)]
    assert ranks == [(4, 0, 0, 4.267, 5.722, 15, 18.219), (4, 1, 1, 18.219, 5.535, 16, 4.267),
                     (5, 0, 0, 10.898, 6.274, 11, 2.477), (5, 1, 1, 2.477, 5.752, 22, 10.898)]


def test_the_quoted_batch_groups(db):
    (sql,) = [q for q in QUERIES if "FROM batch_groups" in q]
    with sqlite3.connect(db) as conn:
        rows = conn.execute(sql).fetchall()
    assert rows == [(1, "8", 2, 105, 4.001, 2.08, 4158.0, None, None, None),
                    (2, "8", 4, 105, 4.572, 2.631, 4603.0, None, None, None),
                    (3, "8", 6, 105, 5.21, 2.707, 4156.0, None, None, None)]
