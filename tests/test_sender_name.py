"""The sender's name (issue 38, item 6): a mailbox's From display name, apart from its label, defaulting to the name
of the person who connected it; set by a person through the gate, held to its bound and to one plain line, sent as
a correctly encoded header, and fixed in a request when it is made. Mallory, in another tenant, reaches none of it."""

from __future__ import annotations

import hashlib
import json
from email import message_from_bytes
from email.headerregistry import Address
from email.policy import default as default_policy
from typing import Any

import pytest
from django.test import Client

from apps.accounts.models import User
from apps.audit.log import canonical_json
from apps.audit.models import AuditEvent
from apps.mail.importing import ensure_local_account
from apps.mail.models import MailAccount
from apps.outbound import requests as outbound_requests
from apps.outbound.compose import Recipients, content_hash
from apps.outbound.models import OutboundRequest
from apps.outbound.requests import stored_digest
from apps.worker import delivery
from tests.callers import as_agent, as_person, call, joined, refusal
from tests.conftest import PASSWORD, Person
from tests.imapbox import connect
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user, request

NAME = "Zoë Ünal"
# what a From display name may not hold: a line break (another header would start), any other control character,
# a bidirectional override or isolate (the name could read as another), an @ (it could read as another address)
REFUSED = [
    "Ann\r\nBcc: victim@example.test",
    "Ann\nLee",
    "Ann\rLee",
    "Ann\tLee",
    "Ann\x00Lee",
    "Ann\u2028Lee",
    "Ann\x85Lee",
    "Ann \u202egpj.exe",
    "\u2066Ann\u2069",
    "boss@bank.example",
]


def _name_me(p: Person, name: str) -> dict[str, Any]:
    return call(as_person(p), "set_preferences", {"name": name})


