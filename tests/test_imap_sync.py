"""IMAP sync against a real Dovecot (SPEC §16): initial and incremental, flags both ways (\\Seen is read,
\\Flagged is pinned), moves mirrored, deletions on the server mirrored after a grace period, UIDVALIDITY
changes, interrupted syncs resumed, backoff, one worker per account.

Mallory, in another tenant, has her own connected mailbox on the same server: nothing alice's syncs or
changes do reaches it, and none of alice's mail is ever visible to her.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connections
from django.utils import timezone
from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientError
from pytest_django import Settings

from apps.audit.models import AuditEvent
from apps.mail import sync as sync_module
from apps.mail.mirror import mirror_lock, push_flags, push_moves
from apps.mail.models import FLAG_SEEN, FolderKind, MailAccount, Message, Thread
from apps.mail.sync import account_lock, due_accounts, run_sync
from apps.mail.tasks import push_flags_task, sync_account_task, sync_due_accounts_task
from tests.callers import as_agent, as_person, call, refusal
from tests.conftest import Person
from tests.imapbox import by_message_id, connect, eager, folder, mail, sync  # noqa: F401 (eager: a fixture)
from tests.mailfactory import raw_message
from tests.mailservers import ImapServer, SmtpServer

SEEN = b"\\Seen"


def server_flags(server: ImapServer, user: str, name: str) -> list[tuple[bytes, ...]]:
    """Each message's flags on the server, oldest first (\\Recent aside: it says who looked first)."""
    return [tuple(f for f in flags if f != b"\\Recent") for _, _, flags in server.folder_messages(user, name)]


@pytest.fixture
def boxes(alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer) -> dict[str, Any]:
    """Alice's and mallory's connected mailboxes, each with mail of its own, synced once."""
    alice_id, alice_user = connect(alice, imap_server, smtp_server)
    mallory_id, mallory_user = connect(mallory, imap_server, smtp_server)
    for raw in mail(2, "mallory"):
        imap_server.append(mallory_user, "INBOX", raw)
    sync(mallory_id)
    return {"alice": alice_id, "alice_user": alice_user, "mallory": mallory_id, "mallory_user": mallory_user}


def mallory_unchanged(mallory: Person, boxes: dict[str, Any], imap_server: ImapServer) -> None:
    held = by_message_id(mallory, boxes["mallory"])
    assert sorted(held) == ["mallory-0@example.test", "mallory-1@example.test"]
    assert all(not m.read and m.folder.kind == FolderKind.INBOX for m in held.values())
    assert server_flags(imap_server, boxes["mallory_user"], "INBOX") == [(), ()]
    assert not Message.objects.for_tenant(mallory.tenant).exclude(account_id=boxes["mallory"]).exists()


def test_it_syncs_every_folder_then_only_what_is_new(
    alice: Person, mallory: Person, boxes: dict[str, Any], imap_server: ImapServer
) -> None:
    user = boxes["alice_user"]
    with imap_server.client(user) as c:
        c.create_folder("Projects")
    imap_server.append(user, "INBOX", mail(1, "in")[0], flags=(SEEN,))
    imap_server.append(user, "INBOX", mail(2, "in")[1])
    imap_server.append(user, "Sent", mail(1, "sent")[0], flags=(SEEN,))
    imap_server.append(user, "Projects", mail(1, "project")[0])

    outcome = sync(boxes["alice"])
    assert (outcome.counts.stored, outcome.counts.failed) == (4, 0)
    held = by_message_id(alice, boxes["alice"])
    assert {k: (m.folder.kind, m.folder.name, m.read) for k, m in held.items()} == {
        "in-0@example.test": ("inbox", "INBOX", True),
        "in-1@example.test": ("inbox", "INBOX", False),
        "sent-0@example.test": ("sent", "Sent", True),
        "project-0@example.test": ("custom", "Projects", False),
    }
    assert all(m.imap_folder == m.folder and m.imap_uid for m in held.values())
    kinds = {f.name: f.kind for f in folder(alice, boxes["alice"], "INBOX").account.folders.all()}
    assert kinds == {
        "INBOX": "inbox",
        "Sent": "sent",
        "Drafts": "drafts",
        "Trash": "trash",
        "Junk": "spam",
        "Projects": "custom",
    }
    inbox = folder(alice, boxes["alice"], "INBOX")
    assert inbox.imap_uidvalidity and inbox.imap_last_uid == 2 and inbox.imap_highestmodseq > 0  # CONDSTORE

    imap_server.append(user, "INBOX", raw_message(subject="Later", message_id="<later@example.test>"))
    assert sync(boxes["alice"]).counts.stored == 1
    assert sync(boxes["alice"]).counts.stored == 0
    assert len(by_message_id(alice, boxes["alice"])) == 5
    listed = call(as_person(alice), "list_accounts")["accounts"]
    assert [(a["kind"], a["sync_error"]) for a in listed] == [("imap", "")] and listed[0]["last_synced_at"]
    assert [a["id"] for a in call(as_person(mallory), "list_accounts")["accounts"]] == [boxes["mallory"]]
    mallory_unchanged(mallory, boxes, imap_server)


