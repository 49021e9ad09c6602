"""Snooze on a connected mailbox, against a real Dovecot: snoozing moves the message to the server's Archive (so
the mailbox's other clients stop showing it in their inbox), the return moves it back to INBOX without \\Seen, and
syncs in between change neither. Mallory's mailbox, on the same server, is untouched; hers has no Archive, and
snoozing there is refused before anything moves."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from apps.mail.models import Message
from apps.worker.snooze import return_due
from tests.callers import as_person, call, refusal
from tests.conftest import Person
from tests.imapbox import by_message_id, connect, eager, mail, sync  # noqa: F401 (eager: a fixture)
from tests.mailservers import ImapServer, SmtpServer

SEEN = b"\\Seen"


def on_server(
    server: ImapServer, user: str, names: tuple[str, ...] = ("INBOX", "Archive")
) -> dict[str, list[tuple[bytes, tuple[bytes, ...]]]]:
    """Each folder's Message-IDs with their flags (\\Recent aside)."""
    found = {}
    for name in names:
        found[name] = sorted(
            (raw.split(b"Message-ID: ")[1].split(b"\r\n")[0], tuple(f for f in flags if f != b"\\Recent"))
            for _, raw, flags in server.folder_messages(user, name)
        )
    return found


@pytest.mark.usefixtures("eager")
def test_a_snoozed_message_waits_in_the_servers_archive_and_comes_back_to_its_inbox_unread(
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    account, user = connect(alice, imap_server, smtp_server)
    theirs, their_user = connect(mallory, imap_server, smtp_server)
    with imap_server.client(user) as c:
        c.create_folder("Archive")
    first, second = mail(2)
    imap_server.append(user, "INBOX", first, flags=(SEEN,))
    imap_server.append(user, "INBOX", second)
    imap_server.append(their_user, "INBOX", mail(1, "mallory")[0])
    sync(account)
    sync(theirs)
    held = by_message_id(alice, account)
    snoozed = str(held["m-0@example.test"].pk)
    assert held["m-0@example.test"].read and held["m-0@example.test"].folder.kind == "inbox"
    me = as_person(alice)

    with django_capture_on_commit_callbacks(execute=True):
        call(
            me,
            "snooze_messages",
            {"message_ids": [snoozed], "until": (timezone.now() + timedelta(hours=2)).isoformat()},
        )
    assert on_server(imap_server, user) == {
        "INBOX": [(b"<m-1@example.test>", ())],
        "Archive": [(b"<m-0@example.test>", (SEEN,))],
    }
    # a sync finds it where the snooze put it: nothing moves back, the snooze stays
    sync(account)
    row = by_message_id(alice, account)["m-0@example.test"]
    assert (row.folder.kind, row.imap_folder and row.imap_folder.name, row.snoozed_until is not None) == (
        "archive",
        "Archive",
        True,
    )

    Message.objects.for_tenant(alice.tenant).filter(pk=snoozed).update(
        snoozed_until=timezone.now() - timedelta(minutes=1)
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert return_due() == 1
    assert on_server(imap_server, user) == {
        "INBOX": [(b"<m-0@example.test>", ()), (b"<m-1@example.test>", ())],
        "Archive": [],
    }
    sync(account)
    row = by_message_id(alice, account)["m-0@example.test"]
    assert (row.folder.kind, row.read, row.snoozed_until, row.imap_folder and row.imap_folder.name) == (
        "inbox",
        False,
        None,
        "INBOX",
    )
    assert row.returned_at is not None
    listed = call(me, "list_messages", {"account_id": account, "folder": "inbox"})["messages"]
    assert listed[0]["id"] == snoozed  # on top, though the older of the two by Date

    # mallory's mailbox has no Archive: refused, and nothing of hers moved
    hers = str(by_message_id(mallory, theirs)["mallory-0@example.test"].pk)
    until = (timezone.now() + timedelta(hours=2)).isoformat()
    error = refusal(as_person(mallory), "snooze_messages", {"message_ids": [hers], "until": until})
    assert (error.code, error.field) == ("INVALID_INPUT", "message_ids") and "Archive" in error.message
    assert refusal(as_person(mallory), "snooze_messages", {"message_ids": [snoozed], "until": until}).code == (
        "NOT_FOUND"
    )
    assert [m for m, _ in on_server(imap_server, their_user, ("INBOX",))["INBOX"]] == [b"<mallory-0@example.test>"]
