"""Connecting, updating, removing and syncing mailboxes through the gate (SPEC §2, §6, §15, §16).

The logins are tried before anything is saved; a failure names the setting at fault and never echoes
the password; credentials are stored encrypted in one shape and never returned; only a person with
ADMIN manages mailboxes. Mallory, in another tenant, sees none of it and cannot reach any of it.
"""

from __future__ import annotations

import json
import smtplib
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import suppress
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from django.db import connection
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.mail.models import MailAccount, Message
from apps.operations.registry import registry
from tests.callers import as_agent, as_person, call, joined, refusal
from tests.conftest import Person
from tests.imapbox import (  # noqa: F401 (eager: a fixture)
    by_message_id,
    connect,
    eager,
    mail,
    new_user,
    server_settings,
    sync,
)
from tests.mailservers import PASSWORD, ImapServer, SmtpServer, free_port

WRONG = "wrong-password-42"


class _AuthHandler:
    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        return "250 OK"


@pytest.fixture
def smtp_with_auth() -> Iterator[tuple[str, int]]:
    """An SMTP server that offers AUTH and accepts only PASSWORD (or, as UTF-8, NON_ASCII_PASSWORD)."""

    def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        ok = isinstance(data, LoginPassword) and data.password in (PASSWORD.encode(), NON_ASCII_PASSWORD.encode())
        return AuthResult(success=ok, handled=False)

    port = free_port()
    controller = Controller(
        _AuthHandler(), hostname="127.0.0.1", port=port, authenticator=authenticate, auth_require_tls=False
    )
    controller.start()
    try:
        yield "127.0.0.1", port
    finally:
        controller.stop()


NON_ASCII_PASSWORD = "pässwörd-日本"


def _connect_input(server: ImapServer, smtp: SmtpServer, user: str, **imap: Any) -> dict[str, Any]:
    settings = server_settings(server, smtp, user)
    settings["imap"] |= imap
    return {"account_name": "Work mail", **settings}


def _nothing_saved(p: Person) -> None:
    assert not MailAccount.objects.for_tenant(p.tenant).exists()


def test_it_connects_a_mailbox_after_trying_both_logins_and_never_returns_the_password(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    user = new_user(imap_server)
    out = call(as_person(alice), "connect_mailbox", _connect_input(imap_server, smtp_server, user))
    assert out["imap"] == {"host": "127.0.0.1", "port": imap_server.port, "security": "none", "username": user}
    assert out["smtp"] == {"host": "127.0.0.1", "port": smtp_server.port, "security": "none", "username": user}
    assert (out["name"], out["workspace"], out["email_address"]) == ("Work mail", "default", user)
    assert PASSWORD not in json.dumps(out)
    assert smtp_server.connections == 1  # EHLO was tried before saving

    account = MailAccount.objects.for_tenant(alice.tenant).get(pk=out["id"])
    assert account.kind == "imap"
    assert account.credentials == {
        "imap": {
            "host": "127.0.0.1",
            "port": imap_server.port,
            "security": "none",
            "username": user,
            "password": PASSWORD,
        },
        "smtp": {
            "host": "127.0.0.1",
            "port": smtp_server.port,
            "security": "none",
            "username": user,
            "password": PASSWORD,
        },
    }
    with connection.cursor() as cursor:
        cursor.execute("SELECT credentials FROM mail_mailaccount WHERE id = %s", [account.pk])
        assert PASSWORD.encode() not in bytes(cursor.fetchone()[0])  # encrypted at rest
    event = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="connect_mailbox").get()
    assert PASSWORD not in json.dumps(event.targets, default=str)
    assert not MailAccount.objects.for_tenant(mallory.tenant).exists()
    assert call(as_person(mallory), "list_accounts") == {"accounts": []}
    assert refusal(as_person(mallory), "sync_mailbox", {"account_id": out["id"]}).code == "NOT_FOUND"


