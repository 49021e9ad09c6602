"""Drafts, replies and forwards: written in Oaken, never sent by themselves; another tenant sees none of them."""

from __future__ import annotations

from email import message_from_bytes
from typing import Any

import pytest

from apps.mail.models import Attachment, Folder, MailAccount, Message, Thread
from apps.outbound.models import Draft, OutboundAttachment, OutboundRequest
from apps.worker import delivery
from tests.callers import as_agent, as_person, call, refusal
from tests.conftest import Person
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user, request


def stored_message(
    p: Person,
    account: MailAccount,
    *,
    sender: str,
    subject: str,
    message_id: str,
    references: list[str] | None = None,
    text: str = "Hello.\n",
    to: list[str] | None = None,
    cc: list[str] | None = None,
    reply_to: list[str] | None = None,
) -> Message:
    """A message in the account's inbox, as sync would store it."""
    inbox = Folder.objects.for_tenant(p.tenant).get(account=account, kind="inbox")
    thread = Thread.objects.create(tenant=p.tenant, account=account, subject=subject)
    return Message.objects.create(
        tenant=p.tenant,
        account=account,
        folder=inbox,
        thread=thread,
        message_id=message_id,
        references=references or [],
        subject=subject,
        sender_name="Bob",
        sender_address=sender,
        to_addresses=[{"name": "", "address": a} for a in (to or [account.email_address])],
        cc_addresses=[{"name": "", "address": a} for a in (cc or [])],
        reply_to_addresses=[{"name": "", "address": a} for a in (reply_to or [])],
        text_body=text,
        content_hash=message_id,
    )


@pytest.fixture
def box(alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer) -> dict[str, Any]:
    me, bob = mail_user(imap_server, "alice"), mail_user(imap_server, "bob")
    account = imap_account(alice, imap_server, smtp_server, me)
    theirs = imap_account(mallory, imap_server, smtp_server, mail_user(imap_server, "mallory"))
    return {"me": me, "bob": bob, "account": account, "theirs": theirs}


def test_drafts_are_written_changed_and_deleted(alice: Person, mallory: Person, box: dict[str, Any]) -> None:
    agent = as_agent(alice)
    draft = call(
        agent,
        "create_draft",
        {
            "account_id": str(box["account"].pk),
            "to": ["Bob <BOB@Example.TEST>"],
            "cc": ["bob@example.test"],
            "subject": "Hi",
            "body": "Draft one",
        },
    )
    assert (draft["to"], draft["cc"], draft["subject"]) == (["BOB@example.test"], [], "Hi")
    changed = call(agent, "update_draft", {"draft_id": draft["id"], "body": "Draft two"})
    assert (changed["body"], changed["to"], changed["subject"]) == ("Draft two", ["BOB@example.test"], "Hi")
    assert [d["id"] for d in call(agent, "list_drafts", {"account_id": str(box["account"].pk)})["drafts"]] == [
        draft["id"]
    ]
    bad = refusal(agent, "update_draft", {"draft_id": draft["id"], "to": ["not an address"]})
    assert (bad.code, bad.field) == ("INVALID_INPUT", "to") and "not an address" not in bad.message

    # another tenant: the draft and the account do not exist for mallory
    theirs = as_person(mallory)
    assert refusal(theirs, "update_draft", {"draft_id": draft["id"], "body": "x"}).code == "NOT_FOUND"
    assert refusal(theirs, "delete_draft", {"draft_id": draft["id"]}, confirm=True).code == "NOT_FOUND"
    assert refusal(theirs, "create_draft", {"account_id": str(box["account"].pk)}).code == "NOT_FOUND"
    assert call(theirs, "list_drafts", {})["drafts"] == []
    outside = as_agent(alice, workspaces=("elsewhere",))
    assert refusal(outside, "update_draft", {"draft_id": draft["id"], "body": "x"}).code == "OUT_OF_SCOPE"

    # deleting needs confirmation: a proposal and a token first
    asked = refusal(agent, "delete_draft", {"draft_id": draft["id"]})
    assert asked.code == "CONFIRMATION_REQUIRED" and Draft.objects.for_tenant(alice.tenant).exists()
    assert request(agent, "delete_draft", {"draft_id": draft["id"]})["deleted"] is True
    assert not Draft.objects.for_tenant(alice.tenant).exists()


