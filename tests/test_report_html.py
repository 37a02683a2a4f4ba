"""The HTML report (analyzer/render/html.py, analyzer/render/report/): rendered from real captures and run in headless Chromium.

Checks: the page is one self-contained file that asks for nothing over the network; every panel is drawn with
no console error; the cycle selector moves the timeline's window; hovering an op shows its name, phase,
category and correlation id; names planted in a real capture that try to be markup (closing the script
element, an <img onerror>, an <svg onload>, a template placeholder, U+2028) come out as text and open no dialog.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from specprof.analyzer.core.attribution import attribute
from specprof.analyzer.derived.analysis import analyse
from specprof.analyzer.readers.inputs import manifest
from specprof.analyzer.readers.load import load_trace
from specprof.analyzer.render import html
from browser import Page, chromium
from conftest import FIXTURES

K4 = FIXTURES / "reference-k4"
PANELS = ("breakdown", "timeline", "phases", "kernels", "cycles", "histogram", "run", "crosscheck", "economics",
          "levers")
PLOTS = ("breakdown-chart", "timeline", "phase-bars", "cycle-series", "cycle-hist")

HOSTILE_KERNEL = "</script><script>alert(1)</script><img src=x onerror=alert(2)>{{DATA}}\u2028<!--k"
HOSTILE_RANGE = "<img src=x onerror=alert(3)>draft_extend"
HOSTILE_DOMAIN = "<svg onload=alert(4)>"


@pytest.fixture(scope="module")
def k4_analysis():
    return analyse(attribute(load_trace(str(K4))))


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def data_of(page: str) -> dict:
    return html.read_data(page)


def test_page_is_self_contained(k4_analysis, tmp_path):
    out = html.write(k4_analysis, str(tmp_path / "r.html"), manifest=manifest(str(K4)))
    page = Path(out).read_text(encoding="utf-8")
    # plotly.js is inlined; nothing is loaded from anywhere
    assert "Plotly" in page and not re.search(r'<script[^>]+src=|<link[^>]+href=', page)
    assert "default-src 'none'" in page
    vm = data_of(page)
    assert vm["schema"] == html.SCHEMA
    assert vm["facts"]["command"].startswith("python3 -m analyzer reference --steps 4")
    assert "--cuda-graph-trace=node" in vm["facts"]["nsys_flags"]
    assert vm["facts"]["gpus"][0]["name"] == "NVIDIA H200" and vm["facts"]["gpus"][0]["driver"] == "580.159.04"
    assert vm["cycles"]["n"] == 100 and len(vm["cycles"]["total_ms"]) == 100
    tl = vm["timeline"]
    # a small capture is embedded op by op, every window in detail, no aggregated blocks
    assert len(tl["ops"]["s"]) == k4_analysis.ops.height and all(tl["windows"]["detail"])
    assert not tl["blocks"]["s"]
    labels = [w for w, k in zip(tl["windows"]["label"], tl["windows"]["kind"]) if k == "cycle"]
    assert labels[:2] == ["cycle 0", "cycle 1"]
    # the per-phase bars add up to the phase's attributed time
    for p in vm["phases"]:
        total = sum(c["by_phase"].get(p["name"], 0.0) for c in vm["categories"])
        assert total == pytest.approx(p["attributed_ms"], abs=1e-3)


def test_embedded_json_cannot_end_the_script():
    text = html.embed_json({"a": "</script><!--\u2028\u2029&<>", "b": [1.5, None]})
    assert not re.search(r"[<>&\u2028\u2029]", text)
    assert json.loads(text) == {"a": "</script><!--\u2028\u2029&<>", "b": [1.5, None]}


def test_report_in_chromium(k4_analysis, browser, tmp_path):
    out = html.write(k4_analysis, str(tmp_path / "report.html"), manifest=manifest(str(K4)))
    p = Page(browser, Path(out))
    page = p.page
    assert p.console_errors() == [] and p.dialogs == []
    assert all(u.startswith(("file:", "data:", "blob:")) for u in p.requests), p.requests
    for panel in PANELS:
        assert page.locator(f'section[data-panel="{panel}"]').count() == 1, panel
        assert page.locator(f'section[data-panel="{panel}"]').inner_text().strip(), panel
    for plot in PLOTS:
        assert page.locator(f"#{plot} .main-svg").count() >= 1, plot
    assert page.locator("#kernels tr").count() > 10
    assert "NVIDIA H200" in page.inner_text("#tiles") and "100" in page.inner_text("#tiles")
    assert "--steps 4" in page.inner_text("#run-facts")

    # the cycle selector moves the window: slider, next button, width, jump
    def window():
        xrange = page.evaluate("document.getElementById('timeline')._fullLayout.xaxis.range.slice()")
        return page.inner_text("#win-label"), xrange

    label0, range0 = window()
    assert label0.startswith("cycle 0 ") and "…" not in label0
    page.evaluate("(() => { const s = document.getElementById('win-slider'); s.value = '51';"
                  " s.dispatchEvent(new Event('input')); })()")
    label1, range1 = window()
    assert label1.startswith("cycle 50 ") and range1[0] > range0[1]
    page.click("#win-next")
    label2, range2 = window()
    assert label2.startswith("cycle 51 ") and range2[0] > range1[0]
    page.select_option("#win-width", "3")
    label3, range3 = window()
    assert label3.startswith("cycle 51 … cycle 53") and range3[0] <= range2[0] and range3[1] > range2[1]
    page.select_option("#win-jump", index=1)  # the slowest cycle
    slow = page.inner_text("#win-label")
    starts, ends, kinds = (page.evaluate(f"specprof.data.timeline.windows.{c}") for c in ("start", "end", "kind"))
    durations = [e - s for s, e, k in zip(starts, ends, kinds) if k == "cycle"]
    assert slow.startswith(f"cycle {durations.index(max(durations))} ")
    assert page.inner_text("#win-detail") == "every op"

    # hover an op: its name, phase, category and correlation id appear in the tooltip
    i = page.evaluate("specprof.timeline.find('nvjet_sm90_tst_256x8_64x6_2x1_v_bz_NNT')")
    assert i >= 0
    page.evaluate(f"specprof.timeline.show(specprof.timeline.windowAt(specprof.timeline.start({i})), 1)")
    pt = page.evaluate(f"specprof.timeline.point({i})")
    page.mouse.move(pt["x"], pt["y"])
    tip = page.inner_text(".tip")
    assert "nvjet_sm90_tst_256x8_64x6_2x1_v_bz_NNT" in tip and "phase draft" in tip and "category gemm" in tip
    assert re.search(r"correlation \d+", tip) and "duration" in tip
    page.mouse.click(pt["x"], pt["y"])
    assert "nvjet_sm90_tst_256x8_64x6_2x1_v_bz_NNT" in page.inner_text("#op-info")
    # ... and its launch call on the CPU thread's launch lane
    j = page.evaluate(f"specprof.timeline.launchOf({i})")
    assert j >= 0
    lp = page.evaluate(f"specprof.timeline.launchPoint({j})")
    page.mouse.move(lp["x"], lp["y"])
    tip = page.inner_text(".tip")
    assert "launch call on the CPU" in tip and "nvjet_sm90_tst_256x8_64x6_2x1_v_bz_NNT" in tip and "phase draft" in tip

    # zooming in draws what is in view again, at the new resolution
    def drawn():
        return page.evaluate("document.getElementById('timeline').data.reduce((n, t) => n + t.x.length, 0)")

    before = drawn()
    mid = sum(window()[1]) / 2
    page.evaluate(f"Plotly.relayout('timeline', {{'xaxis.range[0]': {mid}, 'xaxis.range[1]': {mid + 0.3}}})")
    page.wait_for_function(f"document.getElementById('timeline').data.reduce((n, t) => n + t.x.length, 0) < {before}")
    assert 0 < drawn() < before and window()[1][1] == pytest.approx(mid + 0.3)

    # a per-cycle point clicked shows that cycle in the timeline
    page.evaluate("""(() => { const gd = document.getElementById('cycle-series');
        gd.emit('plotly_click', {points: [{x: 7}]}); })()""")
    assert page.inner_text("#win-label").startswith("cycle 7 ")

    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 50_000
    if os.environ.get("SPECPROF_REPORT_SCREENSHOT"):
        shutil.copy(shot, os.environ["SPECPROF_REPORT_SCREENSHOT"])
    assert p.console_errors() == [] and p.dialogs == []


def hostile_capture(tmp_path) -> Path:
    """reference-k4's run directory, with its busiest kernel, the draft_extend ranges and the NVTX domain renamed."""
    run = tmp_path / "hostile"
    run.mkdir()
    db = run / "run.sqlite"
    shutil.copy(K4 / "run.sqlite", db)
    shutil.copy(K4 / "manifest.json", run / "manifest.json")
    con = sqlite3.connect(db)
    with con:
        (kernel_id,) = con.execute(
            "SELECT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY shortName ORDER BY sum(end - start) DESC LIMIT 1"
        ).fetchone()
        con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (HOSTILE_KERNEL, kernel_id))
        con.execute("UPDATE StringIds SET value = ? WHERE id IN (SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL "
                    "WHERE shortName = ? AND demangledName != shortName)", (HOSTILE_KERNEL + " (demangled)", kernel_id))
        con.execute("UPDATE StringIds SET value = ? WHERE value = 'draft_extend'", (HOSTILE_RANGE,))
        con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE eventType = 75", (HOSTILE_DOMAIN,))
    con.close()
    return run