def test_a_refused_imap_login_names_the_field_echoes_nothing_and_saves_nothing(
    alice: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    user = new_user(imap_server)
    error = refusal(as_person(alice), "connect_mailbox", _connect_input(imap_server, smtp_server, user, password=WRONG))
    assert (error.code, error.field) == ("INVALID_INPUT", "imap.password")
    assert WRONG not in json.dumps(error.as_dict()) and user not in error.message
    _nothing_saved(alice)
    assert AuditEvent.objects.for_tenant(alice.tenant).get(operation="connect_mailbox").outcome == "INVALID_INPUT"

    error = refusal(
        as_person(alice), "connect_mailbox", _connect_input(imap_server, smtp_server, user, port=free_port())
    )
    assert (error.code, error.field) == ("INVALID_INPUT", "imap.host")
    error = refusal(
        as_person(alice), "connect_mailbox", _connect_input(imap_server, smtp_server, user, security="starttls")
    )
    assert (error.code, error.field) == ("INVALID_INPUT", "imap.security")
    # a name the resolver cannot be asked for (an empty label, one over 63 characters) is refused as input
    for host in ("a..b", "x" * 64 + ".example", "..."):
        error = refusal(as_person(alice), "connect_mailbox", _connect_input(imap_server, smtp_server, user, host=host))
        assert (error.code, error.field) == ("INVALID_INPUT", "imap.host") and host not in error.message
    _nothing_saved(alice)


def test_a_refused_smtp_login_names_the_field_and_saves_nothing(
    alice: Person, imap_server: ImapServer, smtp_server: SmtpServer, smtp_with_auth: tuple[str, int]
) -> None:
    user = new_user(imap_server)
    data = _connect_input(imap_server, smtp_server, user)
    data["smtp"] = {"host": smtp_with_auth[0], "port": smtp_with_auth[1], "security": "none", "password": WRONG}
    error = refusal(as_person(alice), "connect_mailbox", data)
    assert (error.code, error.field) == ("INVALID_INPUT", "smtp.password")
    assert WRONG not in json.dumps(error.as_dict())
    _nothing_saved(alice)
    data["smtp"] |= {"password": PASSWORD}
    out = call(as_person(alice), "connect_mailbox", data)
    assert out["smtp"]["port"] == smtp_with_auth[1]


def test_only_a_person_with_admin_manages_mailboxes(
    alice: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    account_id, _ = connect(alice, imap_server, smtp_server)
    data = _connect_input(imap_server, smtp_server, new_user(imap_server))
    for name in ("connect_mailbox", "update_mailbox_credentials", "remove_mailbox"):
        assert registry.get(name).ceiling == "never"  # type: ignore[union-attr]
        assert refusal(as_agent(alice, scopes={"read", "write", "send"}), name, {}).code == "NOT_AVAILABLE"
    member = as_person(joined(alice, "bob@example.test", "MEMBER"))
    assert refusal(member, "connect_mailbox", data).code == "FORBIDDEN"
    assert refusal(member, "remove_mailbox", {"account_id": account_id}).code == "FORBIDDEN"
    admin = as_person(joined(alice, "carol@example.test", "ADMIN"))
    assert call(admin, "connect_mailbox", data | {"account_name": "Second"})["name"] == "Second"
    # a MEMBER may ask for a sync; agents only where a person switched it on (ceiling off)
    assert call(member, "sync_mailbox", {"account_id": account_id})["queued"] is True
    assert refusal(as_agent(alice), "sync_mailbox", {"account_id": account_id}).code == "NOT_AVAILABLE"


def test_new_credentials_are_tried_before_they_replace_the_old_ones(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    account_id, user = connect(alice, imap_server, smtp_server)
    MailAccount.objects.for_tenant(alice.tenant).filter(pk=account_id).update(
        sync_failures=3, sync_error="login_failed"
    )
    settings = server_settings(imap_server, smtp_server, user)
    bad = {"account_id": account_id, **settings, "imap": settings["imap"] | {"password": WRONG}}
    assert refusal(as_person(alice), "update_mailbox_credentials", bad).field == "imap.password"
    account = MailAccount.objects.for_tenant(alice.tenant).get(pk=account_id)
    assert account.credentials["imap"]["password"] == PASSWORD
    out = call(as_person(alice), "update_mailbox_credentials", {"account_id": account_id, **settings})
    assert out["sync_error"] == "" and PASSWORD not in json.dumps(out)
    account.refresh_from_db()
    assert (account.sync_failures, account.sync_error) == (0, "")
    assert (
        refusal(as_person(mallory), "update_mailbox_credentials", {"account_id": account_id, **settings}).code
        == "NOT_FOUND"
    )


def test_removing_a_mailbox_is_confirmed_and_takes_everything_oaken_held_for_it(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    account_id, user = connect(alice, imap_server, smtp_server)
    mallory_id, mallory_user = connect(mallory, imap_server, smtp_server)
    for raw in mail(3):
        imap_server.append(user, "INBOX", raw)
        imap_server.append(mallory_user, "INBOX", raw)
    sync(account_id)
    sync(mallory_id)
    me = as_person(alice)
    error = refusal(me, "remove_mailbox", {"account_id": account_id})
    assert error.code == "CONFIRMATION_REQUIRED" and error.proposal is not None
    assert error.proposal["changes"][0]["before"]["messages"] == 3
    assert refusal(as_person(mallory), "remove_mailbox", {"account_id": account_id}, confirm=True).code == "NOT_FOUND"
    assert call(me, "remove_mailbox", {"account_id": account_id}, confirm=True)["messages_removed"] == 3
    assert not MailAccount.objects.for_tenant(alice.tenant).exists()
    assert not Message.objects.for_tenant(alice.tenant).exists()
    assert len(imap_server.folder_messages(user, "INBOX")) == 3  # the server keeps its mail
    assert len(by_message_id(mallory, mallory_id)) == 3


@pytest.mark.usefixtures("eager")
def test_sync_on_demand_fetches_new_mail(
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
    django_capture_on_commit_callbacks: Callable[..., Any],
    tmp_path: Any,
) -> None:
    account_id, user = connect(alice, imap_server, smtp_server)
    for raw in mail(2):
        imap_server.append(user, "INBOX", raw)
    with django_capture_on_commit_callbacks(execute=True):
        out = call(as_person(alice), "sync_mailbox", {"account_id": account_id})
    assert out["queued"] is True
    assert sorted(by_message_id(alice, account_id)) == ["m-0@example.test", "m-1@example.test"]
    assert not Message.objects.for_tenant(mallory.tenant).exists()

    from apps.mail.importing import import_mail
    from tests.mailfactory import write_mbox

    local = import_mail(
        tenant=alice.tenant,
        workspace=alice.workspace,
        account_name="Old",
        path=write_mbox(tmp_path / "old", mail(1, "old")),
    )
    error = refusal(as_person(alice), "sync_mailbox", {"account_id": str(local.account_id)})
    assert (error.code, error.field) == ("INVALID_INPUT", "account_id")


@pytest.mark.usefixtures("eager")
def test_connecting_right_away_starts_a_sync(
    alice: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    user = new_user(imap_server)
    for raw in mail(2):
        imap_server.append(user, "INBOX", raw)
    with django_capture_on_commit_callbacks(execute=True):
        out = call(as_person(alice), "connect_mailbox", _connect_input(imap_server, smtp_server, user))
    assert len(by_message_id(alice, out["id"])) == 2
    assert MailAccount.objects.for_tenant(alice.tenant).get(pk=out["id"]).synced_at is not None


def test_a_mailbox_on_a_private_network_is_refused_by_default(settings, alice: Person, mallory: Person) -> None:
    from apps.mail.imap import MailServerError, pinned_address

    settings.MAIL_ALLOW_PRIVATE_HOSTS = False
    private = ("127.0.0.1", "10.1.2.3", "192.168.0.9", "169.254.169.254", "::1", "localhost")
    # IPv4 carried in IPv6: mapped, NAT64, 6to4
    carried = ("::ffff:127.0.0.1", "64:ff9b::a01:203", "2002:7f00:1::1")
    for host in private + carried:
        with pytest.raises(MailServerError) as refused:
            pinned_address(host, 993, "imap.host")
        assert refused.value.reason == "private_host" and host not in refused.value.message
    assert pinned_address("8.8.8.8", 993, "imap.host") == "8.8.8.8"  # global: resolved locally, nothing is sent


def test_a_name_is_resolved_once_and_the_connection_goes_to_that_address(
    settings, monkeypatch: pytest.MonkeyPatch, alice: Person, mallory: Person
) -> None:
    """DNS rebinding: a name that answers a public address to the check and loopback a moment later. The IMAP and
    SMTP connections go to the address that was checked (here refused before any packet leaves), never to a
    second answer; each name is looked up once per connection."""
    from apps.mail.imap import MailServerError, check_imap, check_smtp

    settings.MAIL_ALLOW_PRIVATE_HOSTS = False
    answers = iter(["8.8.4.4", "203.0.113.7", "127.0.0.1", "127.0.0.1", "127.0.0.1"])
    looked_up: list[str] = []
    connected: list[Any] = []
    real = socket.getaddrinfo

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "mail.rebind.example":
            return real(host, port, *args, **kwargs)
        looked_up.append(host)
        address = next(answers)
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))]

    def refuse(address: Any, *args: Any, **kwargs: Any) -> Any:
        connected.append(address[0])
        raise ConnectionRefusedError  # nothing is sent anywhere

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    monkeypatch.setattr(socket, "create_connection", refuse)
    imap = {"host": "mail.rebind.example", "port": 993, "security": "ssl", "username": "u", "password": "p"}
    with pytest.raises(MailServerError) as refused:
        check_imap(imap)
    assert refused.value.reason == "connection_failed" and connected == ["8.8.4.4"]
    with pytest.raises(MailServerError) as refused:
        check_smtp({**imap, "port": 465})  # 203.0.113.7 is documentation space: refused before connecting
    assert refused.value.reason == "private_host" and connected == ["8.8.4.4"]
    assert looked_up == ["mail.rebind.example"] * 2


def _queued_by(action: Callable[[], Any]) -> tuple[Any, list[Any]]:
    """What `action` returns, and the after-commit callbacks it added (compared by identity: the audit log
    puts its own hook first in the list)."""
    # entries are (savepoints, callback, robust); django-stubs types them as pairs, so read the callback by index
    before = {id(entry[1]) for entry in connection.run_on_commit}
    result = action()
    return result, [entry[1] for entry in connection.run_on_commit if id(entry[1]) not in before]


def test_an_agent_asking_for_a_sync_waits_out_a_failing_accounts_backoff_and_a_person_does_not(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    account_id, _ = connect(alice, imap_server, smtp_server)
    mallory_id, _ = connect(mallory, imap_server, smtp_server)
    call(as_person(alice), "set_operation_exposure", {"operation": "sync_mailbox", "level": "on"}, confirm=True)
    later = timezone.now() + timedelta(minutes=10)
    MailAccount.objects.for_tenant(alice.tenant).filter(pk=account_id).update(
        sync_failures=2, sync_error="login_failed", sync_next_at=later
    )
    assistant = as_agent(alice, scopes={"read", "write"})
    out, queued = _queued_by(lambda: call(assistant, "sync_mailbox", {"account_id": account_id}))
    assert (out["queued"], out["sync_error"], queued) == (False, "login_failed", [])
    assert datetime.fromisoformat(out["next_sync_at"]) == later
    out, queued = _queued_by(lambda: call(as_person(alice), "sync_mailbox", {"account_id": account_id}))
    assert out["queued"] is True and len(queued) == 1
    # mallory's agent cannot even tell alice's account exists; her own tenant never switched it on
    assert refusal(as_agent(mallory), "sync_mailbox", {"account_id": account_id}).code == "NOT_AVAILABLE"
    call(as_person(mallory), "set_operation_exposure", {"operation": "sync_mailbox", "level": "on"}, confirm=True)
    theirs = as_agent(mallory, scopes={"read", "write"})
    assert refusal(theirs, "sync_mailbox", {"account_id": account_id}).code == "NOT_FOUND"
    assert call(theirs, "sync_mailbox", {"account_id": mallory_id})["queued"] is True


def test_a_password_beyond_ascii_logs_in_as_utf_8_and_a_bad_one_is_never_repeated(
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
    smtp_with_auth: tuple[str, int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    user = imap_server.add_user(f"utf8-{timezone.now().timestamp()}@example.test", NON_ASCII_PASSWORD)
    data = _connect_input(imap_server, smtp_server, user, password="wrong-pässwörd")
    data["smtp"] = {
        "host": smtp_with_auth[0],
        "port": smtp_with_auth[1],
        "security": "none",
        "password": "wrong-pässwörd",
    }
    error = refusal(as_person(alice), "connect_mailbox", data)
    assert (error.code, error.field) == ("INVALID_INPUT", "imap.password")
    data["imap"]["password"] = NON_ASCII_PASSWORD
    error = refusal(as_person(alice), "connect_mailbox", data)
    assert (error.code, error.field) == ("INVALID_INPUT", "smtp.password")
    assert "wrong" not in json.dumps(error.as_dict()) and "wrong" not in caplog.text and "ä" not in caplog.text
    _nothing_saved(alice)
    data["smtp"]["password"] = NON_ASCII_PASSWORD
    out = call(as_person(alice), "connect_mailbox", data)  # IMAP AUTHENTICATE PLAIN and SMTP AUTH PLAIN, UTF-8
    assert NON_ASCII_PASSWORD not in json.dumps(out)
    assert sync(out["id"]).state == "synced"
    assert not MailAccount.objects.for_tenant(mallory.tenant).exists()


def test_delivery_logs_in_beyond_ascii_as_check_smtp_does(smtp_with_auth: tuple[str, int]) -> None:
    """The worker's SMTP login is the one the connect form tried (apps.mail.imap.smtp_login)."""
    from apps.worker.delivery import _smtp

    host, port = smtp_with_auth
    config = {"host": host, "port": port, "security": "none", "username": "someone@example.test"}
    smtp = _smtp(config | {"password": NON_ASCII_PASSWORD}, timeout=10)
    try:
        assert smtp.noop()[0] == 250
    finally:
        smtp.quit()
    with pytest.raises(smtplib.SMTPAuthenticationError):
        _smtp(config | {"password": "wrong-pässwörd"}, timeout=10)


def test_tls_to_the_pinned_address_checks_the_certificate_against_the_servers_name(tmp_path: Path) -> None:
    """The connection goes to the address the name was resolved to, and the handshake checks the certificate
    against the name (a certificate for the name is accepted on that address, one for another name is not, and a
    plain context given the address would refuse a real server's certificate: why the name is carried)."""
    from apps.mail.imap import name_checking_context
    from tests.embeddings_server import self_signed

    cert, key = self_signed("mail.tls.example", tmp_path)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with suppress(OSError, ssl.SSLError), served.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"220 mail.tls.example ESMTP\r\n")
                tls.recv(1024)

    threading.Thread(target=serve, daemon=True).start()
    try:
        context = name_checking_context("mail.tls.example")
        context.load_verify_locations(cert)
        smtp = smtplib.SMTP_SSL("127.0.0.1", port, timeout=10, context=context)
        assert isinstance(smtp.sock, ssl.SSLSocket) and smtp.sock.server_hostname == "mail.tls.example"
        smtp.close()
        other = name_checking_context("other.example")
        other.load_verify_locations(cert)
        with pytest.raises(ssl.SSLCertVerificationError):
            smtplib.SMTP_SSL("127.0.0.1", port, timeout=10, context=other)
        plain = ssl.create_default_context(cafile=str(cert))
        with pytest.raises(ssl.SSLCertVerificationError):
            smtplib.SMTP_SSL("127.0.0.1", port, timeout=10, context=plain)
    finally:
        listener.close()
