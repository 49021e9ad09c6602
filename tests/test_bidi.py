"""Bidirectional-text spoofing (issue 35, item 7): right-to-left overrides, embeddings and isolates in a sender's
name, a subject and a file name never reach a person raw (/mail and the approval page in Chromium) and reach an
agent marked ("[U+202E]") through the MCP and REST doors. Another tenant's mail never shows."""

from __future__ import annotations

import base64
import json
import re
import uuid
from email.message import EmailMessage
from email.utils import format_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.test import Client

from apps.core.bidi import mark_bidi_controls
from apps.mail.importing import import_mail
from apps.mail.models import Message
from tests.browser import look
from tests.callers import as_agent
from tests.conftest import Person
from tests.mailfactory import BASE_DATE, raw_message, write_mbox
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user, request
from tests.test_console_browser import _sign_in
from tests.test_mcp_door import key_for, post, rpc
from tests.test_rest_door import api_client, error_of
from tests.test_rest_door import post as rest_post

if TYPE_CHECKING:
    from playwright.sync_api import Page

RLO, LRE, RLI, PDI = "\u202e", "\u202a", "\u2067", "\u2069"
# what a person would read if the controls worked: "PAYMENT from Bank", "Invoice paid", "invoiceexe.jpg"
SENDER_NAME = f"Your {RLO}knaB{PDI} Team"
SUBJECT = f"Invoice {RLI}diap{PDI} {LRE}now"
FILENAME = f"invoice{RLO}gpj.exe"
RAW_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")


def _spoofing_message() -> bytes:
    message = EmailMessage()
    message["From"] = f'"{SENDER_NAME}" <billing@bank.example>'
    message["To"] = "alice@example.test"
    message["Subject"] = SUBJECT
    message["Message-ID"] = "<spoof@bank.example>"
    message["Date"] = format_datetime(BASE_DATE)
    message.set_content("Please open the attached invoice.\n")
    message.add_attachment(
        b"MZ not really a picture", maintype="application", subtype="octet-stream", filename=FILENAME
    )
    return message.as_bytes()


@pytest.fixture
def spoofed(alice: Person, mallory: Person, tmp_path: Path) -> Message:
    import_mail(
        tenant=alice.tenant, workspace=alice.workspace, account_name="Personal",
        path=write_mbox(tmp_path / "a.mbox", [_spoofing_message()]),
    )  # fmt: skip
    import_mail(
        tenant=mallory.tenant, workspace=mallory.workspace, account_name="Personal",
        path=write_mbox(tmp_path / "m.mbox", [raw_message(subject=f"zq-mallory {RLO}terces", message_id="<m@x>")]),
    )  # fmt: skip
    stored = Message.objects.for_tenant(alice.tenant).get(message_id="spoof@bank.example")
    assert RLO in stored.sender_name and RLI in stored.subject  # stored as it came: only what is shown is marked
    return stored


def test_the_marker_names_each_control_and_leaves_other_text_alone() -> None:
    assert mark_bidi_controls(FILENAME) == "invoice[U+202E]gpj.exe"
    assert mark_bidi_controls(SUBJECT) == "Invoice [U+2067]diap[U+2069] [U+202A]now"
    # right-to-left text and the marks (U+200E, U+200F, U+061C), which reorder no letters, are left as they are
    for kept in ("שלום עולם", "مرحبا\u061c", "report\u200f.pdf", "plain"):
        assert mark_bidi_controls(kept) == kept


_FENCE = re.compile(r"\[/?untrusted:[0-9a-f]+\]")


def _marked(fenced: dict[str, Any]) -> None:
    # the MCP door fences mail text as data ([untrusted:…]…[/untrusted:…]); the marking is inside the fence
    message = json.loads(_FENCE.sub("", json.dumps(fenced)))
    assert message["sender"]["name"] == "Your [U+202E]knaB[U+2069] Team"
    assert message["subject"] == "Invoice [U+2067]diap[U+2069] [U+202A]now"
    assert [a["filename"] for a in message["attachments"]] == ["invoice[U+202E]gpj.exe"]
    assert not RAW_CONTROLS.search(json.dumps(message, ensure_ascii=False))


def test_agents_get_the_controls_marked_at_the_mcp_and_rest_doors(
    client: Client, alice: Person, mallory: Person, spoofed: Message
) -> None:
    # MCP, as an assistant with a read key
    key = key_for(alice, ["read"])
    answer = post(
        client, rpc("tools/call", {"name": "get_message", "arguments": {"message_id": str(spoofed.pk)}}), token=key
    )
    result = answer.json()["result"]
    assert not result.get("isError")
    _marked(result["structuredContent"]["message"])
    text = result["content"][0]["text"]  # the text block agents read, raw or escaped
    assert "[U+202E]" in text and not RAW_CONTROLS.search(text) and "\\u202e" not in text.lower()
    listed = post(client, rpc("tools/call", {"name": "list_messages", "arguments": {}}), token=key).json()["result"]
    [summary] = listed["structuredContent"]["messages"]
    assert _FENCE.sub("", summary["subject"]) == "Invoice [U+2067]diap[U+2069] [U+202A]now"
    # REST, as a person's session (what the console itself reads)
    rest = rest_post(api_client(alice.user), "get_message", {"message_id": str(spoofed.pk)})
    assert rest.status_code == 200
    _marked(rest.json()["message"])
    attachment = rest.json()["message"]["attachments"][0]
    got = rest_post(api_client(alice.user), "get_attachment", {"attachment_id": attachment["id"]}).json()
    assert got["filename"] == "invoice[U+202E]gpj.exe"  # the name a download is saved under, too
    # the other tenant reaches none of it, by either door
    theirs = key_for(mallory, ["read"])
    refused = post(
        client, rpc("tools/call", {"name": "get_message", "arguments": {"message_id": str(spoofed.pk)}}), token=theirs
    )
    assert refused.json()["result"]["isError"] is True
    missing = rest_post(api_client(mallory.user), "get_message", {"message_id": str(spoofed.pk)})
    assert missing.status_code == 404 and error_of(missing)["field"] == "message_id"
    alices = post(client, rpc("tools/call", {"name": "list_messages", "arguments": {}}), token=key).json()["result"]
    assert "zq-mallory" not in json.dumps(alices)


