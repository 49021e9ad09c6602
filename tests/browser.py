"""A real browser for the console's end-to-end tests: Debian's headless Chromium driven by Playwright.

Nothing is downloaded: Playwright drives the system's /usr/bin/chromium (bin/system-packages
installs it). Tests that need it skip, saying why, when it is missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--headless=new", "--disable-gpu", "--disable-dev-shm-usage"]
# How long an action, and an expect(...) assertion, waits for the page to become ready: tests wait on what the page
# shows (a selector, a text), never a fixed time, and this bound is only reached when the page is broken. Generous,
# since a loaded 2-core machine running two suites renders slowly (Swagger UI once took over 5 s, Playwright's
# default for expect).
TIMEOUT_MS = 30_000


@contextmanager
def chromium_page(base_url: str) -> Iterator[Page]:
    """A fresh page (own cookies) whose relative URLs go to `base_url`; fails the test on a script error or a 5xx."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (bin/system-packages does, as root)")
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
            context.set_default_timeout(TIMEOUT_MS)
            page = context.new_page()
            # refusals (a 409 asking for confirmation, a 404) are answers; exceptions and 5xx are not
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if _failed(page, r) else None)
            try:
                yield page
            finally:
                _UNAVAILABLE.pop(id(page), None)
        finally:
            browser.close()
    assert errors == [], f"the page reported script errors: {errors}"


# the paths (per page) where a test makes the server answer 503 on purpose: a worker it did not start
_UNAVAILABLE: dict[int, set[str]] = {}


def expect_unavailable(page: Page, path: str) -> None:
    """The test makes `path` answer 503 (SERVICE_UNAVAILABLE) on purpose, to see the page say so: that one answer
    is not a failure of the page; every other 5xx, and any 500 there, still is."""
    _UNAVAILABLE.setdefault(id(page), set()).add(path)


def _failed(page: Page, response: Any) -> bool:
    if response.status < 500:
        return False
    return not (response.status == 503 and urlsplit(response.url).path in _UNAVAILABLE.get(id(page), set()))


# ------------------------------------------------------------ looking at a page as a person would

ROOT = Path(__file__).resolve().parent.parent
# from npm (package.json), installed by `make test`; OAKEN_AXE_JS names another copy (a worktree without node_modules)
AXE = Path(os.environ.get("OAKEN_AXE_JS") or ROOT / "node_modules" / "axe-core" / "axe.min.js")
# where the walks leave what each page looks like, at a desktop's width and a phone's (README names it)
SCREENSHOTS = Path(os.environ.get("OAKEN_SCREENSHOTS_DIR", ROOT / "var" / "screenshots"))
WIDTHS = {"desktop": (1280, 900), "phone": (375, 800)}
_SERIOUS = {"serious", "critical"}
_AXE_RUN = """async () => {
  const result = await axe.run(document, {iframes: false, resultTypes: ["violations"]});
  return result.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,
                                        nodes: v.nodes.slice(0, 5).map((n) => n.target.join(" "))}));
}"""


def accessibility_violations(page: Page) -> list[dict[str, object]]:
    """axe-core's serious and critical violations on the page as it is now (axe is injected over the DevTools
    protocol, so the page's Content-Security-Policy stays as strict as ever)."""
    if not AXE.exists():
        pytest.skip(f"{AXE} is missing: `make node_modules/.installed` installs axe-core from npm")
    if not page.evaluate("typeof axe !== 'undefined'"):
        page.evaluate(AXE.read_text(encoding="utf-8") + "\n;undefined")
    found: list[dict[str, object]] = page.evaluate(_AXE_RUN)
    return [v for v in found if v["impact"] in _SERIOUS]


def settled(page: Page) -> None:
    """Return once the page has drawn what it has: two animation frames (the first may hold a layout queued
    before the call, the second comes after it is painted)."""
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")


def look(page: Page, name: str) -> None:
    """What a person sees on this page, at 1280 and at 375 px: a screenshot of each into SCREENSHOTS, no serious
    or critical accessibility violation, and nothing wider than a phone's screen (no sideways scrolling); then at
    375 px in the dark scheme, its screenshot and the same accessibility check."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        for label, (width, height) in WIDTHS.items():
            page.set_viewport_size({"width": width, "height": height})
            settled(page)  # the layout at the new width
            page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}.png"), full_page=True)
            found = accessibility_violations(page)
            assert found == [], f"{name} at {width} px ({label}): {found}"
            overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert overflow <= 0, f"{name} is {overflow} px wider than a {width} px screen"
        # the dark scheme (the system's choice, prefers-color-scheme): its colours pass the same check
        page.emulate_media(color_scheme="dark")
        settled(page)
        page.screenshot(path=str(SCREENSHOTS / f"{name}-{WIDTHS['phone'][0]}-dark.png"), full_page=True)
        found = accessibility_violations(page)
        assert found == [], f"{name} in the dark scheme: {found}"
    finally:
        page.emulate_media(color_scheme="light")
        page.set_viewport_size({"width": WIDTHS["desktop"][0], "height": WIDTHS["desktop"][1]})
