"""wait_for_message (issue 41 item 2): an assistant waits for a verification code or a reply. Mail delivered to
Dovecot during the wait and synced is answered within moments, through the real web server (gunicorn, two
workers) at both doors, while more waiters are parked than the server has threads (a wait holds none); what
does not match wakes it but never answers it; the deadline answers matched false. A key restricted to one
workspace never waits on another's mailbox, and mallory's mail and waits never meet alice's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from datetime import timedelta
from typing import Any

import httpx2
import pytest
from django.db import connection, connections
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.events.wake import hub
from apps.mail.models import MailAccount
from apps.mail.sync import run_sync
from apps.server.management.commands.serve import web_command
from apps.workspaces.models import Workspace
from tests.callers import as_agent, call, refusal
from tests.conftest import Person
from tests.liveserver import _database_url, wait_until_serving
from tests.loopback import free_port, stop
from tests.mailfactory import raw_message
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user
from tests.test_mcp_door import _fresh_counters, key_for, rpc  # noqa: F401 (fixture)
from tests.test_mcp_strict import LEGACY
from tests.test_rest_bearer import call as rest_call

pytestmark = [pytest.mark.django_db(transaction=True)]

CODE_SUBJECT = "Your sign-in code is 482913"


def _mailbox(p: Person, imap: ImapServer, smtp: SmtpServer, who: str, workspace: Workspace | None = None) -> Any:
    user = mail_user(imap, who)
    account = imap_account(p, imap, smtp, user, name=f"Mail {who}")
    if workspace is not None:
        MailAccount.objects.for_tenant(p.tenant).filter(pk=account.pk).update(workspace=workspace)
    assert run_sync(str(account.pk), force=True).state == "synced"
    return str(account.pk), user


def _deliver_and_sync(imap: ImapServer, user: str, account: str, subject: str, sender: str) -> None:
    raw = raw_message(subject=subject, body="hello\n", sender=sender, message_id=f"<{time.monotonic_ns()}@x.test>")
    imap.append(user, "INBOX", raw)
    assert run_sync(account, force=True).state == "synced"


def _rest(url: str, key: str, body: dict[str, Any], timeout: float = 60) -> httpx2.Response:
    return httpx2.post(
        f"{url}/api/v1/ops/wait_for_message",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=timeout,
    )


def _mcp(url: str, key: str, arguments: dict[str, Any]) -> httpx2.Response:
    return httpx2.post(
        url + "/mcp",
        content=json.dumps(rpc("tools/call", {"name": "wait_for_message", "arguments": arguments})).encode(),
        headers={
            "Authorization": f"Bearer {key}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": LEGACY,
            "Content-Type": "application/json",
        },
        timeout=60,
    )


class Waiting(threading.Thread):
    """One call made in the background; its answer and when it came (seconds after `start`)."""

    def __init__(self, make: Any) -> None:
        super().__init__(daemon=True)
        self.make, self.answer, self.after = make, None, -1.0
        self.start_at = time.monotonic()

    def run(self) -> None:
        try:
            self.answer = self.make()
            self.after = time.monotonic() - self.start_at
        finally:
            connections.close_all()  # a call through the test client opened this thread's own


def test_mail_delivered_during_the_wait_answers_both_doors_and_waiters_hold_no_thread(
    live_url: str, alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    account, user = _mailbox(alice, imap_server, smtp_server, "alice")
    theirs, their_user = _mailbox(mallory, imap_server, smtp_server, "mallory")
    key, their_key = key_for(alice, ["read"]), key_for(mallory, ["read"])
    asked = {"account_id": account, "from": "codes@bank", "subject_contains": "sign-in code", "timeout_seconds": 40}
    rest = Waiting(lambda: _rest(live_url, key, asked))
    mcp = Waiting(lambda: _mcp(live_url, key, asked))
    # more parked waits than the server has threads (two workers of four): each must hold none
    others = [
        Waiting(
            lambda: _rest(live_url, key, {"account_id": account, "subject_contains": "never", "timeout_seconds": 15})
        )
        for _ in range(10)
    ]
    mallorys = Waiting(lambda: _rest(live_url, their_key, {"account_id": theirs, "timeout_seconds": 40}))
    for waiting in (rest, mcp, *others, mallorys):
        waiting.start()
    time.sleep(2.0)
    assert all(w.answer is None for w in (rest, mcp, *others, mallorys)), "a wait answered before any mail came"
    began = time.monotonic()
    listed = httpx2.post(
        f"{live_url}/api/v1/ops/list_accounts", json={}, headers={"Authorization": f"Bearer {key}"}, timeout=10
    )
    assert listed.status_code == 200 and time.monotonic() - began < 5, "the server had no thread left"

    # what does not match wakes the waiters, who look, find nothing and wait on
    _deliver_and_sync(imap_server, user, account, "Weekly newsletter", "news@shop.example")
    time.sleep(1.0)
    assert rest.answer is None and mcp.answer is None
    # mallory's own mail with the same subject answers none of alice's waits
    _deliver_and_sync(imap_server, their_user, theirs, CODE_SUBJECT, "codes@bank.example")
    mallorys.join(20)
    assert mallorys.answer is not None and mallorys.answer.json()["matched"] is True
    time.sleep(1.0)
    assert rest.answer is None and mcp.answer is None

    delivered = time.monotonic()
    _deliver_and_sync(imap_server, user, account, CODE_SUBJECT, "codes@bank.example")
    rest.join(20)
    mcp.join(20)
    assert rest.answer is not None and mcp.answer is not None
    assert time.monotonic() - delivered < 10
    found = rest.answer.json()
    assert rest.answer.status_code == 200, found
    assert found["matched"] is True and found["account_id"] == account
    assert found["message"]["subject"] == CODE_SUBJECT
    assert found["message"]["sender"]["address"] == "codes@bank.example"
    result = mcp.answer.json()["result"]
    assert not result.get("isError"), result
    assert result["structuredContent"]["message"]["id"] == found["message"]["id"]
    assert CODE_SUBJECT in result["structuredContent"]["message"]["subject"]  # fenced as mail text
    assert result["structuredContent"]["message"]["subject"] != CODE_SUBJECT
    assert mallorys.answer.json()["message"]["id"] != found["message"]["id"]

    # the other waits answer at their deadline, matched false, none of them stuck
    for waiting in others:
        waiting.join(60)
        assert waiting.answer is not None and waiting.answer.status_code == 200
        assert waiting.answer.json()["matched"] is False and waiting.answer.json()["message"] is None
        assert 14 < waiting.after < 30
    # each look was a call through the gate, audited on its door
    audited = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="wait_for_message")
    assert {e.door for e in audited} == {"api", "mcp"} and audited.count() >= 2 * 12
    assert not [e for e in AuditEvent.objects.for_tenant(mallory.tenant) if account in json.dumps(e.targets)]


def test_a_wait_in_another_workspace_or_tenant_is_refused_as_absent(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    elsewhere = Workspace.objects.create(tenant=alice.tenant, name="family")
    account, _ = _mailbox(alice, imap_server, smtp_server, "alice")
    family, _ = _mailbox(alice, imap_server, smtp_server, "family", workspace=elsewhere)
    theirs, _ = _mailbox(mallory, imap_server, smtp_server, "mallory")
    restricted = as_agent(alice, scopes={"read"}, workspaces=("default",))
    for other in (family, theirs):
        refused = refusal(restricted, "wait_for_message", {"account_id": other, "timeout_seconds": 1})
        assert refused.code in {"NOT_FOUND", "OUT_OF_SCOPE"}, refused
    # the gate itself never waits: a door does (here the test client's thread, with no worker to park it)
    assert call(restricted, "wait_for_message", {"account_id": account, "timeout_seconds": 2})["matched"] is False
    started = time.monotonic()
    answer = rest_call(key_for(alice, ["read"]), "wait_for_message", {"account_id": account, "timeout_seconds": 2})
    assert answer.status_code == 200 and answer.json()["matched"] is False
    assert 1.5 <= time.monotonic() - started < 10


def test_mail_already_there_after_the_time_asked_answers_at_once_and_bounds_name_the_field(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    account, user = _mailbox(alice, imap_server, smtp_server, "alice")
    theirs, their_user = _mailbox(mallory, imap_server, smtp_server, "mallory")
    before = timezone.now() - timedelta(seconds=5)
    _deliver_and_sync(imap_server, user, account, "Re: the contract", "bob@example.org")
    _deliver_and_sync(imap_server, their_user, theirs, "Re: the contract", "bob@example.org")
    agent = as_agent(alice, scopes={"read"})
    started = time.monotonic()
    out = call(agent, "wait_for_message", {"account_id": account, "from": "BOB@", "arrived_after": before.isoformat()})
    assert out["matched"] is True and time.monotonic() - started < 2
    assert out["message"]["account_id"] == account
    # the default is the call's start: mail stored before it is not what it waits for
    assert call(agent, "wait_for_message", {"account_id": account, "timeout_seconds": 1})["matched"] is False
    too_long = refusal(agent, "wait_for_message", {"account_id": account, "timeout_seconds": 121})
    assert too_long.code == "LIMIT_EXCEEDED" and too_long.field == "timeout_seconds"
    bad = refusal(agent, "wait_for_message", {"account_id": account, "arrived_after": "yesterday-ish"})
    assert bad.code == "INVALID_INPUT" and bad.field == "arrived_after" and "yesterday" not in bad.message


def test_a_server_that_stops_answers_its_parked_waits_first(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    account, _ = _mailbox(alice, imap_server, smtp_server, "alice")
    _mailbox(mallory, imap_server, smtp_server, "mallory")
    key = key_for(alice, ["read"])
    port = free_port()
    env = {**os.environ, "DATABASE_URL": _database_url(), "OAKEN_DB_CONN_MAX_AGE": "0"}
    proc = subprocess.Popen(
        web_command(f"127.0.0.1:{port}", 2, quiet=True), env=env, stdout=subprocess.DEVNULL, text=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(url, proc)
        waiting = Waiting(lambda: _rest(url, key, {"account_id": account, "timeout_seconds": 60}))
        waiting.start()
        time.sleep(2.0)
        assert waiting.answer is None
        proc.send_signal(signal.SIGTERM)
        waiting.join(20)
        # its answer as it stands (nothing yet), well before the deadline: not a connection dropped at the end of
        # the grace period
        assert waiting.answer is not None and waiting.answer.status_code == 200
        assert waiting.answer.json()["matched"] is False and waiting.after < 15
        assert proc.wait(30) == 0
    finally:
        stop(proc)


def test_a_lost_listening_connection_loses_no_wake(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    """The connection that LISTENs is killed mid-wait (a database restart, a proxy): every waiter looks again, the
    thread connects again, and mail that comes next still answers the wait."""
    account, user = _mailbox(alice, imap_server, smtp_server, "alice")
    theirs, their_user = _mailbox(mallory, imap_server, smtp_server, "mallory")
    key = key_for(alice, ["read"])
    waiting = Waiting(lambda: rest_call(key, "wait_for_message", {"account_id": account, "timeout_seconds": 40}))
    waiting.start()
    deadline = time.monotonic() + 10
    while not hub.listening.is_set():
        assert time.monotonic() < deadline, "the wait never listened"
        time.sleep(0.05)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [hub.backend_pid])
        assert cursor.fetchall() == [(True,)]
    # the thread connects again (after a second's pause); the waiter looked again meanwhile and waits on
    time.sleep(0.5)
    deadline = time.monotonic() + 20
    while not hub.listening.is_set():
        assert time.monotonic() < deadline, "the wait never listened again"
        time.sleep(0.05)
    assert waiting.answer is None
    _deliver_and_sync(imap_server, their_user, theirs, "Code 1", "codes@bank.example")
    _deliver_and_sync(imap_server, user, account, "Code 2", "codes@bank.example")
    waiting.join(20)
    assert waiting.answer is not None and waiting.answer.json()["matched"] is True
    assert waiting.answer.json()["message"]["subject"] == "Code 2" and waiting.after < 20
