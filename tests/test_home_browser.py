"""Home in headless Chromium (issue 17, item 7): a new tenant sees the three steps to start and a client
configuration naming this server's /mcp that copies; a busy one sees the request waiting for approval, the
mailbox failing to sync and what its assistants did last, in words and without mail. Another tenant's never
show."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.test import Client

from apps.mail.models import AccountKind, MailAccount
from apps.outbound.models import OutboundRequest
from tests.browser import look
from tests.callers import call
from tests.conftest import Person, give_mail
from tests.test_audit_ops import _key
from tests.test_console_browser import _sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page


def _waiting_request(p: Person, account_id: str, key_id: str, subject: str) -> OutboundRequest:
    return OutboundRequest.objects.create(
        tenant=p.tenant,
        account_id=account_id,
        state="awaiting_approval",
        sender=p.user.email,
        to=["bob@example.test", "carol@example.test"],
        subject=subject,
        message_id=f"{uuid.uuid4().hex}@example.test",
        content_hash="0" * 64,
        recipient_count=2,
        requested_by=p.user,
        principal="agent",
        door="mcp",
        credential_id=key_id,
        credential_kind="apikey",
        caller_key="-",
        idempotency_key=f"home-{uuid.uuid4().hex}",
    )


def _failing_account(p: Person, name: str) -> MailAccount:
    return MailAccount.objects.create(
        tenant=p.tenant,
        workspace=p.workspace,
        name=name,
        kind=AccountKind.IMAP,
        email_address=f"{name.lower()}@example.test",
        sync_failures=3,
        sync_error="login_failed",
    )


def _busy(p: Person, tmp_path: Path, tag: str) -> dict[str, Any]:
    mail = give_mail(p, tmp_path, tag)
    key, agent = _key(p, f"{tag} script")
    for message_id in mail.message_ids:
        call(agent, "get_message", {"message_id": message_id})
    call(agent, "list_accounts", {})
    call(agent, "search", {"query": "note", "account_id": mail.account_id})
    request = _waiting_request(p, mail.account_id, str(key.pk), f"{tag} quarterly plan")
    failing = _failing_account(p, f"{tag.title()}Work")
    return {"mail": mail, "key": key, "request": request, "failing": failing}


@pytest.mark.slow
def test_a_new_tenant_sees_the_three_steps_and_copies_the_client_configuration(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    _busy(mallory, tmp_path, "mallory")  # none of it may show to alice
    page = browser_page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    _sign_in(page, alice, live_server.url)
    page.goto("/")
    expect(page.locator("main[data-ready]")).to_have_count(1)
    start = page.locator("#start")
    expect(start).to_be_visible()
    expect(start.locator("ol.steps > li")).to_have_count(3)
    assert [s.get_attribute("data-done") for s in start.locator("li[data-step]").all()[:2]] == ["false", "false"]
    expect(start.locator('[data-step="mail"] a[href="/mailboxes"]')).to_have_count(1)
    expect(start.locator('[data-step="mail"] a[href="/import"]')).to_have_count(1)
    expect(start.locator('[data-step="agent"] a[href="/keys"]')).to_have_count(1)
    expected = {"mcpServers": {"oaken": {"url": f"{live_server.url}/mcp"}}}
    assert json.loads(page.locator("#client-config").inner_text()) == expected
    expect(page.locator("#mcp-url")).to_have_text(f"{live_server.url}/mcp")
    page.click("#copy-config")
    expect(page.locator("#copy-config-result")).to_have_text("Copied.")
    assert json.loads(page.evaluate("navigator.clipboard.readText()")) == expected
    expect(page.locator("#waiting")).to_contain_text("No e-mail is waiting for your approval.")
    # a new tenant has no mailbox: it is not told that "every connected mailbox syncs" (issue 37)
    expect(page.locator("#failing")).to_contain_text("No mailbox connected yet.")
    expect(page.locator("#activity")).to_contain_text("No assistant has done anything here yet.")
    text = page.locator("main").inner_text()
    assert "mallory" not in text.lower()
    look(page, "home-new")

    # with mail in and a key made, the first two steps say so; the steps stay until both are done
    give_mail(alice, tmp_path, "alice")
    page.reload()
    expect(page.locator("main[data-ready]")).to_have_count(1)
    expect(start.locator('[data-step="mail"]')).to_have_attribute("data-done", "true")
    expect(start.locator('[data-step="agent"]')).to_have_attribute("data-done", "false")
    _key(alice, "laptop")
    page.reload()
    expect(page.locator("main[data-ready]")).to_have_count(1)
    expect(start).to_be_hidden()


@pytest.mark.slow
def test_home_says_what_needs_the_person_now(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    ours = _busy(alice, tmp_path, "alice")
    _busy(mallory, tmp_path, "mallory")
    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/")
    expect(page.locator("main[data-ready]")).to_have_count(1)
    expect(page.locator("#start")).to_be_hidden()  # mail and a key: no steps to take

    waiting = page.locator("#waiting li[data-request]")
    expect(waiting).to_have_count(1)
    expect(waiting).to_contain_text("alice quarterly plan")
    expect(waiting).to_contain_text("The API key alice script")
    expect(waiting).to_contain_text("2 recipients")
    link = waiting.locator("a")
    assert link.get_attribute("href") == f"/outbound?request={ours['request'].pk}"

    failing = page.locator("#failing li[data-account]")
    expect(failing).to_have_count(1)
    expect(failing).to_contain_text("AliceWork (alicework@example.test)")
    expect(failing).to_contain_text("the mail server refused the login")
    expect(failing).to_contain_text("last synced never")

    activity = page.locator("#activity li[data-event]")
    expect(activity).to_have_count(5)  # the last five of the agent's six calls
    words = activity.all_inner_texts()
    assert all(":" in line and len(line.split(": ", 1)[1]) > 5 for line in words), words
    assert any("alice script" in line for line in words), words
    everything = page.locator("main").inner_text()
    for subject in ours["mail"].subjects:
        assert subject not in everything  # the log's words hold no mail
    assert "body" not in everything
    assert "mallory" not in everything.lower()
    look(page, "home-busy")

    # the last event shown is the newest: the search, then the list, then the reads
    assert "search" in words[0].lower(), words

    # the Mailboxes page says the same failure in the same words (list_accounts' sync_problem), not its code
    page.goto("/mailboxes")
    problem = page.locator(f'tr[data-account-id="{ours["failing"].pk}"] [data-sync-error="login_failed"]')
    expect(problem).to_have_text("the mail server refused the login: enter the password again")
    assert "login_failed" not in page.locator("main").inner_text()
    assert "mallory" not in page.locator("main").inner_text().lower()


def test_the_client_configuration_names_the_public_url_when_it_is_set(
    alice: Person, mallory: Person, settings: Any
) -> None:
    settings.PUBLIC_URL = "https://mail.example.test"
    client = Client()
    client.force_login(alice.user)
    page = client.get("/").content.decode()
    assert "https://mail.example.test/mcp" in page
    assert "&quot;mcpServers&quot;" in page and "Mallory" not in page
