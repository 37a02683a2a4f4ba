"""Several ranks in one capture (analyzer/derived/ranks.py) on real captures: the 2xH100 window (no communication
kernels), the 2-GPU training pair with NCCL SendRecv kernels (before/after a fix), and the project's own
single-GPU reference-engine capture (one rank). The wait/transfer split is recomputed here independently from
the raw SQLite rows. Synthetic tables only where no capture shows the case (said at each test)."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from specprof.analyzer.core.attribution import attribute
from specprof.analyzer.derived import ranks as multirank
from specprof.analyzer.readers.load import load_trace
from conftest import FIXTURES

K4 = str(FIXTURES / "reference-k4")


@pytest.fixture(scope="module")
def captures(request):
    from conftest import SHARED

    if SHARED is None:
        pytest.skip("the third-party captures (../shared/traces) are not beside this checkout")
    out = {}
    for name in ("h100_2gpu_1s", "mfu_2gpu_before", "mfu_2gpu_after"):
        path = str(SHARED / "nsys_sqlite" / f"nsysai_{name}.sqlite")
        a = attribute(load_trace(path))
        out[name] = (path, a, multirank.per_rank(a))
    return out


def raw_nccl_split(path):
    """Per device: (instances, wait ns, transfer ns), from CUPTI kernel rows alone: the k-th NCCL kernel of
    each device paired in start order; wait = clip(latest start - own start, 0, duration)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT k.deviceId, k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                          "JOIN StringIds s ON s.id = k.shortName WHERE s.value LIKE 'nccl%' "
                          "ORDER BY k.deviceId, k.start").fetchall()
    per = {}
    for dev, s, e in rows:
        per.setdefault(dev, []).append((s, e))
    n = min(len(v) for v in per.values())
    assert all(len(v) == n for v in per.values())
    starts = np.array([[s for s, _ in per[d]] for d in sorted(per)])
    ends = np.array([[e for _, e in per[d]] for d in sorted(per)])
    last = starts.max(axis=0)
    wait = np.clip(last - starts, 0, ends - starts)
    return {d: (n, int(wait[i].sum()), int((ends[i] - starts[i] - wait[i]).sum())) for i, d in enumerate(sorted(per))}


@pytest.mark.parametrize("name", ["mfu_2gpu_before", "mfu_2gpu_after"])
def test_wait_and_transfer_on_nccl_sendrecv_equal_an_independent_count(captures, name):
    path, a, m = captures[name]
    assert m.count == 2 and m.ranks["device"].to_list() == [0, 1] and set(m.ranks["source"]) == {"device order"}
    raw = raw_nccl_split(path)
    for r in m.ranks.iter_rows(named=True):
        n, wait, transfer = raw[r["device"]]
        assert (r["wait"], r["transfer"], r["unmatched"]) == (wait, transfer, 0)
        assert r["comm"] == r["wait"] + r["transfer"]
    coll = m.collectives.row(0, named=True)
    assert coll["name"].startswith("ncclDevKernel_SendRecv") and coll["instances"] == raw[0][0]
    assert coll["overlap_pct"] == 100.0 and coll["shifts"] is None  # every pair overlaps in time: matched right
    # exactly one rank arrives last per instance; the others' wait in it is what that rank caused
    assert int(m.stragglers["last"].sum()) == coll["instances"]
    assert int(m.stragglers["caused"].sum()) == int(m.ranks["wait"].sum())


def test_the_measured_numbers_of_docs_multirank(captures):
    # docs/multirank.md quotes these (ms, rounded to 0.001).
    def row(name, rank):
        return captures[name][2].ranks.filter(pl.col("rank") == rank).row(0, named=True)

    got = {(n, r): (round(row(n, r)["wait"] / 1e6, 3), round(row(n, r)["transfer"] / 1e6, 3))
           for n in ("mfu_2gpu_before", "mfu_2gpu_after") for r in (0, 1)}
    assert got == {("mfu_2gpu_before", 0): (10.898, 6.274), ("mfu_2gpu_before", 1): (2.477, 5.752),
                   ("mfu_2gpu_after", 0): (4.267, 5.722), ("mfu_2gpu_after", 1): (18.219, 5.535)}
    before = captures["mfu_2gpu_before"][2]
    top = before.straggler()
    assert (top["rank"], top["last"]) == (1, 22)
    nccl = before.skew.filter(pl.col("phase") == "ncclGroupEnd").row(0, named=True)
    assert (nccl["max_rank"], round(nccl["skew_pct"], 1)) == (0, 52.3)