def _rendered(page: Page) -> str:
    """Everything the page shows as text, with its attributes (titles, labels) too."""
    text: str = page.evaluate(
        "() => document.body.innerText + [...document.querySelectorAll('*')]"
        ".flatMap(e => [...e.attributes].map(a => a.value)).join(' ')"
    )
    return text


@pytest.mark.slow
def test_the_mail_page_shows_the_controls_as_markers_in_chromium(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, spoofed: Message
) -> None:
    from playwright.sync_api import expect

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/mail")
    # the conversations' list (the default) and the messages' list alike
    conversation = page.locator(f'li.conversation[data-thread-id="{spoofed.thread_id}"]')
    expect(conversation.locator(".sender")).to_contain_text("Your [U+202E]knaB[U+2069] Team")
    expect(conversation.locator(".subject")).to_have_text("Invoice [U+2067]diap[U+2069] [U+202A]now")
    assert not RAW_CONTROLS.search(_rendered(page))
    page.click("#view-messages")
    row = page.locator(f'li.message[data-message-id="{spoofed.pk}"]')
    expect(row.locator(".sender")).to_have_text("Your [U+202E]knaB[U+2069] Team")
    expect(row.locator(".subject")).to_have_text("Invoice [U+2067]diap[U+2069] [U+202A]now")
    expect(row.locator(".subject")).to_have_attribute("dir", "auto")  # isolated from the text around it
    assert not RAW_CONTROLS.search(_rendered(page))
    look(page, "mail-bidi")
    row.locator("button.open").click()
    expect(page.locator("#thread-title")).to_have_text("Invoice [U+2067]diap[U+2069] [U+202A]now")
    attachment = page.locator("#thread ul.attachments li")
    expect(attachment.locator("bdi.filename")).to_have_text("invoice[U+202E]gpj.exe")
    expect(page.locator("#thread dl.headers")).to_contain_text("Your [U+202E]knaB[U+2069] Team <billing@bank.example>")
    assert not RAW_CONTROLS.search(_rendered(page))
    assert "zq-mallory" not in page.locator("body").inner_text()
    look(page, "mail-bidi-message")


@pytest.mark.slow
def test_the_approval_page_shows_the_controls_as_markers_in_chromium(
    browser_page: Page,
    live_server: Any,
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
) -> None:
    from playwright.sync_api import expect

    me, bob = mail_user(imap_server, "alice"), mail_user(imap_server, "bob")
    account = imap_account(alice, imap_server, smtp_server, me, name="Alice Example", sender_name="Alice Example")
    theirs = imap_account(mallory, imap_server, smtp_server, mail_user(imap_server, "mallory"))
    # an outbound file's name with such a character is refused already (attachments.N.filename: "invisible
    # characters"), so the file here is plainly named; its subject and body hold them
    attachment = {
        "filename": "invoice.pdf",
        "content_type": "application/octet-stream",
        "content_base64": base64.b64encode(b"MZ").decode(),
    }

    def email(account_id: Any, subject: str, **extra: Any) -> dict[str, Any]:
        return {
            "account_id": str(account_id), "to": [bob], "subject": subject, "body": f"Pay {RLO}won\n",
            "idempotency_key": uuid.uuid4().hex, **extra,
        }  # fmt: skip

    # an assistant asks to send mail whose subject and file name hold the controls
    made = request(
        as_agent(alice, scopes={"read", "write", "send"}),
        "send_email",
        email(account.pk, SUBJECT, attachments=[attachment]),
    )
    request(as_agent(mallory, scopes={"read", "write", "send"}), "send_email", email(theirs.pk, "zq-mallory secret"))
    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto(f"/outbound?request={made['request_id']}")
    shown = page.locator(f'#outbound-list article[data-request-id="{made["request_id"]}"]')
    expect(shown.locator("h3").first).to_have_text("Invoice [U+2067]diap[U+2069] [U+202A]now")
    expect(shown.locator("dl.headers")).to_contain_text("SubjectInvoice [U+2067]diap[U+2069] [U+202A]now")
    expect(shown.locator("bdi.filename")).to_have_text("invoice.pdf")
    expect(shown.locator("pre")).to_have_text("Pay [U+202E]won\n")
    assert not RAW_CONTROLS.search(_rendered(page))
    assert "zq-mallory" not in page.locator("body").inner_text()
    look(page, "outbound-bidi")
