"""The HTML report's layout, in headless Chromium at 1400 and 700 px, on the README's main command's report (the
reference K = 4 run against its plain baseline), on a real SGLang capture with its twin without nsys, and on a
ramp capture against its plain twin (the economics panel's per-batch-size table):

- nothing overflows: the page never scrolls sideways, no panel is wider than its box, nothing in a panel reaches
  past its edges;
- plotly's toolbar covers no legend, label or data, and no legend entry covers the data, a label or another
  legend (tests/report_layout.js says what is checked);
- every chart is drawn by the page's load event, so a static `chromium --headless --screenshot` of the saved page
  holds them all;
- the idle kinds `cpu_wait` and `launch` look different in the per-phase chart's legend;
- the two nsys versions a run can hold are named for what they are (the recorder's, the exporter's).

The checks are shown to find a planted overflow and a toolbar put back over a legend.
"""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from browser import ARGS, CHROMIUM, Page, chromium
from conftest import FIXTURES

LAYOUT = (Path(__file__).parent / "report_layout.js").read_text(encoding="utf-8")
WIDTHS = (1400, 700)
CHARTS = ("breakdown-chart", "timeline", "phase-bars", "cycle-series", "cycle-hist", "crosscheck-consistency",
          "crosscheck-inflation", "economics-chart")


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("layout")
    out = {"reference-k4": tmp / "k4.html", "sglang-dense-k3": tmp / "dense-k3.html",
           "sglang-ramp-dense-adaptive": tmp / "ramp.html"}
    for args in (["analyze", str(FIXTURES / "reference-k4"), "--baseline", str(FIXTURES / "reference-k0"),
                  "--html", str(out["reference-k4"]), "-q"],
                 ["report", str(FIXTURES / "sglang-dense-k3"), "-o", str(out["sglang-dense-k3"])],
                 ["analyze", str(FIXTURES / "sglang-ramp-dense-adaptive"), "--baseline",
                  str(FIXTURES / "sglang-ramp-dense-plain"), "--html", str(out["sglang-ramp-dense-adaptive"]), "-q"]):
        result = CliRunner().invoke(main, [*args, "--no-cache"])
        assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("run", ["reference-k4", "sglang-dense-k3", "sglang-ramp-dense-adaptive"])
def test_nothing_overflows_and_nothing_covers_a_legend(browser, reports, run, width):
    p = Page(browser, reports[run], width=width)
    assert p.page.evaluate(LAYOUT) == []
    if run == "sglang-ramp-dense-adaptive":  # the per-batch-size table of the economics panel is there, inside it
        assert p.page.locator("#economics-batch-groups tr").count() > 5
    drawn = p.page.evaluate("[...document.querySelectorAll('.js-plotly-plot')].map(gd => gd.id)")
    assert set(CHARTS) <= set(drawn), drawn
    assert p.console_errors() == []


def test_the_layout_check_finds_an_overflow_and_a_covered_legend(browser, reports):
    p = Page(browser, reports["reference-k4"], width=700)
    page = p.page
    # a table wider than its panel, and the histogram's legend where plotly's toolbar used to stand
    page.evaluate("""(() => { const t = document.createElement('table'); t.style.width = '900px';
        t.appendChild(document.createElement('tr')).appendChild(document.createElement('td')).textContent = 'wide';
        document.getElementById('economics').appendChild(t); })()""")
    page.evaluate("Plotly.relayout('cycle-hist', {'modebar.orientation': 'h', 'legend.x': 1, 'legend.xanchor': 'right',"
                  " 'legend.y': 1.3, 'margin.t': 0})")
    found = page.evaluate(LAYOUT)
    assert any(f.startswith("the page scrolls sideways") for f in found), found
    assert any(f.startswith("panel-economics: content") for f in found), found
    assert any(f.startswith("cycle-hist: the toolbar covers g.legend .traces") for f in found), found


AT_LOAD = """window.addEventListener('load', () => {
  window.specprofAtLoad = [...document.querySelectorAll('.js-plotly-plot')]
    .filter(gd => gd.querySelector('.main-svg g.trace')).map(gd => gd.id);
});"""


@pytest.mark.parametrize("width", WIDTHS)
def test_every_chart_is_drawn_by_the_load_event(browser, reports, width):
    # the data block of a report this size is gzip'd: inflated synchronously, before the load event
    page_text = reports["reference-k4"].read_text(encoding="utf-8")
    assert 'type="application/gzip;base64" id="specprof-data"' in page_text
    p = Page(browser, reports["reference-k4"], width=width, init_script=AT_LOAD)
    assert set(CHARTS) <= set(p.page.evaluate("window.specprofAtLoad")), p.page.evaluate("window.specprofAtLoad")
    assert p.console_errors() == []