@pytest.mark.parametrize("name", ["h100_2gpu_1s", "mfu_2gpu_before", "mfu_2gpu_after"])
def test_per_rank_phases_add_up_to_the_whole(captures, name):
    _, a, m = captures[name]
    whole = a.phases.select("phase", "attributed", "ops", "gpu_busy")
    summed = m.phases.group_by("phase").agg(pl.col("attributed").sum(), pl.col("ops").sum(), pl.col("gpu_busy").sum())
    joined = whole.join(summed, on="phase", how="full", coalesce=True, suffix="_ranks").fill_null(0)
    assert (joined["attributed"] == joined["attributed_ranks"]).all()
    assert (joined["ops"] == joined["ops_ranks"]).all()
    # each rank has one stream here: its attributed time is its wall time
    assert (m.ranks["attributed"] == m.ranks["wall"]).all()
    assert int(m.ranks["attributed"].sum()) == int(a.streams["wall"].sum())
    # the skew table covers every phase, min <= mean <= max, skew = max - min
    assert m.skew.height == whole.height
    assert (m.skew["skew"] == m.skew["max"] - m.skew["min"]).all()
    assert ((m.skew["min"] <= m.skew["mean"]) & (m.skew["mean"] <= m.skew["max"])).all()


def test_two_h100_ranks_without_communication(captures):
    _, _, m = captures["h100_2gpu_1s"]
    assert m.count == 2 and m.collectives.is_empty() and m.stragglers.is_empty()
    assert (m.ranks["comm"] == 0).all()
    mm = m.skew.filter(pl.col("phase") == "aten::mm").row(0, named=True)
    assert mm["ranks"] == 2 and mm["skew_pct"] < 1.0  # the same model on both GPUs: little skew


def test_the_single_gpu_capture_is_one_rank_equal_to_the_whole():
    a = attribute(load_trace(K4))
    m = multirank.per_rank(a)
    assert m.count == 1 and m.ranks.row(0, named=True)["rank"] == 0 and m.skew.is_empty()
    mine = m.phases.drop("rank").sort("phase")
    whole = a.phases.select(mine.columns).sort("phase")
    assert mine.equals(whole)


def test_tp_ranks_from_the_sidecar_header_number_the_ranks(captures):
    # The capture has no sidecar: a rank map as a sidecar header would give it (os pid -> TP rank) is made
    # here, reversed against device order, on the real capture.
    _, a, m = captures["mfu_2gpu_before"]
    pids = m.ranks["os_pid"].to_list()
    swapped = multirank.per_rank(a, {pids[0]: 1, pids[1]: 0})
    assert swapped.ranks["source"].unique().to_list() == ["sidecar"]
    assert swapped.ranks.select("rank", "device").rows() == [(0, 1), (1, 0)]
    partial = multirank.per_rank(a, {pids[0]: 5})
    assert partial.ranks["source"].unique().to_list() == ["device order"] and partial.notes


