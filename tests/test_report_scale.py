"""The HTML report of a million-op capture (time-shifted copies of reference-k4, benchmarks/scale.py): under
20 MB, op detail within its budget, blocks elsewhere, and it loads in headless Chromium with no error.

The time to interactive is printed (docs/report.md has measured numbers); the bound asserted here is loose on
purpose, to catch a pathological regression on a loaded CI machine, not to measure."""

from __future__ import annotations

import sys
from pathlib import Path

from specprof.analyzer.core.attribution import attribute
from specprof.analyzer.render import html
from specprof.analyzer.readers.inputs import manifest
from specprof.analyzer.readers.load import load_trace
from browser import Page, chromium
from conftest import ROOT

sys.path.insert(0, str(ROOT))

from benchmarks.scale import FIXTURE, scaled_analysis, scaled_trace  # noqa: E402


def test_scaled_trace_is_copies_of_the_real_one():
    trace = load_trace(FIXTURE)
    big = scaled_trace(trace, 3)
    assert big.ops.height == 3 * trace.ops.height and big.ranges.height == 3 * trace.ranges.height
    assert big.ops["correlation"].n_unique() == 3 * trace.ops["correlation"].n_unique()
    assert big.ops["start"].min() == trace.ops["start"].min()
    a1, a3 = attribute(trace), attribute(big)
    assert a3.cycles.height == 3 * a1.cycles.height
    # every copy is the same capture: three times the busy time of each phase
    for ph, busy in zip(a1.phases["phase"].to_list(), a1.phases["gpu_busy"].to_list()):
        assert a3.phases.filter(a3.phases["phase"] == ph)["gpu_busy"].item() == 3 * busy


def test_million_op_report(tmp_path):
    a = scaled_analysis(FIXTURE, 1_000_000)
    assert a.ops.height >= 1_000_000
    out = Path(html.write(a, str(tmp_path / "big.html"), manifest=manifest(FIXTURE)))
    size = out.stat().st_size
    print(f"\n1M-op report: {size / 1e6:.1f} MB")
    assert size < 20e6
    vm = html.read_data(out.read_text(encoding="utf-8"))
    tl = vm["timeline"]
    assert len(tl["ops"]["s"]) <= html.DETAIL_OPS and tl["blocks"]["s"]
    detail = tl["windows"]["detail"]
    assert any(detail) and not all(detail)
    with chromium() as browser:
        p = Page(browser, out)
        print("timings (ms since navigation):", {k: round(v) for k, v in p.timings.items()})
        assert p.console_errors() == [] and p.dialogs == []
        assert p.timings["ready_ms"] < 30_000
        page = p.page
        assert page.inner_text("#win-detail") == "every op"  # the first cycles are embedded op by op
        w = detail.index(False)
        page.evaluate(f"specprof.timeline.show({w}, 1)")
        assert page.inner_text("#win-detail").startswith("aggregated")
        assert page.locator("#timeline .main-svg").count() >= 1
        assert p.console_errors() == []
