"""Every page works under the strict Content-Security-Policy in headless Chromium: the console's pages, the
sign-in pages, the consent page, the 404 page and the API docs report no violation, and the docs render."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from django.test import Client

from tests.browser import settled
from tests.conftest import Person
from tests.oauthflow import start
from tests.test_console_browser import _sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page

CONSOLE_PAGES = ["/", "/keys", "/connections", "/workspaces", "/members", "/exposure", "/outbound", "/mailboxes",
                 "/budgets", "/audit", "/mail", "/plugins", "/policies", "/import", "/rules",
                 "/no-such-page"]  # fmt: skip
PUBLIC_PAGES = ["/accounts/sign-in", "/accounts/sign-up", "/accounts/password-reset", "/api/docs"]

# each violation the page reports, as the event's fields; set before any of the page's own scripts run
_RECORD = """
window.addEventListener("securitypolicyviolation", (e) => {
  console.error("CSP violation: " + JSON.stringify({directive: e.effectiveDirective, blocked: e.blockedURI,
                                                    source: e.sourceFile, line: e.lineNumber}));
});
"""


def _recording(page: Page) -> list[str]:
    """Violations the page reports: its own event, and the "Refused to …" messages Chromium logs for them."""
    seen: list[str] = []
    page.add_init_script(_RECORD)

    def on_console(message: Any) -> None:
        text = message.text
        if "CSP violation" in text or "Content Security Policy" in text or text.startswith("Refused to"):
            seen.append(f"{page.url}: {text}")

    page.on("console", on_console)
    return seen


def _settle(page: Page) -> None:
    """Once the page has loaded, fetched all it asks for and drawn it, with the violation events (queued as tasks
    when a load is refused) delivered: one more task through the page's own queue comes after them."""
    page.wait_for_load_state("networkidle")
    settled(page)
    page.evaluate("() => new Promise((done) => setTimeout(done, 0))")


@pytest.mark.slow
def test_no_page_violates_the_policy(browser_page: Page, live_server: Any, alice: Person, mallory: Person) -> None:
    from playwright.sync_api import expect

    page = browser_page
    violations = _recording(page)
    for path in PUBLIC_PAGES:
        page.goto(path)
        _settle(page)
    # the docs rendered from Oaken's own files: the operations are listed, the schema was fetched
    page.goto("/api/docs")
    expect(page.locator(".swagger-ui .opblock-summary-path").first).to_be_visible()
    expect(page.locator('.swagger-ui [data-path="/api/v1/ops/list_messages"]').first).to_be_attached()
    _settle(page)

    _sign_in(page, alice, live_server.url)
    for path in CONSOLE_PAGES:
        page.goto(path)
        _settle(page)
        if path == "/exposure":  # its script ran and filled the page
            # the operations are folded under their groups since issue 37
            expect(page.locator('#exposure-list section[data-group="read"]')).to_be_visible()
    expect(page.locator("main")).to_contain_text("There is nothing here")  # the last one, the 404

    client = Client()
    client.force_login(alice.user)
    auth = start(client, resource=live_server.url + "/mcp")
    page.goto(auth.url())
    expect(page.locator("#allow")).to_be_visible()
    _settle(page)
    assert violations == []
    assert "Mallory" not in page.content()
