"""Unsubscribe (issue 40 item 1): a one-click POST only for a DKIM-vouched RFC 8058 header, made once by the
worker after approval; a mailto address as an ordinary outbound request; a plain link never fetched. Against a
loopback HTTPS list server with a self-signed certificate the client is told to trust, and the real SMTP sink.
Mallory's identical message is untouched, and she cannot reach alice's."""

from __future__ import annotations

import base64
import http.server
import ssl
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dkim
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from apps.audit.models import AuditEvent
from apps.mail.models import STANDARD_FOLDERS, AccountKind, Folder, MailAccount, Message, RawMessage, Thread
from apps.mail.parsing.message import parse_message
from apps.outbound import requests as outbound_requests
from apps.outbound.models import OutboundRequest
from apps.worker import delivery
from tests.callers import as_agent, as_person, call, refusal
from tests.concurrency import race
from tests.conftest import Person
from tests.embeddings_server import self_signed
from tests.mailfactory import raw_message
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user, request

SENDER = {"read", "write", "send"}
TOKEN = "tok-SECRET-5d2a"  # the list's token in its URL: never audited

# ---------------------------------------------------------------- DKIM: keys the test's resolver answers with

KEYS: dict[bytes, bytes] = {}


def dns_txt(name: bytes, timeout: int = 5) -> bytes | None:
    """The DKIM key lookup the settings name in these tests (DKIM_DNS_FUNC): the keys published below."""
    return KEYS.get(name)


def _key() -> tuple[bytes, bytes]:
    """(private key PEM, the TXT record publishing its public key)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return pem, b"v=DKIM1; k=rsa; p=" + base64.b64encode(der)


@pytest.fixture(scope="module")
def list_key() -> bytes:
    pem, txt = _key()
    KEYS[b"news._domainkey.list.example.org."] = txt
    return pem


@pytest.fixture(scope="module")
def stranger_key() -> bytes:
    """A key that list.example.org never published."""
    return _key()[0]


def signed(raw: bytes, key: bytes, headers: tuple[str, ...] = ()) -> bytes:
    include = [b"from", b"to", b"subject", b"date", *(h.encode() for h in headers)]
    signature = dkim.sign(raw, b"news", b"list.example.org", key, include_headers=include, linesep=b"\n")
    return signature + raw


def list_mail(
    url: str, *, one_click: bool = True, mailto: str = "", message_id: str = "<news-1@list.example.org>"
) -> bytes:
    value = ", ".join(f"<{u}>" for u in (mailto, url) if u)
    extra = [("List-Unsubscribe", value)]
    if one_click:
        extra.append(("List-Unsubscribe-Post", "List-Unsubscribe=One-Click"))
    return raw_message(
        subject="Weekly news",
        sender="News <news@list.example.org>",
        message_id=message_id,
        extra_headers=extra,
    )


BOTH = ("list-unsubscribe", "list-unsubscribe-post")

# ---------------------------------------------------------------- the list's HTTPS server


class ListServer:
    def __init__(self, cert: Path, key: Path, status: int = 200) -> None:
        self.status = status
        self.posts: list[dict[str, Any]] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                owner.posts.append(
                    {"path": self.path, "headers": dict(self.headers.items()), "body": self.rfile.read(length)}
                )
                self.send_response(owner.status)
                if 300 <= owner.status < 400:
                    self.send_header("Location", "https://127.0.0.1:1/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                owner.posts.append({"path": self.path, "headers": dict(self.headers.items()), "body": b"GET"})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, path: str = "/unsubscribe") -> str:
        return f"https://127.0.0.1:{self.port}{path}?token={TOKEN}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed("127.0.0.1", tmp_path_factory.mktemp("list-tls"))


@pytest.fixture
def list_server(certificate: tuple[Path, Path], settings: Any) -> Iterator[ListServer]:
    """The list's server, trusted through the setting (never by turning verification off), reachable on
    loopback only because the allowance is on."""
    settings.UNSUBSCRIBE_CA_FILE = str(certificate[0])
    settings.UNSUBSCRIBE_ALLOW_PRIVATE_HOSTS = True
    settings.DKIM_DNS_FUNC = "tests.test_unsubscribe.dns_txt"
    server = ListServer(*certificate)
    yield server
    server.stop()


# ---------------------------------------------------------------- mailboxes and messages


def _mailbox(p: Person, address: str) -> MailAccount:
    """An IMAP mailbox that is never contacted (one-click posts need no mail server)."""
    account = MailAccount.objects.create(
        tenant=p.tenant,
        workspace=p.workspace,
        name="Mail",
        kind=AccountKind.IMAP,
        email_address=address,
        credentials={
            "imap": {"host": "imap.invalid", "port": 993, "security": "ssl", "username": "a", "password": "p"},
            "smtp": {"host": "smtp.invalid", "port": 465, "security": "ssl", "username": "a", "password": "p"},
        },
    )
    Folder.objects.bulk_create(
        Folder(tenant=p.tenant, account=account, kind=kind, name=kind.label) for kind in STANDARD_FOLDERS
    )
    return account


def stored(p: Person, account: MailAccount, raw: bytes) -> str:
    """The message in the account's inbox, its bytes kept as received (as sync keeps them)."""
    inbox = Folder.objects.for_tenant(p.tenant).get(account=account, kind="inbox")
    thread = Thread.objects.create(tenant=p.tenant, account=account, subject="Weekly news")
    message = Message.objects.create(
        tenant=p.tenant,
        account=account,
        folder=inbox,
        thread=thread,
        message_id=uuid.uuid4().hex,
        subject="Weekly news",
        sender_name="News",
        sender_address="news@list.example.org",
        content_hash=uuid.uuid4().hex,
        headers=parse_message(raw).headers,  # the headers the store keeps (List-Unsubscribe among them)
    )
    RawMessage.objects.create(tenant=p.tenant, message=message, data=raw)
    return str(message.pk)


