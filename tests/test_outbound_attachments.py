"""send_email's attachments: files given inline (base64) and attachments of messages the caller can read, bound
into the content hash, named (never shown) in the proposal, bounded, and delivered byte for byte over real SMTP.
Mallory's tenant and another workspace reach none of alice's attachments."""

from __future__ import annotations

import base64
import json
import uuid
from email import message_from_bytes
from typing import Any

import pytest

from apps.audit.models import AuditEvent
from apps.mail.models import Attachment
from apps.outbound.models import Draft, OutboundAttachment, OutboundRequest
from apps.worker import delivery
from tests.callers import as_agent, as_person, call, refusal
from tests.conftest import Person
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user, request
from tests.test_drafts import stored_message

SENDER = {"read", "write", "send"}
NOTES = b"line one\nline two\n"
PICTURE = bytes(range(256)) * 4


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _email(account_id: Any, to: list[str], attachments: list[dict[str, Any]], key: str | None = None) -> dict[str, Any]:
    return {
        "account_id": str(account_id),
        "to": to,
        "subject": "Files",
        "body": "Attached.\n",
        "attachments": attachments,
        "idempotency_key": key or uuid.uuid4().hex,
    }


def _stored(p: Person, account: Any, filename: str, content: bytes, sender: str) -> Attachment:
    message = stored_message(p, account, sender=sender, subject="Invoice", message_id=f"{uuid.uuid4().hex}@x.test")
    return Attachment.objects.create(
        tenant=p.tenant,
        message=message,
        filename=filename,
        content_type="application/pdf",
        size=len(content),
        content=content,
    )


@pytest.fixture
def world(alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer) -> dict[str, Any]:
    me, bob, eve = mail_user(imap_server, "alice"), mail_user(imap_server, "bob"), mail_user(imap_server, "eve")
    account = imap_account(alice, imap_server, smtp_server, me)
    theirs = imap_account(mallory, imap_server, smtp_server, eve)
    return {
        "me": me,
        "bob": bob,
        "account": account,
        "theirs": theirs,
        "invoice": _stored(alice, account, "invoice.pdf", b"%PDF-1.4 alice\n", bob),
        "their_invoice": _stored(mallory, theirs, "secret.pdf", b"%PDF-1.4 mallory\n", bob),
    }


