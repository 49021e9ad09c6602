"""AI labels on /mail, in headless Chromium: a label's description set in the side's "Labels" (the gate's proposal
shown and confirmed: how many messages of the last 30 days it would have labelled), a stopped label saying why, and
an open message saying why its AI label is on it (explain_labels). At 1280 and 375 px, with the accessibility check.
Another tenant's labels and mail never show."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from apps.mail.models import Label, Message
from apps.worker import ailabels
from apps.workspaces.models import Membership
from tests.browser import look
from tests.callers import joined
from tests.conftest import Person
from tests.test_ai_labels import INVOICE, RECEIPT, RECEIPTS, SHIPPING, deliver, describe, make_label, run
from tests.test_console_browser import _sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page


def test_a_description_is_set_and_a_message_says_why_it_is_labelled(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    receipts = make_label(alice, tmp_path)
    travel = make_label(alice, tmp_path, "Travel")
    bob = joined(alice, "bob@example.test")
    describe(bob, travel, "flight, train and hotel bookings")
    Membership.objects.filter(tenant=alice.tenant, user=bob.user).update(workspace_ids=[])
    deliver(alice, tmp_path, RECEIPT, SHIPPING)
    run()  # the travel label stops: bob no longer reaches the mailbox
    make_label(mallory, tmp_path, "Mallory secret label")

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/mail")
    page.click("#ai-labels summary")
    form = page.locator(f'form.label-description[data-label-id="{receipts}"]')
    expect(form.locator(".ai-state")).to_have_text("No description: it labels only what you label by hand.")
    stopped = page.locator(f'form.label-description[data-label-id="{travel}"] .ai-state')
    expect(stopped).to_contain_text(f"Stopped: {ailabels.LOST_WORKSPACE}.")
    expect(page.locator("#label-forms")).not_to_contain_text("Mallory")

    form.locator("textarea").fill(RECEIPTS)
    form.locator("button[type=submit]").click()
    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("it would have labelled 1 message")
    expect(dialog).to_contain_text(RECEIPT[0])
    look(page, "mail-ai-label-proposal")
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_have_text("The description of Receipts was saved.")
    form = page.locator(f'form.label-description[data-label-id="{receipts}"]')
    expect(form.locator(".ai-state")).to_have_text("Labels new mail that matches its description.")
    row = Label.objects.for_tenant(alice.tenant).get(pk=receipts)
    assert (row.description, row.description_by_id) == (RECEIPTS, alice.user.pk)

    # new mail is labelled in the background; the open message says why
    (invoice,) = deliver(alice, tmp_path, INVOICE)
    run()
    thread = Message.objects.for_tenant(alice.tenant).get(pk=invoice).thread_id
    page.goto(f"/mail/t/{thread}")
    article = page.locator(f'article.thread-message[data-message-id="{invoice}"]')
    why = article.locator(".ai-why")
    expect(why).to_be_visible()
    expect(why).to_contain_text("Receipts")
    expect(why).to_contain_text("close to the description")
    page.click("#ai-labels summary")
    look(page, "mail-ai-labels")
    assert "Mallory" not in page.content()