@pytest.mark.parametrize("width", WIDTHS)
def test_a_static_screenshot_holds_every_chart(browser, reports, tmp_path, width):
    from PIL import Image

    path = reports["reference-k4"]
    p = Page(browser, path, width=width)
    boxes = p.page.evaluate("""[...document.querySelectorAll('.js-plotly-plot')].map(gd => {
        const r = gd.getBoundingClientRect();
        return {id: gd.id, x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height}; })""")
    height = p.page.evaluate("document.documentElement.scrollHeight")
    shot = tmp_path / "shot.png"
    # the command line's own screenshot: taken when the page has loaded, no script waits for anything
    subprocess.run([CHROMIUM, *ARGS, "--hide-scrollbars", f"--window-size={width},{height}", f"--screenshot={shot}",
                    path.resolve().as_uri()], check=True, capture_output=True, timeout=180)
    img = Image.open(io.BytesIO(shot.read_bytes())).convert("RGB")
    assert img.size[0] == width
    for b in boxes:
        crop = img.crop((int(b["x"]) + 2, int(b["y"]) + 2, int(b["x"] + b["w"]) - 2, int(b["y"] + b["h"]) - 2))
        inked = sum(crop.convert("L").histogram()[:200])  # pixels darker than a light grey
        colours = len(crop.getcolors(maxcolors=1 << 20) or [])
        # an empty chart is the card's white; a drawn one has axes, text and coloured marks
        assert inked > 0.01 * crop.size[0] * crop.size[1] and colours > 20, (b["id"], inked, colours)


def _mean_colour(png: bytes) -> list[float]:
    from PIL import Image, ImageStat

    return ImageStat.Stat(Image.open(io.BytesIO(png)).convert("RGB")).mean


@pytest.mark.parametrize("width", WIDTHS)
def test_the_idle_kinds_look_different_in_the_legend(browser, reports, width):
    p = Page(browser, reports["reference-k4"], width=width)
    swatch = {}
    for item in p.page.query_selector_all("#phase-bars g.legend .traces"):
        name = item.text_content().strip()
        if name in ("cpu_wait", "launch"):
            swatch[name] = _mean_colour(item.query_selector(".legendpoints").screenshot())
    a, b = swatch["cpu_wait"], swatch["launch"]
    assert sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5 > 40, swatch


@pytest.mark.parametrize("width", WIDTHS)
def test_the_two_nsys_versions_are_named(browser, reports, width):
    p = Page(browser, reports["reference-k4"], width=width)
    tiles = p.page.inner_text("#tiles")
    facts = p.page.inner_text("#run-facts")
    # the export's own metadata says 2025.3.2.0; the manifest says the nsys that recorded the capture
    assert "2025.3.2.0\nNSYS EXPORT" in tiles.upper()
    assert "nsys-sqlite, exported by nsys 2025.3.2.0" in facts
    assert "recorded by\nNVIDIA Nsight Systems version 2025.3.1.0" in facts
    assert "exported by nsys 2025.3.2.0" in p.page.inner_text("#subtitle")


WIDTHS_JS = """[...document.querySelectorAll('.js-plotly-plot')].map(gd =>
    [gd.id, Math.round(gd.querySelector('.main-svg').getBoundingClientRect().width), gd.clientWidth])"""


def test_a_printout_draws_each_chart_at_its_panels_width(browser, reports):
    # Printed (or saved as a PDF), the panels stand one a row at the paper's width: each chart is drawn again for
    # it while the page prints, and again for the screen afterwards.
    p = Page(browser, reports["reference-k4"], width=1400)
    page = p.page
    screen = page.evaluate(WIDTHS_JS)
    assert any(svg < 800 for _, svg, _ in screen)  # two panels a row on the screen
    page.emulate_media(media="print")
    page.wait_for_timeout(300)  # the media query's change event comes in a task of its own
    printed = page.evaluate(WIDTHS_JS)
    assert all(abs(svg - box) <= 1 and svg > 1200 for _, svg, box in printed), printed
    assert page.evaluate(LAYOUT) == []
    page.emulate_media(media="screen")
    page.wait_for_timeout(300)
    assert page.evaluate(WIDTHS_JS) == screen and page.evaluate(LAYOUT) == []
    assert p.console_errors() == []
