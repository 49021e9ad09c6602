"""Connecting a mailbox by OAuth in headless Chromium, as a person: "Connect with <provider>" on the Mailboxes page,
the loopback provider consents, the callback connects and syncs it, the account is listed; a refusal at the provider
comes back as a message on the page; a grant withdrawn at the provider shows "Reconnect", which keeps the account
and its mail; removing the mailbox revokes its token at the provider. Another tenant sees none of it."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from django.utils import timezone

from apps.mail.models import MailAccount, Message
from apps.mail.sync import run_sync
from tests.browser import look
from tests.conftest import Person
from tests.imapbox import eager  # noqa: F401 (a fixture)
from tests.mail_oauth import OAuthWorld
from tests.mailfactory import raw_message
from tests.test_console_browser import _sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page


@pytest.mark.slow
@pytest.mark.usefixtures("eager")
def test_a_person_connects_a_mailbox_with_a_provider(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, oauth: OAuthWorld
) -> None:
    from playwright.sync_api import expect

    page = browser_page
    me = oauth.imap.add_user(f"alice.{uuid.uuid4().hex[:8]}@example.test")
    oauth.imap.append(me, "INBOX", raw_message(subject="Hello from the provider", to=me))
    _sign_in(page, alice, live_server.url)

    # the person says no at the provider: the page says so, nothing is connected
    oauth.provider.refuse_with = "access_denied"
    try:
        page.goto(f"{live_server.url}/mailboxes")
        page.get_by_role("button", name="Connect with Loopback Mail").click()
        expect(page.locator("[data-oauth-notice=error]")).to_have_text(
            "Loopback Mail: you did not allow Oaken to use this mailbox at the provider"
        )
    finally:
        oauth.provider.refuse_with = ""
    assert not MailAccount.objects.for_tenant(alice.tenant).exists()

    oauth.provider.next_address = me
    page.get_by_role("button", name="Connect with Loopback Mail").click()
    expect(page.locator("[data-oauth-notice=success]")).to_have_text(
        f"Connected {me} with Loopback Mail; its mail is syncing."
    )
    assert "code=" not in page.url and "state=" not in page.url
    account = MailAccount.objects.for_tenant(alice.tenant).get()
    row = page.locator(f"[data-account-id='{account.pk}']")
    expect(row).to_contain_text(me)
    account.refresh_from_db()
    assert account.synced_at is not None  # synced when the connection committed
    look(page, "mailboxes-oauth")

    page.goto(f"{live_server.url}/mail")
    expect(page.get_by_text("Hello from the provider").first).to_be_visible()
    held = Message.objects.for_tenant(alice.tenant).count()

    # the person withdraws consent at the provider; once the access token runs out, the next sync finds out
    oauth.provider.revoke_grants(me)
    oauth.provider.expire_access(me)
    MailAccount.objects.for_tenant(alice.tenant).update(oauth_expires_at=timezone.now() - timedelta(seconds=1))
    assert run_sync(account.pk, force=True).reason == "needs_reconnect"
    page.goto(f"{live_server.url}/mailboxes")
    waiting = page.locator(f"[data-reconnect='{account.pk}']")
    expect(waiting).to_contain_text("the provider withdrew Oaken's access")
    expect(row.locator("[data-sync-error=needs_reconnect]")).to_be_visible()
    look(page, "mailboxes-oauth-reconnect")
    waiting.get_by_role("button", name="Reconnect").click()
    expect(page.locator("[data-oauth-notice=success]")).to_have_text(
        f"Connected {me} with Loopback Mail; its mail is syncing."
    )
    expect(page.locator("[data-reconnect]")).to_have_count(0)
    account.refresh_from_db()
    assert (account.oauth_state, MailAccount.objects.for_tenant(alice.tenant).count()) == ("ok", 1)
    assert Message.objects.for_tenant(alice.tenant).count() == held  # the account and its mail stayed

    # removing it revokes the token at the provider
    row.locator("button[data-action=remove]").click()
    page.click("#confirm-yes")
    expect(page.locator("#accounts-list tr[data-account-id]")).to_have_count(0)
    assert oauth.provider.revocations.count(me) == 1

    # mallory, in her own tenant, sees no account and no mail of alice's
    page.context.clear_cookies()
    _sign_in(page, mallory, live_server.url)
    page.goto(f"{live_server.url}/mailboxes")
    expect(page.locator("#accounts-list")).to_contain_text("No mail accounts yet.")
    assert not MailAccount.objects.for_tenant(mallory.tenant).exists()
