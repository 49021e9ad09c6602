"""Tool sets in a real browser: a person defines a set on /keys and creates a key limited to it; the consent page
offers the same sets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from django.conf import settings
from django.test import Client

from apps.agents.keys import caller_for_key
from apps.agents.models import ApiKey, ToolSet
from apps.operations.exposure import offered_operations
from tests.callers import as_person, call
from tests.conftest import Person

if TYPE_CHECKING:
    from playwright.sync_api import Page


def _sign_in(page: Page, p: Person, url: str) -> None:
    client = Client()
    client.force_login(p.user)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": url}])


@pytest.mark.slow
def test_a_person_defines_a_set_and_limits_a_new_key_to_it(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person
) -> None:
    from playwright.sync_api import expect

    call(as_person(mallory), "create_tool_set", {"name": "mallorys", "operations": ["search"]}, confirm=True)
    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/keys")
    sets = page.locator("#tool-sets-list")
    expect(sets).to_contain_text("mail-read (built in)")
    expect(sets).not_to_contain_text("mallorys")

    page.fill("#tool-set-name", "triage")
    page.fill("#tool-set-operations", "list_messages, get_message")
    page.click("#create-tool-set button[type=submit]")
    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_contain_text("Create the tool set “triage” of 2 tools")
    page.click("#confirm-yes")
    expect(page.locator('#tool-sets-list tr[data-tool-set="triage"]')).to_be_visible()
    assert ToolSet.objects.for_tenant(alice.tenant).get().name == "triage"

    page.fill("#key-name", "triage bot")
    page.select_option("#key-tool-set", "triage")
    page.click("#create-key button[type=submit]")
    expect(dialog).to_contain_text("only the tools of the set “triage”")
    page.click("#confirm-yes")
    expect(page.locator("#new-key")).to_be_visible()
    key = page.locator("#new-key-value").inner_text().strip()
    expect(page.locator("#keys-list tr[data-prefix]")).to_contain_text("the set triage")
    caller = caller_for_key(key)
    assert caller is not None and {op.name for op in offered_operations(caller)} == {"list_messages", "get_message"}
    assert ApiKey.objects.for_tenant(alice.tenant).get().tool_set == "triage"
    assert not ApiKey.objects.for_tenant(mallory.tenant).exists()


@pytest.mark.slow
def test_the_connections_page_names_the_set_chosen_at_consent(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person
) -> None:
    from playwright.sync_api import expect

    from tests.oauthflow import connect

    for person in (alice, mallory):
        consenting = Client()
        consenting.force_login(person.user)
        connect(consenting, write=True, tool_set="mail-organize" if person is alice else "")
    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/connections")
    rows = page.locator("#connections-list tr[data-connection-id]")
    expect(rows).to_have_count(1)  # mallory's is not shown
    expect(rows).to_contain_text("the set mail-organize")