def test_a_reply_gets_threading_headers_one_re_and_the_quoted_text(alice: Person, box: dict[str, Any]) -> None:
    account = box["account"]
    plain = stored_message(
        alice,
        account,
        sender=box["bob"],
        subject="Plans",
        message_id="p1@example.test",
        text="Line one\n\nLine two\n",
        cc=["carol@example.test"],
    )
    again = stored_message(
        alice,
        account,
        sender=box["bob"],
        subject="RE: Plans",
        message_id="p2@example.test",
        references=["p0@example.test", "p1@example.test"],
        reply_to=["list@example.test"],
    )
    agent = as_agent(alice)
    first = call(agent, "reply_to_message", {"message_id": str(plain.pk), "body": "Yes."})
    assert (first["subject"], first["to"], first["cc"]) == ("Re: Plans", [box["bob"]], [])
    assert (first["in_reply_to"], first["references"]) == ("p1@example.test", ["p1@example.test"])
    assert first["body"].startswith("Yes.\n\n") and "Bob <" in first["body"]
    assert "> Line one\n>\n> Line two" in first["body"]
    everyone = call(agent, "reply_to_message", {"message_id": str(plain.pk), "reply_all": True, "quote": False})
    assert everyone["cc"] == ["carol@example.test"] and box["me"] not in everyone["cc"] and everyone["body"] == ""
    second = call(agent, "reply_to_message", {"message_id": str(again.pk), "body": "Sure."})
    assert (second["subject"], second["to"]) == ("RE: Plans", ["list@example.test"])
    assert second["references"] == ["p0@example.test", "p1@example.test", "p2@example.test"]


