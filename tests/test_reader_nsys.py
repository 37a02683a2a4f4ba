"""The nsys SQLite reader on real exports: every row is accounted for, against plain SQL."""

from __future__ import annotations

import sqlite3

import polars as pl
import pytest

from specprof.analyzer.readers.nsys import read_nsys_sqlite
from conftest import capture_id, own_nsys, shared_nsys


def _count(con, sql):
    try:
        return con.execute(sql).fetchone()[0]
    except sqlite3.OperationalError:  # table absent in this export
        return 0


@pytest.mark.parametrize("path", own_nsys() + shared_nsys(), ids=capture_id)
def test_every_gpu_row_and_range_is_read(path):
    trace = read_nsys_sqlite(str(path))
    con = sqlite3.connect(path)
    ops = sum(_count(con, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_{t}")
              for t in ("KERNEL", "MEMCPY", "MEMSET", "GRAPH_TRACE"))  # whole graphs: --cuda-graph-trace=graph
    assert trace.ops.height == ops
    ranges = _count(con, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71) "
                         "AND (endGlobalTid IS NULL OR endGlobalTid = globalTid)")
    assert trace.ranges.height == ranges
    # Every op that has a launch record in the export has exactly one API row in the trace.
    launched = _count(con, "SELECT count(*) FROM (SELECT DISTINCT k.globalPid, k.correlationId "
                           "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
                           "ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24))")
    kernel_corr = trace.ops.filter(pl.col("kind") == "kernel").select("pid", "correlation").unique()
    assert kernel_corr.join(trace.api, on=["pid", "correlation"], how="semi").height == launched
    assert trace.api.select(pl.struct("pid", "correlation").is_unique().all()).item()
    assert trace.meta.tool_version and trace.meta.tool_version.startswith(("2025.", "2026."))
    # Times are integer nanoseconds and no op ends before it starts.
    assert trace.ops.schema["start"] == pl.Int64
    assert trace.ops.filter(pl.col("end") < pl.col("start")).is_empty()


def test_names_come_from_string_ids_and_registered_nvtx_strings(shared_dir):
    trace = read_nsys_sqlite(str(shared_dir / "nsys_sqlite" / "nsysai_mfu_2gpu_before.sqlite"))
    # NCCL's NVTX domain uses registered strings (textId) only.
    assert trace.ranges.filter(pl.col("name") == "ncclGroupEnd").height > 0
    assert trace.ranges.filter(pl.col("name").is_null() | (pl.col("name") == "")).is_empty()
    # Its DomainCreate row was cut out of the window: the domain is named by its id and noted.
    assert trace.ranges.filter(pl.col("domain") == "<id 1>").height > 0
    assert any("domain" in n for n in trace.meta.notes)
    nccl = trace.ops.filter(pl.col("name").cast(pl.Utf8).str.starts_with("ncclDevKernel_SendRecv"))
    assert nccl.height == 66
    # Driver-API launches (cuLaunchKernelEx) are launch records too.
    assert "cuLaunchKernelEx" in trace.api["name"].unique().to_list()
    assert not trace.api["name"].cast(pl.Utf8).str.contains(r"_v\d+$").any()


def test_gpu_names_from_target_info(shared_dir):
    trace = read_nsys_sqlite(str(shared_dir / "nsys_sqlite" / "nsysai_mock.sqlite"))
    assert trace.meta.gpus == [{"device": 0, "name": "NVIDIA GeForce RTX 3080"}]
    assert trace.ranges.is_empty()
    assert set(trace.ops["kind"]) == {"kernel", "memcpy"}


def test_runtime_and_driver_call_sharing_a_correlation_id_keep_the_outer_one(tmp_path):
    # No capture here has it; CUPTI can give a runtime call and the driver call it makes one correlation id.
    # Planted in a copy of a real capture: a driver call inside a launch call, same correlation id.
    import shutil

    from conftest import FIXTURES

    db = tmp_path / "run.sqlite"
    shutil.copyfile(FIXTURES / "reference-k4" / "run.sqlite", db)
    con = sqlite3.connect(db)
    start, end, tid, corr = con.execute(
        "SELECT r.start, r.end, r.globalTid, r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId ORDER BY r.start LIMIT 1").fetchone()
    name = con.execute("SELECT id FROM StringIds WHERE value LIKE 'cuLaunchKernel%' LIMIT 1").fetchone()
    name = name[0] if name else con.execute("SELECT max(id) FROM StringIds").fetchone()[0]
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, "
                "returnValue) VALUES (?, ?, 1, ?, ?, ?, 0)", (start + 1, end - 1, tid, corr, name))
    con.commit()
    con.close()
    trace = read_nsys_sqlite(str(db))
    assert trace.api.select(pl.struct("pid", "correlation").is_unique().all()).item()
    row = trace.api.filter(pl.col("correlation") == corr)
    assert row.height == 1 and row["start"][0] == start and row["end"][0] == end
    assert (trace.api["start"].diff().drop_nulls() >= 0).all()


@pytest.mark.parametrize("name", ["reference-k4", "reference-k4-graph", "reference-k4-tp2", "reference-k0",
                                  *[f"shared:{p.name}" for p in shared_nsys()]])
def test_skipping_calls_that_launch_nothing_changes_no_launch_record(name, monkeypatch):
    # The reader leaves known non-launching CUDA calls (queries, events, syncs) out of its query;
    # that list may only cost time: the launch calls read, and so every op's launch record, are the
    # same without it, on every capture.
    from specprof.analyzer.readers.nsys import Export, read_strings, tables
    from conftest import FIXTURES, SHARED

    path = str(SHARED / "nsys_sqlite" / name[7:]) if name.startswith("shared:") else \
        str(FIXTURES / name / "run.sqlite")
    if name == "reference-k4":  # the list does apply to a real capture
        with Export(path) as ex:
            skipped = tables.not_launches(read_strings(ex), ex.columns("CUPTI_ACTIVITY_KIND_RUNTIME"))
        assert skipped and skipped[0][:2] == ("not in", "nameId") and skipped[0][2]
    with_list = read_nsys_sqlite(path)
    monkeypatch.setattr(tables, "NOT_LAUNCHES", frozenset())
    without = read_nsys_sqlite(path)
    assert with_list.api.height == without.api.height
    assert with_list.api.with_columns(pl.col("name").cast(pl.Utf8)).equals(
        without.api.with_columns(pl.col("name").cast(pl.Utf8)))
