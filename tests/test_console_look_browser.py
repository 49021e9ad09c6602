"""Every console page as a person sees it: at 1280 and 375 px, screenshots written, axe-core finds no serious or
critical violation, nothing scrolls sideways; the 404 page is in the console's layout."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.browser import look
from tests.conftest import Person
from tests.test_console_browser import _sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page

PAGES = {
    "home": "/", "keys": "/keys", "connections": "/connections", "workspaces": "/workspaces",
    "members": "/members", "exposure": "/exposure", "outbound": "/outbound", "mailboxes": "/mailboxes",
    "budgets": "/budgets", "plugins": "/plugins", "policies-empty": "/policies", "audit-empty": "/audit",
    "mail-empty": "/mail", "import-empty": "/import", "rules-empty": "/rules",
}  # fmt: skip
PUBLIC = {"sign-in": "/accounts/sign-in", "sign-up": "/accounts/sign-up", "password-reset": "/accounts/password-reset"}


@pytest.mark.slow
def test_every_page_reads_well_on_a_desktop_and_a_phone(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person
) -> None:
    from playwright.sync_api import expect

    page = browser_page
    for name, path in PUBLIC.items():
        page.goto(path)
        look(page, name)
    _sign_in(page, alice, live_server.url)
    for name, path in PAGES.items():
        page.goto(path)
        page.wait_for_load_state("networkidle")
        look(page, name)
        assert "Mallory" not in page.content()
    response = page.goto("/no-such-page")
    assert response is not None and response.status == 404
    expect(page.locator("main h1")).to_have_text("There is nothing here")
    expect(page.locator("nav.console-nav")).to_be_visible()  # the console's own layout, navigation and all
    look(page, "not-found")