def _unsubscribe(caller: Any, message_id: str, key: str = "unsub-1") -> dict[str, Any]:
    return request(caller, "unsubscribe", {"message_id": message_id, "idempotency_key": key})


def _row(p: Person, request_id: str) -> OutboundRequest:
    return OutboundRequest.objects.for_tenant(p.tenant).get(pk=request_id)


@pytest.fixture
def no_broker(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    handed: list[str] = []
    monkeypatch.setattr(outbound_requests, "enqueue_on_commit", lambda request_id: handed.append(str(request_id)))
    return handed


# ---------------------------------------------------------------- one-click


def test_one_click_posts_exactly_once_with_the_rfc_8058_body(
    alice: Person, mallory: Person, list_server: ListServer, list_key: bytes, no_broker: list[str]
) -> None:
    url = list_server.url()
    raw = signed(list_mail(url), list_key, BOTH)
    mine = stored(alice, _mailbox(alice, "alice@example.test"), raw)
    theirs = stored(mallory, _mailbox(mallory, "mallory@example.test"), raw)  # the same message, in another tenant

    made = _unsubscribe(as_person(alice), mine)
    assert (made["method"], made["signed_by"], made["state"]) == ("one_click", "list.example.org", "queued")
    assert made["request"]["kind"] == "unsubscribe_post"
    assert made["request"]["target"] == f"https://127.0.0.1:{list_server.port}/unsubscribe?…"
    assert list_server.posts == []  # nothing until the worker runs it
    rid = made["request_id"]
    assert no_broker == [rid]

    assert delivery.deliver(rid) == "sent"
    assert delivery.deliver(rid) == "not claimed"  # the task run twice: no second POST
    assert len(list_server.posts) == 1
    post = list_server.posts[0]
    assert post["body"] == b"List-Unsubscribe=One-Click"
    assert post["path"] == f"/unsubscribe?token={TOKEN}"
    assert post["headers"]["Content-Type"] == "application/x-www-form-urlencoded"
    assert not {"Cookie", "Authorization", "Referer"} & set(post["headers"])
    row = _row(alice, rid)
    assert (row.state, row.http_status, row.smtp_started_at is not None) == ("sent", 200, True)
    seen = call(as_person(alice), "get_outbound_request", {"request_id": rid})
    assert (seen["state"], seen["http_status"], seen["kind"]) == ("sent", 200, "unsubscribe_post")

    # the token never reaches the audit log; the steps are audited
    events = AuditEvent.objects.for_tenant(alice.tenant).order_by("seq")
    assert TOKEN not in str([(e.targets, e.operation) for e in events])
    assert {"unsubscribe", "claim_outbound_send", "begin_outbound_data", "record_outbound_outcome"} <= {
        e.operation for e in events
    }
    # mallory's identical message is untouched, and alice's is NOT_FOUND to her
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()
    assert refusal(as_person(mallory), "unsubscribe", {"message_id": mine, "idempotency_key": "x"}).code == "NOT_FOUND"
    assert Message.objects.for_tenant(mallory.tenant).filter(pk=theirs).exists()


@pytest.mark.django_db(transaction=True)
def test_two_workers_racing_post_once(
    alice: Person, list_server: ListServer, list_key: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbound_requests, "enqueue_on_commit", lambda request_id: None)
    mine = stored(alice, _mailbox(alice, "alice@example.test"), signed(list_mail(list_server.url()), list_key, BOTH))
    rid = _unsubscribe(as_person(alice), mine)["request_id"]
    results = race(3, lambda: delivery.deliver(rid))
    assert sorted(results) == ["not claimed", "not claimed", "sent"]
    assert len(list_server.posts) == 1


def test_a_lost_answer_is_unknown_and_never_posted_again(
    alice: Person, list_server: ListServer, list_key: bytes, no_broker: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = stored(alice, _mailbox(alice, "alice@example.test"), signed(list_mail(list_server.url()), list_key, BOTH))
    rid = _unsubscribe(as_person(alice), mine)["request_id"]

    import http.client

    def lost(self: Any) -> Any:
        raise ConnectionResetError

    monkeypatch.setattr(http.client.HTTPConnection, "getresponse", lost)
    assert delivery.deliver(rid) == "unknown"
    assert delivery.deliver(rid) == "not claimed"
    assert delivery.reconcile(rid) == "not unknown"  # nothing to look for in Sent: a person settles it
    assert len(list_server.posts) == 1
    assert _row(alice, rid).error == "unsubscribe_answer_lost"


def test_a_redirect_is_the_lists_answer_and_never_followed(
    alice: Person, list_server: ListServer, list_key: bytes, no_broker: list[str]
) -> None:
    list_server.status = 302
    mine = stored(alice, _mailbox(alice, "alice@example.test"), signed(list_mail(list_server.url()), list_key, BOTH))
    rid = _unsubscribe(as_person(alice), mine)["request_id"]
    assert delivery.deliver(rid) == "sent"
    assert _row(alice, rid).http_status == 302 and len(list_server.posts) == 1


def test_a_list_refusal_fails_with_its_status(
    alice: Person, list_server: ListServer, list_key: bytes, no_broker: list[str]
) -> None:
    list_server.status = 500
    mine = stored(alice, _mailbox(alice, "alice@example.test"), signed(list_mail(list_server.url()), list_key, BOTH))
    rid = _unsubscribe(as_person(alice), mine)["request_id"]
    assert delivery.deliver(rid) == "failed"
    row = _row(alice, rid)
    assert (row.http_status, row.error) == (500, "unsubscribe_refused_by_list") and len(list_server.posts) == 1


@pytest.mark.parametrize(
    "case", ["unsigned", "wrong key", "h= without List-Unsubscribe-Post", "header changed after signing", "no Post"]
)
def test_without_a_vouching_dkim_signature_there_is_no_one_click(
    case: str, alice: Person, list_server: ListServer, list_key: bytes, stranger_key: bytes
) -> None:
    url = list_server.url()
    raw = {
        "unsigned": lambda: list_mail(url),
        "wrong key": lambda: signed(list_mail(url), stranger_key, BOTH),
        "h= without List-Unsubscribe-Post": lambda: signed(list_mail(url), list_key, ("list-unsubscribe",)),
        "header changed after signing": lambda: signed(list_mail(url), list_key, BOTH).replace(b"token=", b"token=x"),
        "no Post": lambda: signed(list_mail(url, one_click=False), list_key, ("list-unsubscribe",)),
    }[case]()
    mine = stored(alice, _mailbox(alice, "alice@example.test"), raw)
    answer = _unsubscribe(as_person(alice), mine)
    assert answer["method"] == "link" and answer["request_id"] is None
    assert answer["sender_link"].startswith("https://127.0.0.1:") and "sender's own" in answer["sender_link_note"]
    assert not OutboundRequest.objects.for_tenant(alice.tenant).exists()
    assert list_server.posts == []  # never fetched, not even looked at


def test_an_agents_unsubscribe_waits_for_a_person_and_posts_nothing_until_then(
    alice: Person, list_server: ListServer, list_key: bytes, no_broker: list[str], settings: Any
) -> None:
    account = _mailbox(alice, "alice@example.test")
    mine = stored(alice, account, signed(list_mail(list_server.url()), list_key, BOTH))
    # a send policy allowing everything never approves an unsubscribe
    call(
        as_person(alice),
        "create_send_policy",
        {"name": "All", "allowed_domains": ["127.0.0.1", "list.example.org"], "recipients_per_hour": 100},
        confirm=True,
    )
    agent = as_agent(alice, scopes=SENDER)
    asked = refusal(agent, "unsubscribe", {"message_id": mine, "idempotency_key": "a-1"})
    assert asked.code == "CONFIRMATION_REQUIRED" and asked.proposal is not None
    assert TOKEN not in str(asked.proposal)
    made = _unsubscribe(agent, mine, "a-1")
    assert (made["state"], made["method"]) == ("awaiting_approval", "one_click")
    assert made["approval_url"].endswith(f"/outbound?request={made['request_id']}")
    assert TOKEN not in str(made)
    assert delivery.deliver(made["request_id"]) == "not claimed" and list_server.posts == [] and no_broker == []
    # a retry with the same key is the same request; another key for the same message is refused
    retried = call(agent, "unsubscribe", {"message_id": mine, "idempotency_key": "a-1"})  # no second confirmation
    assert retried["request_id"] == made["request_id"]
    again = refusal(agent, "unsubscribe", {"message_id": mine, "idempotency_key": "a-2"})
    assert (again.code, again.field) == ("CONFLICT", "message_id")
    # agents cannot approve; a person can
    assert refusal(agent, "approve_outbound", {"request_id": made["request_id"]}).code == "NOT_AVAILABLE"
    call(as_person(alice), "approve_outbound", {"request_id": made["request_id"]})
    assert delivery.deliver(made["request_id"]) == "sent" and len(list_server.posts) == 1


def test_private_addresses_are_refused_when_the_allowance_is_off(
    alice: Person, list_server: ListServer, list_key: bytes, no_broker: list[str], settings: Any
) -> None:
    settings.UNSUBSCRIBE_ALLOW_PRIVATE_HOSTS = False
    mine = stored(alice, _mailbox(alice, "alice@example.test"), signed(list_mail(list_server.url()), list_key, BOTH))
    rid = _unsubscribe(as_person(alice), mine)["request_id"]
    assert delivery.deliver(rid) == "failed"
    assert _row(alice, rid).error == "unsubscribe_host_private" and list_server.posts == []


def test_an_untrusted_certificate_is_refused(
    alice: Person, list_server: ListServer, list_key: bytes, no_broker: list[str], settings: Any
) -> None:
    settings.UNSUBSCRIBE_CA_FILE = ""  # the system's trust store, which does not know the list's certificate
    mine = stored(alice, _mailbox(alice, "alice@example.test"), signed(list_mail(list_server.url()), list_key, BOTH))
    rid = _unsubscribe(as_person(alice), mine)["request_id"]
    assert delivery.deliver(rid) == "failed"
    assert _row(alice, rid).error == "unsubscribe_tls_failed" and list_server.posts == []


# ---------------------------------------------------------------- mailto


def test_mailto_is_an_ordinary_outbound_request_through_smtp(
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
    list_server: ListServer,
    no_broker: list[str],
) -> None:
    me, lister = mail_user(imap_server, "alice"), mail_user(imap_server, "list")
    account = imap_account(alice, imap_server, smtp_server, me)
    # one-click is offered but unsigned: the list's address is used instead; its cc is never used
    mailto = f"mailto:{lister}?subject=Unsubscribe%20me&body=Please%20remove%20me&cc=extra@example.org"
    mine = stored(alice, account, list_mail(list_server.url(), mailto=mailto))
    made = _unsubscribe(as_person(alice), mine)
    assert made["method"] == "mailto" and made["request"]["kind"] == "unsubscribe_mail"
    row = _row(alice, made["request_id"])
    assert (row.to, row.cc, row.subject, row.body) == ([lister], [], "Unsubscribe me", "Please remove me")
    assert delivery.deliver(made["request_id"]) == "sent"
    assert smtp_server.data_commands == 1
    delivered = imap_server.folder_messages(lister, "INBOX")
    assert len(delivered) == 1 and b"Subject: Unsubscribe me" in delivered[0][1]
    assert list_server.posts == []

    # defaults when the URI has no subject or body
    other = stored(alice, account, list_mail("", one_click=False, mailto=f"mailto:{lister}", message_id="<n2@x>"))
    second = _row(alice, _unsubscribe(as_person(alice), other, "unsub-2")["request_id"])
    assert (second.subject, second.body) == ("unsubscribe", "unsubscribe\n")
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


# ---------------------------------------------------------------- input


def test_bad_input_gets_the_one_error_shape_naming_the_field(alice: Person, mallory: Person) -> None:
    me = as_person(alice)
    for data, field in (
        ({"idempotency_key": "k"}, "message_id"),
        ({"message_id": "not-an-id", "idempotency_key": "k"}, "message_id"),
        ({"message_id": str(uuid.uuid4())}, "idempotency_key"),
        ({"message_id": str(uuid.uuid4()), "idempotency_key": "k", "url": "https://x"}, None),
    ):
        refused = refusal(me, "unsubscribe", data, confirm=True)
        assert refused.field == field, (data, refused.code, refused.field)
        assert refused.code in ("INVALID_INPUT", "NOT_FOUND")
    # a message without List-Unsubscribe
    plain = stored(alice, _mailbox(alice, "alice@example.test"), raw_message())
    refused = refusal(me, "unsubscribe", {"message_id": plain, "idempotency_key": "k"}, confirm=True)
    assert (refused.code, refused.field) == ("INVALID_INPUT", "message_id")
