"""Waiting for reply, against a real Dovecot: mail delivered to a connected mailbox and synced. A thread the person
wrote last five days ago is listed, one answered is not, and one answered by sync afterwards leaves the listing; the
number of days is the person's; the nudge brings a thread back once across beats and restarts. Mallory's identical
mailbox, in her own tenant on the same server, and alice's never see each other; an agent granted one workspace
lists that workspace's threads alone."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from apps.core.errors import OakenError
from apps.gate.internal import call_internal
from apps.mail.models import Message, Thread
from apps.worker.awaiting import nudge_due
from apps.worker.tasks import nudge_awaiting_task
from tests.callers import as_agent, as_person, call, joined, membership, refusal
from tests.conftest import Person
from tests.imapbox import by_message_id, connect, eager, new_user, server_settings, sync  # noqa: F401 (eager)
from tests.mailfactory import raw_message
from tests.mailservers import ImapServer, SmtpServer

SEEN = b"\\Seen"


def days_ago(n: float) -> datetime:
    return timezone.now() - timedelta(days=n)


def deliver_conversations(server: ImapServer, user: str, prefix: str) -> None:
    """Three threads in `user`'s mailbox: (wait) asked 6 days ago, answered by the mailbox 5 days ago, nothing since;
    (fresh) started by the mailbox a day ago; (done) answered by the mailbox 5 days ago and answered back 4 days
    ago. The mailbox's own messages lie in Sent, from its own address."""

    def put(folder: str, name: str, sender: str, age: float, reply_to: str | None = None, to: str = user) -> None:
        raw = raw_message(
            subject=f"{prefix} {name}",
            sender=sender,
            to=to,
            message_id=f"<{prefix}-{name}@example.test>",
            in_reply_to=f"<{prefix}-{reply_to}@example.test>" if reply_to else None,
            references=[f"<{prefix}-{reply_to}@example.test>"] if reply_to else (),
            date=days_ago(age),
        )
        server.append(user, folder, raw, flags=(SEEN,))

    bob = "Bob <bob@example.test>"
    put("INBOX", "wait-q", bob, 6)
    put("Sent", "wait-a", user, 5, reply_to="wait-q", to="bob@example.test")
    put("Sent", "fresh", user, 1, to="carol@example.test")
    put("INBOX", "done-q", bob, 6)
    put("Sent", "done-a", user, 5, reply_to="done-q", to="bob@example.test")
    put("INBOX", "done-b", bob, 4, reply_to="done-a")


def subjects(out: dict[str, Any]) -> list[str]:
    return [t["subject"] for t in out["threads"]]


@pytest.fixture
def boxes(alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer) -> dict[str, str]:
    account, user = connect(alice, imap_server, smtp_server)
    theirs, their_user = connect(mallory, imap_server, smtp_server)
    deliver_conversations(imap_server, user, "a")
    deliver_conversations(imap_server, their_user, "a")  # identical mail, another tenant
    sync(account)
    sync(theirs)
    return {"alice": account, "alice_user": user, "mallory": theirs, "mallory_user": their_user}


def test_a_thread_the_person_wrote_last_waits_until_an_answer_is_synced(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer
) -> None:
    me = as_person(alice)
    out = call(me, "list_awaiting_reply", {})
    assert (out["days"], subjects(out), out["next_cursor"]) == (3, ["a wait-q"], None)
    (row,) = out["threads"]
    held = by_message_id(alice, boxes["alice"])
    assert row["last_message_id"] == str(held["a-wait-a@example.test"].pk)
    assert row["thread_id"] == str(held["a-wait-q@example.test"].thread_id)
    assert (row["days_waiting"], row["message_count"], row["nudged_at"]) == (5, 2, None)
    assert row["to"] == [{"name": "", "address": "bob@example.test"}]
    assert row["account_id"] == boxes["alice"]

    # the other tenant's identical thread is its own, and neither listing holds anything of the other
    hers = call(as_person(mallory), "list_awaiting_reply", {})["threads"]
    assert [t["subject"] for t in hers] == ["a wait-q"] and hers[0]["thread_id"] != row["thread_id"]
    assert Thread.objects.for_tenant(mallory.tenant).filter(pk=row["thread_id"]).count() == 0
    assert refusal(as_person(mallory), "list_awaiting_reply", {"account_id": boxes["alice"]}).code == "NOT_FOUND"

    # the answer arrives on the server and is synced: the thread waits no more (nothing was stored to undo)
    answer = raw_message(
        subject="Re: a wait",
        sender="Bob <bob@example.test>",
        to=boxes["alice_user"],
        message_id="<answer@example.test>",
        in_reply_to="<a-wait-a@example.test>",
        references=["<a-wait-q@example.test>", "<a-wait-a@example.test>"],
        date=timezone.now(),
    )
    imap_server.append(boxes["alice_user"], "INBOX", answer)
    sync(boxes["alice"])
    assert subjects(call(me, "list_awaiting_reply", {})) == []
    # mallory's, not answered, still waits
    assert [t["subject"] for t in call(as_person(mallory), "list_awaiting_reply", {})["threads"]] == ["a wait-q"]


