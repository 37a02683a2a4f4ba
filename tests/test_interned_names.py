"""Range names and domains are dictionary-encoded (Categorical) through the pipeline: each distinct name is held
once, and a row costs 4 bytes however long its name. The round trip is checked on real captures (every range's
name and domain as the export itself gives them, through SQLite); the memory bound on a synthetic table of one
long name repeated on many ranges (no capture repeats a name thousands of characters long)."""

from __future__ import annotations

import sqlite3
from collections import Counter

import polars as pl
import pytest

from specprof.analyzer.core.projection import project
from specprof.analyzer.model.trace import Trace, TraceMeta, empty, OPS_SCHEMA, API_SCHEMA, MARKS_SCHEMA
from specprof.analyzer.readers.load import load_trace
from conftest import FIXTURES, capture_id, shared_nsys

# every NVTX push/pop and start/end range of the export, with its name and its domain's name, straight from SQL
RANGES_SQL = """
SELECT COALESCE(n.text, s.value, ''),
       CASE WHEN COALESCE(n.domainId, 0) = 0 THEN ''
            ELSE COALESCE(d.text, '<id ' || n.domainId || '>') END
FROM NVTX_EVENTS n
LEFT JOIN StringIds s ON s.id = n.textId
LEFT JOIN (SELECT globalTid & ~16777215 AS pid, domainId, MAX(COALESCE(text, (SELECT value FROM StringIds WHERE id = textId))) AS text FROM NVTX_EVENTS
           WHERE eventType = 75 GROUP BY 1, 2) d
       ON d.pid = (n.globalTid & ~16777215) AND d.domainId = n.domainId
WHERE n.eventType IN (59, 60, 70, 71) AND (n.endGlobalTid IS NULL OR n.endGlobalTid = n.globalTid)
"""


def _captures():
    return [FIXTURES / "reference-k4" / "run.sqlite", FIXTURES / "sglang-k4" / "run.sqlite"] + \
        [p for p in shared_nsys() if "mock" not in p.name][:2]


@pytest.mark.parametrize("path", _captures(), ids=capture_id)
def test_range_names_and_domains_round_trip_interned(path):
    trace = load_trace(str(path))
    assert trace.ranges.schema["name"] == pl.Categorical and trace.ranges.schema["domain"] == pl.Categorical
    con = sqlite3.connect(path)
    want = Counter(con.execute(RANGES_SQL).fetchall())
    got = Counter(zip(trace.ranges["name"].cast(pl.Utf8).to_list(), trace.ranges["domain"].cast(pl.Utf8).to_list()))
    assert got == want
    # the projection's phase is encoded too, and is the name less its per-call suffix
    ranges = project(trace)["ranges"]
    assert ranges.schema["phase"] == pl.Categorical
    assert ranges["phase"].cast(pl.Utf8).to_list() == ranges["name"].cast(pl.Utf8).str.replace(
        r",\s*(seq|op_id|sizes|input_op_ids|stream)\s*=.*$|#\d+$", "").to_list()


def test_a_kineto_trace_range_names_round_trip_interned():
    path = FIXTURES / "torch-k4"
    trace = load_trace(str(path))
    assert trace.ranges.schema["name"] == pl.Categorical
    names = trace.ranges["name"].cast(pl.Utf8)
    assert names.null_count() == 0 and "cycle" in names.to_list()


def _ranges_of_one_name(n: int, name: str) -> Trace:
    """Synthetic (no capture repeats a 4,000-character name): n consecutive ranges on one thread, one name."""
    starts = pl.int_range(0, n, eager=True, dtype=pl.Int64) * 10
    ranges = pl.DataFrame({"range_id": pl.int_range(0, n, eager=True, dtype=pl.Int64), "pid": 1, "tid": 1,
                           "start": starts, "end": starts + 5, "name": name, "domain": "specprof"})
    return Trace(ops=empty(OPS_SCHEMA), api=empty(API_SCHEMA), ranges=ranges, marks=empty(MARKS_SCHEMA),
                 meta=TraceMeta(path="synthetic", format="nsys-sqlite"))


def test_memory_of_ranges_does_not_grow_with_a_repeated_long_name():
    n = 20_000
    short, long = _ranges_of_one_name(n, "draft"), _ranges_of_one_name(n, "d" * 4000 + ", seq = 1")
    as_text = n * 4000  # what the name column alone held as plain text: 80 MB
    for t in (short, long):
        assert t.ranges.estimated_size() < 2 << 20  # 20,000 rows of integers and 4-byte codes
        projected = project(t)["ranges"]
        assert projected.schema["phase"] == pl.Categorical
        assert projected.estimated_size() < 3 << 20
    # the long name costs its length once, not per range
    assert long.ranges.estimated_size() - short.ranges.estimated_size() < as_text / 1000
    assert project(long)["ranges"]["phase"].unique().cast(pl.Utf8).to_list() == ["d" * 4000]
