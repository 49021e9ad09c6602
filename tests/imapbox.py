"""Connected mailboxes on the test Dovecot: connect one through the gate, sync it, look at what Oaken holds."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from apps.mail.models import Folder, Message
from apps.mail.sync import SyncOutcome, run_sync
from config.celery import app
from tests.callers import as_person, call
from tests.conftest import Person
from tests.mailfactory import raw_message
from tests.mailservers import PASSWORD, ImapServer, SmtpServer


def new_user(server: ImapServer) -> str:
    """A fresh Dovecot user: tests share the module's server, never a mailbox."""
    return server.add_user(f"user-{uuid.uuid4().hex[:10]}@example.test")


def server_settings(
    server: ImapServer, smtp: SmtpServer, user: str, password: str = PASSWORD
) -> dict[str, dict[str, Any]]:
    return {
        "imap": {"host": server.host, "port": server.port, "security": "none", "username": user, "password": password},
        "smtp": {"host": smtp.host, "port": smtp.port, "security": "none"},
    }


def connect(p: Person, server: ImapServer, smtp: SmtpServer, *, name: str = "Mail") -> tuple[str, str]:
    """Connect a new Dovecot user's mailbox as p (an OWNER); (account id, IMAP user)."""
    user = new_user(server)
    out = call(as_person(p), "connect_mailbox", {"account_name": name, **server_settings(server, smtp, user)})
    return out["id"], user


def sync(account_id: str) -> SyncOutcome:
    outcome = run_sync(account_id, force=True)
    assert outcome.state == "synced", outcome
    return outcome


def mail(n: int, prefix: str = "m") -> list[bytes]:
    return [
        raw_message(subject=f"Note {i}", body=f"Note {i}.\n", message_id=f"<{prefix}-{i}@example.test>")
        for i in range(n)
    ]


def held(p: Person, account_id: str) -> list[Message]:
    return list(
        Message.objects.for_tenant(p.tenant)
        .filter(account_id=account_id)
        .select_related("folder", "imap_folder")
        .order_by("message_id")
    )


def by_message_id(p: Person, account_id: str) -> dict[str, Message]:
    found = held(p, account_id)
    ids = [m.message_id for m in found]
    assert len(ids) == len(set(ids)), "a message is held twice"
    return {m.message_id: m for m in found}


def folder(p: Person, account_id: str, name: str) -> Folder:
    return Folder.objects.for_tenant(p.tenant).get(account_id=account_id, name=name)


@pytest.fixture
def eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """Celery tasks run in this process when queued (the real-worker path is tests/test_tasks.py)."""
    monkeypatch.setitem(app.conf, "task_always_eager", True)
    monkeypatch.setitem(app.conf, "task_eager_propagates", True)
