"""The HTML report's economics panel draws every figure's 95% interval (docs/economics.md, "Intervals"), the
numbers `analyze` computes: the README's main command's report (the reference K = 4 run against its plain
baseline, fixtures/reference-k0), run in headless Chromium."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from browser import Page, chromium
from conftest import FIXTURES

K4 = FIXTURES / "reference-k4"
K0 = FIXTURES / "reference-k0"

PANEL = """(() => {
  const chart = document.getElementById('economics-chart').data;
  return {badge: document.querySelector('#economics .verdict .badge').textContent,
          tile: document.getElementById('tiles').textContent,
          table: [...document.querySelectorAll('#economics table.grid tr')].map(r => [...r.cells].map(c => c.textContent)),
          traces: chart.map(t => ({name: t.name || '', ex: t.error_x && t.error_x.array, exm: t.error_x && t.error_x.arrayminus,
                                   ey: t.error_y && t.error_y.array, y: t.y, x: t.x}))};
})()"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("econ-ci") / "report.html"
    result = CliRunner().invoke(main, ["analyze", str(K4), "--baseline", str(K0), "--html", str(out), "--json", "-q"])
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)["economics"]


def test_the_economics_panel_draws_the_intervals(report):
    out, econ = report
    head = econ["estimates"][0]
    lo, hi = head["speedup_ci"]
    with chromium() as browser:
        p = Page(browser, out)
        got = p.page.evaluate(PANEL)
        assert p.console_errors() == []
    # the verdict badge and the tile: 1.46x (1.40-1.52), as the terminal words it
    assert got["badge"] == f"speculation wins ×{head['speedup']:.2f} ({lo:.2f}–{hi:.2f})"
    assert f"(95% CI {lo:.2f}–{hi:.2f})" in got["tile"]
    # the table: a column per source, a row per figure, each with its interval: the JSON's numbers
    header, *rows = got["table"]
    assert header == ["", *(e["source"] for e in econ["estimates"])]
    assert [r[0] for r in rows][:5] == ["cycle ms (95% CI)", "accept len (95% CI)", "tokens/s (95% CI)",
                                        "speedup (95% CI)", "break-even (95% CI)"]
    first = {r[0]: r[1] for r in rows}
    c_lo, c_hi = head["cycle_ms_ci"]
    b_lo, b_hi = head["break_even_accept_len_ci"]
    assert first["cycle ms (95% CI)"] == f"{head['cycle_ms']:.3f} ({c_lo:.3f}–{c_hi:.3f})"
    assert first["speedup (95% CI)"] == f"×{head['speedup']:.2f} ({lo:.2f}–{hi:.2f})"
    assert first["break-even (95% CI)"] == f"{head['break_even_accept_len']:.3f} ({b_lo:.3f}–{b_hi:.3f})"
    assert "(" in first["accept len (95% CI)"] and "(" in first["tokens/s (95% CI)"]
    # the chart: error bars on each measurement (cycle and accept length), and the break-even line's band
    marker = next(t for t in got["traces"] if t["name"] == head["source"])
    assert marker["ex"][0] == pytest.approx(c_hi - head["cycle_ms"], abs=2e-3)
    assert marker["exm"][0] == pytest.approx(head["cycle_ms"] - c_lo, abs=2e-3)
    a_lo, a_hi = head["accept_len_ci"]
    assert marker["ey"][0] == pytest.approx(a_hi - head["accept_len"], abs=2e-3)
    band = next(t for t in got["traces"] if t["name"].startswith("break-even 95% band"))
    base_lo, base_hi = econ["baseline_ms_ci"]
    assert f"{base_lo:.3f}–{base_hi:.3f} ms" in band["name"]
    assert band["y"][2] > band["y"][1]  # the steeper edge is the shorter baseline step's
