"""The levers table and per-position acceptance on every speculative fixture with its plain baseline
(docs/economics.md, "Levers", "Per-position acceptance"): each lever row recomputed here, by this test's own
arithmetic, from the same run's measured quantities as `analyze --json` prints them (the economics' headline, the
cycle breakdown's shares, the per-position rates); per-position acceptance adds up to the accept length within 0.01;
`analyze --baseline` prints the table with intervals."""

from __future__ import annotations

import json
import math

import pytest

from conftest import ROOT
from specprof.analyzer.app.analyze import RunInputs
from specprof.analyzer.app.run import Run
from specprof.analyzer.render import json as json_render
from specprof.analyzer.render import terminal

FIX = ROOT / "fixtures"
PAIRS = [("reference-k2", "reference-k0"), ("reference-k4", "reference-k0"), ("reference-k6", "reference-k0"),
         ("reference-k4-tp2", "reference-k0"),
         ("sglang-dense-k1", "sglang-dense-plain"), ("sglang-dense-k2", "sglang-dense-plain"),
         ("sglang-dense-k3", "sglang-dense-plain"), ("sglang-dense-k4", "sglang-dense-plain"),
         ("sglang-dense-k6", "sglang-dense-plain"), ("sglang-dense-tree", "sglang-dense-plain"),
         ("sglang-k2", "sglang-plain"), ("sglang-k4", "sglang-plain"),
         ("sglang-k4-nooverlap", "sglang-plain"), ("sglang-moe-k2", "sglang-moe-plain"),
         ("sglang-moe-k4", "sglang-moe-plain"), ("reference-k4-graph", "reference-k0"), ("torch-k4", "reference-k0"),
         ("sglang-ramp-dense-k2", "sglang-ramp-dense-plain"), ("sglang-ramp-dense-adaptive", "sglang-ramp-dense-plain"),
         # no plain run of the MoE ramp (sglang-moe-plain is another workload): tokens/s alone
         ("sglang-ramp-moe-k2", None), ("sglang-ramp-moe-adaptive", None)]
_DONE: dict = {}


def analysed(run: str, base: str):
    if run not in _DONE:
        # the TP = 2 capture has no plain run of its own size: the TP = 1 one is used as its baseline on purpose
        a = Run.load(str(FIX / run), inputs=RunInputs(baseline_run=str(FIX / base) if base else None,
                                                      allow_mixed=run.endswith("tp2"))).analysis()
        doc = json.loads(json_render.dumps(json_render.document(a)))
        _DONE[run] = (a, doc, terminal.render(a))
    return _DONE[run]


def _half(lo, hi):
    return None if lo is None or hi is None else (hi - lo) / 2


def _estimates(a):
    """(group, its estimate row, its per-position acceptance, its levers): the run's headline where the run is one
    group, else each batch-size group's row of the headline source (economics.groups)."""
    e = a.economics
    g = e.groups
    if g is not None and g.several:
        head = g.rows.filter(g.rows["source"] == g.rows["source"][0])
        rows = [(f"batch {r['batch_group']}" + ("" if r["steps"] is None else f", K={r['steps']}"), r)
                for r in head.iter_rows(named=True) if r["steps"] != 0]  # K = 0: the draft skipped, no levers
    else:
        rows = [(None, e.headline)]
    accs = {x.group: x for x in a.acceptance}
    levs = {x.group: x for x in a.levers}
    assert set(levs) == {k for k, _ in rows}
    return [(k, r, accs.get(k), levs[k]) for k, r in rows]


