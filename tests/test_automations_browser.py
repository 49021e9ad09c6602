"""/automations and Unsubscribe on a message (issue 40 item 6), in headless Chromium, walked as a person: an
automatic reply set through the form and the gate's proposal, then on; an assistant's (asked through the gate as an
agent) opened from its approval link /automations?automation=<id>, approved exactly as shown and on, replacing hers;
what it did; cancelled; an assistant's unsubscribe request listed with a link to /outbound. On a message, Unsubscribe
asks the operation, whose proposal says which kind the list offers, and a plain link is shown as text, never made
clickable. At 1280 and 375 px, with the accessibility check. Mallory's automatic reply never shows."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from django.utils import timezone

from apps.mail.models import Message
from apps.outbound.models import Automation, AutoReplyDecision, OutboundRequest
from tests.browser import look
from tests.callers import as_agent, as_person, call
from tests.conftest import Person
from tests.outbound_accounts import request
from tests.test_console_browser import _sign_in
from tests.test_unsubscribe import _mailbox, list_mail, stored

if TYPE_CHECKING:
    from playwright.sync_api import Page

SENDER = {"read", "write", "send"}
SECRET = "Mallory is away on a secret trip"


@pytest.mark.slow
def test_automatic_replies_are_set_approved_explained_and_cancelled(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person
) -> None:
    from playwright.sync_api import expect

    mine = str(_mailbox(alice, "alice@example.test").pk)
    theirs = str(_mailbox(mallory, "mallory@example.test").pk)
    call(as_person(mallory), "set_auto_reply", {"account_id": theirs, "text": SECRET}, confirm=True)

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/automations")
    expect(page.locator('a[href="/automations"][aria-current="page"]')).to_have_text("Automations")
    expect(page.locator("#automations-list")).to_contain_text("No automatic reply yet.")
    expect(page.locator("#auto-reply-account option")).to_have_count(1)

    # a person's: through the form and the gate's proposal, then on
    page.fill("#auto-reply-subject", "Away this week")
    page.fill("#auto-reply-text", "I am away until Monday.\n<b>not bold</b>")
    page.check('input[name="audience"][value="known"]')
    page.fill("#auto-reply-days", "3")
    ends = (timezone.localtime() + timedelta(days=5)).strftime("%Y-%m-%dT%H:%M")
    page.fill("#auto-reply-ends", ends)
    page.click("#auto-reply-save")
    dialog = page.locator("#confirm-dialog")
    expect(dialog.locator("#confirm-title")).to_have_text("Turn on this automatic reply?")
    expect(dialog.locator("[data-summary]")).to_contain_text("people it has written to")
    look(page, "automations-confirm")
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_contain_text("is on")
    first = page.locator("article.automation").first
    expect(first.locator("dd").first).to_have_text("On")
    expect(first).to_contain_text("Away this week")
    expect(first).to_contain_text("Only people the mailbox has written to")
    expect(first).to_contain_text("once per sender in 3 days")
    expect(first.locator("pre.message-text")).to_have_text("I am away until Monday.\n<b>not bold</b>")  # text, not HTML
    own = Automation.objects.for_tenant(alice.tenant).get()
    assert (own.state, own.audience, own.once_per_days, own.ends_at is not None) == ("active", "known", 3, True)

    # an assistant's: it waits; its approval link picks it out; approved exactly as shown, it replaces hers
    agent = as_agent(alice, scopes=SENDER)
    asked = request(agent, "set_auto_reply", {"account_id": mine, "subject": "Out", "text": "Out of office.\n"})
    assert asked["state"] == "awaiting_approval"
    assert asked["approval_url"].endswith(f"/automations?automation={asked['automation_id']}")
    AutoReplyDecision.objects.create(
        tenant=alice.tenant,
        automation_id=own.pk,
        message_key=uuid.uuid4(),
        sender="news@list.example.org",
        outcome="mailing_list",
    )
    page.goto(f"/automations?automation={asked['automation_id']}")
    named = page.locator(f'article[data-automation-id="{asked["automation_id"]}"]')
    expect(named).to_have_attribute("aria-current", "true")
    expect(named).to_be_focused()
    expect(named).to_contain_text("Waiting for your approval")
    expect(page.locator("#automation-named")).to_contain_text("approve or reject it")
    look(page, "automations-approval")
    named.locator('button[data-action="approve"]').click()
    expect(page.locator("#ask-first-title")).to_have_text("Turn on this automatic reply?")
    page.click("#ask-first-yes")
    expect(page.locator("#notice")).to_have_text("Approved: the automatic reply is on.")
    expect(named.locator("dd").first).to_have_text("On")
    expect(named).to_contain_text("alice@example.test")  # approved by
    earlier = page.locator(f'article[data-automation-id="{own.pk}"]')
    expect(earlier.locator("dd").first).to_have_text("Cancelled")

    # what the earlier one did, and why
    earlier.locator('button[data-action="history"]').click()
    history = page.locator("#automation-history")
    expect(history).to_contain_text("news@list.example.org")
    expect(history).to_contain_text("not answered: a mailing list")

    # cancelled: it sends nothing more
    named.locator('button[data-action="cancel"]').click()
    page.click("#ask-first-yes")
    expect(page.locator("#notice")).to_have_text("Cancelled: it sends nothing more.")
    expect(named.locator("dd").first).to_have_text("Cancelled")
    assert Automation.objects.for_tenant(alice.tenant).get(pk=asked["automation_id"]).state == "cancelled"

    # an assistant's unsubscribe request is listed, with its state and a link to /outbound
    message = stored(alice, Automation.objects.for_tenant(alice.tenant).get(pk=own.pk).account,
                     list_mail("", one_click=False, mailto="mailto:leave@list.example.org"))  # fmt: skip
    unsubscribing = request(agent, "unsubscribe", {"message_id": message, "idempotency_key": "u-1"})
    page.goto("/automations")
    listed = page.locator(f'#unsubscribe-list li[data-request-id="{unsubscribing["request_id"]}"]')
    expect(listed).to_contain_text("Unsubscribe by e-mail to leave@list.example.org")
    expect(listed).to_contain_text("waiting for approval")
    expect(listed.locator("a")).to_have_attribute("href", f"/outbound?request={unsubscribing['request_id']}")
    # forwarding through its form: confirmed, saying where to and how much of the last 30 days it would have sent
    page.fill("#forward-to", "keeper@example.org")
    page.click("#forward-save")
    expect(dialog.locator("#confirm-title")).to_have_text("Forward this mailbox's mail?")
    expect(dialog).to_contain_text("keeper@example.org")
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_contain_text("is forwarded to keeper@example.org")
    forwarding = page.locator("article.automation", has_text="Forwarding of")
    expect(forwarding.locator("dd").first).to_have_text("On")
    expect(forwarding).to_contain_text("keeper@example.org")
    look(page, "automations")

    content = page.content()
    assert SECRET not in content and "mallory" not in content.lower()
    assert Automation.objects.for_tenant(mallory.tenant).get().state == "active"
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


@pytest.mark.slow
def test_unsubscribe_on_a_message_says_which_kind_and_never_makes_a_link_clickable(
    browser_page: Page, live_server: Any, alice: Person
) -> None:
    from playwright.sync_api import expect

    account = _mailbox(alice, "alice@example.test")
    link = "https://list.example.org/leave?token=abc"
    message = stored(alice, account, list_mail(link))  # unsigned: no one-click, only the sender's link
    thread = Message.objects.for_tenant(alice.tenant).get(pk=message).thread_id

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto(f"/mail/t/{thread}")
    article = page.locator(f'article.thread-message[data-message-id="{message}"]')
    article.locator("button.unsubscribe").click()
    dialog = page.locator("#confirm-dialog")
    expect(dialog.locator("#confirm-title")).to_have_text("Show the list's unsubscribe link?")
    expect(dialog.locator("[data-summary]")).to_contain_text("Nothing is sent or opened")
    page.click("#confirm-yes")
    answer = article.locator(".unsubscribe-answer")
    expect(answer.locator(".unsubscribe-kind")).to_have_text("A link you must open yourself")
    expect(answer.locator("code.sender-link")).to_have_text(link)
    expect(answer).to_contain_text("sender's own")
    assert page.locator('a[href*="list.example.org"]').count() == 0  # never clickable
    look(page, "mail-unsubscribe-link")
    assert not OutboundRequest.objects.for_tenant(alice.tenant).exists()


@pytest.mark.slow
def test_a_forwarding_rule_is_built_confirmed_and_an_assistants_is_approved_on_automations(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person
) -> None:
    """A forwarding rule built on /rules (a label condition, a forward action): the proposal names the destination,
    and once confirmed it forwards as approved. An assistant's forwarding rule (asked as an agent with send) waits:
    /rules says so and links to /automations, which shows the rule's terms in words and approves them exactly."""
    from playwright.sync_api import expect

    mine = str(_mailbox(alice, "alice@example.test").pk)
    theirs = str(_mailbox(mallory, "mallory@example.test").pk)
    call(as_person(mallory), "create_label", {"account_id": theirs, "name": "Mallory's secret label"})
    label = call(as_person(alice), "create_label", {"account_id": mine, "name": "Receipts"})["label"]["id"]

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/rules")
    page.fill("#rule-name", "Receipts to the keeper")
    page.locator("#rule-scope").select_option(f"account:{mine}")
    condition = page.locator(".rule-condition").first
    condition.locator("select[data-kind]").select_option("label")
    expect(condition.locator('[data-key="label_id"] option')).to_have_count(1)  # hers alone
    condition.locator('[data-key="label_id"]').select_option(label)
    action = page.locator(".rule-action").first
    action.locator("select[data-kind]").select_option("forward")
    action.locator('[data-key="to"]').fill("keeper@example.org")
    page.click("#rule-save")
    dialog = page.locator("#confirm-dialog")
    expect(dialog.locator("[data-summary]")).to_contain_text("forwards each message it matches to keeper@example.org")
    look(page, "rules-forward-confirm")
    page.click("#confirm-yes")
    listed = page.locator("#rules-list tbody tr")
    expect(listed.first).to_contain_text("it carries the label “Receipts”")
    expect(listed.first).to_contain_text("forward it to “keeper@example.org”")
    expect(listed.first).to_contain_text("Forwards as you approved it.")

    # an assistant's: it waits, and /automations shows exactly what it would forward
    agent = as_agent(alice, scopes=SENDER)
    asked = request(
        agent,
        "create_rule",
        {
            "account_id": mine,
            "name": "Partners",
            "conditions": [{"field": "from", "op": "domain", "value": "partner.example"}],
            "actions": [{"action": "forward", "to": "assistant@example.org"}],
        },
    )
    assert asked["forward_state"] == "awaiting_approval"
    page.goto("/rules")
    waiting = page.locator("#rules-list tbody tr", has_text="Partners")
    expect(waiting).to_contain_text("Forwards nothing until a person approves the forward")
    waiting.get_by_role("link", name="approves the forward").click()
    named = page.locator(f'article[data-automation-id="{asked["forward_automation_id"]}"]')
    expect(named).to_contain_text("Waiting for your approval")
    expect(named).to_contain_text("assistant@example.org")
    expect(named).to_contain_text("the sender is in the domain “partner.example”")
    look(page, "automations-forwarding-rule")
    named.locator('button[data-action="approve"]').click()
    page.click("#ask-first-yes")
    expect(named.locator("dd").first).to_have_text("On")
    page.goto("/rules")
    expect(page.locator("#rules-list tbody tr", has_text="Partners")).to_contain_text("Forwards as you approved it.")
    assert "secret label" not in page.content()
    assert not Automation.objects.for_tenant(mallory.tenant).exists()
