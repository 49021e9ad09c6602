"""Every confirmation the console shows is a sentence (issue 37): a person clicks through the mutating actions of
several pages, and each dialog asks a question, says what will happen in words and names no field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.conf import settings
from django.utils import timezone
from oauth2_provider.models import Application

from apps.agents.models import ApiKey, Connection
from apps.mail.models import Message
from apps.operations.registry import registry
from apps.workspaces.models import Membership
from tests.browser import look
from tests.callers import as_person, call, joined
from tests.conftest import Person, give_mail
from tests.test_console_browser import _sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page

SNAKE = re.compile(r"\b[a-z][a-z0-9]*_[a-z0-9_]+\b")
KEY_PREFIX = re.compile(r"\(prefix oak_[0-9a-f]+\)")


def _fields(op: str) -> set[str]:
    found = registry.get(op)
    assert found is not None
    return set(found.input_model.model_json_schema().get("properties", {}))


def _said(page: Page, op: str, *, fragment: str) -> None:
    """The confirmation dialog is open and says, in words, what `op` will do; then it is confirmed."""
    from playwright.sync_api import expect

    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text(fragment)
    title = page.locator("#confirm-title").inner_text().strip()
    summary = dialog.locator("[data-summary]").inner_text().strip()
    verb = page.locator("#confirm-yes").inner_text().strip()
    text = dialog.inner_text()
    assert title.endswith("?") and title != "Confirm this change", title
    assert summary[:1].isupper() and summary.endswith("."), summary
    assert verb and verb != "Confirm", verb
    assert not SNAKE.search(KEY_PREFIX.sub("", text)), text
    for field in _fields(op):
        assert not ("_" in field and field in text) and not re.search(rf"\b{re.escape(field)}\s*:", text), (field, text)
    assert "\u2014" not in text and "undefined" not in text and "null" not in text, text
    page.click("#confirm-yes")
    expect(dialog).to_be_hidden()


@pytest.mark.slow
def test_each_mutating_action_asks_in_a_sentence(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    me = as_person(alice)
    mail = give_mail(alice, tmp_path, "parcel", n=3)
    give_mail(mallory, tmp_path, "mallory", n=3)
    call(me, "create_api_key", {"name": "ci-bot", "scopes": ["read"]}, confirm=True)
    app = Application.objects.create(
        name="Calendar helper",
        client_type="public",
        authorization_grant_type="authorization-code",
        redirect_uris="http://127.0.0.1:5555/cb",
    )
    Connection.objects.create(
        tenant=alice.tenant,
        user=alice.user,
        application=app,
        client_name="Calendar helper",
        redirect_uri="http://127.0.0.1:5555/cb",
        scopes=["read"],
        activated_at=timezone.now(),
    )
    bob = joined(alice, "bob@example.test")
    policy = {"name": "Accounts team", "allowed_domains": ["example.org"], "recipients_per_hour": 5}
    call(me, "create_send_policy", policy, confirm=True)
    settings.OPERATIONS = {**settings.OPERATIONS, "CONFIRM_FREE_MAX": 2}

    page = browser_page
    _sign_in(page, alice, live_server.url)

    # /keys: revoke the key
    page.goto("/keys")
    page.click("#keys-list button[data-action=revoke]")
    _said(page, "revoke_api_key", fragment="Revoke the API key “ci-bot”")
    expect(page.locator("#keys-list .status-revoked")).to_have_count(1)
    assert ApiKey.objects.for_tenant(alice.tenant).get().revoked_at is not None

    # /connections: revoke the connection
    page.goto("/connections")
    page.click("#connections-list button[data-action=revoke]")
    _said(page, "revoke_connection", fragment="Revoke the connection of “Calendar helper”")
    expect(page.locator("#connections-list button[data-action=revoke]")).to_have_count(0)

    # /members: remove bob
    page.goto("/members")
    page.locator("#members-list tr[data-membership-id]", has_text="bob@example.test").locator(
        "button[data-action=remove]"
    ).click()
    _said(page, "remove_member", fragment="Remove bob@example.test from this tenant.")
    expect(page.locator("#members-list tr[data-membership-id]")).to_have_count(1)
    assert not Membership.objects.for_tenant(alice.tenant).filter(user=bob.user).exists()

    # /policies: delete the send policy
    page.goto("/policies")
    page.click("#policies-list button[data-action=delete]")
    _said(page, "delete_send_policy", fragment="Delete the send policy “Accounts team”.")

    # /exposure: a whole group, in words
    page.goto("/exposure")
    read = page.locator('#exposure-list section[data-group="read"]')
    expect(read).to_contain_text("Read mail")
    expect(read.locator("tr[data-operation=search]")).to_be_hidden()  # the operations are folded away
    look(page, "exposure")
    read.locator("button[data-group-action=off]").click()
    _said(page, "set_operation_exposure", fragment="Stop offering “Read mail” to this tenant's agents")
    expect(read.locator("[data-state]")).to_have_text("Not offered to agents.")

    # /mail: trash three messages (above the threshold set for this test)
    page.goto("/mail")
    page.click("#view-messages")  # conversations are the default: these are three messages
    for message_id in mail.message_ids:
        page.locator(f'li.message[data-message-id="{message_id}"] input.select').check()
    page.click("#bulk button[data-bulk=trash]")
    expect(page.locator("#confirm-dialog")).to_be_visible()
    look(page, "confirm-dialog")
    _said(page, "trash_messages", fragment="Move 3 messages to the Trash.")
    expect(page.locator("#notice")).to_contain_text("trash")
    assert Message.objects.for_tenant(alice.tenant).filter(folder__kind="trash").count() == 3

    # /mailboxes: remove the imported account
    page.goto("/mailboxes")
    row = page.locator(f'#accounts-list tr[data-account-id="{mail.account_id}"]')
    expect(row.locator("[data-count=total]")).to_have_text("3")
    row.locator("button[data-action=remove]").click()
    _said(page, "remove_mailbox", fragment="Remove the mailbox “parcel mail” and the 3 messages Oaken holds for it.")
    expect(page.locator("#accounts-list")).to_contain_text("No mail accounts yet.")

    # another tenant's things were never touched
    assert Message.objects.for_tenant(mallory.tenant).count() == 3
