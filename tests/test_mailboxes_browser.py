"""/mailboxes in a browser (issue 37): counts per mailbox, and the list follows a sync by itself."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.utils import timezone

from apps.mail.models import STANDARD_FOLDERS, AccountKind, Folder, MailAccount, Message
from tests.browser import look
from tests.conftest import Person, give_mail
from tests.test_console_browser import _sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page


@pytest.mark.slow
def test_the_list_shows_counts_and_follows_a_sync_without_a_reload(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page = browser_page
    _sign_in(page, alice, live_server.url)
    # none connected yet: the home page does not say that every connected mailbox syncs
    page.goto("/")
    expect(page.locator("#failing")).to_have_text("No mailbox connected yet.")

    imported = give_mail(alice, tmp_path, "parcel", n=3)
    give_mail(mallory, tmp_path, "mallory", n=5)
    first = Message.objects.for_tenant(alice.tenant).get(pk=imported.message_ids[0])
    first.read = True
    first.save(update_fields=["read"])
    # a mailbox just connected, its first sync on its way (the worker is not running in this test)
    account = MailAccount.objects.create(
        tenant=alice.tenant,
        workspace=alice.workspace,
        name="Work mail",
        kind=AccountKind.IMAP,
        email_address="alice@work.example.org",
        credentials={},
    )
    Folder.objects.bulk_create(
        Folder(tenant=alice.tenant, account=account, kind=kind, name=kind.label) for kind in STANDARD_FOLDERS
    )

    page.goto("/mailboxes")
    parcel = page.locator(f'#accounts-list tr[data-account-id="{imported.account_id}"]')
    expect(parcel.locator("[data-count=total]")).to_have_text("3")
    expect(parcel.locator("[data-count=unread]")).to_have_text("2")
    work = page.locator(f'#accounts-list tr[data-account-id="{account.pk}"]')
    expect(work.locator("[data-syncing]")).to_have_text("syncing…")
    look(page, "mailboxes")

    # the sync finishes while the page is open: the list shows it within a few seconds, without a reload
    MailAccount.objects.for_tenant(alice.tenant).filter(pk=account.pk).update(synced_at=timezone.now())
    expect(work.locator("[data-syncing]")).to_have_count(0, timeout=15_000)
    expect(work).not_to_contain_text("not yet")
    # then it stops asking: no more list_accounts calls once nothing is syncing
    calls: list[str] = []
    page.on("request", lambda r: calls.append(r.url) if r.url.endswith("/list_accounts") else None)
    page.wait_for_timeout(7_000)
    assert calls == []
    assert "mallory" not in page.locator("main").inner_text().lower()
