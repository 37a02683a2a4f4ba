"""Make docs/report.png: the HTML report of the bundled reference-k4 capture, its first screen, in headless Chromium.

    python3 scripts/report_screenshot.py [--out docs/report.png] [--run fixtures/reference-k4]

Runs `specprof report RUN` (so the header shows the run's manifest and the panels its sidecar's cross-check),
opens the page in Debian's chromium through playwright (tests/browser.py's flags) at 1440x1040, and saves the
viewport; with Pillow installed the PNG is reduced to 256 colours (octree, no dither) to stay small.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="fixtures/reference-k4")
    ap.add_argument("--out", default="docs/report.png")
    ap.add_argument("--width", type=int, default=1440)
    ap.add_argument("--height", type=int, default=1040)
    args = ap.parse_args(argv)
    os.chdir(ROOT)
    from browser import ARGS, CHROMIUM
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        page_path = Path(tmp) / "report.html"
        subprocess.run([sys.executable, "-m", "specprof", "report", args.run, "-o", str(page_path)], check=True)
        raw = Path(tmp) / "raw.png"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            page.goto(page_path.as_uri())
            page.wait_for_function("window.specprofReady === true", timeout=60_000)
            page.screenshot(path=str(raw))
            browser.close()
        try:
            from PIL import Image
        except ImportError:
            Path(args.out).write_bytes(raw.read_bytes())
        else:
            img = Image.open(raw).convert("RGB")
            img.quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE).save(
                args.out, optimize=True)
    print(f"{args.out}: {Path(args.out).stat().st_size / 1e3:.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
