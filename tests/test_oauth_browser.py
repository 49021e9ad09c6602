"""The OAuth consent page in a real browser: an MCP client's authorization-code + PKCE flow where the person
ticks only Read, ending with a token whose scope is read only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client
from django.utils import timezone

from apps.accounts import signin
from apps.agents.connections import caller_for_token
from apps.agents.models import Connection
from tests.conftest import PASSWORD, Person
from tests.oauthflow import REDIRECT, exchange, start

if TYPE_CHECKING:
    from playwright.sync_api import Page, Route


@pytest.mark.slow
def test_consent_with_only_read_ticked_gives_a_read_only_token(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person
) -> None:
    from playwright.sync_api import expect

    alice.user.email_verified_at = timezone.now()
    alice.user.save(update_fields=["email_verified_at"])
    signin.clear(alice.user.email)
    origin = live_server.url
    client = Client(HTTP_HOST=urlsplit(origin).netloc)  # the client reaches the same origin as the browser
    auth = start(client, resource=origin + "/mcp")  # the client asks for read, write and send

    landed: list[str] = []

    def callback(route: Route) -> None:  # the client's loopback listener
        landed.append(route.request.url)
        route.fulfill(status=200, content_type="text/plain", body="You can close this window.")

    page = browser_page
    page.route(REDIRECT.rsplit("/", 1)[0] + "/**", callback)
    page.goto(auth.url())
    page.wait_for_url("**/accounts/sign-in**")
    page.fill("#id_username", alice.user.email)
    page.fill("#id_password", PASSWORD)
    page.click("main button[type=submit]")

    page.wait_for_url("**/oauth/authorize/**")
    main = page.locator("main")
    expect(main).to_contain_text("Test Assistant")
    expect(main).to_contain_text("127.0.0.1:33418")
    expect(page.locator("#id_grant_write")).not_to_be_checked()
    expect(page.locator("#id_grant_send")).not_to_be_checked()
    expect(page.locator('input[name="workspaces"][value="default"]')).to_be_checked()
    expect(page.locator('input[name="lifetime"][value="24h"]')).to_be_checked()
    page.click("#allow")
    page.wait_for_url(REDIRECT + "?**")

    params = {k: v[0] for k, v in parse_qs(urlsplit(landed[-1]).query).items()}
    assert params["state"] == auth.state and params["iss"] == origin
    tokens = exchange(client, auth, params["code"], resource=origin + "/mcp")
    assert tokens.status_code == 200, tokens.content
    assert tokens.json()["scope"] == "read"
    caller = caller_for_token(tokens.json()["access_token"], origin + "/mcp")
    assert caller is not None and caller.scopes == frozenset({"read"}) and caller.tenant == alice.tenant
    connection = Connection.objects.for_tenant(alice.tenant).get()
    assert connection.scopes == ["read"] and connection.workspaces == ["default"]
    assert not Connection.objects.for_tenant(mallory.tenant).exists()


@pytest.mark.slow
def test_the_connections_page_says_why_a_connection_was_revoked(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person
) -> None:
    from playwright.sync_api import expect

    from tests.browser import look
    from tests.oauthflow import consent, redirect_params
    from tests.test_console_browser import _sign_in

    def connected(p: Person, replayed: bool) -> None:
        browser = Client()
        browser.force_login(p.user)
        auth = start(browser)
        code = redirect_params(consent(browser, auth))["code"]
        assert exchange(browser, auth, code).status_code == 200
        if replayed:  # the code presented again: whoever holds it now, the connection ends
            assert exchange(browser, auth, code).status_code == 400

    connected(alice, replayed=True)
    connected(alice, replayed=False)
    connected(mallory, replayed=True)
    revoked = Connection.objects.for_tenant(alice.tenant).get(revoked_at__isnull=False)
    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/connections")
    rows = page.locator("#connections-list tr[data-connection-id]")
    expect(rows).to_have_count(2)  # alice's two; mallory's is not shown
    status = page.locator(f'tr[data-connection-id="{revoked.pk}"] [data-revoked-reason]')
    expect(status).to_have_text("revoked: authorization code replayed")
    active = rows.filter(has_not=page.locator("[data-revoked-reason]"))
    expect(active).to_contain_text("active")
    look(page, "connections-revoked")