def _expected(a, e, acc) -> dict:
    """lever -> (cycle ns, accept length): this test's own arithmetic on the measured quantities."""
    C, L, K = e["cycle_ns"], e["accept_len"], e["draft_steps"] if "draft_steps" in e else e["steps"]
    b = a.cycle_breakdown
    twin = not e["profiled"] and b.unprofiled_mean_ns
    share = {}
    for r in b.phases.iter_rows(named=True):
        share[r["phase"]] = r["unprofiled_share"] if twin and r["unprofiled_share"] is not None else (r["share"] or 0)
    out = {}
    for p in ("verify", "draft", "draft_extend"):
        t = share.get(p, 0) * C
        if not t:
            continue
        out[f"{p} 1 ms cheaper" if t >= 1e6 else f"{p} removed ({t / 1e6:.3f} ms, less than 1 ms)"] = (C - min(1e6, t), L)
        out[f"{p} 10% cheaper"] = (C * (1 - 0.1 * share[p]), L)
    cats = {(r["phase"], r["category"]): r["ns_per_cycle"] for r in b.categories.iter_rows(named=True)}
    verify = sum(v for (p, _), v in cats.items() if p == "verify")
    if cats.get(("verify", "allreduce")):
        out["allreduce of verify removed"] = (C * (1 - share["verify"] * cats[("verify", "allreduce")] / verify), L)
    busy = sum(b.phases["busy_ns_per_cycle"].to_list())
    gaps = 1 - busy / (b.unprofiled_mean_ns if twin else b.mean_ns)
    if gaps > 0:
        out["launch and CPU-wait gaps removed"] = (C * (1 - gaps), L)
    if K is None or L + 0.1 <= K + 1:
        out["accept length +0.1"] = (C, L + 0.1)
    if acc is not None:
        p = [r["rate"] or 0.0 for r in acc.positions.iter_rows(named=True)]
        q = [min(1.0, p[0] + 0.05)] + p[1:]

        def length(rates):
            total, survive = 1.0, 1.0
            for x in rates:
                survive *= x
                total += survive
            return total

        out[f"first position's acceptance +5 points ({100 * p[0]:.1f}% -> {100 * q[0]:.1f}%)"] = \
            (C, L + length(q) - length(p))
    return out


@pytest.mark.parametrize("run,base", PAIRS)
def test_levers_recomputed(run, base):
    a, _, text = analysed(run, base)
    for group, e, acc, lv in _estimates(a):
        C, L, B, batch, S = e["cycle_ns"], e["accept_len"], e["baseline_ns"], e["batch"], e["speedup"]
        hc, hl = _half(e["cycle_lo_ns"], e["cycle_hi_ns"]), _half(e["accept_len_lo"], e["accept_len_hi"])
        rb = None
        if hc is None or hl is None:  # a group of one cycle: no interval, said as none
            assert all(r["tokens_per_s_lo"] is None and r["speedup_lo"] is None for r in lv.rows.iter_rows(named=True))
            assert set(r["lever"] for r in lv.rows.iter_rows(named=True) if r["kind"] != "steps") == \
                set(_expected(a, e, acc))
            continue
        if S is not None and e["speedup_lo"] is None:  # the plain step without an interval at this batch size
            assert all(r["speedup_lo"] is None for r in lv.rows.iter_rows(named=True))
            S = None
        if S is not None:
            rb2 = (_half(e["speedup_lo"], e["speedup_hi"]) / S) ** 2 - (hc / C) ** 2 - (hl / L) ** 2
            rb = math.sqrt(max(0.0, rb2))
        want = _expected(a, e, acc)
        rows = {r["lever"]: r for r in lv.rows.iter_rows(named=True)}
        predicted = {k: r for k, r in rows.items() if r["kind"] != "steps"}
        assert set(predicted) == set(want), (run, group, set(predicted) ^ set(want))
        for name, (c2, l2) in want.items():
            r = rows[name]
            assert r["cycle_ns"] == pytest.approx(c2, rel=1e-9) and r["accept_len"] == pytest.approx(l2, rel=1e-9)
            assert r["tokens_per_s"] == pytest.approx(l2 * batch / c2 * 1e9, rel=1e-9), name
            rc = hc / c2 if (name.endswith("1 ms cheaper") or "less than 1 ms" in name) else hc / C
            trel = math.sqrt(rc ** 2 + (hl / l2) ** 2)
            assert r["tokens_per_s_lo"] == pytest.approx(r["tokens_per_s"] * (1 - trel), rel=1e-6), name
            if S is None:  # a group without a plain step at its batch sizes (or its interval): tokens/s checked
                assert r["speedup"] is None or B is not None
                assert r["gain"] == pytest.approx(r["tokens_per_s"] / e["tokens_per_s"] - 1, rel=1e-9, abs=1e-12)
                continue
            assert r["speedup"] == pytest.approx(l2 * B / c2, rel=1e-9), name
            assert r["gain"] == pytest.approx(l2 * B / c2 / S - 1, rel=1e-9, abs=1e-12), name
            # the interval: the cycle's half-width carried over C' (a fixed saving) or C's relative width (a share
            # held), the accept length's over L', the plain step's as measured
            rel = math.sqrt(rc ** 2 + (hl / l2) ** 2 + rb ** 2)
            assert r["speedup_lo"] == pytest.approx(r["speedup"] * (1 - rel), rel=1e-6), name
            assert r["speedup_hi"] == pytest.approx(r["speedup"] * (1 + rel), rel=1e-6), name
            assert r["speedup_lo"] < r["speedup"] < r["speedup_hi"]
        gains = [r["gain"] for r in lv.rows.iter_rows(named=True) if r["gain"] is not None]
        assert gains == sorted(gains, reverse=True)
        steps = [r for r in rows.values() if r["kind"] == "steps"]
        assert all("needs a sweep" in r["held"] for r in steps)
    # analyze --baseline prints the table with its intervals
    assert "Levers: what each change would give" in text
    line = next(x for x in text.splitlines() if x.startswith("accept length +0.1") or x.startswith("verify 10%"))
    assert "(" in line and ("x (" in line or a.levers[0].speedup is None)