def test_a_forward_carries_the_attachments(
    alice: Person, mallory: Person, box: dict[str, Any], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    original = stored_message(
        alice,
        box["account"],
        sender=box["bob"],
        subject="Invoice",
        message_id="i1@example.test",
        text="See the invoice.\n",
    )
    Attachment.objects.create(
        tenant=alice.tenant,
        message=original,
        filename="invoice.pdf",
        content_type="application/pdf",
        size=9,
        content=b"%PDF-1.4\n",
    )
    me = as_person(alice)
    draft = call(me, "forward_message", {"message_id": str(original.pk), "to": [box["bob"]], "body": "FYI"})
    assert draft["subject"] == "Fwd: Invoice" and draft["attachments"][0]["filename"] == "invoice.pdf"
    assert draft["body"].startswith("FYI\n\n---------- Forwarded message") and "See the invoice." in draft["body"]
    assert (
        refusal(as_person(mallory), "forward_message", {"message_id": str(original.pk), "to": ["x@example.test"]}).code
        == "NOT_FOUND"
    )

    made = request(me, "send_draft", {"draft_id": draft["id"], "idempotency_key": "fwd"})
    assert delivery.deliver(made["request_id"]) == "sent"
    [(_, raw, _)] = imap_server.folder_messages(box["bob"], "INBOX")
    parts = [p for p in message_from_bytes(raw).walk() if p.get_filename()]
    assert [(p.get_filename(), p.get_payload(decode=True)) for p in parts] == [("invoice.pdf", b"%PDF-1.4\n")]
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


def test_a_local_account_cannot_send(alice: Person, box: dict[str, Any]) -> None:
    from apps.mail.importing import ensure_local_account

    local = ensure_local_account(tenant=alice.tenant, workspace=alice.workspace, name="Archive")
    refused = refusal(
        as_person(alice),
        "send_email",
        {"account_id": str(local.pk), "to": ["a@example.test"], "idempotency_key": "x"},
        confirm=True,
    )
    assert (refused.code, refused.field) == ("INVALID_INPUT", "account_id")


def test_a_subject_that_would_break_its_header_is_refused_and_nothing_is_written(
    alice: Person, mallory: Person, box: dict[str, Any]
) -> None:
    agent, me = as_agent(alice, scopes={"read", "write", "send"}), as_person(alice)
    account = str(box["account"].pk)
    for subject in ("a\r\nBcc: evil@example.test", "a\nb", "a\u2028b"):
        made = refusal(agent, "create_draft", {"account_id": account, "to": [box["bob"]], "subject": subject})
        assert (made.code, made.field) == ("INVALID_INPUT", "subject") and "evil" not in made.message
        sent = refusal(
            me,
            "send_email",
            {"account_id": account, "to": [box["bob"]], "subject": subject, "body": "x", "idempotency_key": "k"},
            confirm=True,
        )
        assert (sent.code, sent.field) == ("INVALID_INPUT", "subject")
    draft = call(agent, "create_draft", {"account_id": account, "to": [box["bob"]], "subject": "fine"})
    changed = refusal(agent, "update_draft", {"draft_id": draft["id"], "subject": "x\r\nTo: evil@example.test"})
    assert (changed.code, changed.field) == ("INVALID_INPUT", "subject")
    assert list(Draft.objects.for_tenant(alice.tenant).values_list("subject", flat=True)) == ["fine"]
    assert not OutboundRequest.objects.for_tenant(alice.tenant).exists()
    assert not Draft.objects.for_tenant(mallory.tenant).exists()


def test_a_draft_keeps_its_own_files_by_id_when_another_is_added_or_one_removed(
    alice: Person, mallory: Person, box: dict[str, Any]
) -> None:
    import base64

    me = as_person(alice)
    account = str(box["account"].pk)

    def new_file(name: str, data: bytes) -> dict[str, str]:
        return {"filename": name, "content_type": "text/plain", "content_base64": base64.b64encode(data).decode()}

    draft = call(me, "create_draft", {"account_id": account, "attachments": [new_file("a.txt", b"first\n")]})
    (held,) = draft["attachments"]
    assert (held["filename"], held["size"]) == ("a.txt", 6) and held["id"]
    # the draft's file kept by id, a new one added after it: both, in that order, the first byte for byte
    both = call(
        me,
        "update_draft",
        {"draft_id": draft["id"], "attachments": [{"draft_attachment_id": held["id"]}, new_file("b.txt", b"two")]},
    )
    assert [(f["filename"], f["size"]) for f in both["attachments"]] == [("a.txt", 6), ("b.txt", 3)]
    rows = OutboundAttachment.objects.for_tenant(alice.tenant).filter(draft_id=draft["id"]).order_by("position")
    assert [bytes(f.content) for f in rows] == [b"first\n", b"two"]
    # one removed by leaving it out; the other kept
    second = both["attachments"][1]["id"]
    kept = call(me, "update_draft", {"draft_id": draft["id"], "attachments": [{"draft_attachment_id": second}]})
    assert [f["filename"] for f in kept["attachments"]] == ["b.txt"]

    # another draft's file, another tenant's, a new draft naming one, or an id beside a new file: refused
    other = call(me, "create_draft", {"account_id": account, "attachments": [new_file("c.txt", b"c")]})
    foreign = other["attachments"][0]["id"]
    wrong = refusal(me, "update_draft", {"draft_id": draft["id"], "attachments": [{"draft_attachment_id": foreign}]})
    assert (wrong.code, wrong.field) == ("NOT_FOUND", "attachments.0.draft_attachment_id")
    theirs = call(as_person(mallory), "create_draft", {"account_id": str(box["theirs"].pk), "attachments": [
        new_file("m.txt", b"mallory's")]})  # fmt: skip
    mine_now = kept["attachments"][0]["id"]
    stolen = refusal(me, "update_draft", {"draft_id": draft["id"], "attachments": [
        {"draft_attachment_id": mine_now}, {"draft_attachment_id": theirs["attachments"][0]["id"]}]})  # fmt: skip
    assert (stolen.code, stolen.field) == ("NOT_FOUND", "attachments.1.draft_attachment_id")
    fresh = refusal(me, "create_draft", {"account_id": account, "attachments": [{"draft_attachment_id": mine_now}]})
    assert (fresh.code, fresh.field) == ("INVALID_INPUT", "attachments.0.draft_attachment_id")
    both_ways = refusal(me, "update_draft", {"draft_id": draft["id"], "attachments": [
        {"draft_attachment_id": mine_now, **new_file("x.txt", b"x")}]})  # fmt: skip
    assert (both_ways.code, both_ways.field) == ("INVALID_INPUT", "attachments.0")
    assert [bytes(f.content) for f in OutboundAttachment.objects.for_tenant(alice.tenant).filter(
        draft_id=draft["id"])] == [b"two"]  # fmt: skip
    # mallory cannot name alice's draft file in her own draft either
    assert refusal(as_person(mallory), "update_draft", {"draft_id": theirs["id"], "attachments": [
        {"draft_attachment_id": mine_now}]}).code == "NOT_FOUND"  # fmt: skip