def test_inline_files_and_readable_attachments_are_sent_byte_for_byte(
    alice: Person, mallory: Person, world: dict[str, Any], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    agent = as_agent(alice, scopes=SENDER)
    files = [
        {"filename": "notes.txt", "content_type": "text/plain", "content_base64": _b64(NOTES)},
        # base64 as mail programs wrap it: line breaks are allowed
        {
            "filename": "Grafik ü.png",
            "content_type": "image/PNG",
            "content_base64": base64.encodebytes(PICTURE).decode(),
        },
        {"attachment_id": str(world["invoice"].pk)},
    ]
    data = _email(world["account"].pk, [world["bob"]], files, key="files")
    proposal = refusal(agent, "send_email", data).proposal
    assert proposal is not None
    after = proposal["changes"][0]["after"]
    assert after["attachments"] == 3
    assert after["attachment_names"] == ["notes.txt", "Grafik ü.png", "invoice.pdf"]
    assert after["attachment_bytes"] == len(NOTES) + len(PICTURE) + len(b"%PDF-1.4 alice\n")
    shown = json.dumps(proposal)
    assert _b64(NOTES) not in shown and "line one" not in shown and "PDF-1.4" not in shown  # names, never bytes

    made = call(agent, "send_email", data, confirmation_token=proposal["token"])
    assert made["state"] == "awaiting_approval"
    stored = OutboundAttachment.objects.for_tenant(alice.tenant).filter(request_id=made["request_id"])
    assert [(a.filename, a.content_type, bytes(a.content)) for a in stored.order_by("position")] == [
        ("notes.txt", "text/plain", NOTES),
        ("Grafik ü.png", "image/png", PICTURE),
        ("invoice.pdf", "application/pdf", b"%PDF-1.4 alice\n"),
    ]
    listed = call(as_person(alice), "list_outbound", {"state": "awaiting_approval"})["requests"]
    assert listed[0]["attachments"] == ["notes.txt", "Grafik ü.png", "invoice.pdf"]

    # the files are part of the content hash: other bytes under the same key are other content
    other = _email(
        world["account"].pk, [world["bob"]], [{**files[0], "content_base64": _b64(b"changed")}, *files[1:]], key="files"
    )
    assert refusal(agent, "send_email", other).code == "IDEMPOTENCY_MISMATCH"
    without = request(agent, "send_email", _email(world["account"].pk, [world["bob"]], files[:2]))
    assert without["content_hash"] != made["content_hash"]

    call(as_person(alice), "approve_outbound", {"request_id": made["request_id"], "content_hash": made["content_hash"]})
    assert delivery.deliver(made["request_id"]) == "sent"
    [(_, raw, _)] = imap_server.folder_messages(world["bob"], "INBOX")
    parts = [p for p in message_from_bytes(raw).walk() if p.get_filename()]
    assert [(p.get_filename(), p.get_content_type(), p.get_payload(decode=True)) for p in parts] == [
        ("notes.txt", "text/plain", NOTES),
        ("Grafik ü.png", "image/png", PICTURE),
        ("invoice.pdf", "application/pdf", b"%PDF-1.4 alice\n"),
    ]
    assert smtp_server.data_commands == 1
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


def test_an_attachment_out_of_reach_behaves_as_if_it_did_not_exist(
    alice: Person, mallory: Person, world: dict[str, Any]
) -> None:
    theirs = [{"attachment_id": str(world["their_invoice"].pk)}]
    for caller, extra in ((as_person(alice), {"confirm": True}), (as_agent(alice, scopes=SENDER), {})):
        refused = refusal(caller, "send_email", _email(world["account"].pk, ["x@example.test"], theirs), **extra)
        assert (refused.code, refused.field, refused.proposal) == ("NOT_FOUND", "attachments.0.attachment_id", None)
        # exactly what an id that exists nowhere gets
        nowhere = [{"attachment_id": str(uuid.uuid4())}]
        missing = refusal(caller, "send_email", _email(world["account"].pk, ["x@example.test"], nowhere), **extra)
        assert (missing.code, missing.message) == (refused.code, refused.message)
    # mallory cannot attach alice's file to her own mail either
    mine = [{"attachment_id": str(world["invoice"].pk)}]
    assert (
        refusal(
            as_person(mallory), "send_email", _email(world["theirs"].pk, ["x@example.test"], mine), confirm=True
        ).code
        == "NOT_FOUND"
    )
    # an agent reaches an attachment only in the workspaces it was granted
    elsewhere = [{"attachment_id": str(_elsewhere_attachment(alice, world).pk)}]
    wide = as_agent(alice, scopes=SENDER, workspaces=("default", "elsewhere"))
    assert refusal(wide, "send_email", _email(world["account"].pk, ["x@example.test"], elsewhere)).code == (
        "CONFIRMATION_REQUIRED"
    )
    narrow = as_agent(alice, scopes=SENDER)
    refused = refusal(narrow, "send_email", _email(world["account"].pk, ["x@example.test"], elsewhere))
    assert (refused.code, refused.field, refused.proposal) == ("OUT_OF_SCOPE", "attachments.0.attachment_id", None)
    assert not OutboundRequest.objects.unscoped().exists()


def _elsewhere_attachment(alice: Person, world: dict[str, Any]) -> Attachment:
    """An attachment of a message in an account of alice's workspace 'elsewhere'."""
    from apps.mail.importing import ensure_local_account
    from apps.workspaces.models import Workspace

    workspace = Workspace.objects.create(tenant=alice.tenant, name="elsewhere")
    account = ensure_local_account(tenant=alice.tenant, workspace=workspace, name="Other")
    return _stored(alice, account, "other.pdf", b"%PDF other\n", world["bob"])


@pytest.fixture
def refusing(alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer) -> Any:
    """An account for calls that are refused before anything reaches a server (no mailboxes needed)."""
    imap_account(mallory, imap_server, smtp_server, "mallory@example.test")
    return imap_account(alice, imap_server, smtp_server, "alice@example.test")


@pytest.mark.parametrize(
    ("files", "code", "field"),
    [
        ([{"filename": f"f{i}.txt", "content_base64": "eA=="} for i in range(4)], "LIMIT_EXCEEDED", "attachments"),
        (
            [
                {"filename": "a.txt", "content_base64": _b64(b"x" * 10)},
                {"filename": "big.bin", "content_base64": _b64(b"x" * 101)},
            ],
            "LIMIT_EXCEEDED",
            "attachments.1.content_base64",
        ),
        (
            [{"filename": f"f{i}.bin", "content_base64": _b64(b"x" * 80)} for i in range(3)],
            "LIMIT_EXCEEDED",
            "attachments",
        ),
        ([{"filename": "a.txt", "content_base64": "not base64!"}], "INVALID_INPUT", "attachments.0.content_base64"),
        ([{"filename": "a.txt"}], "INVALID_INPUT", "attachments.0.content_base64"),
        ([{"content_base64": "eA=="}], "INVALID_INPUT", "attachments.0.filename"),
        ([{"filename": "../etc/passwd", "content_base64": "eA=="}], "INVALID_INPUT", "attachments.0.filename"),
        ([{"filename": "a\r\nBcc: x@evil.test", "content_base64": "eA=="}], "INVALID_INPUT", "attachments.0.filename"),
        # shown as "invoiceexe.pdf": a right-to-left override hides what the file is
        ([{"filename": "invoice\u202efdp.exe", "content_base64": "eA=="}], "INVALID_INPUT", "attachments.0.filename"),
        ([{"filename": "a\u2028b.txt", "content_base64": "eA=="}], "INVALID_INPUT", "attachments.0.filename"),
        # extra padding does not make a file look smaller than it is
        (
            [{"filename": "pad.bin", "content_base64": "AAAA" * 40 + "=" * 400}],
            "LIMIT_EXCEEDED",
            "attachments.0.content_base64",
        ),
        (
            [{"filename": "a.txt", "content_type": "text/plain; charset=x", "content_base64": "eA=="}],
            "INVALID_INPUT",
            "attachments.0.content_type",
        ),
        (
            [{"filename": "a.eml", "content_type": "multipart/mixed", "content_base64": "eA=="}],
            "INVALID_INPUT",
            "attachments.0.content_type",
        ),
        (
            [{"filename": "a.txt", "content_base64": "eA==", "attachment_id": str(uuid.uuid4())}],
            "INVALID_INPUT",
            "attachments.0",
        ),
        # a key no file has is not named (it is the caller's own text): the file that holds it is
        ([{"filename": "a.txt", "content_base64": "eA==", "size": 1}], "INVALID_INPUT", "attachments.0"),
    ],
)
def test_bad_or_oversized_files_are_refused_naming_the_field(
    alice: Person, refusing: Any, settings: Any, files: list[dict[str, Any]], code: str, field: str
) -> None:
    settings.OPERATIONS = {
        **settings.OPERATIONS,
        "SEND_ATTACHMENTS_MAX": 3,
        "SEND_ATTACHMENT_MAX_BYTES": 100,
        "SEND_ATTACHMENTS_TOTAL_MAX_BYTES": 200,
    }
    data = _email(refusing.pk, ["x@example.test"], files)
    for caller, extra in ((as_person(alice), {"confirm": True}), (as_agent(alice, scopes=SENDER), {})):
        refused = refusal(caller, "send_email", data, **extra)
        assert (refused.code, refused.field, refused.proposal) == (code, field, None)  # refused before any proposal
        for item in files:
            for value in item.values():
                assert str(value) not in refused.message or str(value) in field
    assert not OutboundRequest.objects.unscoped().exists()


def test_a_received_attachment_is_sent_on_with_a_name_and_type_fit_to_send(
    alice: Person, mallory: Person, world: dict[str, Any], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    """A third party chose a received file's name and type: invisible characters are dropped and a message or
    multipart type goes out as plain bytes (base64 under message/rfc822 is not allowed, RFC 2046 §5.2.1)."""
    message = stored_message(
        alice, world["account"], sender=world["bob"], subject="Fwd", message_id=f"{uuid.uuid4().hex}@x.test"
    )
    odd = Attachment.objects.create(
        tenant=alice.tenant,
        message=message,
        filename="report\u202efdp.exe",
        content_type="message/rfc822",
        size=5,
        content=b"hello",
    )
    data = _email(world["account"].pk, [world["bob"]], [{"attachment_id": str(odd.pk)}])
    made = call(as_person(alice), "send_email", data, confirm=True)
    assert delivery.deliver(made["request_id"]) == "sent"
    [(_, raw, _)] = imap_server.folder_messages(world["bob"], "INBOX")
    [part] = [p for p in message_from_bytes(raw).walk() if p.get_filename()]
    assert (part.get_filename(), part.get_content_type(), part.get_payload(decode=True)) == (
        "reportfdp.exe",
        "application/octet-stream",
        b"hello",
    )
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


def test_a_stored_attachment_over_the_bound_is_refused(alice: Person, world: dict[str, Any], settings: Any) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "SEND_ATTACHMENT_MAX_BYTES": 10}
    data = _email(world["account"].pk, ["x@example.test"], [{"attachment_id": str(world["invoice"].pk)}])
    refused = refusal(as_person(alice), "send_email", data, confirm=True)
    assert (refused.code, refused.field) == ("LIMIT_EXCEEDED", "attachments.0.attachment_id")
    assert not OutboundRequest.objects.for_tenant(alice.tenant).exists()


def test_a_draft_over_the_attachment_bounds_is_refused_at_send(
    alice: Person, world: dict[str, Any], settings: Any
) -> None:
    me = as_person(alice)
    draft = call(me, "forward_message", {"message_id": str(world["invoice"].message_id), "to": [world["bob"]]})
    settings.OPERATIONS = {**settings.OPERATIONS, "SEND_ATTACHMENTS_TOTAL_MAX_BYTES": 10}
    refused = refusal(me, "send_draft", {"draft_id": draft["id"], "idempotency_key": "d"}, confirm=True)
    assert (refused.code, refused.field) == ("LIMIT_EXCEEDED", "draft_id")
    assert not OutboundRequest.objects.for_tenant(alice.tenant).exists()


def test_an_agent_sends_a_file_of_several_megabytes_over_the_mcp_door(
    alice: Person, mallory: Person, refusing: Any, settings: Any
) -> None:
    from django.test import Client

    from tests.test_mcp_door import key_for, post, rpc

    key = key_for(alice, ["read", "write", "send"])
    big = bytes(range(256)) * (3 * 4096)  # 3 MiB: over Django's default 2.5 MiB request body
    arguments = _email(
        refusing.pk, ["bob@example.test"], [{"filename": "scan.bin", "content_base64": _b64(big)}], key="mcp-big"
    )
    response = post(Client(), rpc("tools/call", {"name": "send_email", "arguments": arguments}), token=key)
    assert response.status_code == 200
    error = json.loads(response.json()["result"]["content"][0]["text"])["error"]
    assert error["code"] == "CONFIRMATION_REQUIRED"
    [name] = error["proposal"]["changes"][0]["after"]["attachment_names"]
    assert name.startswith("[untrusted:") and "]scan.bin[/untrusted:" in name  # fenced: a name is mail text
    assert error["proposal"]["changes"][0]["after"]["attachment_bytes"] == len(big)
    token = error["proposal"]["token"]
    confirmed = {"name": "send_email", "arguments": {**arguments, "confirmation_token": token}}
    made = post(Client(), rpc("tools/call", confirmed), token=key).json()["result"]
    assert made.get("isError") is not True and made["structuredContent"]["state"] == "awaiting_approval"
    made_id = made["structuredContent"]["request_id"]
    [file] = OutboundAttachment.objects.for_tenant(alice.tenant).filter(request_id=made_id)
    assert bytes(file.content) == big

    # a body larger than the bounds allow is answered in the door's error shape, not an HTML page
    settings.OPERATION_BODY_MAX_BYTES = 10_000
    too_big = post(Client(), rpc("tools/call", {"name": "send_email", "arguments": arguments}), token=key)
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "LIMIT_EXCEEDED"
    assert OutboundRequest.objects.for_tenant(alice.tenant).count() == 1
    # a body of a million empty objects is refused before it is parsed (parsed, it would take gigabytes)
    settings.OPERATION_BODY_MAX_BYTES = 32 << 20
    flood = {"name": "send_email", "arguments": {**arguments, "attachments": [{}] * 1_000_000}}
    refused = post(Client(), rpc("tools/call", flood), token=key)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == -32700  # a JSON-RPC parse error
    assert "more than 20000 JSON objects and arrays" in refused.json()["error"]["message"]
    assert OutboundRequest.objects.for_tenant(alice.tenant).count() == 1
    # the bound on other endpoints stays Django's own: only the operation doors take large bodies
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE == 2621440
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


def test_a_forward_is_held_to_the_sending_bounds_when_it_is_written(
    alice: Person, mallory: Person, world: dict[str, Any], settings: Any
) -> None:
    me, invoice = as_person(alice), world["invoice"]
    forward = {"message_id": str(invoice.message_id), "to": [world["bob"]]}
    for bounds in (
        {"SEND_ATTACHMENTS_MAX": 0},
        {"SEND_ATTACHMENT_MAX_BYTES": invoice.size - 1},
        {"SEND_ATTACHMENTS_TOTAL_MAX_BYTES": invoice.size - 1},
    ):
        settings.OPERATIONS = {**settings.OPERATIONS, **bounds}
        refused = refusal(me, "forward_message", forward)
        assert (refused.code, refused.field) == ("LIMIT_EXCEEDED", "attachments"), bounds
        assert "attachments: false" in refused.message and "invoice" not in refused.message
        assert not Draft.objects.for_tenant(alice.tenant).exists()
        # without its files the forward is written, and sent as it is
        draft = call(me, "forward_message", {**forward, "attachments": False})
        assert not OutboundAttachment.objects.for_tenant(alice.tenant).filter(draft_id=draft["id"]).exists()
        Draft.objects.for_tenant(alice.tenant).filter(pk=draft["id"]).delete()
    assert not Draft.objects.for_tenant(mallory.tenant).exists()


def _draft_files(p: Person, draft_id: str) -> list[tuple[str, str, bytes]]:
    rows = OutboundAttachment.objects.for_tenant(p.tenant).filter(draft_id=draft_id).order_by("position")
    return [(a.filename, a.content_type, bytes(a.content)) for a in rows]


def test_a_draft_holds_files_an_agent_gave_and_sends_them_byte_for_byte(
    alice: Person, mallory: Person, world: dict[str, Any], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    agent, me = as_agent(alice, scopes=SENDER), as_person(alice)
    notes = {"filename": "notes.txt", "content_type": "text/plain", "content_base64": _b64(NOTES)}
    invoice = {"attachment_id": str(world["invoice"].pk)}
    data = {"account_id": str(world["account"].pk), "to": [world["bob"]], "subject": "Files", "body": "Attached.\n"}
    draft = call(agent, "create_draft", {**data, "attachments": [notes, invoice]})
    assert [(f["filename"], f["size"]) for f in draft["attachments"]] == [
        ("notes.txt", len(NOTES)),
        ("invoice.pdf", 15),
    ]
    assert _draft_files(alice, draft["id"]) == [
        ("notes.txt", "text/plain", NOTES),
        ("invoice.pdf", "application/pdf", b"%PDF-1.4 alice\n"),
    ]

    # left out, the files stay; a list replaces them (here: the picture, then the invoice again)
    kept = call(agent, "update_draft", {"draft_id": draft["id"], "subject": "Files, again"})
    assert len(kept["attachments"]) == 2
    picture = {"filename": "chart.png", "content_type": "image/png", "content_base64": _b64(PICTURE)}
    call(agent, "update_draft", {"draft_id": draft["id"], "attachments": [picture, invoice]})
    assert _draft_files(alice, draft["id"]) == [
        ("chart.png", "image/png", PICTURE),
        ("invoice.pdf", "application/pdf", b"%PDF-1.4 alice\n"),
    ]
    events = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="update_draft").order_by("seq")
    assert [e.targets[0]["after"]["changed"] for e in events] == [["subject"], ["attachments"]]
    assert "chart.png" not in json.dumps([e.targets for e in events])  # the audit names what changed, not the files

    made = call(me, "send_draft", {"draft_id": draft["id"], "idempotency_key": "with-files"}, confirm=True)
    assert delivery.deliver(made["request_id"]) == "sent"
    [(_, raw, _)] = imap_server.folder_messages(world["bob"], "INBOX")
    parts = [p for p in message_from_bytes(raw).walk() if p.get_filename()]
    assert [(p.get_filename(), p.get_content_type(), p.get_payload(decode=True)) for p in parts] == [
        ("chart.png", "image/png", PICTURE),
        ("invoice.pdf", "application/pdf", b"%PDF-1.4 alice\n"),
    ]
    # sent, the draft left Drafts (its request keeps its own copies); on another, an empty list takes every file away
    assert not Draft.objects.for_tenant(alice.tenant).filter(pk=draft["id"]).exists()
    other = call(agent, "create_draft", {**data, "attachments": [notes]})
    assert call(agent, "update_draft", {"draft_id": other["id"], "attachments": []})["attachments"] == []
    assert _draft_files(alice, other["id"]) == []
    assert not Draft.objects.for_tenant(mallory.tenant).exists()


def test_a_draft_takes_no_file_out_of_reach_and_none_over_the_bounds(
    alice: Person, mallory: Person, world: dict[str, Any], settings: Any
) -> None:
    agent = as_agent(alice, scopes=SENDER)
    base = {"account_id": str(world["account"].pk), "to": [world["bob"]], "subject": "Files"}
    theirs = refusal(
        agent, "create_draft", {**base, "attachments": [{"attachment_id": str(world["their_invoice"].pk)}]}
    )
    assert (theirs.code, theirs.field) == ("NOT_FOUND", "attachments.0.attachment_id")
    broken = refusal(agent, "create_draft", {**base, "attachments": [{"filename": "a.txt", "content_base64": "%%"}]})
    assert (broken.code, broken.field) == (
        "INVALID_INPUT",
        "attachments.0.content_base64",
    ) and "%%" not in broken.message
    settings.OPERATIONS = {**settings.OPERATIONS, "SEND_ATTACHMENTS_MAX": 1}
    two = [{"filename": f"{n}.txt", "content_base64": _b64(NOTES)} for n in ("a", "b")]
    over = refusal(agent, "create_draft", {**base, "attachments": two})
    assert (over.code, over.field) == ("LIMIT_EXCEEDED", "attachments")
    assert not Draft.objects.for_tenant(alice.tenant).exists()
    draft = call(agent, "create_draft", {**base, "attachments": two[:1]})
    refused = refusal(agent, "update_draft", {"draft_id": draft["id"], "attachments": two})
    assert (refused.code, refused.field) == ("LIMIT_EXCEEDED", "attachments")
    assert [name for name, _, _ in _draft_files(alice, draft["id"])] == ["a.txt"]
    # mallory's own drafts cannot take alice's files either, and alice's draft is not hers to change
    hers = as_agent(mallory, scopes=SENDER)
    assert refusal(hers, "update_draft", {"draft_id": draft["id"], "attachments": []}).code == "NOT_FOUND"
    assert [name for name, _, _ in _draft_files(alice, draft["id"])] == ["a.txt"]