def test_hostile_names_render_as_text(browser, tmp_path):
    run = hostile_capture(tmp_path)
    out = tmp_path / "hostile.html"
    result = CliRunner().invoke(main, ["report", str(run), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page_text = out.read_text(encoding="utf-8")
    for raw in ("</script><script>alert(1)", "<img src=x", "<svg onload", "\u2028", "<!--k"):
        assert raw not in page_text, raw
    assert page_text.count("</script>") == 3  # the data block, plotly.js and the app: nothing more
    vm = data_of(page_text)
    assert HOSTILE_KERNEL in vm["timeline"]["strings"]
    assert HOSTILE_RANGE in [p["name"] for p in vm["phases"]]
    assert HOSTILE_DOMAIN in vm["timeline"]["strings"]

    p = Page(browser, out)
    page = p.page
    assert p.dialogs == [] and p.console_errors() == []
    assert page.evaluate("document.scripts.length") == 3
    # shown as text: in the kernel table, the phase bars' labels, the legend, the tooltip, the details box
    assert HOSTILE_KERNEL in page.text_content("#kernels")
    assert HOSTILE_RANGE in page.text_content("#kernels")
    assert HOSTILE_RANGE in page.text_content("#phase-bars")
    assert HOSTILE_RANGE in page.text_content("#cycle-series")
    i = page.evaluate(f"specprof.timeline.find({json.dumps(HOSTILE_KERNEL)})")
    assert i >= 0
    page.evaluate(f"specprof.timeline.show(specprof.timeline.windowAt(specprof.timeline.start({i})), 1)")
    pt = page.evaluate(f"specprof.timeline.point({i})")
    page.mouse.move(pt["x"], pt["y"])
    assert HOSTILE_KERNEL in page.text_content(".tip")
    assert page.evaluate("document.querySelector('.tip').querySelectorAll('img, svg, script').length") == 0
    page.mouse.click(pt["x"], pt["y"])
    assert HOSTILE_KERNEL in page.text_content("#op-info")
    # a range of the renamed phase, with its renamed domain
    j = page.evaluate(f"""(() => {{ const rg = specprof.data.timeline.ranges, S = specprof.data.timeline.strings;
        for (let k = 0; k < rg.n.length; k++) if (S[rg.n[k]] === {json.dumps(HOSTILE_RANGE)}) return k;
        return -1; }})()""")
    assert j >= 0
    assert HOSTILE_DOMAIN in " ".join(page.evaluate(f"specprof.timeline.describe({{set: 'range', i: {j}}})"))
    assert p.dialogs == [] and p.console_errors() == []
    assert page.evaluate("document.querySelectorAll('img, [onerror], [onload]').length") == 0


def test_report_and_analyze_html_commands(browser, tmp_path):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", str(K4), "-o", str(out), "--baseline-ms", "2.0"])
    assert result.exit_code == 0, result.output
    vm = data_of(out.read_text(encoding="utf-8"))
    assert vm["facts"]["preset"] == "reference"
    # the run directory's sidecar (and no-nsys/ baseline) give the cross-check and economics panels real data
    assert {r["phase"] for r in vm["crosscheck"]["consistency"]} >= {"draft", "verify", "draft_extend"}
    assert {r["measure"] for r in vm["crosscheck"]["inflation"]} == {"cpu", "gpu"}
    assert "pairs" not in vm["crosscheck"]
    assert vm["economics"]["baseline_ns"] == 2_000_000 and vm["economics"]["estimates"][0]["accept_len"] > 1
    p = Page(browser, out)
    assert p.console_errors() == [] and p.dialogs == []
    for plot in ("crosscheck-consistency", "crosscheck-inflation", "economics-chart"):
        assert p.page.locator(f"#{plot} .main-svg").count() >= 1, plot
    assert "consistent" in p.page.inner_text("#crosscheck")
    names = p.page.evaluate("document.getElementById('economics-chart').data.map(t => t.name || '')")
    assert any(n.startswith("break-even") for n in names)
    assert "speculation speedup" in p.page.text_content("#tiles")
    out2 = tmp_path / "a.html"
    result = CliRunner().invoke(main, ["analyze", str(K4 / "run.sqlite"), "--html", str(out2), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["schema"] == "specprof.analysis/3"
    assert f"report written to {out2}" in result.stderr
    assert data_of(out2.read_text(encoding="utf-8"))["facts"]["ops"] == 21126


LEGENDS = """(() => {
  const svg = document.querySelector('#timeline .main-svg').getBoundingClientRect();
  const items = cls => [...document.querySelectorAll('#timeline g.' + cls + ' .traces')].map(t => {
    const r = t.getBoundingClientRect();
    return {text: t.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom};
  });
  return {svg: {left: svg.left, right: svg.right, top: svg.top, bottom: svg.bottom},
          legend: items('legend'), legend2: items('legend2'),
          entries: document.getElementById('timeline').data.filter(t => t.showlegend !== false && t.name)
                   .map(t => t.name)};
})()"""


@pytest.mark.parametrize("width", [1500, 700])
def test_every_legend_entry_is_shown_whole(browser, tmp_path, width):
    # A real SGLang capture: eight phase entries ((unattributed) last) and seven categories; at 700 px they wrap
    # to several rows, and no entry may be cut off or drawn over another legend's.
    out = html.write(analyse(attribute(load_trace(str(FIXTURES / "sglang-k4")))), str(tmp_path / "r.html"))
    p = Page(browser, Path(out), width=width)
    got = p.page.evaluate(LEGENDS)
    shown = got["legend"] + got["legend2"]
    assert sorted(i["text"] for i in shown) == sorted(got["entries"]) and "(unattributed)" in got["entries"]
    box = got["svg"]
    for i in shown:
        assert box["left"] <= i["left"] and i["right"] <= box["right"] + 1 and i["bottom"] <= box["bottom"], i
    for a in got["legend"]:
        for b in got["legend2"]:
            assert not (a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"]
                        and b["top"] < a["bottom"]), (a, b)


ECONOMICS = """(() => {
  const root = document.getElementById('economics-chart');
  const box = e => { const r = e.getBoundingClientRect();
                     return {text: e.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  return {svg: box(root.querySelector('.main-svg')), y: [...root.querySelectorAll('.ytitle')].map(box),
          x: [...root.querySelectorAll('.xtitle')].map(box),
          legend: [...root.querySelectorAll('g.legend .traces')].map(box),
          table: [...document.querySelectorAll('#economics table.grid tr')].map(r => [...r.cells].map(c => c.textContent))};
})()"""


def _inside(inner, outer):
    return outer["left"] <= inner["left"] and inner["right"] <= outer["right"] + 1 and \
        outer["top"] <= inner["top"] and inner["bottom"] <= outer["bottom"] + 1


def _overlap(a, b):
    return a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]


@pytest.fixture(scope="module")
def economics_report(tmp_path_factory):
    # The README's main command's report: the reference K = 4 run against its plain-decode baseline.
    out = tmp_path_factory.mktemp("econ") / "report.html"
    result = CliRunner().invoke(main, ["analyze", str(K4), "--baseline", str(FIXTURES / "reference-k0"), "--html",
                                       str(out), "--no-cache", "-q"])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("width", [1400, 700])
def test_economics_chart_titles_are_whole_and_clear_of_the_legend(browser, economics_report, width):
    p = Page(browser, economics_report, width=width)
    got = p.page.evaluate(ECONOMICS)
    assert p.console_errors() == []
    (y,), (x,) = got["y"], got["x"]
    assert y["text"] == "accept length (tokens per cycle)" and x["text"] == "cycle time, ms"
    assert _inside(y, got["svg"]) and _inside(x, got["svg"]), got  # not clipped by the chart's edges
    assert len(got["legend"]) == 4  # the break-even line, its 95% band (the baseline's interval), the two sources
    for item in got["legend"]:
        assert _inside(item, got["svg"]), item
        assert not _overlap(item, x) and not _overlap(item, y), (item, x, y)
    # the table names the row for what it is: the break-even is within K + 1 tokens per cycle
    head, *rows = got["table"]
    assert [r[0] for r in rows][-2:] == ["K", "break-even ≤ K+1"] and "can pay" not in str(rows)
    assert [r[1:] for r in rows][-2:] == [["4", "4"], ["yes", "yes"]]


LEVERS = "[...document.querySelectorAll('#levers table.grid tr')].map(r => [...r.cells].map(c => c.textContent))"


def test_levers_panel_is_the_json_levers(browser, economics_report):
    """The report's "What to do next" panel: the levers table row by row as the JSON contract's `levers` (the
    terminal's order, largest gain first), and the per-position acceptance chart drawn."""
    p = Page(browser, economics_report)
    assert p.console_errors() == []
    rows = p.page.evaluate(LEVERS)
    assert p.page.evaluate("specprof.data.analysis.levers.length") == 1  # one batch size: one table
    lv = p.page.evaluate("specprof.data.analysis.levers[0]")
    assert rows[0] == ["lever", "cycle ms", "accept len", "tokens/s (95% CI)", "speedup (95% CI)", "gain"]
    assert [r[0] for r in rows[1:]] == [r["lever"] for r in lv["rows"]]
    first = lv["rows"][0]
    assert rows[1][4] == f"×{first['speedup']:.2f} ({first['speedup_ci'][0]:.2f}–{first['speedup_ci'][1]:.2f})"
    assert rows[-1][5] == "needs a sweep"
    assert p.page.locator("#acceptance-chart .main-svg").count() >= 1
    assert "1 + the sum of P(at least i accepted) = 2.625" in p.page.inner_text("#levers")


BREAKDOWN = "[...document.querySelectorAll('#breakdown table.grid tr')].map(r => [...r.cells].map(c => c.textContent))"


def _terminal_breakdown(text: str) -> list[list[str]]:
    """The terminal's "Where a decode cycle goes" table, cell by cell."""
    lines = text.split("\nWhere a decode cycle goes", 1)[1].splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("phase "))
    rows = [lines[head]] + list(itertools.takewhile(lambda line: line and not line.startswith(" "), lines[head + 2:]))
    return [re.split(r"\s{2,}", line.strip()) for line in rows]


@pytest.mark.parametrize("run, args", [("reference-k4", ["--baseline", str(FIXTURES / "reference-k0")]),
                                       ("sglang-dense-k3", []), ("reference-k4-tp2", [])],
                         ids=["k4-baseline", "dense-k3-no-nsys-twin", "k4-tp2-ranks"])
def test_the_breakdown_panel_is_the_terminals_table(browser, tmp_path, run, args):
    # the first panel after the header: the terminal's first table, every cell the same (ms per cycle and share,
    # under nsys and, with a twin without the profiler, without it)
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["analyze", str(FIXTURES / run), *args, "--html", str(out), "--no-cache"])
    assert result.exit_code == 0, result.output
    terminal = _terminal_breakdown(result.stdout)
    p = Page(browser, out, width=1400)
    assert p.page.evaluate(BREAKDOWN) == terminal
    assert p.page.evaluate("document.querySelector('main > section').id") == "panel-breakdown"
    bars = p.page.evaluate("document.getElementById('breakdown-chart').data.map(t => [t.name, t.y, t.x])")
    if run == "sglang-dense-k3":
        assert terminal[0][-3:] == ["without nsys ms", "ratio", "share without"]
        verify = next(b for b in bars if b[0] == "verify")
        assert verify[1] == ["without nsys", "under nsys"]
        assert [f"{x:.3f}" for x in verify[2]] == [r[5:6] + r[1:2] for r in terminal if r[0] == "verify"][0]
    if run == "reference-k4-tp2":  # a cycle without nsys, but no phase's events there: no column, as the terminal
        assert "ratio" not in terminal[0] and all(b[1] == ["under nsys"] for b in bars)
    assert p.console_errors() == []


def test_report_without_cycles_or_ranges(browser, tmp_path, shared_dir):
    """A third-party capture with no cycle ranges: windows are time slices, and every panel still draws."""
    src = shared_dir / "nsys_sqlite" / "nsysai_h100_2gpu_1s.sqlite"
    a = analyse(attribute(load_trace(str(src))))
    out = html.write(a, str(tmp_path / "r.html"))
    vm = data_of(Path(out).read_text(encoding="utf-8"))
    assert vm["cycles"]["n"] == 0 and set(vm["timeline"]["windows"]["kind"]) == {"slice"}
    p = Page(browser, Path(out))
    assert p.console_errors() == [] and p.dialogs == []
    assert "No cycles" in p.page.inner_text("#cycle-series")
    assert p.page.locator("#timeline .main-svg").count() >= 1
    # a phase per aten op: the largest are drawn by name, the rest summed
    assert len(vm["phases"]) > 100
    assert "other phases (" in p.page.text_content("#phase-bars")
    assert "smaller phases not listed" in p.page.inner_text("#kernels")


def test_tiny_capture_embeds_plain_json(browser, tmp_path, shared_dir):
    """Two kernels and no ranges: the data block stays plain JSON (no gzip), and the page still draws."""
    a = analyse(attribute(load_trace(str(shared_dir / "nsys_sqlite" / "nsysai_mock.sqlite"))))
    out = Path(html.write(a, str(tmp_path / "r.html")))
    assert '<script type="application/json" id="specprof-data">' in out.read_text(encoding="utf-8")
    p = Page(browser, out)
    assert p.console_errors() == [] and p.dialogs == []
    assert p.page.locator("#timeline .main-svg").count() >= 1


def _gzip_vectors() -> dict[str, tuple[bytes, bytes]]:
    """name -> (gzip member, what it holds): every kind of deflate block, a header with a file name, and the
    data block of a real report."""
    import base64
    import gzip
    import io
    import random

    rng = random.Random(41)
    text = json.dumps({"ops": [rng.randrange(10 ** 9) for _ in range(20_000)]}).encode()
    named = io.BytesIO()
    with gzip.GzipFile(filename="data.json", mode="wb", fileobj=named, mtime=0) as fh:
        fh.write(text)
    page = html.render(analyse(attribute(load_trace(str(K4)))))
    body = re.search(r'<script type="application/gzip;base64" id="specprof-data">(.*?)</script>', page, re.S).group(1)
    real = base64.b64decode(body)
    return {
        "empty": (gzip.compress(b"", mtime=0), b""),
        "fixed codes": (gzip.compress(b"hello, hello, hello", mtime=0), b"hello, hello, hello"),
        "stored blocks": (gzip.compress(text, compresslevel=0, mtime=0), text),
        "long overlapping copies": (gzip.compress(b"ab" * 100_000, compresslevel=1, mtime=0), b"ab" * 100_000),
        "incompressible": (gzip.compress(bytes(rng.randrange(256) for _ in range(70_000)), mtime=0), None),
        "dynamic codes, level 9": (gzip.compress(text, compresslevel=9, mtime=0), text),
        "a file name in the header": (named.getvalue(), text),
        "a real report's data block": (real, gzip.decompress(real)),
    }


GUNZIP = """([packed, expected]) => {
  const bin = atob(packed), bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  const out = gunzip(bytes);
  let s = ''; for (let i = 0; i < out.length; i++) s += String.fromCharCode(out[i]);
  return btoa(s) === expected;
}"""


def test_the_pages_inflate_agrees_with_python_gzip(browser):
    # The page inflates its gzip'd data block itself (synchronously, so that every chart is drawn by the load
    # event): main.js's gunzip, run in Chromium on each kind of deflate block, against Python's gzip.
    import base64
    import gzip

    source = html._resource("report/main.js")
    code = source[source.index("function gunzip(src) {"):]
    code = code[:code.index("\n}\n") + 3]
    page = browser.new_page()
    try:
        page.add_script_tag(content=code)
        for name, (packed, raw) in _gzip_vectors().items():
            raw = gzip.decompress(packed) if raw is None else raw
            args = [base64.b64encode(packed).decode(), base64.b64encode(raw).decode()]
            assert page.evaluate(GUNZIP, args), name
        damaged = bytearray(gzip.compress(b"x" * 5000, mtime=0))
        damaged[12] ^= 0xFF
        got = page.evaluate("""(packed) => { const bin = atob(packed), b = new Uint8Array(bin.length);
            for (let i = 0; i < bin.length; i++) b[i] = bin.charCodeAt(i);
            try { gunzip(b); return 'no error'; } catch (e) { return e.message; } }""",
                            base64.b64encode(bytes(damaged[:40])).decode())
        assert got.startswith("the report's data block is damaged"), got
    finally:
        page.close()


def test_the_economics_panel_shows_the_per_batch_size_table_and_the_crossover(browser, tmp_path):
    """A ramp run (batch 1 to 16, K by SGLang's adaptive thresholds) against its plain twin: the economics panel
    draws the JSON's economics.batch_groups (the headline source's rows, as given) and says where speculation stops
    paying; a run at one batch size (the reference K = 4) draws no such table."""
    out = tmp_path / "ramp.html"
    result = CliRunner().invoke(main, ["analyze", str(FIXTURES / "sglang-ramp-dense-adaptive"), "--baseline",
                                       str(FIXTURES / "sglang-ramp-dense-plain"), "--html", str(out), "--json",
                                       "--no-cache"])
    assert result.exit_code == 0, result.output
    g = json.loads(result.stdout)["economics"]["batch_groups"]
    head = [r for r in g["groups"] if r["source"] == g["groups"][0]["source"]]
    p = Page(browser, out, width=1400)
    assert p.console_errors() == []
    rows = p.page.evaluate("[...document.querySelectorAll('#economics-batch-groups tr')]"
                           ".map(r => [...r.cells].map(c => c.textContent))")
    assert rows[0] == ["batch", "K", "cycles", "cycle ms", "accept len", "tokens/s", "plain step ms", "speedup", "time"]
    assert len(rows) == len(head) + 1
    for cells, r in zip(rows[1:], head):
        assert cells[0] == r["batch_group"] + ("" if r["exact"] else " (bucket)") and cells[1] == str(r["steps"])
        assert cells[2] == str(r["cycles"])
        if r["speedup"] is None:
            assert cells[7] == "-" and cells[6] == "none at this size"
        else:
            assert cells[7].startswith(f"×{r['speedup']:.2f} (") and cells[7].endswith(f"{r['speedup_ci'][1]:.2f})")
    text = p.page.inner_text("#economics")
    assert len(g["crossover"]) >= 2 and all(s in text for s in g["crossover"])
    assert "crossover between batch 8 and batch 16" in text
    k4 = tmp_path / "k4.html"
    assert CliRunner().invoke(main, ["report", str(K4), "-o", str(k4), "--no-cache"]).exit_code == 0
    assert Page(browser, k4).page.locator("#economics-batch-groups").count() == 0
