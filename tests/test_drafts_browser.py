"""The Drafts list and Send later on /mail in headless Chromium, walked as a person: a draft deleted from the list
only after the page asks (cancelling keeps it; one deleted elsewhere meanwhile is said in words), and a draft
scheduled for later through schedule_draft (an empty or past time refused in plain words, nothing requested;
a future one confirmed, shown as scheduled, held as one approved request at that time). Another tenant's drafts
and requests are never shown and never change."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from apps.outbound.models import Draft, OutboundRequest
from tests.browser import look
from tests.callers import as_person, call
from tests.conftest import Person
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user
from tests.test_console_browser import _sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page


def _draft(p: Person, account_id: str, subject: str, to: str) -> str:
    made = call(as_person(p), "create_draft", {"account_id": account_id, "to": [to], "subject": subject, "body": "Hi."})
    return str(made["id"])


@pytest.mark.slow
def test_a_draft_is_deleted_from_the_list_only_once_the_person_says_so(
    browser_page: Page,
    live_server: Any,
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
) -> None:
    from playwright.sync_api import expect

    account = imap_account(alice, imap_server, smtp_server, mail_user(imap_server, "alice"), name="Work")
    theirs = imap_account(mallory, imap_server, smtp_server, mail_user(imap_server, "mallory"), name="Hers")
    boat = _draft(alice, str(account.pk), "Boat tickets", "bob@example.test")
    lunch = _draft(alice, str(account.pk), "Lunch plan", "carol@example.test")
    hers = _draft(mallory, str(theirs.pk), "Mallory secret draft", "eve@example.test")

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/mail")
    page.click("#drafts-open")
    rows = page.locator("#drafts-list li.draft")
    expect(rows).to_have_count(2)
    look(page, "mail-drafts-list")
    boat_row = page.locator(f'#drafts-list li.draft[data-draft-id="{boat}"]')
    delete = boat_row.locator("button.delete-draft")
    expect(delete).to_have_accessible_name("Delete the draft “Boat tickets” to bob@example.test")

    # asked first, saying which draft; Cancel keeps it
    delete.click()
    ask = page.locator("dialog.ask-first")
    expect(ask).to_be_visible()
    expect(ask).to_contain_text("“Boat tickets” to bob@example.test")
    look(page, "mail-drafts-delete-ask")
    ask.locator("button[value=cancel]").click()
    expect(page.locator("#notice")).to_have_text("Nothing was changed.")
    expect(rows).to_have_count(2)
    assert Draft.objects.for_tenant(alice.tenant).count() == 2

    # confirmed: that draft goes (delete_draft), the other stays, the list says so at once
    delete.click()
    page.click("#ask-first-yes")
    expect(page.locator("#notice")).to_have_text("The draft was deleted.")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-draft-id", lunch)
    assert [str(d.pk) for d in Draft.objects.for_tenant(alice.tenant)] == [lunch]

    # deleted elsewhere while the list was open: the refusal in words, and the list as it now is
    Draft.objects.for_tenant(alice.tenant).filter(pk=lunch).delete()
    rows.first.locator("button.delete-draft").click()
    page.click("#ask-first-yes")
    expect(page.locator("#notice")).to_have_text(
        "Draft was not found: it may have been removed, or it is not yours to see."
    )
    expect(page.locator("#drafts-list")).to_have_text("No drafts.")

    # mallory's draft: never shown, still there as it was
    assert "Mallory secret draft" not in page.content() and hers not in page.content()
    (kept,) = Draft.objects.for_tenant(mallory.tenant)
    assert str(kept.pk) == hers and kept.subject == "Mallory secret draft"


@pytest.mark.slow
def test_send_later_schedules_the_draft_and_refuses_a_missing_or_past_time_in_words(
    browser_page: Page,
    live_server: Any,
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
) -> None:
    from playwright.sync_api import expect

    imap_account(alice, imap_server, smtp_server, mail_user(imap_server, "alice"), name="Work")
    theirs = imap_account(mallory, imap_server, smtp_server, mail_user(imap_server, "mallory"), name="Hers")
    _draft(mallory, str(theirs.pk), "Mallory secret draft", "eve@example.test")

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/mail")
    page.click("#compose-new")
    page.fill("#compose-to", "bob@example.test")
    page.fill("#compose-subject", "Monday reminder")
    page.fill("#compose-body", "The boat leaves at nine.")
    expect(page.locator("#compose-state")).to_contain_text("Draft saved at")
    look(page, "mail-compose-send-later")

    # no time chosen: said before anything is asked
    page.click("#compose-schedule")
    expect(page.locator("#notice")).to_have_text("Choose the date and time to send it at first.")
    expect(page.locator("#compose-send-at")).to_be_focused()

    # a time already past: the gate's proposal is never reached, the refusal is in words naming the time
    page.fill("#compose-send-at", "2020-01-06T09:00")
    page.click("#compose-schedule")
    expect(page.locator("#notice")).to_have_text("The time to send it must be in the future.")
    expect(page.locator("#confirm-dialog")).to_be_hidden()
    assert "send_at" not in page.locator("#notice").inner_text()
    assert not OutboundRequest.objects.for_tenant(alice.tenant).exists()

    # two days ahead at 09:30 in the browser's own time: the proposal confirmed, the scheduled state shown
    day = (datetime.now() + timedelta(days=2)).date().isoformat()
    page.fill("#compose-send-at", f"{day}T09:30")
    expected = datetime.fromisoformat(page.evaluate(f"new Date('{day}T09:30').toISOString()").replace("Z", "+00:00"))
    page.click("#compose-schedule")
    expect(page.locator("#confirm-dialog")).to_be_visible()
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_contain_text("Scheduled: it will be sent on ")
    expect(page.locator("#notice")).to_contain_text("Until then it waits on the Outbound page")
    expect(page.locator("#composer")).to_be_hidden()
    (scheduled,) = OutboundRequest.objects.for_tenant(alice.tenant)
    assert scheduled.state == "approved" and scheduled.send_at == expected
    assert scheduled.subject == "Monday reminder"
    assert not Draft.objects.for_tenant(alice.tenant).exists()  # the request holds its own copy
    look(page, "mail-scheduled")

    # mallory: nothing of hers shown, nothing requested, her draft kept
    assert "Mallory secret draft" not in page.content()
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()
    assert Draft.objects.for_tenant(mallory.tenant).count() == 1