def test_the_number_of_days_is_the_persons_and_pages_follow_each_other(
    alice: Person, mallory: Person, boxes: dict[str, str]
) -> None:
    me = as_person(alice)
    assert call(me, "get_preferences")["awaiting_reply_days"] == 3
    call(me, "set_preferences", {"awaiting_reply_days": 6})
    out = call(me, "list_awaiting_reply", {})
    assert (out["days"], subjects(out)) == (6, [])
    assert call(me, "get_preferences")["awaiting_reply_days"] == 6
    # a call may ask for its own number; newest first, a page at a time
    first = call(me, "list_awaiting_reply", {"days": 1, "limit": 1, "account_id": boxes["alice"]})
    assert subjects(first) == ["a fresh"] and first["next_cursor"]
    second = call(me, "list_awaiting_reply", {"days": 1, "limit": 1, "cursor": first["next_cursor"]})
    assert subjects(second) == ["a wait-q"] and second["next_cursor"] is None
    # bounded: more than AWAITING_REPLY_DAYS_MAX is refused, never cut
    assert refusal(me, "set_preferences", {"awaiting_reply_days": 61}).code == "LIMIT_EXCEEDED"
    assert refusal(me, "list_awaiting_reply", {"days": 61}).code == "LIMIT_EXCEEDED"
    assert refusal(me, "list_awaiting_reply", {"cursor": "bm90IGEgY3Vyc29y"}).code == "INVALID_INPUT"
    # mallory's setting is hers
    assert call(as_person(mallory), "list_awaiting_reply", {})["days"] == 3


def test_a_wait_longer_than_the_window_is_over(
    alice: Person, mallory: Person, boxes: dict[str, str], settings: Any
) -> None:
    """What a page walks is bounded: a thread waiting longer than N + AWAITING_REPLY_WINDOW_DAYS days is not listed
    (nor nudged)."""
    me = as_person(alice)
    settings.OPERATIONS = {**settings.OPERATIONS, "AWAITING_REPLY_WINDOW_DAYS": 1}
    assert subjects(call(me, "list_awaiting_reply", {})) == []  # 5 days > 3 + 1
    assert subjects(call(me, "list_awaiting_reply", {"days": 1})) == ["a fresh"]  # 1 day, within 1 + 1
    call(me, "set_preferences", {"awaiting_reply_nudge": True})
    assert nudge_due() == 0
    settings.OPERATIONS = {**settings.OPERATIONS, "AWAITING_REPLY_WINDOW_DAYS": 3}
    assert subjects(call(me, "list_awaiting_reply", {})) == ["a wait-q"]  # 5 days, within 3 + 3
    assert subjects(call(as_person(mallory), "list_awaiting_reply", {})) == ["a wait-q"]


