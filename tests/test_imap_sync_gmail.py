"""IMAP sync of a Gmail-like server (X-GM-EXT-1, tests/gmailserver.py): labels are not folders. A message in the
inbox and two labels is one message with two labels, All Mail is not fetched twice, label changes on the server
reach Oaken, moves made in Oaken go back as labels, and a plain server (Dovecot) is synced as before.

Mallory, in another tenant, syncs her own Gmail-like mailbox on the same server: none of alice's mail or labels
ever reaches her.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from imapclient import IMAPClient

from apps.mail.models import FolderKind, Label, Message, MessageLabel
from tests.callers import as_person, call, refusal
from tests.conftest import Person
from tests.gmailserver import ALL_MAIL, PASSWORD, TRASH, GmailServer, gmail_like
from tests.imapbox import by_message_id, eager, mail, sync  # noqa: F401 (eager: a fixture)
from tests.mailservers import ImapServer, SmtpServer

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def gmail_server() -> Iterator[GmailServer]:
    """One Gmail-like server for the module; each test makes its own users."""
    with gmail_like() as server:
        yield server


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    server = SmtpServer().start()
    try:
        yield server
    finally:
        server.stop()


def connect_gmail(p: Person, server: GmailServer, smtp: SmtpServer) -> tuple[str, str]:
    user = server.add_user(f"user-{uuid.uuid4().hex[:10]}@gmail.test")
    settings = {
        "imap": {"host": server.host, "port": server.port, "security": "none", "username": user, "password": PASSWORD},
        "smtp": {"host": smtp.host, "port": smtp.port, "security": "none"},
    }
    out = call(as_person(p), "connect_mailbox", {"account_name": "Gmail", **settings})
    return out["id"], user


def labels_of(p: Person, message: Message) -> set[str]:
    ids = MessageLabel.objects.for_tenant(p.tenant).filter(message=message).values_list("label_id", flat=True)
    return set(Label.objects.for_tenant(p.tenant).filter(pk__in=list(ids)).values_list("name", flat=True))


@pytest.fixture
def boxes(alice: Person, mallory: Person, gmail_server: GmailServer, smtp: SmtpServer) -> dict[str, Any]:
    alice_id, alice_user = connect_gmail(alice, gmail_server, smtp)
    mallory_id, mallory_user = connect_gmail(mallory, gmail_server, smtp)
    gmail_server.deliver(mallory_user, mail(1, "mallory")[0], labels=("\\Inbox", "Private"))
    sync(mallory_id)
    return {"alice": alice_id, "alice_user": alice_user, "mallory": mallory_id, "mallory_user": mallory_user}


def mallory_unchanged(mallory: Person, boxes: dict[str, Any]) -> None:
    held = by_message_id(mallory, boxes["mallory"])
    assert list(held) == ["mallory-0@example.test"]
    assert labels_of(mallory, held["mallory-0@example.test"]) == {"Private"}
    assert set(Label.objects.for_tenant(mallory.tenant).values_list("name", flat=True)) == {"Private"}
    assert not Message.objects.for_tenant(mallory.tenant).exclude(account_id=boxes["mallory"]).exists()


def test_a_message_in_the_inbox_and_two_labels_is_one_message_with_two_labels(
    alice: Person, mallory: Person, boxes: dict[str, Any], gmail_server: GmailServer
) -> None:
    user = boxes["alice_user"]
    first, archived, sent = mail(3)
    gmail_server.deliver(user, first, labels=("\\Inbox", "\\Important", "Work", "Clients/Acme"))
    gmail_server.deliver(user, archived, labels=("Work",), flags=("\\Seen", "\\Flagged"))
    gmail_server.deliver(user, sent, labels=("\\Sent",), flags=("\\Seen",))

    outcome = sync(boxes["alice"])
    assert (outcome.counts.stored, outcome.counts.failed) == (3, 0)
    held = by_message_id(alice, boxes["alice"])
    assert {k: (m.folder.kind, m.read, m.pinned) for k, m in held.items()} == {
        "m-0@example.test": (FolderKind.INBOX, False, False),
        "m-1@example.test": (FolderKind.ARCHIVE, True, True),  # archived: All Mail; starred: pinned
        "m-2@example.test": (FolderKind.SENT, True, False),
    }
    assert labels_of(alice, held["m-0@example.test"]) == {"Work", "Clients/Acme"}
    assert labels_of(alice, held["m-1@example.test"]) == {"Work"}
    assert labels_of(alice, held["m-2@example.test"]) == set()
    assert all(m.imap_folder is not None and m.imap_folder.name == ALL_MAIL for m in held.values())
    assert all(m.gmail_msgid for m in held.values())
    # each body fetched once, from All Mail; no label folder (nor INBOX) was read
    assert gmail_server.bodies_fetched(user) == 1
    assert set(gmail_server.selected(user)) == {ALL_MAIL, TRASH, "[Gmail]/Spam"}
    kinds = {f.name: f.kind for f in held["m-0@example.test"].account.folders.all()}
    assert kinds == {
        "INBOX": "inbox",
        ALL_MAIL: "archive",
        "[Gmail]/Sent Mail": "sent",
        "[Gmail]/Drafts": "drafts",
        TRASH: "trash",
        "[Gmail]/Spam": "spam",
    }
    # the labels are the account's own, listed as any label is
    work = Label.objects.for_tenant(alice.tenant).get(account_id=boxes["alice"], name="Work")
    listed = call(as_person(alice), "list_messages", {"account_id": boxes["alice"], "label_id": str(work.pk)})
    assert sorted(m["subject"] for m in listed["messages"]) == ["Note 0", "Note 1"]
    assert refusal(as_person(mallory), "list_messages", {"label_id": str(work.pk)}).code == "NOT_FOUND"

    # All Mail is not synced twice: nothing new, nothing fetched
    assert sync(boxes["alice"]).counts.stored == 0
    assert gmail_server.bodies_fetched(user) == 1
    assert len(by_message_id(alice, boxes["alice"])) == 3
    mallory_unchanged(mallory, boxes)


def test_labels_changed_on_the_server_reach_oaken_on_the_next_sync(
    alice: Person, mallory: Person, boxes: dict[str, Any], gmail_server: GmailServer
) -> None:
    user = boxes["alice_user"]
    first, second = mail(2)
    one = gmail_server.deliver(user, first, labels=("\\Inbox", "Work"))
    two = gmail_server.deliver(user, second, labels=("\\Inbox",))
    sync(boxes["alice"])
    message = by_message_id(alice, boxes["alice"])["m-0@example.test"]
    # a label put on in Oaken stays Oaken's: the server's changes leave it alone
    mine = call(as_person(alice), "create_label", {"account_id": boxes["alice"], "name": "Mine"})
    call(as_person(alice), "add_labels", {"message_ids": [str(message.pk)], "label_ids": [mine["label"]["id"]]})

    gmail_server.relabel(user, one, add=("Travel",), remove=("Work", "\\Inbox"))  # archived, relabelled
    gmail_server.relabel(user, two, add=("Work",))
    outcome = sync(boxes["alice"])
    assert (outcome.counts.stored, outcome.counts.labels_changed) == (0, 2)
    held = by_message_id(alice, boxes["alice"])
    assert labels_of(alice, held["m-0@example.test"]) == {"Travel", "Mine"}
    assert held["m-0@example.test"].folder.kind == FolderKind.ARCHIVE
    assert labels_of(alice, held["m-1@example.test"]) == {"Work"}
    assert held["m-1@example.test"].folder.kind == FolderKind.INBOX
    assert sync(boxes["alice"]).counts.labels_changed == 0
    mallory_unchanged(mallory, boxes)


def test_a_message_trashed_and_restored_on_the_server_is_followed_without_fetching_it_again(
    alice: Person, mallory: Person, boxes: dict[str, Any], gmail_server: GmailServer
) -> None:
    user = boxes["alice_user"]
    msgid = gmail_server.deliver(user, mail(1)[0], labels=("\\Inbox", "Work"))
    sync(boxes["alice"])
    gmail_server.move_to(user, msgid, "trash")
    sync(boxes["alice"])
    message = by_message_id(alice, boxes["alice"])["m-0@example.test"]
    assert (message.folder.kind, message.imap_folder.name if message.imap_folder else None) == ("trash", TRASH)
    gmail_server.move_to(user, msgid, "")
    outcome = sync(boxes["alice"])
    message = by_message_id(alice, boxes["alice"])["m-0@example.test"]
    assert (message.folder.kind, message.imap_missing_since, outcome.counts.stored) == ("inbox", None, 0)
    assert labels_of(alice, message) == {"Work"}
    assert gmail_server.bodies_fetched(user) == 1
    mallory_unchanged(mallory, boxes)


@pytest.mark.usefixtures("eager")
def test_moving_between_inbox_and_archive_in_oaken_is_a_label_change_on_the_server(
    alice: Person,
    mallory: Person,
    boxes: dict[str, Any],
    gmail_server: GmailServer,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    user = boxes["alice_user"]
    msgid = gmail_server.deliver(user, mail(1)[0], labels=("\\Inbox", "Work"))
    sync(boxes["alice"])
    message = by_message_id(alice, boxes["alice"])["m-0@example.test"]
    me = as_person(alice)
    with django_capture_on_commit_callbacks(execute=True):
        call(me, "move_messages", {"message_ids": [str(message.pk)], "folder": "archive"})
    assert gmail_server.boxes[user].messages[0].labels == {"Work"}  # archived: still in All Mail, no copy moved
    assert sync(boxes["alice"]).counts.labels_changed == 0
    assert by_message_id(alice, boxes["alice"])["m-0@example.test"].folder.kind == FolderKind.ARCHIVE
    with django_capture_on_commit_callbacks(execute=True):
        call(me, "move_messages", {"message_ids": [str(message.pk)], "folder": "INBOX"})
    assert gmail_server.boxes[user].messages[0].labels == {"Work", "\\Inbox"}
    assert [m.msgid for m in gmail_server.boxes[user].messages] == [msgid]
    sync(boxes["alice"])
    assert by_message_id(alice, boxes["alice"])["m-0@example.test"].folder.kind == FolderKind.INBOX
    mallory_unchanged(mallory, boxes)


@pytest.mark.usefixtures("eager")
def test_labels_put_on_or_taken_off_in_oaken_go_to_the_server(
    alice: Person,
    mallory: Person,
    boxes: dict[str, Any],
    gmail_server: GmailServer,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    user = boxes["alice_user"]
    msgid = gmail_server.deliver(user, mail(1)[0], labels=("\\Inbox", "Work", "Travel"))
    sync(boxes["alice"])
    message = by_message_id(alice, boxes["alice"])["m-0@example.test"]
    me = as_person(alice)
    new = call(me, "create_label", {"account_id": boxes["alice"], "name": "Urgent"})["label"]["id"]
    work = str(Label.objects.for_tenant(alice.tenant).get(account_id=boxes["alice"], name="Work").pk)
    with django_capture_on_commit_callbacks(execute=True):
        call(me, "add_labels", {"message_ids": [str(message.pk)], "label_ids": [new]})
        call(me, "remove_labels", {"message_ids": [str(message.pk)], "label_ids": [work]})
    on_server = gmail_server.boxes[user].messages[0]
    assert (on_server.msgid, on_server.labels) == (msgid, {"\\Inbox", "Travel", "Urgent"})
    assert sync(boxes["alice"]).counts.labels_changed == 0
    assert labels_of(alice, message) == {"Travel", "Urgent"}
    # pushed, the label is the server's too: taken off there, it goes here
    gmail_server.relabel(user, msgid, remove=("Urgent",))
    assert sync(boxes["alice"]).counts.labels_changed == 1
    assert labels_of(alice, message) == {"Travel"}
    assert gmail_server.boxes[boxes["mallory_user"]].messages[0].labels == {"\\Inbox", "Private"}
    mallory_unchanged(mallory, boxes)


def test_a_gmail_account_synced_before_as_folders_becomes_one_message_per_gmail_id(
    alice: Person, mallory: Person, boxes: dict[str, Any], gmail_server: GmailServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = boxes["alice_user"]
    first, archived = mail(2)
    gmail_server.deliver(user, first, labels=("\\Inbox", "Work"))
    gmail_server.deliver(user, archived, labels=("Work",))
    offered = IMAPClient.has_capability
    with monkeypatch.context() as m:  # as Oaken synced it before it knew Gmail's extensions: folders, copies
        m.setattr(IMAPClient, "has_capability", lambda self, c: c != "X-GM-EXT-1" and offered(self, c))
        sync(boxes["alice"])
    before = by_message_id(alice, boxes["alice"])
    assert before["m-0@example.test"].folder.name == "INBOX"
    assert (before["m-1@example.test"].folder.name, before["m-1@example.test"].folder.kind) == (ALL_MAIL, "custom")
    assert "Work" in set(before["m-0@example.test"].account.folders.values_list("name", flat=True))

    outcome = sync(boxes["alice"])
    assert outcome.counts.stored == 0  # the messages held are found again in All Mail: no second copy
    held = by_message_id(alice, boxes["alice"])
    assert {k: m.pk for k, m in held.items()} == {k: m.pk for k, m in before.items()}
    assert {k: (m.folder.kind, m.imap_folder.name if m.imap_folder else "") for k, m in held.items()} == {
        "m-0@example.test": (FolderKind.INBOX, ALL_MAIL),
        "m-1@example.test": (FolderKind.ARCHIVE, ALL_MAIL),
    }
    assert all(m.gmail_msgid and labels_of(alice, m) == {"Work"} for m in held.values())
    names = set(held["m-0@example.test"].account.folders.values_list("name", flat=True))
    assert names == {"INBOX", ALL_MAIL, "[Gmail]/Sent Mail", "[Gmail]/Drafts", TRASH, "[Gmail]/Spam"}
    assert sync(boxes["alice"]).counts.stored == 0
    mallory_unchanged(mallory, boxes)


def test_a_plain_server_is_synced_as_before(
    alice: Person, mallory: Person, boxes: dict[str, Any], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    from tests.imapbox import connect

    account, user = connect(alice, imap_server, smtp_server, name="Plain")
    with imap_server.client(user) as c:
        c.create_folder("Work")
    imap_server.append(user, "INBOX", mail(1, "in")[0])
    imap_server.append(user, "Work", mail(1, "in")[0])  # a copy, as a label folder would hold it
    outcome = sync(account)
    assert outcome.counts.stored == 1 and outcome.counts.labels_changed == 0
    held = by_message_id(alice, account)
    assert held["in-0@example.test"].folder.name == "INBOX" and held["in-0@example.test"].gmail_msgid is None
    assert not Label.objects.for_tenant(alice.tenant).filter(account_id=account).exists()
    assert "Work" in set(held["in-0@example.test"].account.folders.values_list("name", flat=True))
    mallory_unchanged(mallory, boxes)
