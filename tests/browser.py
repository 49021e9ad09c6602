"""A real browser for the console's end-to-end tests: Debian's headless Chromium driven by Playwright.

Nothing is downloaded: Playwright drives the system's /usr/bin/chromium (bin/system-packages
installs it). Tests that need it skip, saying why, when it is missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--headless=new", "--disable-gpu", "--disable-dev-shm-usage"]
TIMEOUT_MS = 15_000


@contextmanager
def chromium_page(base_url: str) -> Iterator[Page]:
    """A fresh page (own cookies) whose relative URLs go to `base_url`; fails the test on a script error or a 5xx."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (bin/system-packages does, as root)")
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            context = browser.new_context(base_url=base_url)
            context.set_default_timeout(TIMEOUT_MS)
            page = context.new_page()
            # refusals (a 409 asking for confirmation, a 404) are answers; exceptions and 5xx are not
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 500 else None)
            yield page
        finally:
            browser.close()
    assert errors == [], f"the page reported script errors: {errors}"
