"""Snooze in the mailbox (/mail), in headless Chromium: a message's Snooze asks for a time in the person's own time
zone and calls snooze_messages (the message leaves the inbox), a snoozed message says until when and offers
Unsnooze (unsnooze_messages: back in the inbox). Looked at, at desktop and phone width, with the accessibility
check. Another tenant's mail never shows, and nothing of it changes."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from apps.mail.models import Message
from tests.browser import look
from tests.conftest import Person
from tests.mailbox import build_mailbox, state_of
from tests.test_console_browser import _sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page


def test_a_message_is_snoozed_from_the_reader_and_unsnoozed_again(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    box = build_mailbox(alice, tmp_path / "a", prefix="alice", with_work=False)
    theirs = build_mailbox(mallory, tmp_path / "m", prefix="mallory", with_work=False)
    hers = state_of(theirs)
    zeppelin = box.messages["zeppelin"]
    mine = Message.objects.for_tenant(alice.tenant)

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto(f"/mail/t/{box.threads['zeppelin']}")
    article = page.locator(f'article.thread-message[data-message-id="{zeppelin}"]')
    opener = article.locator("button.snooze-open")
    expect(opener).to_be_visible()
    opener.click()
    expect(opener).to_have_attribute("aria-expanded", "true")
    field = article.locator("input[type=datetime-local]")
    expect(field).to_be_focused()
    zone = page.evaluate("Intl.DateTimeFormat().resolvedOptions().timeZone")
    when = (datetime.now(ZoneInfo(zone)) + timedelta(days=2)).replace(hour=9, minute=30, second=0, microsecond=0)
    field.fill(when.strftime("%Y-%m-%dT%H:%M"))
    look(page, "mail-snooze")

    article.locator("form.snooze-form button[type=submit]").click()
    expect(page.locator("#mail-list-view")).to_be_visible()
    expect(page.locator(f'#message-list li[data-message-id="{zeppelin}"]')).to_have_count(0)
    row = mine.select_related("folder").get(pk=zeppelin)
    assert (row.folder.kind, row.snoozed_until) == ("archive", when)

    # opened again: until when, and Unsnooze
    page.goto(f"/mail/t/{box.threads['zeppelin']}")
    expect(article.locator(".snoozed-until")).to_contain_text("Snoozed until")
    look(page, "mail-snoozed")
    article.locator("button.unsnooze").click()
    expect(page.locator("#mail-list-view")).to_be_visible()
    row = mine.select_related("folder").get(pk=zeppelin)
    assert (row.folder.kind, row.snoozed_until) == ("inbox", None)
    assert "mallory" not in page.content()
    assert state_of(theirs) == hers
