"""Headless Chromium (Debian's package, driven by playwright) for the HTML report's tests.

`./scripts/test` installs Debian's `chromium` where /usr/bin/chromium is missing, and playwright comes with the
`test` extra; playwright's own browser downloads are never used. A missing browser fails the tests (they are
never skipped): the report's tests are the only ones that run its JavaScript.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("SPECPROF_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


@contextmanager
def chromium():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: ./scripts/test installs Debian's chromium "
                    "(apt-get install chromium), or set SPECPROF_CHROMIUM to a Chromium binary")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is missing: pip install -e '.[test]' (./scripts/test does it)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Page:
    """A report opened in a fresh page, with what it said on the console and any dialog it opened."""

    def __init__(self, browser, path: Path, width: int = 1500, height: int = 1000, init_script: str | None = None):
        self.page = browser.new_page(viewport={"width": width, "height": height})
        if init_script:  # runs in the page before any of its own scripts
            self.page.add_init_script(init_script)
        self.console: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", self._dialog)
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(Path(path).resolve().as_uri())
        self.page.wait_for_function("window.specprofReady === true", timeout=60_000)
        self.timings = self.page.evaluate("window.specprofTimings")

    def _dialog(self, dialog):
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def console_errors(self) -> list[str]:
        return [text for kind, text in self.console if kind in ("error", "assert")] + self.errors
