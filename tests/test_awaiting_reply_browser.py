"""Waiting for reply in the mailbox (/mail), in headless Chromium, on a mailbox synced from the test Dovecot: the
entry under the views counts the conversations the person wrote last and nobody answered, opens them as a list with
their days of waiting, one opens as any conversation, and the person's own number of days (set_preferences) changes
what waits. Looked at, at desktop and phone width, with the accessibility check. Mallory's mail, in her own tenant
on the same server, never shows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from apps.accounts.models import Preferences
from tests.browser import look
from tests.conftest import Person
from tests.imapbox import connect, sync
from tests.mailservers import ImapServer, SmtpServer
from tests.test_awaiting_reply import deliver_conversations
from tests.test_console_browser import _sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page


def test_the_conversations_waiting_for_reply_are_listed_with_their_days(
    browser_page: Page,
    live_server: Any,
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
) -> None:
    from playwright.sync_api import expect

    account, user = connect(alice, imap_server, smtp_server)
    theirs, their_user = connect(mallory, imap_server, smtp_server)
    deliver_conversations(imap_server, user, "alice")
    deliver_conversations(imap_server, their_user, "mallory")
    sync(account)
    sync(theirs)

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/mail")
    entry = page.locator("#awaiting-open")
    expect(entry).to_contain_text("Waiting for reply")
    expect(entry.locator(".view-count")).to_have_text("1")
    entry.click()
    expect(page.locator("#list-title")).to_have_text("Waiting for reply")
    rows = page.locator("#message-list li.awaiting")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("alice wait-q")
    expect(rows.first).to_contain_text("To bob@example.test")
    expect(rows.first.locator(".waiting-days")).to_have_text("waiting 5 days")
    expect(entry).to_have_attribute("aria-current", "true")
    look(page, "mail-awaiting")
    assert "mallory" not in page.content()

    # it opens as any conversation
    rows.first.locator("button.open").click()
    expect(page.locator("#reader")).to_be_visible()
    expect(page.locator("#thread article.thread-message")).to_have_count(2)
    page.locator("#reader-back").click()

    # the person's own number of days: after six days, nothing of theirs waits yet
    page.locator("details:has(#awaiting-settings) > summary").click()
    page.locator("#awaiting-days").fill("6")
    page.locator("#awaiting-nudge").check()
    look(page, "mail-awaiting-settings")
    page.locator("#awaiting-settings button[type=submit]").click()
    expect(entry.locator(".view-count")).to_have_count(0)
    expect(page.locator("#mail-awaiting .hint")).to_have_text("After 6 days without an answer.")
    mine = Preferences.objects.get(user=alice.user)
    assert (mine.awaiting_reply_days, mine.awaiting_reply_nudge) == (6, True)
    assert not Preferences.objects.filter(user=mallory.user, awaiting_reply_nudge=True).exists()
    entry.click()
    expect(page.locator("#message-list")).to_contain_text("No conversation waits for a reply.")
