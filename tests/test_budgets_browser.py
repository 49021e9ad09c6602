"""The console's "Budgets in use" page in headless Chromium: an agent's request spends from its key's budget and
the page shows it, live or, with Redis away, as last rolled up; another tenant's budgets never appear."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from apps.agents.keys import caller_for_key, issue_key
from apps.core import redis_client as redis_module
from apps.outbound import budget, rollup
from tests.callers import membership
from tests.conftest import Person
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user, request
from tests.test_console_browser import _sign_in

# every test here spends or reads the hourly budgets: within one clock hour
pytestmark = pytest.mark.usefixtures("one_budget_hour")

if TYPE_CHECKING:
    from playwright.sync_api import Page


@pytest.mark.slow
def test_the_budgets_page_shows_what_a_key_spent(
    browser_page: Page,
    live_server: Any,
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
    settings: Any,
) -> None:
    from playwright.sync_api import expect

    account = imap_account(alice, imap_server, smtp_server, mail_user(imap_server, "alice"))
    key, secret = issue_key(
        membership=membership(alice),
        scopes=["read", "send"],
        workspaces=["default"],
        allow_list=None,
        expires_at=None,
        name="newsletter script",
    )
    agent = caller_for_key(secret)
    assert agent is not None
    made = request(
        agent,
        "send_email",
        {
            "account_id": str(account.pk),
            "subject": "Figures",
            "body": "Here.\n",
            "to": ["a@example.test", "b@example.test", "c@example.test"],
            "idempotency_key": "browser-1",
        },
    )
    assert made["state"] == "awaiting_approval"
    theirs, _ = issue_key(
        membership=membership(mallory),
        scopes=["read", "send"],
        workspaces=["default"],
        allow_list=None,
        expires_at=None,
        name="mallory's secret project",
    )
    assert (
        budget.take(budget.BudgetName(str(mallory.tenant.pk), "apikey", str(theirs.pk)), 9, 200, time.time())
        is not None
    )
    settings.OPERATIONS = {**settings.OPERATIONS, "PAGE_SIZE_DEFAULT": 1}  # one budget a page: "Show more"
    page = browser_page
    _sign_in(page, alice, live_server.url)

    page.goto("/")
    page.click("nav >> text=Budgets")
    page.wait_for_url("**/budgets")
    expect(page.locator("h1")).to_have_text("Budgets in use")
    expect(page.locator("#budgets-list tr[data-budget-id]")).to_have_count(1)
    page.click("#budgets-more")
    expect(page.locator("#budgets-list tr[data-budget-id]")).to_have_count(2)
    expect(page.locator("#budgets-more")).to_be_hidden()
    row = page.locator(f'#budgets-list tr[data-budget-id="{key.pk}"]')
    expect(row).to_contain_text("API key")
    expect(row).to_contain_text("newsletter script")
    expect(row).to_contain_text(f"{key.prefix}_…")
    expect(row).to_contain_text("3 of 200 (197 left)")
    expect(row).to_contain_text("active")
    mine = page.locator(f'#budgets-list tr[data-budget-kind="person"][data-budget-id="{alice.user.pk}"]')
    expect(mine).to_contain_text("0 of 200")
    expect(page.locator("#budgets-stale")).to_be_hidden()
    html = page.content()
    assert str(theirs.pk) not in html and "mallory" not in html and secret not in html

    # with Redis away the page says so, and shows what the roll-up copied
    rollup.roll_up()
    working, settings.REDIS_URL = settings.REDIS_URL, "unix:///nonexistent/redis.sock"
    redis_module.redis_client.cache_clear()
    try:
        page.reload()
        page.click("#budgets-more")
        expect(page.locator("#budgets-stale")).to_be_visible()
        expect(page.locator("#budgets-stale")).to_contain_text("last rolled up")
        rolled = page.locator(f'#budgets-list tr[data-budget-id="{key.pk}"] [data-rolled-up]')
        expect(rolled).to_contain_text("3 of 200 (197 left), as rolled up")
    finally:
        settings.REDIS_URL = working
        redis_module.redis_client.cache_clear()
    assert str(theirs.pk) not in page.content()