def test_a_cut_off_first_instance_is_lined_up_by_the_shift():
    # Synthetic (no capture shows it): rank 1's first allreduce fell before the capture window, so its
    # sequence starts one instance later; matching by order alone would pair every kernel with the wrong one.
    ranks = pl.DataFrame({"rank": [0, 1], "pid": [10, 11], "device": [0, 1]})
    rows = []
    for k in range(6):
        t = 1000 * k
        rows.append((0, 10, 0, k, t + 10, t + 100))  # rank 0 arrives at +10
        if k > 0:
            rows.append((1, 11, 1, 100 + k, t + 40, t + 100))  # rank 1 at +40: rank 0 waits 30 each time
    ops = pl.DataFrame(rows, schema=["_r", "pid", "device", "op_id", "start", "end"], orient="row").with_columns(
        name=pl.lit("ncclDevKernel_AllReduce_Sum_bf16_RING_LL").cast(pl.Categorical),
        category=pl.lit("communication").cast(pl.Categorical), phase=pl.lit("verify").cast(pl.Categorical))
    comm, coll, notes = multirank.split_communication(ops, ranks)
    c = coll.row(0, named=True)
    assert (c["instances"], c["unmatched"], c["shifts"], c["overlap_pct"]) == (5, 1, "rank 1: -1", 100.0)
    r0 = comm.filter((pl.col("rank") == 0) & pl.col("instance").is_not_null())
    assert r0["wait"].to_list() == [30] * 5 and r0["transfer"].to_list() == [60] * 5
    assert comm.filter(pl.col("instance").is_null())["op_id"].to_list() == [0]
    assert notes  # the unmatched kernel is said


def test_json_has_a_ranks_list_with_phases_in_the_same_format():
    out = CliRunner().invoke(main, ["analyze", K4, "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["rank_skew"] is None and len(doc["ranks"]) == 1
    rank = doc["ranks"][0]
    assert rank["rank"] == 0 and rank["device"] == 0 and rank["rank_source"] == "device order"
    assert rank["phases"] == doc["phases"]
    assert rank["communication"] == {"ms": 0.0, "wait_ms": 0.0, "transfer_ms": 0.0, "unmatched_ms": 0.0,
                                     "by_phase": {}, "by_kind": {}}


def test_json_and_terminal_on_two_ranks(captures):
    path = captures["mfu_2gpu_after"][0]
    out = CliRunner().invoke(main, ["analyze", path, "--json"])
    doc = json.loads(out.output)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert {p["name"] for r in doc["ranks"] for p in r["phases"]} == {p["name"] for p in doc["phases"]}
    skew = doc["rank_skew"]
    assert skew["collectives"][0]["instances"] == 31 and skew["straggler"]["rank"] in (0, 1)
    text = CliRunner().invoke(main, ["analyze", path]).output
    assert "Ranks: 2 (process, device) pairs" in text and "Stragglers" in text and "straggler: rank" in text


def test_the_real_tensor_parallel_capture():
    # fixtures/reference-k4-tp2: the reference engine at TP = 2 on two H200s, NCCL all-reduce after
    # attention and after the MLP. The numbers docs/multirank.md quotes.
    from specprof.analyzer.readers.sidecar import find, read_sidecars
    from conftest import FIXTURES

    run = FIXTURES / "reference-k4-tp2"
    a = attribute(load_trace(str(run)))
    m = multirank.per_rank(a, multirank.sidecar_ranks(read_sidecars(find(str(run))).files))
    ranks = {r["rank"]: r for r in m.ranks.iter_rows(named=True)}
    assert set(ranks) == {0, 1} and {r["device"] for r in ranks.values()} == {0, 1}
    assert all(r["source"] == "sidecar" and r["unmatched"] == 0 for r in ranks.values())
    # 2 all-reduces per layer per forward, every one matched on both ranks.
    assert m.comm.filter(pl.col("rank") == 0).height == m.comm.filter(pl.col("rank") == 1).height == 2618
    for r in ranks.values():
        assert r["comm"] == r["wait"] + r["transfer"]
    # The transfer is the same on both ranks (about 23 ms each); the waiting is not: rank 0 waits
    # for rank 1, whose launch-bound draft runs slower under nsys.
    assert abs(ranks[0]["transfer"] - ranks[1]["transfer"]) < 0.01 * ranks[0]["transfer"]
    assert ranks[0]["wait"] > 100 * ranks[1]["wait"]
    straggler = m.stragglers.sort("last", descending=True).row(0, named=True)
    assert straggler["rank"] == 1 and straggler["share"] > 0.6
    draft0 = m.comm_phases.filter((pl.col("rank") == 0) & (pl.col("phase") == "draft")).row(0, named=True)
    assert draft0["wait"] > 0.95 * draft0["comm"]
    assert round(ranks[0]["wait"] / 1e6, 3) == 489.038 and round(ranks[1]["transfer"] / 1e6, 3) == 22.938