@pytest.mark.parametrize("run,base", PAIRS)
def test_acceptance_adds_up(run, base):
    a, doc, text = analysed(run, base)
    for group, e, acc, _ in _estimates(a):
        if e["accept_len"] is None:
            continue
        assert abs(1 + sum(acc.positions["at_least"].to_list()) - e["accept_len"]) < 0.01, (run, group)
        assert acc.accept_len == pytest.approx(e["accept_len"], abs=0.01)
        prod = 1.0
        for r in acc.positions.iter_rows(named=True):
            prod *= r["rate"] or 0.0
            assert r["at_least"] == pytest.approx(prod, abs=1e-9)
            if r["at_least_lo"] is not None:
                assert r["at_least_lo"] <= r["at_least"] <= r["at_least_hi"]
    assert "Acceptance per draft position" in text
    entries = doc["acceptance"]
    assert [x["group"] for x in entries] == [x.group for x in a.acceptance]
    for entry, acc in zip(entries, a.acceptance):
        assert len(entry["positions"]) == acc.steps
        assert abs(1 + sum(p["at_least"] for p in entry["positions"]) - entry["accept_len"]) < 0.01
    if entries[0]["group"] is None:
        assert abs(entries[0]["accept_len"] - doc["economics"]["estimates"][0]["accept_len"]) < 0.01
    lv = doc["levers"][0]
    assert [r["lever"] for r in lv["rows"]] == a.levers[0].rows["lever"].to_list()
    assert all(r["tokens_per_s_ci"] is not None for r in lv["rows"] if r["kind"] != "steps")


def test_a_plain_run_is_stored(tmp_path):
    """A plain run's sidecar has no accept counts: its (empty) request-rounds still join its cycles (`--db` reads them
    for the sweep's inputs; an empty table of the wrong key type once failed here)."""
    from click.testing import CliRunner

    from specprof.analyzer.cli import main
    for run in ("sglang-plain", "reference-k0"):
        result = CliRunner().invoke(main, ["analyze", str(FIX / run), "--db", str(tmp_path / "runs.db"), "-q"])
        assert result.exit_code == 0, result.output
