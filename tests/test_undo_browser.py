"""'Undo what this assistant did since …' in headless Chromium: from the Keys page, a person picks the key and a
time, reads what will be undone and what will not in the confirmation dialog, confirms, and the mail is back as it
was; the same form on the audit log, with the key it shows chosen. At phone width, passing axe-core (tests.browser
look). Mallory's mail, in another tenant, stays as it was."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from apps.mail.models import Message
from tests.browser import look
from tests.callers import as_agent, call
from tests.conftest import Mailbox, Person
from tests.test_audit_ops import _key
from tests.test_console_browser import _sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page


def _where(p: Person, ids: list[str]) -> list[tuple[str, bool]]:
    rows = {str(m.pk): m for m in Message.objects.for_tenant(p.tenant).filter(pk__in=ids).select_related("folder")}
    return [(rows[i].folder.kind, rows[i].read) for i in ids]


@pytest.mark.slow
def test_a_person_undoes_what_a_key_did_from_the_keys_page(
    browser_page: Page, live_server: Any, alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox
) -> None:
    from playwright.sync_api import expect

    one, two, three = alice_mail.message_ids
    key, agent = _key(alice, "laptop script")
    before, theirs = _where(alice, alice_mail.message_ids), _where(mallory, mallory_mail.message_ids)
    call(agent, "mark_read", {"message_ids": [one, two]})
    call(agent, "move_messages", {"message_ids": [three], "folder": "archive"})
    call(as_agent(mallory), "mark_read", {"message_ids": mallory_mail.message_ids[:1]})
    theirs = _where(mallory, mallory_mail.message_ids)
    page = browser_page
    _sign_in(page, alice, live_server.url)

    page.goto("/keys")
    choice = f"apikey:{key.pk}"
    expect(page.locator(f'#undo-credential option[value="{choice}"]')).to_have_count(1)
    page.select_option("#undo-credential", choice)
    page.select_option("#undo-since", "1")
    look(page, "undo-keys")
    page.click("#undo-submit")
    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator("#confirm-title")).to_have_text("Undo what this assistant did?")
    expect(dialog).to_contain_text("Mark 2 messages unread again.")
    expect(dialog).to_contain_text("Move 1 message back to Inbox.")
    look(page, "undo-preview")
    assert _where(alice, alice_mail.message_ids) != before  # nothing changed by asking
    page.click("#confirm-yes")
    expect(page.locator("#undo-result")).to_contain_text("Undone: 3 changes.")
    assert _where(alice, alice_mail.message_ids) == before
    assert _where(mallory, mallory_mail.message_ids) == theirs

    # the audit log offers the same, with the key it shows already chosen; undoing again finds nothing to undo
    page.goto(f"/audit?credential_kind=apikey&credential_id={key.pk}")
    expect(page.locator("#undo-credential")).to_have_value(choice)
    expect(page.locator("#audit-list")).to_contain_text("mark read on 2 messages over MCP")
    look(page, "undo-audit")
    page.click("#undo-submit")
    expect(page.locator("#confirm-dialog")).to_contain_text("Left as it is: 3 changes (a person changed it since).")
    page.click("#confirm-yes")
    expect(page.locator("#undo-result")).to_contain_text("Nothing was left to undo.")

    # the whole log says which event each reversal undid
    page.goto("/audit?principal=person&operation=mark_unread")
    expect(page.locator("#audit-list")).to_contain_text("mark unread on 2 messages in the console, undoing event #")


@pytest.mark.slow
def test_a_person_locks_a_key_down_from_the_keys_page(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person
) -> None:
    """Lockdown (issue 42): a key's row says whether it is on; "Lock down" asks first, then the key is in lockdown
    and the row says so; lifting it is the same. Mallory's key, in another tenant, is never touched."""
    from playwright.sync_api import expect

    from apps.agents.models import ApiKey

    key, _ = _key(alice, "laptop script")
    theirs, _ = _key(mallory, "laptop script")
    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/keys")
    row = page.locator(f'tr[data-key-id="{key.pk}"]')
    expect(row).to_contain_text("off")
    row.locator('[data-action="lockdown"]').click()
    expect(page.locator("#confirm-dialog")).to_be_visible()
    look(page, "keys-lockdown-confirm")
    page.click("#confirm-yes")
    expect(row.locator('[data-action="lockdown"]')).to_have_text("Lift lockdown")
    expect(row).to_contain_text("on")
    look(page, "keys-lockdown")
    assert ApiKey.objects.for_tenant(alice.tenant).get(pk=key.pk).lockdown is True
    assert ApiKey.objects.for_tenant(mallory.tenant).get(pk=theirs.pk).lockdown is False
    row.locator('[data-action="lockdown"]').click()
    page.click("#confirm-yes")
    expect(row.locator('[data-action="lockdown"]')).to_have_text("Lock down")
    assert ApiKey.objects.for_tenant(alice.tenant).get(pk=key.pk).lockdown is False