def test_a_flag_changed_on_the_server_reaches_oaken(
    alice: Person, mallory: Person, boxes: dict[str, Any], imap_server: ImapServer
) -> None:
    user = boxes["alice_user"]
    for raw in mail(3):
        imap_server.append(user, "INBOX", raw)
    sync(boxes["alice"])
    with imap_server.client(user) as c:
        c.select_folder("INBOX")
        c.add_flags([1, 3], [SEEN])
    assert sync(boxes["alice"]).counts.flags_changed == 2
    assert {k: m.read for k, m in by_message_id(alice, boxes["alice"]).items()} == {
        "m-0@example.test": True,
        "m-1@example.test": False,
        "m-2@example.test": True,
    }
    with imap_server.client(user) as c:
        c.select_folder("INBOX")
        c.remove_flags([1], [SEEN])
    assert sync(boxes["alice"]).counts.flags_changed == 1
    assert not by_message_id(alice, boxes["alice"])["m-0@example.test"].read
    mallory_unchanged(mallory, boxes, imap_server)


@pytest.mark.usefixtures("eager")
def test_marking_read_through_the_gate_sets_seen_on_the_server(
    alice: Person,
    mallory: Person,
    boxes: dict[str, Any],
    imap_server: ImapServer,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    user = boxes["alice_user"]
    for raw in mail(3):
        imap_server.append(user, "INBOX", raw)
    sync(boxes["alice"])
    held = by_message_id(alice, boxes["alice"])
    ids = [str(held["m-0@example.test"].pk), str(held["m-2@example.test"].pk)]
    assistant = as_agent(alice)
    with django_capture_on_commit_callbacks(execute=True):
        assert call(assistant, "mark_read", {"message_ids": ids})["changed"] == 2
    assert server_flags(imap_server, user, "INBOX") == [(SEEN,), (), (SEEN,)]
    with django_capture_on_commit_callbacks(execute=True):
        call(assistant, "mark_unread", {"message_ids": ids[:1]})
    assert server_flags(imap_server, user, "INBOX") == [(), (), (SEEN,)]
    # the next sync agrees with what Oaken holds: nothing flips back
    assert sync(boxes["alice"]).counts.flags_changed == 0
    assert [m.read for m in by_message_id(alice, boxes["alice"]).values()] == [False, False, True]
    mallory_unchanged(mallory, boxes, imap_server)


@pytest.mark.usefixtures("eager")
def test_moves_trash_and_restore_are_mirrored_with_imap_move(
    alice: Person,
    mallory: Person,
    boxes: dict[str, Any],
    imap_server: ImapServer,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    user = boxes["alice_user"]
    with imap_server.client(user) as c:
        c.create_folder("Projects")
    for raw in mail(3):
        imap_server.append(user, "INBOX", raw)
    sync(boxes["alice"])
    held = by_message_id(alice, boxes["alice"])
    first, second = str(held["m-0@example.test"].pk), str(held["m-1@example.test"].pk)
    me = as_person(alice)

    def server() -> dict[str, list[bytes]]:
        return {
            name: sorted(
                raw.split(b"Message-ID: ")[1].split(b"\r\n")[0] for _, raw, _ in imap_server.folder_messages(user, name)
            )
            for name in ("INBOX", "Projects", "Trash")
        }

    with django_capture_on_commit_callbacks(execute=True):
        call(me, "move_messages", {"message_ids": [first], "folder": "Projects"})
        call(me, "trash_messages", {"message_ids": [second]})
    assert server() == {
        "INBOX": [b"<m-2@example.test>"],
        "Projects": [b"<m-0@example.test>"],
        "Trash": [b"<m-1@example.test>"],
    }
    moved = by_message_id(alice, boxes["alice"])
    # the server said where they went (COPYUID): the next sync fetches nothing again
    target = moved["m-0@example.test"].imap_folder
    assert target is not None and target.name == "Projects" and moved["m-0@example.test"].imap_uid
    assert sync(boxes["alice"]).counts == sync_module.SyncCounts(folders=6)

    with django_capture_on_commit_callbacks(execute=True):
        call(me, "restore_messages", {"message_ids": [second]})
    assert server()["INBOX"] == [b"<m-1@example.test>", b"<m-2@example.test>"] and server()["Trash"] == []
    sync(boxes["alice"])
    after = by_message_id(alice, boxes["alice"])
    assert {k: m.folder.name for k, m in after.items()} == {
        "m-0@example.test": "Projects",
        "m-1@example.test": "INBOX",
        "m-2@example.test": "INBOX",
    }
    assert all(m.imap_folder == m.folder for m in after.values())
    mallory_unchanged(mallory, boxes, imap_server)


def test_a_move_made_on_the_server_by_another_client_moves_the_message_without_a_copy(
    alice: Person, boxes: dict[str, Any], imap_server: ImapServer
) -> None:
    user = boxes["alice_user"]
    for raw in mail(2):
        imap_server.append(user, "INBOX", raw)
    sync(boxes["alice"])
    with imap_server.client(user) as c:
        c.select_folder("INBOX")
        c.move([2], "Junk")
    sync(boxes["alice"])
    held = by_message_id(alice, boxes["alice"])
    assert {k: m.folder.kind for k, m in held.items()} == {"m-0@example.test": "inbox", "m-1@example.test": "spam"}


def test_a_new_uidvalidity_lists_the_folder_again_without_duplicates_or_loss(
    alice: Person, mallory: Person, boxes: dict[str, Any], imap_server: ImapServer
) -> None:
    user = boxes["alice_user"]
    with imap_server.client(user) as c:
        c.create_folder("Projects")
    for raw in mail(3, "p"):
        imap_server.append(user, "Projects", raw, flags=(SEEN,))
    sync(boxes["alice"])
    before = folder(alice, boxes["alice"], "Projects").imap_uidvalidity

    # the folder is recreated on the server: new UIDVALIDITY, two of the old messages and a new one
    with imap_server.client(user) as c:
        c.delete_folder("Projects")
        c.create_folder("Projects")
    for raw in [*mail(3, "p")[1:], raw_message(subject="New", message_id="<p-new@example.test>")]:
        imap_server.append(user, "Projects", raw)
    outcome = sync(boxes["alice"])
    projects = folder(alice, boxes["alice"], "Projects")
    assert projects.imap_uidvalidity != before
    assert (outcome.counts.stored, outcome.counts.relocated) == (1, 2)
    held = by_message_id(alice, boxes["alice"])
    assert sorted(held) == ["p-0@example.test", "p-1@example.test", "p-2@example.test", "p-new@example.test"]
    server_uids = {uid for uid, _, _ in imap_server.folder_messages(user, "Projects")}
    assert {held[k].imap_uid for k in ("p-1@example.test", "p-2@example.test", "p-new@example.test")} == server_uids
    # gone from the server, kept in Oaken (never lost), with no UID of the new generation
    assert held["p-0@example.test"].imap_uid is None
    # the server's flags hold for the messages listed again
    assert [held[k].read for k in ("p-1@example.test", "p-2@example.test")] == [False, False]
    assert sync(boxes["alice"]).counts.stored == 0
    mallory_unchanged(mallory, boxes, imap_server)


def test_an_interrupted_sync_resumes_without_loss_or_duplicates(
    alice: Person,
    mallory: Person,
    boxes: dict[str, Any],
    imap_server: ImapServer,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "SYNC_BATCH_SIZE": 2}
    user = boxes["alice_user"]
    for raw in mail(7):
        imap_server.append(user, "INBOX", raw)
    original = sync_module._FolderStore._after_batch
    batches = []

    def crash_in_the_second_batch(self: Any, *args: Any) -> None:
        batches.append(1)
        if len(batches) == 2:
            # the batch's messages are written by now; the crash must take them back with it
            assert Message.objects.for_tenant(alice.tenant).filter(account_id=boxes["alice"]).count() == 4
            raise RuntimeError("worker lost")
        original(self, *args)

    monkeypatch.setattr(sync_module._FolderStore, "_after_batch", crash_in_the_second_batch)
    with pytest.raises(RuntimeError):
        run_sync(boxes["alice"], force=True)
    assert sorted(by_message_id(alice, boxes["alice"])) == ["m-0@example.test", "m-1@example.test"]
    assert folder(alice, boxes["alice"], "INBOX").imap_last_uid == 2
    account = MailAccount.objects.for_tenant(alice.tenant).get(pk=boxes["alice"])
    assert (account.sync_error, account.sync_failures) == ("sync_failed", 1)

    monkeypatch.setattr(sync_module._FolderStore, "_after_batch", original)
    with imap_server.client(user) as c:  # meanwhile a stored message was read elsewhere
        c.select_folder("INBOX")
        c.add_flags([1], [SEEN])
    outcome = sync(boxes["alice"])
    assert outcome.counts.stored == 5
    held = by_message_id(alice, boxes["alice"])
    assert sorted(held) == [f"m-{i}@example.test" for i in range(7)]
    assert sorted(m.imap_uid or 0 for m in held.values()) == list(range(1, 8))
    assert held["m-0@example.test"].read
    account.refresh_from_db()
    assert (account.sync_error, account.sync_failures) == ("", 0)
    mallory_unchanged(mallory, boxes, imap_server)


def test_a_failing_account_backs_off_and_shows_a_fixed_reason(
    alice: Person, mallory: Person, boxes: dict[str, Any], imap_server: ImapServer
) -> None:
    account = MailAccount.objects.for_tenant(alice.tenant).get(pk=boxes["alice"])
    credentials = account.credentials
    account.credentials = credentials | {"imap": credentials["imap"] | {"password": "changed-on-the-server"}}
    account.save(update_fields=["credentials"])

    started = timezone.now()
    assert run_sync(account.pk).reason == "login_failed"
    account.refresh_from_db()
    assert account.sync_failures == 1 and account.sync_error == "login_failed"
    # Dovecot answers a failed login after a pause of its own
    assert timedelta(seconds=59) < account.sync_next_at - started <= timedelta(seconds=70)
    assert run_sync(account.pk).state == "waiting"  # backing off: the beat's task does nothing
    assert account.pk not in due_accounts() and boxes["mallory"] in {str(a) for a in due_accounts()}
    run_sync(account.pk, force=True)
    account.refresh_from_db()
    assert account.sync_failures == 2 and account.sync_next_at - timezone.now() > timedelta(seconds=110)
    account.sync_failures = 30
    account.save(update_fields=["sync_failures"])
    run_sync(account.pk, force=True)
    account.refresh_from_db()
    assert account.sync_next_at - timezone.now() <= timedelta(seconds=3600)  # capped

    listed = call(as_person(alice), "list_accounts")["accounts"]
    assert listed[0]["sync_error"] == "login_failed"
    assert "changed-on-the-server" not in str(listed)
    # mallory's account is not held back by alice's
    assert run_sync(boxes["mallory"]).state == "synced"
    mallory_unchanged(mallory, boxes, imap_server)

    account.credentials = credentials
    account.save(update_fields=["credentials"])
    sync(str(account.pk))
    account.refresh_from_db()
    assert (account.sync_failures, account.sync_error, account.sync_next_at) == (0, "", None)


def test_an_unreachable_server_is_a_connection_failure(alice: Person, boxes: dict[str, Any]) -> None:
    account = MailAccount.objects.for_tenant(alice.tenant).get(pk=boxes["alice"])
    account.credentials = account.credentials | {"imap": account.credentials["imap"] | {"port": 1}}
    account.save(update_fields=["credentials"])
    assert run_sync(account.pk).reason == "connection_failed"


def test_two_workers_never_sync_one_account_at_once(alice: Person, boxes: dict[str, Any]) -> None:
    taken, release = threading.Event(), threading.Event()

    def other_worker() -> None:
        try:
            with account_lock(boxes["alice"]) as held:
                assert held
                taken.set()
                release.wait(30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=other_worker)
    thread.start()
    try:
        assert taken.wait(30)
        assert run_sync(boxes["alice"], force=True).state == "busy"
    finally:
        release.set()
        thread.join()
    assert run_sync(boxes["alice"], force=True).state == "synced"


def test_the_beat_queues_a_sync_for_each_due_account(
    alice: Person, boxes: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = django_settings.CELERY_BEAT_SCHEDULE["mail-sync-due-accounts"]
    assert entry == {"task": "mail.sync_due_accounts", "schedule": 60.0}  # every minute unless configured
    queued: list[dict[str, Any]] = []
    monkeypatch.setattr(sync_account_task, "delay", lambda **kw: queued.append(kw))
    MailAccount.objects.for_tenant(alice.tenant).filter(pk=boxes["alice"]).update(
        sync_next_at=timezone.now() + timedelta(minutes=5)
    )
    assert sync_due_accounts_task() == len(queued)
    assert {"account_id": boxes["mallory"]} in queued
    assert {"account_id": boxes["alice"]} not in queued


def sync_events(p: Person) -> list[AuditEvent]:
    return list(AuditEvent.objects.for_tenant(p.tenant).filter(operation="imap_sync").order_by("seq"))


def test_a_message_deleted_on_the_server_is_removed_once_a_complete_sync_still_misses_it(
    alice: Person, mallory: Person, boxes: dict[str, Any], imap_server: ImapServer, settings: Settings
) -> None:
    user = boxes["alice_user"]
    for raw in mail(4):
        imap_server.append(user, "INBOX", raw)
    sync(boxes["alice"])
    before = by_message_id(alice, boxes["alice"])
    with imap_server.client(user) as c:
        c.select_folder("INBOX")
        c.delete_messages([2])  # m-1: deleted for good
        c.expunge()
        c.move([4], "Junk")  # m-3: moved by another client, which expunges it from INBOX too
    outcome = sync(boxes["alice"])
    assert (outcome.counts.missing, outcome.counts.relocated, outcome.counts.removed) == (2, 1, 0)
    held = by_message_id(alice, boxes["alice"])
    # within the grace period the deleted one stays, marked; the moved one was found in its new folder
    assert held["m-1@example.test"].imap_missing_since is not None and held["m-1@example.test"].imap_uid is None
    assert (
        held["m-3@example.test"].folder.kind == FolderKind.SPAM and held["m-3@example.test"].imap_missing_since is None
    )
    assert sync(boxes["alice"]).counts.removed == 0  # an hour of grace by default

    settings.OPERATIONS = {**settings.OPERATIONS, "SYNC_MISSING_GRACE_SECONDS": 0}
    assert sync(boxes["alice"]).counts.removed == 1
    held = by_message_id(alice, boxes["alice"])
    assert sorted(held) == ["m-0@example.test", "m-2@example.test", "m-3@example.test"]
    gone = before["m-1@example.test"]
    assert not Thread.objects.for_tenant(alice.tenant).filter(pk=gone.thread_id).exists()
    assert refusal(as_person(alice), "get_message", {"message_id": str(gone.pk)}).code == "NOT_FOUND"
    removal = [t for e in sync_events(alice) for t in e.targets if t["after"].get("removed")]
    assert removal == [
        {
            "id": str(gone.pk),
            "before": {"folder_id": str(gone.folder_id)},
            "after": {"removed": "deleted on the server"},
        }
    ]
    assert sync(boxes["alice"]).counts == sync_module.SyncCounts(folders=5)
    assert sync_events(mallory) == []
    mallory_unchanged(mallory, boxes, imap_server)


def test_a_folder_deleted_on_the_server_takes_its_messages_and_then_goes(
    alice: Person, mallory: Person, boxes: dict[str, Any], imap_server: ImapServer, settings: Settings
) -> None:
    user = boxes["alice_user"]
    with imap_server.client(user) as c:
        c.create_folder("Projects")
        c.create_folder("Old")
    for raw in mail(2, "p"):
        imap_server.append(user, "Projects", raw)
    imap_server.append(user, "Old", mail(1, "o")[0])
    sync(boxes["alice"])
    with imap_server.client(user) as c:
        c.select_folder("Old")
        c.move([1], "INBOX")  # kept: it moves before its folder goes
        c.close_folder()
        c.delete_folder("Old")
        c.rename_folder("Projects", "Archive 2026")  # a rename is a folder gone and a new one
    settings.OPERATIONS = {**settings.OPERATIONS, "SYNC_MISSING_GRACE_SECONDS": 0}
    first = sync(boxes["alice"])
    assert (first.counts.stored, first.counts.relocated, first.counts.removed) == (0, 3, 0)
    held = by_message_id(alice, boxes["alice"])
    assert {k: m.folder.name for k, m in held.items()} == {
        "p-0@example.test": "Archive 2026",
        "p-1@example.test": "Archive 2026",
        "o-0@example.test": "INBOX",
    }
    names = set(folder(alice, boxes["alice"], "INBOX").account.folders.values_list("name", flat=True))
    assert "Old" not in names and "Projects" not in names and "Archive 2026" in names
    assert sync(boxes["alice"]).counts.removed == 0
    mallory_unchanged(mallory, boxes, imap_server)


FLAGGED = b"\\Flagged"


@pytest.mark.usefixtures("eager")
def test_pinned_is_flagged_both_ways(
    alice: Person,
    mallory: Person,
    boxes: dict[str, Any],
    imap_server: ImapServer,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    user = boxes["alice_user"]
    imap_server.append(user, "INBOX", mail(1)[0], flags=(FLAGGED,))
    imap_server.append(user, "INBOX", mail(2)[1])
    sync(boxes["alice"])
    held = by_message_id(alice, boxes["alice"])
    assert [held["m-0@example.test"].pinned, held["m-1@example.test"].pinned] == [True, False]

    with imap_server.client(user) as c:
        c.select_folder("INBOX")
        c.remove_flags([1], [FLAGGED])
        c.add_flags([2], [FLAGGED, SEEN])
    assert sync(boxes["alice"]).counts.flags_changed == 2
    held = by_message_id(alice, boxes["alice"])
    assert [(m.pinned, m.read) for m in held.values()] == [(False, False), (True, True)]
    changes = [t for e in sync_events(alice) for t in e.targets]
    assert {
        "id": str(held["m-1@example.test"].pk),
        "before": {"read": False, "pinned": False},
        "after": {"read": True, "pinned": True},
    } in changes

    with django_capture_on_commit_callbacks(execute=True):
        call(as_agent(alice), "set_pinned", {"message_ids": [str(held["m-0@example.test"].pk)], "pinned": True})
    assert [tuple(sorted(f)) for f in server_flags(imap_server, user, "INBOX")] == [(FLAGGED,), (FLAGGED, SEEN)]
    assert Message.objects.for_tenant(alice.tenant).filter(flags_pending_at__isnull=False).count() == 0
    assert sync(boxes["alice"]).counts.flags_changed == 0
    assert sync_events(mallory) == []
    mallory_unchanged(mallory, boxes, imap_server)


def test_a_sync_before_the_push_never_undoes_a_change_made_in_oaken(
    alice: Person,
    mallory: Person,
    boxes: dict[str, Any],
    imap_server: ImapServer,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    user = boxes["alice_user"]
    for raw in mail(2):
        imap_server.append(user, "INBOX", raw)
    sync(boxes["alice"])
    first = by_message_id(alice, boxes["alice"])["m-0@example.test"]
    with django_capture_on_commit_callbacks(execute=False) as pushes:  # the push task has not run yet
        call(as_person(alice), "mark_read", {"message_ids": [str(first.pk)]})
    assert pushes[-1].keywords["message_ids"] == [str(first.pk)]  # the push, waiting for its worker
    with imap_server.client(user) as c:  # meanwhile another client flags it (and the server says it is unread)
        c.select_folder("INBOX")
        c.add_flags([1], [FLAGGED])
    # the other client's flag is taken; Oaken's read, which the server has not heard of yet, is kept
    assert sync(boxes["alice"]).counts.flags_changed == 1
    first.refresh_from_db()
    assert (first.read, first.pinned, first.flags_pending) == (True, True, FLAG_SEEN)

    assert push_flags(tenant=alice.tenant, message_ids=[str(first.pk)]) == 1  # the task runs late
    # only what changed in Oaken was pushed: the other client's flag stands beside it
    assert [tuple(sorted(f)) for f in server_flags(imap_server, user, "INBOX")] == [(FLAGGED, SEEN), ()]
    first.refresh_from_db()
    assert (first.flags_pending, first.flags_pending_at) == (0, None)
    # the flags held back are asked for again (the MODSEQ was not moved past them): all agree now
    assert sync(boxes["alice"]).counts.flags_changed == 0
    first.refresh_from_db()
    assert (first.read, first.pinned) == (True, True)
    with imap_server.client(user) as c:
        c.select_folder("INBOX")
        c.remove_flags([1], [SEEN])
    assert sync(boxes["alice"]).counts.flags_changed == 1  # with nothing pending, the server's change counts
    mallory_unchanged(mallory, boxes, imap_server)


def test_a_push_that_never_ran_is_queued_again_by_a_later_sync(
    alice: Person,
    mallory: Person,
    boxes: dict[str, Any],
    imap_server: ImapServer,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    user = boxes["alice_user"]
    imap_server.append(user, "INBOX", mail(1)[0])
    sync(boxes["alice"])
    message = by_message_id(alice, boxes["alice"])["m-0@example.test"]
    with django_capture_on_commit_callbacks(execute=False):  # its push is lost
        call(as_person(alice), "set_pinned", {"message_ids": [str(message.pk)], "pinned": True})
    queued: list[dict[str, Any]] = []
    monkeypatch.setattr(push_flags_task, "delay", lambda **kw: queued.append(kw))
    with django_capture_on_commit_callbacks(execute=True):
        sync(boxes["alice"])
    assert queued == []  # still young: its own task may yet run
    Message.objects.for_tenant(alice.tenant).filter(pk=message.pk).update(
        flags_pending_at=timezone.now() - timedelta(hours=1)
    )
    with django_capture_on_commit_callbacks(execute=True):
        sync(boxes["alice"])
        sync(boxes["mallory"])
    assert queued == [{"tenant_id": str(alice.tenant.pk), "message_ids": [str(message.pk)]}]
    with django_capture_on_commit_callbacks(execute=True):
        sync(boxes["alice"])
    assert len(queued) == 1  # queued again at most once a period
    mallory_unchanged(mallory, boxes, imap_server)


def test_a_copy_on_the_server_never_takes_the_message_away_and_keeps_it_when_the_original_goes(
    alice: Person, mallory: Person, boxes: dict[str, Any], imap_server: ImapServer, settings: Settings
) -> None:
    user = boxes["alice_user"]
    with imap_server.client(user) as c:
        c.create_folder("Saved")
    for raw in mail(2):
        imap_server.append(user, "INBOX", raw)
    sync(boxes["alice"])
    with imap_server.client(user) as c:  # another client keeps copies, as Gmail's All Mail does
        c.select_folder("INBOX")
        c.copy([1, 2], "Saved")
    assert sync(boxes["alice"]).counts == sync_module.SyncCounts(folders=6)
    held = by_message_id(alice, boxes["alice"])
    assert {(m.folder.name, m.imap_folder_id) for m in held.values()} == {("INBOX", held["m-0@example.test"].folder_id)}

    # the original goes: the same sync finds its copy, and Oaken follows it there
    with imap_server.client(user) as c:
        c.select_folder("INBOX")
        c.delete_messages([1])
        c.expunge()
    outcome = sync(boxes["alice"])
    assert (outcome.counts.missing, outcome.counts.relocated, outcome.counts.removed) == (1, 1, 0)
    first = by_message_id(alice, boxes["alice"])["m-0@example.test"]
    assert (first.folder.name, first.imap_folder_id, first.imap_uid, first.imap_missing_since) == (
        "Saved",
        first.folder_id,
        1,
        None,
    )

    # and when the copy goes too, it is gone from the server: removed once the grace period is over
    settings.OPERATIONS = {**settings.OPERATIONS, "SYNC_MISSING_GRACE_SECONDS": 0}
    with imap_server.client(user) as c:
        c.select_folder("Saved")
        c.delete_messages([1])
        c.expunge()
    assert (sync(boxes["alice"]).counts.missing, sync(boxes["alice"]).counts.removed) == (1, 1)
    assert sorted(by_message_id(alice, boxes["alice"])) == ["m-1@example.test"]
    assert by_message_id(alice, boxes["alice"])["m-1@example.test"].folder.name == "INBOX"
    mallory_unchanged(mallory, boxes, imap_server)


def test_a_move_by_another_client_into_a_folder_synced_earlier_is_followed_in_the_same_sync(
    alice: Person, mallory: Person, boxes: dict[str, Any], imap_server: ImapServer
) -> None:
    user = boxes["alice_user"]
    with imap_server.client(user) as c:
        c.create_folder("Zed")
    imap_server.append(user, "Zed", mail(1, "z")[0])
    sync(boxes["alice"])
    with imap_server.client(user) as c:  # INBOX is synced first: there it looks like a copy, until Zed is
        c.select_folder("Zed")
        c.move([1], "INBOX")
    outcome = sync(boxes["alice"])
    assert (outcome.counts.stored, outcome.counts.missing, outcome.counts.relocated) == (0, 1, 1)
    moved = by_message_id(alice, boxes["alice"])["z-0@example.test"]
    assert (moved.folder.name, moved.imap_folder_id, moved.imap_uid, moved.imap_missing_since) == (
        "INBOX",
        moved.folder_id,
        1,
        None,
    )
    zed = folder(alice, boxes["alice"], "Zed")
    followed = {"id": str(moved.pk), "before": {"folder_id": str(zed.pk)}, "after": {"folder_id": str(moved.folder_id)}}
    assert followed in [t for e in sync_events(alice) for t in e.targets]
    assert sync(boxes["alice"]).counts == sync_module.SyncCounts(folders=6)
    assert sync_events(mallory) == []
    mallory_unchanged(mallory, boxes, imap_server)


def test_a_message_the_store_cannot_take_does_not_make_every_sync_list_the_folder(
    alice: Person,
    mallory: Person,
    boxes: dict[str, Any],
    imap_server: ImapServer,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    user = boxes["alice_user"]
    settings.OPERATIONS = {**settings.OPERATIONS, "IMPORT_MAX_MESSAGE_BYTES": 2000}
    imap_server.append(user, "INBOX", mail(1)[0])
    imap_server.append(user, "INBOX", raw_message(subject="Big", body="x" * 5000, message_id="<big@example.test>"))
    imap_server.append(user, "INBOX", mail(3)[2])
    assert sync(boxes["alice"]).counts.failed == 1
    listings: list[str] = []
    original = sync_module._find_missing

    def counted(*args: Any) -> int:
        listings.append(args[2].name)
        return original(*args)

    monkeypatch.setattr(sync_module, "_find_missing", counted)
    for _ in range(2):
        assert sync(boxes["alice"]).counts.missing == 0
    assert listings == []  # the server's count of UIDs is compared with its own count last time
    with imap_server.client(user) as c:
        c.select_folder("INBOX")
        c.delete_messages([3])
        c.expunge()
    assert sync(boxes["alice"]).counts.missing == 1
    assert listings == ["INBOX"]
    mallory_unchanged(mallory, boxes, imap_server)


def test_a_folder_a_list_leaves_out_is_asked_for_before_its_messages_are_let_go(
    alice: Person, boxes: dict[str, Any], imap_server: ImapServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = boxes["alice_user"]
    with imap_server.client(user) as c:
        c.create_folder("Projects")
    imap_server.append(user, "Projects", mail(1, "p")[0])
    sync(boxes["alice"])
    listed = IMAPClient.list_folders

    def list_without_projects(self: IMAPClient, *args: Any, **kwargs: Any) -> list[Any]:
        return [entry for entry in listed(self, *args, **kwargs) if entry[2] != "Projects"]

    monkeypatch.setattr(IMAPClient, "list_folders", list_without_projects)  # a server's hiccup
    assert sync(boxes["alice"]).counts.missing == 0
    held = by_message_id(alice, boxes["alice"])["p-0@example.test"]
    assert (held.imap_uid, held.imap_missing_since) == (1, None)
    assert folder(alice, boxes["alice"], "Projects").imap_uidvalidity is not None


@pytest.mark.django_db(transaction=True)
def test_pushes_to_one_account_take_turns_and_each_pushes_what_oaken_holds_when_its_turn_comes(
    alice: Person, mallory: Person, boxes: dict[str, Any], imap_server: ImapServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(push_flags_task, "delay", lambda **kw: None)  # the pushes run here, by hand
    user = boxes["alice_user"]
    imap_server.append(user, "INBOX", mail(1)[0])
    sync(boxes["alice"])
    message = by_message_id(alice, boxes["alice"])["m-0@example.test"]
    call(as_person(alice), "mark_read", {"message_ids": [str(message.pk)]})
    finished = threading.Event()

    def late_push() -> None:  # a worker whose push of the mark_read comes late
        try:
            push_flags(tenant=alice.tenant, message_ids=[str(message.pk)])
            finished.set()
        finally:
            connections.close_all()

    with mirror_lock(boxes["alice"]) as held:  # another push of this account is under way
        assert held
        worker = threading.Thread(target=late_push)
        worker.start()
        assert not finished.wait(1.0)  # it waits its turn
        call(as_person(alice), "mark_unread", {"message_ids": [str(message.pk)]})  # meanwhile: unread again
    worker.join(30)
    assert finished.is_set()
    # it pushed what Oaken held when its turn came, not what it was queued for
    assert server_flags(imap_server, user, "INBOX") == [()]
    message.refresh_from_db()
    assert (message.read, message.flags_pending, message.flags_pending_at) == (False, 0, None)
    assert sync(boxes["alice"]).counts.flags_changed == 0
    mallory_unchanged(mallory, boxes, imap_server)


def test_a_push_leaves_a_folder_alone_whose_uidvalidity_changed(
    alice: Person,
    boxes: dict[str, Any],
    imap_server: ImapServer,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    user = boxes["alice_user"]
    with imap_server.client(user) as c:
        c.create_folder("Projects")
    imap_server.append(user, "Projects", mail(1, "p")[0])
    sync(boxes["alice"])
    message = by_message_id(alice, boxes["alice"])["p-0@example.test"]
    with django_capture_on_commit_callbacks(execute=False):
        call(as_person(alice), "mark_read", {"message_ids": [str(message.pk)]})
        call(as_person(alice), "move_messages", {"message_ids": [str(message.pk)], "folder": "INBOX"})
    with imap_server.client(user) as c:  # recreated before Oaken's next sync: UID 1 is another message now
        c.delete_folder("Projects")
        c.create_folder("Projects")
    imap_server.append(user, "Projects", mail(1, "other")[0])
    assert push_flags(tenant=alice.tenant, message_ids=[str(message.pk)]) == 0
    assert push_moves(tenant=alice.tenant, message_ids=[str(message.pk)]) == 0
    assert server_flags(imap_server, user, "Projects") == [()]  # the other message, untouched
    assert imap_server.folder_messages(user, "INBOX") == []
    message.refresh_from_db()
    assert message.flags_pending == FLAG_SEEN and message.imap_uid == 1  # it waits for the next sync


def test_a_change_the_server_refuses_gives_way_to_the_servers_flags(
    alice: Person,
    boxes: dict[str, Any],
    imap_server: ImapServer,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    user = boxes["alice_user"]
    imap_server.append(user, "INBOX", mail(1)[0])
    sync(boxes["alice"])
    message = by_message_id(alice, boxes["alice"])["m-0@example.test"]
    with django_capture_on_commit_callbacks(execute=False):
        call(as_person(alice), "mark_read", {"message_ids": [str(message.pk)]})

    def refuse(self: IMAPClient, *args: Any, **kwargs: Any) -> None:
        raise IMAPClientError("STORE failed: the folder is read-only")  # as a shared folder answers

    monkeypatch.setattr(IMAPClient, "add_flags", refuse)
    assert push_flags(tenant=alice.tenant, message_ids=[str(message.pk)]) == 1
    assert "read-only" not in caplog.text and "refused to change flags" in caplog.text
    message.refresh_from_db()
    assert (message.read, message.flags_pending) == (True, 0)
    assert folder(alice, boxes["alice"], "INBOX").imap_highestmodseq == 0
    # the next sync reads every flag of the folder again, and the server's stand
    assert sync(boxes["alice"]).counts.flags_changed == 1
    message.refresh_from_db()
    assert message.read is False


def test_batches_are_bounded_in_bytes_and_a_message_over_the_limit_is_never_fetched(
    alice: Person,
    mallory: Person,
    boxes: dict[str, Any],
    imap_server: ImapServer,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    user = boxes["alice_user"]
    mib = 1024 * 1024
    settings.OPERATIONS = {
        **settings.OPERATIONS,
        "SYNC_BATCH_SIZE": 50,
        "SYNC_BATCH_MAX_BYTES": mib,
        "IMPORT_MAX_MESSAGE_BYTES": 2 * mib,
    }
    sizes = [400_000, 400_000, 400_000, 3 * mib, 100, 1_500_000, 100]  # the fourth is over the limit
    for i, size in enumerate(sizes):
        body = ("y" * 76 + "\n") * (size // 77)
        imap_server.append(user, "INBOX", raw_message(message_id=f"<b-{i}@example.test>", body=body))
    fetched: list[list[int]] = []
    original = sync_module.fetch_messages

    def watched(client: IMAPClient, uids: list[int], max_bytes: int | None = None) -> Any:
        fetched.append(list(uids))
        return original(client, uids, max_bytes)

    monkeypatch.setattr(sync_module, "fetch_messages", watched)
    outcome = sync(boxes["alice"])
    assert (outcome.counts.stored, outcome.counts.failed) == (6, 1)
    # two of 400 kB fit in 1 MiB and the third starts a batch, which the one over the limit joins without
    # being fetched, and a small one too; 1.5 MB is a batch of its own, so the last small one starts another
    assert fetched == [[1, 2], [3, 5], [6], [7]]
    held = by_message_id(alice, boxes["alice"])
    assert sorted(held) == [f"b-{i}@example.test" for i in (0, 1, 2, 4, 5, 6)]
    assert folder(alice, boxes["alice"], "INBOX").imap_last_uid == 7
    assert sync(boxes["alice"]).counts.failed == 0  # not tried again
    mallory_unchanged(mallory, boxes, imap_server)
