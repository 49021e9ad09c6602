"""The console's Plugins page in headless Chromium: a plugin's health and operations, and its settings edited
from the plugin's schema, a refusal shown beside its setting in words, a secret never shown back; another
tenant's settings stay its own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.browser import look
from tests.callers import as_person, call
from tests.conftest import Person
from tests.test_console_browser import _sign_in
from tests.test_plugins import installed  # noqa: F401 - the fixture installing the test plugins

if TYPE_CHECKING:
    from playwright.sync_api import Page


@pytest.mark.slow
@pytest.mark.usefixtures("installed")
def test_an_admin_edits_a_plugins_settings_from_its_schema(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person
) -> None:
    from playwright.sync_api import expect

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/")
    page.click("nav >> text=Plugins")
    page.wait_for_url("**/plugins")
    keyed = page.locator('section[data-plugin="keyed"]')
    expect(keyed.locator("[data-health]")).to_have_text("Working.")
    expect(keyed.locator('[data-operation="keyed.whoami"]')).to_contain_text("not offered")

    # a value the schema refuses: said beside the setting, in words, nothing saved, no dialog
    keyed.locator('input[name="region"]').fill("mars")
    keyed.locator("button[type=submit]").click()
    problem = page.locator("#setting-keyed-region-problem")
    expect(problem).to_have_text("Region does not have the expected form.")
    expect(page.locator("body")).not_to_contain_text("settings.region")
    assert call(as_person(alice), "keyed.whoami", {}) == {"said": "eu without a key"}

    # a key and a region, confirmed
    keyed.locator('input[name="region"]').fill("us")
    keyed.locator('input[name="api_key"]').fill("sk-browser-0123456789")
    keyed.locator("button[type=submit]").click()
    expect(page.locator("#confirm-dialog")).to_be_visible()
    expect(page.locator("#confirm-dialog")).to_contain_text("keyed.api_key")
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_contain_text("The settings of keyed are saved.")
    assert call(as_person(alice), "keyed.whoami", {}) == {"said": "us with a key"}

    # shown again: the key is set, never shown; saving again with it left empty keeps it
    page.reload()
    key = page.locator('section[data-plugin="keyed"] input[name="api_key"]')
    expect(key).to_have_value("")
    expect(key).to_have_attribute("placeholder", "set (leave empty to keep it)")
    assert "sk-browser" not in page.content()
    page.locator('section[data-plugin="keyed"] input[name="region"]').fill("eu")
    page.locator('section[data-plugin="keyed"] button[type=submit]').click()
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_contain_text("saved")
    assert call(as_person(alice), "keyed.whoami", {}) == {"said": "eu with a key"}
    # mallory's tenant has its own settings
    assert call(as_person(mallory), "keyed.whoami", {}) == {"said": "eu without a key"}
    look(page, "plugins")
