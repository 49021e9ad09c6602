"""The mailbox's habits (issue 37), in headless Chromium: conversations by default, an address per folder and per
conversation (Back and reload work), the keyboard (j/k, e, ?), Undo after archiving (the reverse operation), and
new mail delivered to Dovecot appearing in the open list without a reload. Another tenant's mail never shows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from apps.mail.models import Message
from tests.browser import look
from tests.conftest import Person
from tests.imapbox import connect, mail, sync
from tests.mailbox import build_mailbox
from tests.mailfactory import raw_message
from tests.mailservers import ImapServer, SmtpServer
from tests.test_console_browser import _sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page


def test_conversations_have_addresses_back_and_the_keyboard_work_and_archive_can_be_undone(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    box = build_mailbox(alice, tmp_path / "a", prefix="alice", with_work=False)
    theirs = build_mailbox(mallory, tmp_path / "m", prefix="mallory", with_work=False)
    mine = Message.objects.for_tenant(alice.tenant)
    trip = box.threads["trip-0"]

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/mail")

    # conversations by default: the trip's three messages are one row, with its count
    rows = page.locator("#message-list li[data-key]")
    expect(page.locator("#view-conversations")).to_have_attribute("aria-pressed", "true")
    conversation = page.locator(f'li.conversation[data-thread-id="{trip}"]')
    expect(conversation.locator(".count")).to_have_text(" 3 messages")
    expect(rows).to_have_count(23)
    expect(page.locator("#message-list li.message")).to_have_count(0)

    # opening it gives it an address; Back returns to the list
    conversation.locator("button.open").click()
    page.wait_for_url(f"**/mail/t/{trip}")
    expect(page.locator("#thread article.thread-message")).to_have_count(3)
    expect(page.locator("#thread-title")).to_have_text("Harbour trip plans")
    page.go_back()
    expect(page.locator("#mail-list-view")).to_be_visible()
    expect(page.locator("#reader")).to_be_hidden()
    assert not page.url.endswith(f"/mail/t/{trip}")

    # the address alone shows the conversation (the page brought it), and Back to the list leads to its folder
    page.goto(f"/mail/t/{trip}")
    expect(page.locator("#reader")).to_be_visible()
    expect(page.locator("#thread article.thread-message")).to_have_count(3)
    look(page, "mail-conversation")
    page.click("#reader-back")
    expect(page.locator("#mail-list-view")).to_be_visible()
    page.wait_for_url(f"**/mail/{box.personal}/inbox")
    # a folder's address, reloaded, shows that folder; the old ?account= address still works
    page.click('.mail-account button.folder[data-folder="archive"]')
    page.wait_for_url(f"**/mail/{box.personal}/archive")
    expect(page.locator("#message-list")).to_contain_text("No messages here.")
    page.reload()
    expect(page.locator("#list-title")).to_have_text("Archive")
    page.go_back()
    expect(page.locator("#list-title")).to_have_text("Inbox")
    page.goto(f"/mail?account={quote(box.personal)}&folder=archive")
    expect(page.locator("#list-title")).to_have_text("Archive")
    page.goto(f"/mail/{box.personal}/inbox")
    expect(rows).to_have_count(23)

    # the keyboard: j and k move the cursor (visible, focused), ? lists the keys, e archives, Undo brings it back
    page.locator("body").click(position={"x": 5, "y": 5})
    page.keyboard.press("j")
    expect(rows.nth(0)).to_have_attribute("data-cursor", "true")
    page.keyboard.press("j")
    expect(rows.nth(1)).to_have_attribute("data-cursor", "true")
    expect(rows.nth(0)).not_to_have_attribute("data-cursor", "true")
    page.keyboard.press("k")
    expect(rows.nth(0)).to_have_attribute("data-cursor", "true")
    expect(rows.nth(0).locator("button.open")).to_be_focused()
    page.keyboard.press("?")
    expect(page.locator("#keys-dialog")).to_be_visible()
    page.keyboard.press("e")  # a dialog is open: nothing happens
    page.keyboard.press("Escape")
    expect(page.locator("#keys-dialog")).to_be_hidden()
    first = rows.nth(0).get_attribute("data-thread-id")
    assert first is not None
    archived = list(mine.filter(thread_id=first).values_list("pk", flat=True))
    page.keyboard.press("e")
    expect(page.locator(".toast")).to_contain_text("Archived.")
    expect(page.locator(f'li[data-thread-id="{first}"]')).to_have_count(0)
    assert set(mine.filter(pk__in=archived).values_list("folder__kind", flat=True)) == {"archive"}
    page.click(".toast button.toast-action")
    expect(page.locator(f'li[data-thread-id="{first}"]')).to_have_count(1)
    assert set(mine.filter(pk__in=archived).values_list("folder__kind", flat=True)) == {"inbox"}

    # the conversation opened by o, archived by e from the reader, and Undo there too
    page.locator(f'li[data-thread-id="{trip}"] button.open').focus()
    page.keyboard.press("o")
    page.wait_for_url(f"**/mail/t/{trip}")
    expect(page.locator("#thread article.thread-message")).to_have_count(3)
    page.locator("#thread-title").focus()
    page.keyboard.press("Escape")
    expect(page.locator("#mail-list-view")).to_be_visible()

    # marking read and labelling a conversation: Undo calls the reverse (mark_unread, remove_labels)
    trip_ids = box.ids("trip-0", "trip-1", "trip-2")
    page.locator(f'li[data-thread-id="{trip}"] input.select').check()
    page.click('#bulk button[data-bulk="read"]')
    expect(page.locator(".toast")).to_contain_text("Marked read.")
    assert set(mine.filter(pk__in=trip_ids).values_list("read", flat=True)) == {True}
    expect(page.locator(f'li[data-thread-id="{trip}"]')).not_to_have_class(re.compile(r"\bunread\b"))
    page.click(".toast button.toast-action")
    expect(page.locator(f'li[data-thread-id="{trip}"]')).to_have_class(re.compile(r"\bunread\b"))
    assert set(mine.filter(pk__in=trip_ids).values_list("read", flat=True)) == {False}
    zeppelin = box.threads["zeppelin"]
    page.locator(f'li[data-thread-id="{zeppelin}"] input.select').check()
    page.select_option("#bulk-label", label="Travel")
    page.click('#bulk button[data-bulk="label"]')
    expect(page.locator(f'li[data-thread-id="{zeppelin}"] .label-chip')).to_have_count(2)
    page.click(".toast button.toast-action")
    expect(page.locator(f'li[data-thread-id="{zeppelin}"] .label-chip')).to_have_count(1)
    expect(page.locator(f'li[data-thread-id="{zeppelin}"] .label-chip')).to_have_text("Receipts")
    labels = mine.get(pk=box.messages["zeppelin"]).labels.values_list("name", flat=True)
    assert list(labels) == ["Receipts"]

    # / goes to the search
    page.locator("body").click(position={"x": 5, "y": 5})
    page.keyboard.press("/")
    expect(page.locator("#search-query")).to_be_focused()

    # on a phone the folders are above the list: choosing one brings its list into view
    page.set_viewport_size({"width": 375, "height": 800})
    page.evaluate("window.scrollTo(0, 0)")
    page.click('.mail-account button.folder[data-folder="archive"]')
    expect(page.locator("#list-title")).to_have_text("Archive")
    expect(page.locator("#list-title")).to_be_in_viewport()
    page.set_viewport_size({"width": 1280, "height": 900})
    page.click('.mail-account button.folder[data-folder="inbox"]')
    expect(rows).to_have_count(23)

    html = page.content()
    assert "mallory" not in html.lower()
    assert not set(theirs.threads.values()) & {
        page.locator("li.conversation").nth(i).get_attribute("data-thread-id") for i in range(rows.count())
    }


def test_new_mail_shows_in_the_open_list_without_a_reload(
    browser_page: Page,
    live_server: Any,
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
    settings: Any,
) -> None:
    from playwright.sync_api import expect

    settings.MAIL_POLL_SECONDS = 1
    account, user = connect(alice, imap_server, smtp_server)
    imap_server.append(user, "INBOX", mail(1, "first")[0])
    sync(account)
    hers, her_user = connect(mallory, imap_server, smtp_server)
    imap_server.append(her_user, "INBOX", raw_message(subject="Mallory private", message_id="<hers@example.test>"))
    sync(hers)

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto(f"/mail/{account}/inbox")
    rows = page.locator("#message-list li[data-key]")
    expect(rows).to_have_count(1)
    page.locator("#view-messages").click()
    expect(page.locator("#message-list li.message")).to_have_count(1)
    rows.first.locator("input.select").check()
    # the folder's counts are shown: what the page compares the next asks with
    inbox = page.locator('.mail-account button.folder[data-folder="inbox"]')
    expect(inbox.locator(".unread-count")).to_have_text("1")

    imap_server.append(user, "INBOX", raw_message(subject="Fresh arrival", message_id="<fresh@example.test>"))
    sync(account)
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("Fresh arrival")
    expect(rows.nth(1).locator("input.select")).to_be_checked()  # the selection stayed
    expect(page.locator("#bulk-count")).to_have_text("1 selected")
    expect(inbox.locator(".unread-count")).to_have_text("2")
    assert "Mallory private" not in page.content()
