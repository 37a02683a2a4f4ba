"""The HTML report at scale: file size and time to interactive in headless Chromium.

Builds an Analysis of about `--ops` GPU ops from time-shifted copies of a real capture (benchmarks/scale.py),
renders the report, and opens it `--runs` times in Debian's chromium (playwright, the flags of tests/browser.py).
Each load reports, from the page's own clock (performance.now(), 0 = navigation start):
- interactive_ms: the first screen (header, timeline with its cycle selector, phase bars, top kernels) is
  drawn and answers input;
- ready_ms: every panel is drawn;
- load_blocked_ms, load_longest_task_ms: while the report's data loads (from its script's start until the data
  is parsed, `parse_ms`), the main thread's long tasks (the Long Tasks API: each task over 50 ms) summed, and
  the longest; and the long tasks before the report's script starts (the HTML parser, plotly.js:
  `before_app_blocked_ms`) and after the load until every panel is drawn (`after_load_blocked_ms`);
and, as the floor set by the browser itself, the same page with plotly.js alone (nothing of the report), loaded
back to back with the report in each run, so that on a shared machine the difference is the report's own cost.

    python3 benchmarks/html_report.py --ops 1000000 --runs 5 --out benchmarks/results/html_report_1m.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from benchmarks.scale import FIXTURE, scaled_analysis  # noqa: E402
from browser import ARGS, CHROMIUM  # noqa: E402  (tests/browser.py: the tests' browser and flags)


def load_times(paths: list[Path], runs: int) -> list[list[dict]]:
    """Per path, the page's timings over `runs` loads; the paths are loaded in turn within each run, so that
    on a shared machine they see the same load."""
    from playwright.sync_api import sync_playwright

    out: list[list[dict]] = [[] for _ in paths]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for _ in range(runs):
            for k, path in enumerate(paths):
                page = browser.new_page(viewport={"width": 1500, "height": 1000})
                errors = []
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.add_init_script(LONG_TASKS)
                t = time.perf_counter()
                page.goto(path.resolve().as_uri())
                page.wait_for_function("window.specprofReady === true", timeout=120_000)
                wall = time.perf_counter() - t
                timings = page.evaluate("window.specprofTimings || {}")
                timings.update(_load_blocking(timings, page.evaluate("window.specprofLongTasks || []")))
                timings["wall_s"] = round(wall, 3)
                timings["console_errors"] = errors
                out[k].append(timings)
                page.close()
        browser.close()
    return out


# Recorded from the page's first script on: every long task's (start, duration), ms.
LONG_TASKS = ("window.specprofLongTasks = []; try { new PerformanceObserver(function (l) { l.getEntries()"
              ".forEach(function (e) { window.specprofLongTasks.push([e.startTime, e.duration]); }); })"
              ".observe({type: 'longtask', buffered: true}); } catch (e) {}")


def _load_blocking(timings: dict, tasks: list) -> dict:
    """The long tasks while the data loads: from the report's script's start to the data parsed."""
    if "start_ms" not in timings or "parse_ms" not in timings:
        return {}
    def within(a, b):
        return [min(s + d, b) - max(s, a) for s, d in tasks if s < b and s + d > a]

    start, loaded = timings["start_ms"], timings["start_ms"] + timings["parse_ms"]
    inside = within(start, loaded)
    return {"load_blocked_ms": round(sum(inside), 1), "load_longest_task_ms": round(max(inside, default=0), 1),
            # the rest of the page: before the report's script (HTML parser, plotly.js), and after the load
            "before_app_blocked_ms": round(sum(within(0, start)), 1),
            "after_load_blocked_ms": round(sum(within(loaded, timings.get("ready_ms", loaded))), 1)}


def plotly_only(folder: Path) -> Path:
    from plotly.offline import get_plotlyjs

    path = folder / "plotly-only.html"
    path.write_text("<!DOCTYPE html><html><body><script>" + get_plotlyjs() + "</script><script>"
                    "window.specprofTimings = {ready_ms: performance.now()}; window.specprofReady = true;"
                    "</script></body></html>", encoding="utf-8")
    return path


def median(rows: list[dict], key: str):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.median(vals), 1) if vals else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixture", default=FIXTURE)
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--html", help="keep the report here (default: a temporary folder)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args(argv)
    from specprof.analyzer.readers.inputs import manifest
    from specprof.analyzer.render import html

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        a = scaled_analysis(args.fixture, args.ops)
        t1 = time.perf_counter()
        path = Path(args.html or os.path.join(tmp, "report.html"))
        html.write(a, str(path), manifest=manifest(args.fixture))
        t2 = time.perf_counter()
        floor, loads = load_times([plotly_only(Path(tmp)), path], args.runs)
        # the report's own cost: its time beyond plotly.js alone, load by load (the pair ran back to back)
        own = [{"interactive_ms": r["interactive_ms"] - f["ready_ms"], "ready_ms": r["ready_ms"] - f["ready_ms"]}
               for r, f in zip(loads, floor)]
        result = {
            "ops": a.ops.height, "cycles": a.cycles.height, "ranges": a.ranges.height,
            "segments": a.segments.height,
            "analyse_s": round(t1 - t0, 2), "render_s": round(t2 - t1, 2),
            "file_mb": round(path.stat().st_size / 1e6, 2),
            "interactive_ms_median": median(loads, "interactive_ms"),
            "ready_ms_median": median(loads, "ready_ms"),
            "plotly_only_ms_median": median(floor, "ready_ms"),
            **{f"{k}_median": median(loads, k) for k in ("parse_ms", "load_blocked_ms", "load_longest_task_ms",
                                                         "before_app_blocked_ms", "after_load_blocked_ms")},
            "beyond_plotly_interactive_ms_median": median(own, "interactive_ms"),
            "beyond_plotly_ready_ms_median": median(own, "ready_ms"),
            "load_average": os.getloadavg()[0],
            "loads": loads, "plotly_only": [r["ready_ms"] for r in floor],
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "chromium": CHROMIUM},
        }
    print(json.dumps({k: v for k, v in result.items() if k not in ("loads",)}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