@pytest.mark.usefixtures("eager")
def test_the_nudge_brings_a_thread_back_once_across_beats_and_restarts(
    alice: Person,
    mallory: Person,
    boxes: dict[str, str],
    imap_server: ImapServer,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    me = as_person(alice)
    with django_capture_on_commit_callbacks(execute=True):
        assert nudge_due() == 0  # off by default: nothing moves
    held = by_message_id(alice, boxes["alice"])
    assert held["a-wait-q@example.test"].read and held["a-wait-q@example.test"].returned_at is None
    assert call(me, "get_preferences")["awaiting_reply_nudge"] is False

    call(me, "set_preferences", {"awaiting_reply_nudge": True})
    with django_capture_on_commit_callbacks(execute=True):
        assert nudge_due() == 1
    with django_capture_on_commit_callbacks(execute=True):
        assert nudge_due() == 0  # the next beat
        assert nudge_awaiting_task() == 0  # a worker restarted runs the task again
    asked = by_message_id(alice, boxes["alice"])["a-wait-q@example.test"]
    assert (asked.read, asked.folder.kind) == (False, "inbox") and asked.returned_at is not None
    inbox = call(me, "list_messages", {"account_id": boxes["alice"], "folder": "inbox"})["messages"]
    assert inbox[0]["id"] == str(asked.pk)  # on top, though older than the other thread's answer
    (row,) = call(me, "list_awaiting_reply", {})["threads"]
    assert row["nudged_at"] is not None  # marked, and still waiting
    # a second nudge for the same message is refused, whoever asks
    again = {"thread_id": row["thread_id"], "message_id": row["last_message_id"]}
    with pytest.raises(OakenError) as info:
        call_internal(alice.tenant, "nudge_awaiting_thread", again)
    assert info.value.code == "CONFLICT"
    assert refusal(me, "nudge_awaiting_thread", again).code == "NOT_AVAILABLE"  # the system's alone

    # the person writes again and waits again: a new wait, nudged once more
    thread = Thread.objects.for_tenant(alice.tenant).get(pk=row["thread_id"])
    later = raw_message(
        subject="a wait again",
        sender=boxes["alice_user"],
        to="bob@example.test",
        message_id="<a-wait-b@example.test>",
        in_reply_to="<a-wait-a@example.test>",
        references=["<a-wait-a@example.test>"],
        date=days_ago(4),
    )
    imap_server.append(boxes["alice_user"], "Sent", later, flags=(SEEN,))
    sync(boxes["alice"])
    assert Message.objects.for_tenant(alice.tenant).filter(thread=thread).count() == 3
    call(me, "mark_read", {"message_ids": [str(asked.pk)]})
    with django_capture_on_commit_callbacks(execute=True):
        assert nudge_due() == 1
        assert nudge_due() == 0

    # mallory never turned it on: her identical thread is untouched
    hers = by_message_id(mallory, boxes["mallory"])["a-wait-q@example.test"]
    assert hers.read and hers.returned_at is None
    assert call(as_person(mallory), "list_awaiting_reply", {})["threads"][0]["nudged_at"] is None


def test_an_agent_granted_one_workspace_lists_that_workspaces_threads_alone(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    me = as_person(alice)
    call(me, "create_workspace", {"name": "ops"}, confirm=True)
    user = new_user(imap_server)
    ops = call(
        me,
        "connect_mailbox",
        {"account_name": "Ops", "workspace": "ops", **server_settings(imap_server, smtp_server, user)},
    )["id"]
    deliver_conversations(imap_server, user, "ops")
    sync(ops)
    assert sorted(subjects(call(me, "list_awaiting_reply", {}))) == ["a wait-q", "ops wait-q"]

    agent = as_agent(alice, workspaces=("default",))
    # its reach is partial: it names an account, as for list_conversations
    assert refusal(agent, "list_awaiting_reply", {}).code == "OUT_OF_SCOPE"
    assert refusal(agent, "list_awaiting_reply", {"account_id": ops}).code == "OUT_OF_SCOPE"
    out = call(agent, "list_awaiting_reply", {"account_id": boxes["alice"]})
    assert subjects(out) == ["a wait-q"] and {t["account_id"] for t in out["threads"]} == {boxes["alice"]}
    # an agent granted both sees both, across accounts; never mallory's
    both = call(as_agent(alice, workspaces=("default", "ops")), "list_awaiting_reply", {})
    assert sorted(subjects(both)) == ["a wait-q", "ops wait-q"]
    mallorys = {t["thread_id"] for t in call(as_person(mallory), "list_awaiting_reply", {})["threads"]}
    assert not mallorys & {t["thread_id"] for t in both["threads"]}


@pytest.mark.usefixtures("eager")
def test_a_member_limited_to_one_workspace_lists_and_is_nudged_only_there(
    alice: Person,
    mallory: Person,
    boxes: dict[str, str],
    imap_server: ImapServer,
    smtp_server: SmtpServer,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    me = as_person(alice)
    ops_space = call(me, "create_workspace", {"name": "ops"}, confirm=True)
    user = new_user(imap_server)
    settings_in = {"account_name": "Ops", "workspace": "ops", **server_settings(imap_server, smtp_server, user)}
    ops = call(me, "connect_mailbox", settings_in)["id"]
    deliver_conversations(imap_server, user, "ops")
    sync(ops)
    bob = joined(alice, "bob@example.test")
    call(
        me,
        "set_member_workspaces",
        {"membership_id": str(membership(bob).pk), "workspace_ids": [ops_space["id"]]},
        confirm=True,
    )
    his = as_person(bob)
    # a person's read across accounts is narrowed to the workspaces they reach
    out = call(his, "list_awaiting_reply", {})
    assert subjects(out) == ["ops wait-q"] and {t["account_id"] for t in out["threads"]} == {ops}
    assert refusal(his, "list_awaiting_reply", {"account_id": boxes["alice"]}).code == "OUT_OF_SCOPE"

    # his nudge brings back the threads of his workspace alone; alice's, whose nudge is off, stay as they are
    call(his, "set_preferences", {"awaiting_reply_nudge": True})
    with django_capture_on_commit_callbacks(execute=True):
        assert nudge_due() == 1
        assert nudge_due() == 0
    assert by_message_id(alice, ops)["ops-wait-q@example.test"].returned_at is not None
    assert by_message_id(alice, boxes["alice"])["a-wait-q@example.test"].returned_at is None
    assert by_message_id(mallory, boxes["mallory"])["a-wait-q@example.test"].returned_at is None