def test_a_new_mailbox_sends_under_its_persons_name_never_its_label(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    assert call(as_person(alice), "get_preferences")["name"] == ""
    assert _name_me(alice, f"  {NAME}  ")["name"] == NAME  # surrounding spaces go
    assert call(as_person(alice), "get_preferences")["name"] == NAME
    named = AuditEvent.objects.for_tenant(alice.tenant).get(operation="set_preferences")
    assert named.targets[0]["before"] == {"name": ""} and named.targets[0]["after"] == {"name": NAME}

    account_id, _ = connect(alice, imap_server, smtp_server, name="Walker IMAP")
    [listed] = call(as_person(alice), "list_accounts")["accounts"]
    assert (listed["name"], listed["sender_name"]) == ("Walker IMAP", NAME)
    # a person without a name connects a mailbox without one: its mail carries the bare address
    assert call(as_person(mallory), "get_preferences")["name"] == ""
    theirs, _ = connect(mallory, imap_server, smtp_server, name="Mallory IMAP")
    assert MailAccount.objects.for_tenant(mallory.tenant).get(pk=theirs).sender_name == ""
    # an imported (local) account takes the importing person's name too
    local = ensure_local_account(tenant=alice.tenant, workspace=alice.workspace, name="Archive", sender_name=NAME)
    assert local.sender_name == NAME
    # a person's name is their own: mallory's call names mallory only
    assert _name_me(mallory, "Mallory")["name"] == "Mallory"
    alice.user.refresh_from_db()
    assert alice.user.name == NAME
    assert MailAccount.objects.for_tenant(alice.tenant).get(pk=account_id).sender_name == NAME


def test_a_mailbox_sender_name_is_set_read_back_bounded_and_out_of_other_tenants_reach(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    account_id, user = connect(alice, imap_server, smtp_server, name="Walker IMAP")
    theirs, _ = connect(mallory, imap_server, smtp_server, name="Mallory IMAP")
    me = as_person(alice)
    out = call(me, "set_mailbox_sender_name", {"account_id": account_id, "sender_name": "Ann Lee"})
    assert (out["id"], out["name"], out["sender_name"], out["email_address"]) == (
        account_id,
        "Walker IMAP",
        "Ann Lee",
        user,
    )
    assert call(me, "list_accounts")["accounts"][0]["sender_name"] == "Ann Lee"
    event = AuditEvent.objects.for_tenant(alice.tenant).get(operation="set_mailbox_sender_name")
    assert (event.outcome, event.targets[0]["before"], event.targets[0]["after"]) == (
        "ok",
        {"sender_name": ""},
        {"sender_name": "Ann Lee"},
    )
    # a right-to-left name, with its marks, is a name like any other
    hebrew = "\u05d0\u05e0\u05d4 \u05dc\u05d9 \u200f"
    assert call(me, "set_mailbox_sender_name", {"account_id": account_id, "sender_name": hebrew})["sender_name"] == (
        hebrew.strip()
    )

    # the bound: a setting, published in the schema, refused whole (never cut)
    for op, field, extra in (
        ("set_mailbox_sender_name", "sender_name", {"account_id": account_id}),
        ("set_preferences", "name", {}),
    ):
        error = refusal(me, op, {**extra, field: "x" * 10_000})
        assert (error.code, error.field) == ("LIMIT_EXCEEDED", field)
        assert "x" * 100 not in error.message
        for value in REFUSED:
            error = refusal(me, op, {**extra, field: value})
            assert (error.code, error.field) == ("INVALID_INPUT", field), repr(value)
            assert value not in json.dumps(error.as_dict())
    assert call(me, "get_preferences")["name"] == ""
    assert call(me, "set_mailbox_sender_name", {"account_id": account_id, "sender_name": "x" * 100})
    assert refusal(me, "set_mailbox_sender_name", {"account_id": account_id, "sender_name": "x" * 101}).code == (
        "LIMIT_EXCEEDED"
    )
    # '' takes the name away: the bare address
    assert call(me, "set_mailbox_sender_name", {"account_id": account_id, "sender_name": ""})["sender_name"] == ""

    # another tenant cannot read or change it: alice's account is no id at all there, and the other way round
    for error in (
        refusal(as_person(mallory), "set_mailbox_sender_name", {"account_id": account_id, "sender_name": "Your bank"}),
        refusal(me, "set_mailbox_sender_name", {"account_id": theirs, "sender_name": "Mallory"}),
    ):
        assert (error.code, error.field) == ("NOT_FOUND", "account_id")
    assert [a["id"] for a in call(as_person(mallory), "list_accounts")["accounts"]] == [theirs]
    assert MailAccount.objects.for_tenant(alice.tenant).get(pk=account_id).sender_name == ""
    assert MailAccount.objects.for_tenant(mallory.tenant).get(pk=theirs).sender_name == ""
    assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(operation="set_mailbox_sender_name", outcome="ok")

    # as the mailbox's settings: an ADMIN's, at a person's door; no agent names the sender
    member = joined(alice, "member@example.test")
    assert refusal(
        as_person(member), "set_mailbox_sender_name", {"account_id": account_id, "sender_name": "M"}
    ).code == ("FORBIDDEN")
    agent = as_agent(alice, scopes={"read", "write", "send"})
    assert refusal(agent, "set_mailbox_sender_name", {"account_id": account_id, "sender_name": "Bot"}).code == (
        "NOT_AVAILABLE"
    )
    assert refusal(agent, "set_preferences", {"name": "Bot"}).code == "NOT_AVAILABLE"
    # an imported account sends nothing: it has no sender name to set
    local = ensure_local_account(tenant=alice.tenant, workspace=alice.workspace, name="Archive")
    error = refusal(me, "set_mailbox_sender_name", {"account_id": str(local.pk), "sender_name": "Ann"})
    assert (error.code, error.field) == ("INVALID_INPUT", "account_id")


def test_content_hash_holds_a_sender_name_only_when_there_is_one() -> None:
    """A request made before display names were hashed (none) keeps its digest; a name is part of what is approved."""
    given: dict[str, Any] = {
        "account_id": "a1",
        "sender": "me@example.test",
        "found": Recipients(["bob@example.test"], [], []),
        "subject": "Hello",
        "body": "Hi\n",
        "in_reply_to": "",
        "references": [],
        "send_at": None,
        "attachments": [],
    }
    before_names = {
        "account": "a1",
        "sender": "me@example.test",
        "to": ["bob@example.test"],
        "cc": [],
        "bcc": [],
        "subject": "Hello",
        "body": "Hi\n",
        "in_reply_to": "",
        "references": [],
        "send_at": None,
        "attachments": [],
    }
    today = hashlib.sha256(canonical_json(before_names).encode()).hexdigest()
    assert content_hash(sender_name="", **given) == today
    named = content_hash(sender_name=NAME, **given)
    assert named != today and named != content_hash(sender_name="Ann Lee", **given)


def test_the_from_display_name_arrives_encoded_and_stays_as_approved(
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(outbound_requests, "enqueue_on_commit", lambda request_id: None)
    me, bob = mail_user(imap_server, "alice"), mail_user(imap_server, "bob")
    account = imap_account(alice, imap_server, smtp_server, me, name="Walker IMAP", sender_name=NAME)
    theirs = imap_account(mallory, imap_server, smtp_server, mail_user(imap_server, "eve"), sender_name="Eve")

    def email(key: str) -> dict[str, Any]:
        return {"account_id": str(account.pk), "to": [bob], "subject": "Hello", "body": "Hi\n", "idempotency_key": key}

    # an agent's request waits for a person; the approval page's From line is the name as it will be sent
    agent = as_agent(alice, scopes={"read", "write", "send"})
    made = request(agent, "send_email", email("first"))
    assert made["from_header"] == f"{NAME} <{me}>" and made["state"] == "awaiting_approval"
    row = OutboundRequest.objects.for_tenant(alice.tenant).get(pk=made["request_id"])
    assert row.sender_name == NAME and row.content_hash == stored_digest(row)
    # the mailbox's sender name changes after the request was made: the request keeps its own, and its digest
    call(as_person(alice), "set_mailbox_sender_name", {"account_id": str(account.pk), "sender_name": "Your bank"})
    shown = call(as_person(alice), "get_outbound_request", {"request_id": made["request_id"]})
    assert shown["from_header"] == f"{NAME} <{me}>"
    call(as_person(alice), "approve_outbound", {"request_id": made["request_id"], "content_hash": made["content_hash"]})
    assert delivery.deliver(made["request_id"]) == "sent"

    [received] = smtp_server.received
    raw = received.data
    header = next(line for line in raw.split(b"\r\n") if line.lower().startswith(b"from:"))
    assert header.isascii() and b"=?utf-8?" in header.lower()  # RFC 2047: an encoded word, never raw bytes
    parsed = message_from_bytes(raw, policy=default_policy)
    [sender] = parsed["From"].addresses
    assert (sender.display_name, sender.addr_spec) == (NAME, me)
    assert "Walker IMAP" not in raw.decode("ascii", "replace")
    # what arrived in bob's inbox reads the same
    [(_, delivered, _)] = imap_server.folder_messages(bob, "INBOX")
    assert message_from_bytes(delivered, policy=default_policy)["From"].addresses[0] == Address(NAME, addr_spec=me)

    # a request made now sends under the new name; none ('') sends the bare address
    call(as_person(alice), "set_mailbox_sender_name", {"account_id": str(account.pk), "sender_name": ""})
    bare = request(as_person(alice), "send_email", email("second"))
    assert bare["from_header"] == me
    assert delivery.deliver(bare["request_id"]) == "sent"
    last = message_from_bytes(smtp_server.received[-1].data, policy=default_policy)
    assert str(last["From"]) == me and last["From"].addresses[0].display_name == ""
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()
    assert MailAccount.objects.for_tenant(mallory.tenant).get(pk=theirs.pk).sender_name == "Eve"


def test_a_name_given_at_sign_up_is_the_persons_and_held_to_the_same_rule(
    db: None, client: Client, mailoutbox: list[Any], mallory: Person
) -> None:
    def sign_up(email: str, name: str | None) -> Any:
        form = {"email": email, "password": PASSWORD, "tenant": "New Co"}
        return client.post("/accounts/sign-up", form if name is None else form | {"name": name})

    assert sign_up("zoe@example.test", f"  {NAME} ").status_code == 302
    assert User.objects.get(email="zoe@example.test").name == NAME
    assert sign_up("plain@example.test", None).status_code == 302  # optional
    assert User.objects.get(email="plain@example.test").name == ""
    for i, value in enumerate(["Ann\r\nBcc: victim@example.test", "boss@bank.example", "Ann \u202egpj", "x" * 101]):
        refused = sign_up(f"refused{i}@example.test", value)
        assert refused.status_code == 400 and "Your name" in refused.content.decode(), repr(value)
        assert not User.objects.filter(email=f"refused{i}@example.test").exists()
    assert User.objects.get(pk=mallory.user.pk).name == ""
