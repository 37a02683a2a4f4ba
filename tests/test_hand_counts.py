"""What a hand-made accept count would read (derived/crosscheck.py `hand_counts`), on every SGLang fixture with
accept counts and a server log, each way checked with the test's own arithmetic over the sidecar's cycles."""

from __future__ import annotations

import glob
import os

import pytest

from specprof.analyzer.derived.crosscheck import reconcile_accept
from specprof.analyzer.readers.sglang_log import read_server_log
from specprof.analyzer.readers.sidecar import read_sidecars

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = sorted(d for d in glob.glob(os.path.join(ROOT, "fixtures", "sglang-*"))
              if glob.glob(os.path.join(d, "specprof-sidecar.*.jsonl")) and os.path.isfile(os.path.join(d, "server.log")))


def _speculative(run):
    sc = read_sidecars(sorted(glob.glob(os.path.join(run, "specprof-sidecar.*.jsonl"))))
    return sc if sc.accepts.height else None


@pytest.mark.parametrize("run", RUNS, ids=os.path.basename)
def test_hand_counts_on_real_records(run):
    sc = _speculative(run)
    if sc is None:
        pytest.skip("plain decoding: no accept counts")
    try:
        log = read_server_log(os.path.join(run, "server.log"))
    except Exception:
        pytest.skip("no accept len line in the log")
    check = reconcile_accept(sc.cycles, log)
    rows = [r for r in sc.cycles.sort("file", "index").iter_rows(named=True) if r["requests"]]
    correct = sum(r["correct"] for r in rows)
    rounds = sum(r["requests"] for r in rows)
    pooled = correct / rounds + 1
    hand = {h["way"]: h["value"] for h in check.hand_counts}
    assert check.sidecar_pooled == pytest.approx(pooled)
    assert hand["bonus token left out"] == pytest.approx(pooled - 1)
    assert hand["mean of per-cycle means"] == pytest.approx(sum(r["correct"] / r["requests"] + 1 for r in rows)
                                                            / len(rows))
    full = max(r["batch_size"] for r in rows)
    assert hand["per cycle over the full batch"] == pytest.approx(correct / len(rows) / full)
    late_c = late_r = 0
    for a, b in zip(rows, rows[1:]):
        if a["file"] == b["file"]:  # each cycle with counts, and the next one with counts
            late_c, late_r = late_c + a["correct"], late_r + b["requests"]
    assert hand["counts one cycle late"] == pytest.approx(late_c / late_r + 1)
    # a hand count that leaves the bonus out or counts per cycle over the full batch reads about 1 less or below,
    # far from the log; the other two stay near it
    assert hand["bonus token left out"] < check.log_mean - 0.9
    assert hand["per cycle over the full batch"] <= hand["bonus token left out"] + 1e-9
    assert abs(hand["counts one cycle late"] - pooled) < 0.1
    line = [x for x in check.explanations if x.startswith("a hand count")]
    assert len(line) == 1 and f"{hand['bonus token left out']:.3f} (bonus token left out)" in line[0]
