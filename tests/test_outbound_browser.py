"""/outbound and /policies walked as a person in a real browser (issue 17, items 3, 4 and 8): an assistant asks to
send through the real MCP door (HTTP to the live server, its own API key); the person reads the exact From header,
the recipients, the body and the files (downloaded), approves one and rejects another with a reason the assistant
then reads; the page follows new requests and state changes by itself; the history pages by cursor ("Show older
requests") and filters by state; send policies are created, listed and deleted; refusals are said in plain words;
each page read at 1280 and 375 px with axe-core; the 404 page is the console's, signed in or not. Mallory's tenant
sees none of it."""

from __future__ import annotations

import base64
import json
import urllib.request
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from apps.agents.models import ApiKey
from apps.outbound.models import OutboundRequest, SendPolicy
from tests.browser import look
from tests.callers import as_agent, as_person, call
from tests.conftest import Person
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user, request
from tests.test_console_browser import _sign_in
from tests.test_mcp_door import key_for, rpc

if TYPE_CHECKING:
    from playwright.sync_api import Page

SENDER = ["read", "send", "write"]
PDF = b"%PDF-1.4 the plan, as it is sent\n"
REASON = "Not to Bob: he left the company."


def _mcp(url: str, key: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One tools/call over HTTP to the live server's MCP endpoint, as an assistant makes it."""
    body = json.dumps(rpc("tools/call", {"name": name, "arguments": arguments})).encode()
    sent = urllib.request.Request(  # noqa: S310 (the loopback live server)
        f"{url}/mcp",
        data=body,
        method="POST",
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    with urllib.request.urlopen(sent, timeout=30) as answer:  # noqa: S310
        result: dict[str, Any] = json.loads(answer.read())["result"]
    return result


def _ask_to_send(url: str, key: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """send_email as an assistant does it: shown the proposal, it repeats the call with the confirmation token."""
    first = _mcp(url, key, "send_email", arguments)
    proposal = json.loads(first["content"][0]["text"])["error"]["proposal"]
    made = _mcp(url, key, "send_email", {**arguments, "confirmation_token": proposal["token"]})["structuredContent"]
    assert made["state"] == "awaiting_approval", made
    return made


@pytest.mark.slow
def test_a_person_reviews_approves_and_rejects_an_assistants_mail_in_a_browser(
    browser_page: Page,
    live_server: Any,
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
) -> None:
    from playwright.sync_api import expect

    page = browser_page
    me, bob, carol = (mail_user(imap_server, n) for n in ("alice", "bob", "carol"))
    account = imap_account(alice, imap_server, smtp_server, me, name="Alice Example", sender_name="Alice Example")
    theirs = imap_account(mallory, imap_server, smtp_server, mail_user(imap_server, "mallory"))
    key = key_for(alice, SENDER)
    ApiKey.objects.for_tenant(alice.tenant).update(name="Reporting bot")
    prefix = ApiKey.objects.for_tenant(alice.tenant).get().prefix

    def email(subject: str, to: str = bob, **extra: Any) -> dict[str, Any]:
        return {
            "account_id": str(account.pk),
            "to": [to],
            "subject": subject,
            "body": f"{subject}: the totals are in.\n",
            "idempotency_key": uuid.uuid4().hex,
            **extra,
        }

    # an older history: a dozen requests, half rejected and half cancelled, before the ones read now
    agent = as_agent(alice, scopes=set(SENDER))
    for i in range(12):
        old = request(agent, "send_email", email(f"Old {i:02}"))
        if i % 2:
            call(as_person(alice), "reject_outbound", {"request_id": old["request_id"]})
        else:
            call(agent, "cancel_scheduled_send", {"request_id": old["request_id"], "idempotency_key": f"c{i}"})
    request(
        as_agent(mallory, scopes=set(SENDER)), "send_email", email("Mallory's secret") | {"account_id": str(theirs.pk)}
    )

    plan = {"filename": "plan.pdf", "content_type": "application/pdf", "content_base64": base64.b64encode(PDF).decode()}
    figures = _ask_to_send(live_server.url, key, email("Figures", cc=[carol], attachments=[plan]))
    invite = _ask_to_send(live_server.url, key, email("Invite"))
    _sign_in(page, alice, live_server.url)

    page.goto("/")
    page.click("nav >> text=Outbound")
    page.wait_for_url("**/outbound")
    shown = page.locator(f'#outbound-list article[data-request-id="{figures["request_id"]}"]')
    headers = shown.locator("dl.headers")
    # exactly what is sent: the From header with its display name, every recipient, the subject, the hash
    expect(headers).to_contain_text(f"FromAlice Example <{me}>")
    expect(headers).to_contain_text(f"To{bob}")
    expect(headers).to_contain_text(f"Cc{carol}")
    expect(headers).to_contain_text("SubjectFigures")
    # the content hash is folded into "Technical details" since issue 37 (it was a header row)
    expect(headers).not_to_contain_text("Content hash")
    technical = shown.locator("details.technical")
    technical.locator("summary").click()
    expect(technical).to_contain_text(f"Content hash{figures['content_hash']}")
    expect(shown.locator("pre")).to_have_text("Figures: the totals are in.\n")
    expect(shown.locator(".asked")).to_contain_text(f"the API key Reporting bot ({prefix}_…), for {alice.user.email}")
    expect(shown).to_contain_text(f"plan.pdf (application/pdf, {len(PDF)} bytes)")
    with page.expect_download() as downloading:
        shown.locator("button[data-action=download]").click()
    saved = downloading.value
    assert saved.suggested_filename == "plan.pdf"
    with open(saved.path(), "rb") as file:
        assert file.read() == PDF
    expect(page.locator("main")).not_to_contain_text("Mallory's secret")

    # approving asks once more, naming the From header; cancelled, nothing changes
    shown.locator("button[data-action=approve]").click()
    ask = page.locator("dialog.ask-first")
    expect(ask).to_be_visible()
    expect(ask).to_contain_text(f"From Alice Example <{me}> to {bob}, {carol} (cc)")
    ask.locator("button[value=cancel]").click()
    expect(page.locator("#notice")).to_have_text("Nothing was changed.")
    assert OutboundRequest.objects.for_tenant(alice.tenant).get(pk=figures["request_id"]).state == "awaiting_approval"
    shown.locator("button[data-action=approve]").click()
    page.click("#ask-first-yes")
    expect(page.locator("#notice")).to_contain_text("Approved: it is queued for delivery.")
    expect(shown).to_have_count(0)
    assert OutboundRequest.objects.for_tenant(alice.tenant).get(pk=figures["request_id"]).state == "queued"

    # rejecting asks for an optional reason; one over the bound is refused in plain words, then one is given
    other = page.locator(f'#outbound-list article[data-request-id="{invite["request_id"]}"]')
    other.locator("button[data-action=reject]").click()
    page.fill("#ask-first-text", "x" * 1001)
    page.click("#ask-first-yes")
    expect(page.locator("#notice")).to_have_text("Reason is over the limit: at most 1000 characters.")
    assert OutboundRequest.objects.for_tenant(alice.tenant).get(pk=invite["request_id"]).state == "awaiting_approval"
    other.locator("button[data-action=reject]").click()
    page.fill("#ask-first-text", REASON)
    look(page, "outbound-reject-asks")  # the question itself, read on a desktop and a phone
    page.click("#ask-first-yes")
    expect(page.locator("#notice")).to_contain_text("Rejected: it will not be sent.")
    expect(page.locator("#outbound-list")).to_contain_text("Nothing is waiting for your approval.")
    # the assistant reads the person's reason (fenced as data at the MCP door)
    read = _mcp(live_server.url, key, "get_outbound_request", {"request_id": invite["request_id"]})["structuredContent"]
    assert read["state"] == "rejected" and REASON in read["reject_reason"]

    # live: a new request appears without a reload, and leaves when the assistant cancels it
    late = _ask_to_send(live_server.url, key, email("Late"))
    arrived = page.locator(f'#outbound-list article[data-request-id="{late["request_id"]}"]')
    expect(arrived).to_be_visible(timeout=12_000)
    expect(arrived.locator("dl.headers")).to_contain_text(f"FromAlice Example <{me}>")
    look(page, "outbound")
    _mcp(live_server.url, key, "cancel_scheduled_send", {"request_id": late["request_id"], "idempotency_key": "c1"})
    expect(arrived).to_have_count(0, timeout=12_000)
    history = page.locator("#outbound-history tr[data-request-id]")
    expect(page.locator(f'#outbound-history tr[data-request-id="{late["request_id"]}"]')).to_have_attribute(
        "data-state", "cancelled", timeout=12_000
    )

    # the history: newest first, ten at a time (and the one that came while the page was open, on top), older
    # ones by cursor until there are no more
    expect(history).to_have_count(11)
    expect(history.first).to_contain_text("Late")
    more = page.locator("#history-more")
    more.click()
    expect(history).to_have_count(15)
    expect(more).to_be_hidden()
    expect(history.last).to_contain_text("Old 00")
    assert "Mallory's secret" not in page.content()
    # filtered by state: the rejected ones, the person's reason beside the one that has it
    page.select_option("#history-state", "rejected")
    expect(history).to_have_count(7)
    expect(page.locator(f'#outbound-history tr[data-request-id="{invite["request_id"]}"]')).to_contain_text(
        f"Reason: {REASON}"
    )
    expect(page.locator("#outbound-history")).to_contain_text(f"rejected by {alice.user.email}")
    page.select_option("#history-state", "queued")
    expect(history).to_have_count(1)
    expect(history).to_contain_text("Figures")
    look(page, "outbound-history")
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exclude(subject="Mallory's secret").exists()


@pytest.mark.slow
def test_a_person_keeps_send_policies_and_reads_refusals_in_plain_words(
    browser_page: Page,
    live_server: Any,
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
) -> None:
    from playwright.sync_api import expect

    page = browser_page
    me = mail_user(imap_server, "alice")
    account = imap_account(alice, imap_server, smtp_server, me, name="Alice Example", sender_name="Alice Example")
    _sign_in(page, alice, live_server.url)
    page.goto("/")
    page.click("nav >> text=Send policies")
    page.wait_for_url("**/policies")
    expect(page.locator("#policies-list")).to_contain_text("No send policy yet")
    look(page, "policies-empty")

    # refusals beside their fields, in words: never a field's path, never the validator's pattern
    page.click("#create-policy button[type=submit]")
    expect(page.locator('[data-error-for="name"]')).to_have_text("Name cannot be empty.")
    page.fill("#policy-name", "Accounts team")
    page.click("#create-policy button[type=submit]")
    expect(page.locator('[data-error-for="allowed_addresses"]')).to_have_text(
        "Allowed addresses: name allowed addresses or domains."
    )
    page.fill("#policy-domains", "example.com, not a domain!")
    page.click("#create-policy button[type=submit]")
    problem = page.locator('[data-error-for="allowed_domains"]')
    expect(problem).to_have_text("Allowed domains does not have the expected form.")
    page.fill("#policy-rate", "0")
    page.fill("#policy-domains", "example.com")
    page.click("#create-policy button[type=submit]")
    expect(page.locator('[data-error-for="recipients_per_hour"]')).to_have_text(
        "Most recipients an hour must be at least 1."
    )
    for leaked in ("allowed_domains", "recipients_per_hour", "pattern", "^@?", "a-z0-9"):
        expect(page.locator("main")).not_to_contain_text(leaked)
        expect(page.locator("#notice")).not_to_contain_text(leaked)
    look(page, "policies-refused")
    assert not SendPolicy.objects.for_tenant(alice.tenant).exists()

    # created (the operation asks first), listed, deleted (asked again)
    page.fill("#policy-rate", "30")
    page.fill("#policy-addresses", "boss@example.org\nteam@example.org")
    page.select_option("#policy-account", str(account.pk))
    page.click("#create-policy button[type=submit]")
    expect(page.locator("#confirm-dialog")).to_contain_text("Create the send policy")  # in words since issue 37
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_have_text("The send policy Accounts team is created.")
    listed = page.locator("#policies-list tr[data-policy-id]")
    expect(listed).to_have_count(1)
    expect(listed).to_contain_text("Alice Example")
    expect(listed).to_contain_text("boss@example.org, team@example.org")
    expect(listed).to_contain_text("example.com")
    expect(listed).to_contain_text("30")
    policy = SendPolicy.objects.for_tenant(alice.tenant).get()
    assert (policy.allowed_domains, policy.recipients_per_hour, policy.account_id) == (["example.com"], 30, account.pk)
    assert not SendPolicy.objects.for_tenant(mallory.tenant).exists()
    look(page, "policies")
    listed.locator("button[data-action=delete]").click()
    page.click("#confirm-yes")
    expect(page.locator("#policies-list")).to_contain_text("No send policy yet")
    assert not SendPolicy.objects.for_tenant(alice.tenant).exists()

    # an address that leads nowhere: the console's own page, signed in and signed out, never Django's
    response = page.goto("/no-such-page")
    assert response is not None and response.status == 404
    expect(page.locator("main h1")).to_have_text("There is nothing here")
    page.context.clear_cookies()
    response = page.goto("/outbound/no-such-thing")
    assert response is not None and response.status == 404
    expect(page.locator("main h1")).to_have_text("There is nothing here")
    expect(page.locator("header .brand")).to_have_text("Oaken")
    expect(page.locator("nav.console-nav")).to_have_count(0)
    look(page, "not-found-signed-out")
