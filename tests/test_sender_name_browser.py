"""The sender's name in a browser (issue 38, item 6): a person names themselves and a mailbox's sender on the
Mailboxes page, compose's From line and the approval page read "Name <address>"; mallory's names never show."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from apps.mail.models import MailAccount
from tests.browser import look
from tests.callers import as_agent
from tests.conftest import Person
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user, request
from tests.test_console_browser import _sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page

NAME = "Zoë Ünal"


@pytest.mark.slow
def test_the_sender_name_is_set_on_the_mailboxes_page_and_shown_in_compose_and_approval(
    browser_page: Page,
    live_server: Any,
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
) -> None:
    from playwright.sync_api import expect

    me, bob = mail_user(imap_server, "alice"), mail_user(imap_server, "bob")
    account = imap_account(alice, imap_server, smtp_server, me, name="Walker IMAP")
    theirs = imap_account(mallory, imap_server, smtp_server, mail_user(imap_server, "eve"), sender_name="Mallory M")
    page = browser_page
    _sign_in(page, alice, live_server.url)

    # the person's own name
    page.goto("/mailboxes")
    page.fill("#person-name-input", NAME)
    page.click("#person-name button[type=submit]")
    expect(page.locator("#notice")).to_have_text(f"Your name is saved: a mailbox you connect sends as “{NAME}”.")
    alice.user.refresh_from_db()
    assert alice.user.name == NAME

    # a mailbox connected before has none: it sends under the address alone, never its label
    row = page.locator(f'#accounts-list tr[data-account-id="{account.pk}"]')
    cell = row.locator(f'[data-sender-name="{account.pk}"]')
    expect(cell).to_contain_text("none (the address alone)")
    row.locator("[data-action=sender-name]").click()
    form = row.locator(f'form[data-sender-form="{account.pk}"]')
    expect(form.locator("label")).to_have_text("Sender name of Walker IMAP")
    # a name that reads as an address is refused, in words, in the form
    form.locator("input").fill("boss@bank.example")
    form.locator("button[type=submit]").click()
    expect(form.locator("p.errors")).to_be_visible()
    assert MailAccount.objects.for_tenant(alice.tenant).get(pk=account.pk).sender_name == ""
    form.locator("input").fill(NAME)
    # the list reloads every 3 s while the mailbox's first sync is on its way: never under a form being written
    expect(row.locator("[data-syncing]")).to_have_text("syncing…")
    page.wait_for_timeout(4_000)
    expect(form.locator("input")).to_have_value(NAME)
    look(page, "mailboxes-sender-name-edit")
    form.locator("button[type=submit]").click()
    expect(page.locator("#notice")).to_have_text(f"Walker IMAP now sends as “{NAME} <{me}>”.")
    expect(cell).to_contain_text(NAME)
    assert MailAccount.objects.for_tenant(alice.tenant).get(pk=account.pk).sender_name == NAME
    look(page, "mailboxes-sender-name")
    assert "Mallory M" not in page.locator("main").inner_text()

    # compose: the From line is the header as it is sent, then the account's own name
    page.goto("/mail")
    page.click("#compose-new")
    expect(page.locator("#composer")).to_be_visible()
    expect(page.locator("#compose-from option")).to_have_text([f"{NAME} <{me}> · Walker IMAP"])
    look(page, "compose-sender-name")

    # the approval page: an agent's request, From as it will be sent
    made = request(
        as_agent(alice, scopes={"read", "write", "send"}),
        "send_email",
        {"account_id": str(account.pk), "to": [bob], "subject": "Hello", "body": "Hi\n", "idempotency_key": "k"},
    )
    page.goto(f"/outbound?request={made['request_id']}")
    shown = page.locator(f'#outbound-list article[data-request-id="{made["request_id"]}"]')
    expect(shown.locator("dl.headers")).to_contain_text(f"From{NAME} <{me}>")
    look(page, "outbound-sender-name")
    assert "Mallory M" not in page.locator("main").inner_text()
    assert MailAccount.objects.for_tenant(mallory.tenant).get(pk=theirs.pk).sender_name == "Mallory M"
