"""The console's main pages as Lighthouse (the npm package, package.json) scores them, on the live test server in
the system's headless Chromium, at a desktop's size and a phone's: accessibility and best practices at least 0.95,
performance at least 0.90 (Lighthouse's simulated throttling, which is computed from the page's own trace, so a
loaded machine does not move it much). A page is added to PAGES with one line: its name and how to find its address
from the signed-in person's mail. Another tenant's mail never shows on the pages measured."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.conf import settings
from django.test import Client

from tests.browser import ARGS, CHROMIUM, ROOT
from tests.conftest import Person
from tests.mailbox import Mailbox, build_mailbox

if TYPE_CHECKING:
    from playwright.sync_api import Page

LIGHTHOUSE = ROOT / "node_modules" / "lighthouse"  # from npm (package.json), installed by `make test`
RUNNER = Path(__file__).with_name("lighthouse.mjs")  # runs Lighthouse's node API in one Chromium for every page
# the least score each category must reach (0..1), on every page at every size
THRESHOLDS = {"accessibility": 0.95, "best-practices": 0.95, "performance": 0.90}
# "desktop": Lighthouse's desktop preset (1350x940, a fast connection); "mobile": its default phone (a mid-range
# phone on a slow 4G connection, the CPU slowed four times)
SIZES = ("desktop", "mobile")

# every page measured: its name, and its address given the person's mail (one line each)
PAGES: dict[str, Callable[[Mailbox], str]] = {
    "mail": lambda box: "/mail",
    "conversation": lambda box: f"/mail/t/{box.threads['trip-0']}",
    "outbound": lambda box: "/outbound",
    "audit": lambda box: "/audit",
    "keys": lambda box: "/keys",
}


@dataclass(frozen=True)
class Scores:
    url: str
    size: str
    categories: dict[str, float]
    lost: dict[str, list[str]]  # per category, the audits that cost it points: "id: title (score; value)"
    problems: list[str]  # why Lighthouse could not measure the page (a runtime error), or its warnings
    hints: list[str]  # what would make it faster (render-blocking files, bytes to save) and what moved as it loaded

    def low(self) -> dict[str, float]:
        return {c: s for c, s in self.categories.items() if s < THRESHOLDS[c]}


def lighthouse_scores(urls: list[str], cookies: list[dict[str, str]]) -> list[Scores]:
    """Lighthouse's scores for each of `urls` at each of SIZES, in a Chromium holding `cookies` (a session)."""
    if not LIGHTHOUSE.exists():
        pytest.skip(f"{LIGHTHOUSE} is missing: `make node_modules/.installed` installs Lighthouse from npm")
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (bin/system-packages does, as root)")
    job = {
        "chromePath": str(CHROMIUM),
        "chromeFlags": ARGS,
        "cookies": cookies,
        "runs": [{"url": url, "size": size} for url in urls for size in SIZES],
        "categories": list(THRESHOLDS),
    }
    with tempfile.TemporaryDirectory(prefix="oaken-lighthouse-") as folder:
        done = subprocess.run(
            ["node", str(RUNNER)],
            input=json.dumps(job), env={**os.environ, "TMPDIR": folder}, capture_output=True, text=True,
            timeout=300 * len(job["runs"]), check=False,
        )  # fmt: skip
    assert done.returncode == 0, f"lighthouse failed: {done.stderr[-3000:]}"
    return [Scores(**found) for found in json.loads(done.stdout)]


def _session_cookie(p: Person) -> tuple[str, str]:
    client = Client()
    client.force_login(p.user)
    return settings.SESSION_COOKIE_NAME, client.cookies[settings.SESSION_COOKIE_NAME].value


@pytest.mark.slow
def test_the_main_pages_score_well_in_lighthouse(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    box = build_mailbox(alice, tmp_path / "a", prefix="alice", with_work=False)
    theirs = build_mailbox(mallory, tmp_path / "m", prefix="mallory", with_work=False)
    name, value = _session_cookie(alice)
    page = browser_page
    page.context.add_cookies([{"name": name, "value": value, "url": live_server.url}])
    page.goto("/mail")  # the session measured sees alice's mail, never mallory's
    # conversations are the list's default (issue 37)
    expect(page.locator("#message-list li.conversation").first).to_be_visible()
    shown = set(page.locator("#message-list li.conversation").evaluate_all("rows => rows.map(r => r.dataset.threadId)"))
    assert shown and shown <= set(box.threads.values()) and not shown & set(theirs.threads.values())

    # OAKEN_LIGHTHOUSE_PAGES="mail,keys" measures only those (while working on one page)
    only = [n for n in os.environ.get("OAKEN_LIGHTHOUSE_PAGES", "").split(",") if n] or list(PAGES)
    urls = {live_server.url + PAGES[n](box): n for n in only}
    found = lighthouse_scores(list(urls), [{"name": name, "value": value, "url": live_server.url}])
    failures = []
    for scores in found:
        said = " ".join(f"{c}={s:.2f}" for c, s in sorted(scores.categories.items()))
        print(f"lighthouse {urls[scores.url]} {scores.size}: {said}", *scores.problems)
        for line in [*(f"{c}/{audit}" for c, lost in scores.lost.items() for audit in lost), *scores.hints]:
            print(f"    {line}")
        for category in scores.low():
            why = scores.lost[category] + scores.problems
            failures.append(f"{urls[scores.url]} ({scores.size}) {category}: " + "; ".join(why))
    assert len(found) == len(urls) * len(SIZES)
    assert failures == [], "\n".join(failures)
