"""Organizing mail through the gate (SPEC §4, §5, §7, §9, §11, §12): read state, pins, labels, folders,
trash and summaries; confirmation for persons and proposals with tokens for agents; scopes; the audit log.

Mallory, in another tenant, has her own imported mail: her ids behave exactly like ids that do not
exist, and nothing of hers changes whatever alice or alice's agents do.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_django import DjangoDbBlocker, Settings

from apps.audit.models import AuditEvent
from apps.core.callers import Caller
from apps.mail.models import Folder, Label, Message, MessageLabel
from apps.operations.registry import registry
from tests.mailbox import (
    LONG_SENTENCE,
    Mailbox,
    World,
    agent,
    call,
    module_world,
    person,
    read_flags,
    refusal,
    state_of,
)

ORGANIZE_MODULE = "apps.operations.defs.mail_organize"

# ---------------------------------------------------------------- fixtures and helpers


@pytest.fixture(scope="module")
def shared(
    django_db_setup: None, django_db_blocker: DjangoDbBlocker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    with module_world(django_db_blocker, Path(tmp_path_factory.mktemp("organize"))) as world:
        yield world


@pytest.fixture
def world(shared: World, db: None) -> World:
    return shared


def messages(box: Mailbox, ids: list[str]) -> list[Message]:
    found = {str(m.pk): m for m in Message.objects.for_tenant(box.person.tenant).filter(pk__in=ids)}
    return [found[i] for i in ids]


def flags(box: Mailbox, ids: list[str], name: str) -> list[Any]:
    return [getattr(m, name) for m in messages(box, ids)]


def folder_of(box: Mailbox, message_id: str) -> str:
    message = Message.objects.for_tenant(box.person.tenant).select_related("folder").get(pk=message_id)
    return message.folder.kind


def label_ids(box: Mailbox, message_id: str) -> set[str]:
    links = MessageLabel.objects.for_tenant(box.person.tenant).filter(message_id=message_id)
    return {str(x) for x in links.values_list("label_id", flat=True)}


def last_event(box: Mailbox, operation: str) -> AuditEvent:
    event = AuditEvent.objects.for_tenant(box.person.tenant).filter(operation=operation).order_by("-seq").first()
    assert event is not None, operation
    return event


def assert_audited(box: Mailbox, operation: str, targets: list[dict[str, Any]], caller: Caller | None = None) -> None:
    """The call's audit event: outcome ok, these targets (order aside), who called through which door."""
    event = last_event(box, operation)
    assert event.outcome == "ok"

    def key(target: dict[str, Any]) -> str:
        return json.dumps(target, sort_keys=True)

    assert sorted(map(key, event.targets)) == sorted(map(key, targets))
    if caller is not None:
        assert (event.principal, event.credential_id) == (caller.principal.value, caller.credential_id)
        assert event.door == ("mcp" if caller.principal.value == "agent" else "ui")


def assert_no_mail_text(world: World, proposal: dict[str, Any] | None) -> None:
    assert proposal is not None
    dumped = json.dumps(proposal)
    for text in (*world.alice.mail_strings(), *world.mallory.mail_strings()):
        assert text not in dumped, text
    for piece in ("sender@example.test", "@example.test>", "Parcel notice", "parcel number", "Harbour"):
        assert piece not in dumped


def assert_not_found(
    caller: Caller, name: str, build: Callable[[str], dict[str, Any]], stranger: str, field: str
) -> None:
    """An id of another tenant is refused exactly like a random uuid and a malformed id: no hint, no proposal."""
    errors = [refusal(caller, name, build(value)) for value in (stranger, str(uuid.uuid4()), "not-an-id")]
    assert errors[0].code == "NOT_FOUND", (name, errors[0].code)
    for error in errors:
        assert error.as_dict() == {"code": "NOT_FOUND", "message": f"{field}: no such item", "field": field}


def eleven(box: Mailbox) -> list[str]:
    """Eleven unread parcel notices: one more than CONFIRM_FREE_MAX."""
    return box.notices[5:16]


# ---------------------------------------------------------------- read state


def test_it_marks_small_batches_read_and_unread_without_confirmation(world: World) -> None:
    alice, theirs = world.alice, state_of(world.mallory)
    me = person(alice.person)
    pair = alice.ids("trip-0", "trip-1")
    marked = call(me, "mark_read", {"message_ids": pair})
    assert marked["changed"] == 2 and sorted(marked["message_ids"]) == sorted(pair)
    assert flags(alice, pair, "read") == [True, True]
    assert_audited(
        alice, "mark_read", [{"id": m, "before": {"read": False}, "after": {"read": True}} for m in pair], me
    )
    # already read: nothing changes, and the answer says so
    assert call(me, "mark_read", {"message_ids": [*pair, pair[0]]}) == {"changed": 0, "message_ids": []}

    assert call(me, "mark_unread", {"message_ids": pair[:1]}) == {"changed": 1, "message_ids": pair[:1]}
    assert flags(alice, pair, "read") == [False, True]
    assert_audited(alice, "mark_unread", [{"id": pair[0], "before": {"read": True}, "after": {"read": False}}], me)

    # ten is still a small change, for an agent too
    assistant = agent(alice.person)
    ten = alice.notices[5:15]
    assert call(assistant, "mark_read", {"message_ids": ten})["changed"] == 10
    assert all(flags(alice, ten, "read"))
    assert_audited(
        alice, "mark_read", [{"id": m, "before": {"read": False}, "after": {"read": True}} for m in ten], assistant
    )
    assert state_of(world.mallory) == theirs


def test_a_person_confirms_a_large_read_state_change(world: World) -> None:
    alice, theirs = world.alice, state_of(world.mallory)
    me = person(alice.person)
    before = read_flags()
    error = refusal(me, "mark_read", {"message_ids": eleven(alice)})
    assert error.code == "CONFIRMATION_REQUIRED"
    assert error.proposal is not None and "token" not in error.proposal
    assert error.proposal["operation"] == "mark_read" and error.proposal["count"] == 11
    assert error.proposal["changes"] == [
        {"id": m, "before": {"read": False}, "after": {"read": True}} for m in eleven(alice)
    ]
    assert_no_mail_text(world, error.proposal)
    assert read_flags() == before
    assert last_event(alice, "mark_read").outcome == "CONFIRMATION_REQUIRED"

    assert call(me, "mark_read", {"message_ids": eleven(alice)}, confirm=True)["changed"] == 11
    assert all(flags(alice, eleven(alice), "read"))
    assert_audited(
        alice, "mark_read", [{"id": m, "before": {"read": False}, "after": {"read": True}} for m in eleven(alice)], me
    )
    unread = refusal(me, "mark_unread", {"message_ids": eleven(alice)})
    assert unread.code == "CONFIRMATION_REQUIRED" and unread.proposal is not None
    assert unread.proposal["count"] == 11
    assert state_of(world.mallory) == theirs


def test_an_agent_gets_a_proposal_and_nothing_changes_until_it_repeats_with_the_token(world: World) -> None:
    alice, theirs = world.alice, state_of(world.mallory)
    assistant = agent(alice.person)
    before = read_flags()
    input = {"message_ids": eleven(alice)}

    error = refusal(assistant, "mark_read", input)
    assert error.code == "CONFIRMATION_REQUIRED"
    proposal = error.proposal
    assert proposal is not None
    assert proposal["count"] == 11 and proposal["expires_in"] == 120
    assert [c["id"] for c in proposal["changes"]] == eleven(alice)
    assert isinstance(proposal["token"], str) and len(proposal["token"]) >= 22
    assert_no_mail_text(world, proposal)
    assert read_flags() == before

    # an agent cannot confirm on its own: confirm is not its to give
    again = refusal(assistant, "mark_read", input, confirm=True)
    assert again.code == "CONFIRMATION_REQUIRED" and again.proposal is not None
    assert read_flags() == before

    # the token binds the caller, the operation and the input, and any attempt burns it
    other_key = agent(alice.person, credential_id="key-2")
    assert refusal(other_key, "mark_read", input, confirmation_token=proposal["token"]).code == "CONFIRMATION_INVALID"
    assert refusal(assistant, "mark_read", input, confirmation_token=proposal["token"]).code == "CONFIRMATION_INVALID"
    token = again.proposal["token"]
    smaller = {"message_ids": eleven(alice)[:-1] + alice.ids("trip-2")}
    assert refusal(assistant, "mark_read", smaller, confirmation_token=token).code == "CONFIRMATION_INVALID"
    assert refusal(assistant, "mark_unread", input, confirmation_token=token).code == "CONFIRMATION_INVALID"
    assert read_flags() == before

    fresh = refusal(assistant, "mark_read", input).proposal
    assert fresh is not None
    # mallory's agent holding alice's token gets nothing
    mallory_input = {"message_ids": world.mallory.notices[5:16]}
    assert (
        refusal(agent(world.mallory.person), "mark_read", mallory_input, confirmation_token=fresh["token"]).code
        == "CONFIRMATION_INVALID"
    )
    fresh = refusal(assistant, "mark_read", input).proposal
    assert fresh is not None
    done = call(assistant, "mark_read", input, confirmation_token=fresh["token"])
    assert done["changed"] == 11 and sorted(done["message_ids"]) == sorted(eleven(alice))
    assert all(flags(alice, eleven(alice), "read"))
    assert_audited(
        alice,
        "mark_read",
        [{"id": m, "before": {"read": False}, "after": {"read": True}} for m in eleven(alice)],
        assistant,
    )
    assert refusal(assistant, "mark_read", input, confirmation_token=fresh["token"]).code == "CONFIRMATION_INVALID"
    assert state_of(world.mallory) == theirs


# ---------------------------------------------------------------- pins


def test_it_pins_and_unpins_messages(world: World) -> None:
    alice, theirs = world.alice, state_of(world.mallory)
    me = person(alice.person)
    pair = alice.ids("zeppelin", "quoted")
    assert call(me, "set_pinned", {"message_ids": pair, "pinned": True}) == {"changed": 2, "message_ids": pair}
    assert flags(alice, pair, "pinned") == [True, True]
    assert_audited(
        alice, "set_pinned", [{"id": m, "before": {"pinned": False}, "after": {"pinned": True}} for m in pair], me
    )
    assert call(me, "set_pinned", {"message_ids": pair, "pinned": True})["changed"] == 0
    assistant = agent(alice.person)
    assert call(assistant, "set_pinned", {"message_ids": pair[:1], "pinned": False})["message_ids"] == pair[:1]
    assert flags(alice, pair, "pinned") == [False, True]
    assert call(me, "list_messages", {"account_id": alice.personal, "limit": 200})["messages"][0]["pinned"] is False

    large = refusal(me, "set_pinned", {"message_ids": eleven(alice), "pinned": True})
    assert large.code == "CONFIRMATION_REQUIRED" and large.proposal is not None
    assert_no_mail_text(world, large.proposal)
    assert not any(flags(alice, eleven(alice), "pinned"))
    assert call(me, "set_pinned", {"message_ids": eleven(alice), "pinned": True}, confirm=True)["changed"] == 11
    assert all(flags(alice, eleven(alice), "pinned"))
    assert state_of(world.mallory) == theirs


# ---------------------------------------------------------------- labels on messages


def test_it_adds_and_removes_labels_of_the_messages_own_account(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    theirs = state_of(mallory)
    me = person(alice.person)
    receipts, travel = alice.labels["Receipts"], alice.labels["Travel"]
    pair = alice.ids("notice-00", "notice-01")
    assert call(me, "add_labels", {"message_ids": pair, "label_ids": [receipts, travel]}) == {"changed": 4}
    assert all(label_ids(alice, m) == {receipts, travel} for m in pair)
    assert_audited(
        alice,
        "add_labels",
        [
            {"id": m, "before": {"label_id": x, "on": False}, "after": {"label_id": x, "on": True}}
            for m in pair
            for x in (receipts, travel)
        ],
        me,
    )
    listed = call(me, "list_messages", {"label_id": receipts})["messages"]
    assert {m["id"] for m in listed} == {*pair, alice.messages["zeppelin"]}
    assert call(me, "add_labels", {"message_ids": pair, "label_ids": [receipts]}) == {"changed": 0}

    assistant = agent(alice.person)
    assert call(assistant, "remove_labels", {"message_ids": pair, "label_ids": [travel]}) == {"changed": 2}
    assert all(label_ids(alice, m) == {receipts} for m in pair)
    assert_audited(
        alice,
        "remove_labels",
        [
            {"id": m, "before": {"label_id": travel, "on": True}, "after": {"label_id": travel, "on": False}}
            for m in pair
        ],
        assistant,
    )

    # a label of another account: refused, whichever side it is on
    before = state_of(alice)
    for message_ids, labels in (
        (pair, [alice.labels["Clients"]]),
        (alice.ids("standup-0"), [receipts]),
        ([*pair, alice.messages["standup-0"]], [receipts]),
    ):
        for name in ("add_labels", "remove_labels"):
            error = refusal(me, name, {"message_ids": message_ids, "label_ids": labels})
            assert (error.code, error.field) == ("INVALID_INPUT", "label_ids")
    assert state_of(alice) == before

    assert_not_found(
        me, "add_labels", lambda x: {"message_ids": pair, "label_ids": [x]}, mallory.labels["Travel"], "label_ids"
    )
    assert_not_found(
        me,
        "add_labels",
        lambda x: {"message_ids": [x], "label_ids": [receipts]},
        mallory.messages["trip-0"],
        "message_ids",
    )
    assert state_of(mallory) == theirs


# ---------------------------------------------------------------- labels themselves


def test_it_creates_a_label_and_refuses_a_duplicate_name(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    theirs = state_of(mallory)
    me = person(alice.person)
    created = call(me, "create_label", {"account_id": alice.personal, "name": "Bills", "color": "#123456"})["label"]
    assert (created["account_id"], created["name"], created["color"]) == (alice.personal, "Bills", "#123456")
    assert Label.objects.for_tenant(alice.person.tenant).get(pk=created["id"]).name == "Bills"
    assert_audited(
        alice,
        "create_label",
        [{"id": created["id"], "before": None, "after": {"name": "Bills", "color": "#123456"}}],
        me,
    )
    assert created["id"] in {x["id"] for x in call(me, "list_labels", {"account_id": alice.personal})["labels"]}

    for name in ("Bills", "  Bills  ", "Travel"):
        error = refusal(me, "create_label", {"account_id": alice.personal, "name": name})
        assert (error.code, error.field) == ("CONFLICT", "name"), name
    # names are unique per account: the Work account may have its own "Travel", as may mallory
    work = call(agent(alice.person, workspaces=()), "create_label", {"account_id": alice.work, "name": "Travel"})
    assert work["label"]["account_id"] == alice.work

    bad = refusal(me, "create_label", {"account_id": alice.personal, "name": "Red", "color": "red"})
    assert (bad.code, bad.field) == ("INVALID_INPUT", "color")
    outside = refusal(agent(alice.person), "create_label", {"account_id": alice.work, "name": "Elsewhere"})
    assert (outside.code, outside.field) == ("OUT_OF_SCOPE", "account_id")
    assert_not_found(me, "create_label", lambda x: {"account_id": x, "name": "Stolen"}, mallory.personal, "account_id")
    assert state_of(mallory) == theirs


def test_it_renames_a_label_unless_the_name_is_taken(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    theirs = state_of(mallory)
    me = person(alice.person)
    travel = alice.labels["Travel"]
    renamed = call(me, "rename_label", {"label_id": travel, "name": "Trips"})["label"]
    assert (renamed["id"], renamed["name"]) == (travel, "Trips")
    assert_audited(
        alice, "rename_label", [{"id": travel, "before": {"name": "Travel"}, "after": {"name": "Trips"}}], me
    )
    assert Label.objects.for_tenant(alice.person.tenant).get(pk=travel).name == "Trips"
    # keeping its own name is no conflict; another label's name is
    assert call(me, "rename_label", {"label_id": travel, "name": "Trips"})["label"]["name"] == "Trips"
    error = refusal(me, "rename_label", {"label_id": alice.labels["Receipts"], "name": "Trips"})
    assert (error.code, error.field) == ("CONFLICT", "name")
    assert Label.objects.for_tenant(alice.person.tenant).get(pk=alice.labels["Receipts"]).name == "Receipts"

    outside = refusal(agent(alice.person), "rename_label", {"label_id": alice.labels["Clients"], "name": "Customers"})
    assert (outside.code, outside.field) == ("OUT_OF_SCOPE", "label_id")
    assert_not_found(
        me, "rename_label", lambda x: {"label_id": x, "name": "Mine now"}, mallory.labels["Travel"], "label_id"
    )
    assert state_of(mallory) == theirs


def test_deleting_a_label_is_always_confirmed_and_the_messages_stay(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    theirs = state_of(mallory)
    me = person(alice.person)
    travel, trip = alice.labels["Travel"], alice.ids("trip-0", "trip-1", "trip-2")
    before = state_of(alice)

    error = refusal(me, "delete_label", {"label_id": travel})
    assert error.code == "CONFIRMATION_REQUIRED" and error.proposal is not None
    assert error.proposal["changes"] == [{"id": travel, "before": {"name": "Travel", "messages": 3}, "after": None}]
    assert error.proposal["count"] == 1
    assert_no_mail_text(world, error.proposal)
    assert state_of(alice) == before

    assert call(me, "delete_label", {"label_id": travel}, confirm=True) == {"deleted": travel, "messages_unlabelled": 3}
    assert not Label.objects.for_tenant(alice.person.tenant).filter(pk=travel).exists()
    assert len(messages(alice, trip)) == 3 and all(label_ids(alice, m) == set() for m in trip)
    assert Message.objects.for_tenant(alice.person.tenant).count() == 28
    assert_audited(
        alice, "delete_label", [{"id": travel, "before": {"name": "Travel", "messages": 3}, "after": None}], me
    )

    # an agent, too, needs the person's word through a token, even for one label with one message
    assistant = agent(alice.person)
    receipts = alice.labels["Receipts"]
    proposal = refusal(assistant, "delete_label", {"label_id": receipts}).proposal
    assert proposal is not None and proposal["count"] == 1
    assert Label.objects.for_tenant(alice.person.tenant).filter(pk=receipts).exists()
    done = call(assistant, "delete_label", {"label_id": receipts}, confirmation_token=proposal["token"])
    assert done == {"deleted": receipts, "messages_unlabelled": 1}
    assert Message.objects.for_tenant(alice.person.tenant).filter(pk=alice.messages["zeppelin"]).exists()
    assert_audited(
        alice,
        "delete_label",
        [{"id": receipts, "before": {"name": "Receipts", "messages": 1}, "after": None}],
        assistant,
    )

    assert_not_found(me, "delete_label", lambda x: {"label_id": x}, mallory.labels["Travel"], "label_id")
    assert_not_found(assistant, "delete_label", lambda x: {"label_id": x}, mallory.labels["Travel"], "label_id")
    assert state_of(mallory) == theirs


# ---------------------------------------------------------------- folders and trash


def test_it_moves_messages_between_folders_but_not_to_the_trash(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    theirs = state_of(mallory)
    me = person(alice.person)
    pair = alice.ids("notice-00", "notice-01")
    assert call(me, "move_messages", {"message_ids": pair, "folder": "archive"}) == {"changed": 2, "message_ids": pair}
    assert [folder_of(alice, m) for m in pair] == ["archive", "archive"]
    assert_audited(
        alice,
        "move_messages",
        [{"id": m, "before": {"folder": "inbox"}, "after": {"folder": "archive"}} for m in pair],
        me,
    )
    folders = {f["kind"]: f["total"] for f in call(me, "list_folders", {"account_id": alice.personal})["folders"]}
    assert (folders["inbox"], folders["archive"]) == (23, 2)
    assert call(me, "move_messages", {"message_ids": pair, "folder": "Archive"})["changed"] == 0

    before = state_of(alice)
    for folder in ("trash", "Trash"):
        error = refusal(me, "move_messages", {"message_ids": pair, "folder": folder})
        assert (error.code, error.field) == ("INVALID_INPUT", "folder")
        assert "trash_messages" in error.message
    unknown = refusal(me, "move_messages", {"message_ids": pair, "folder": "Holidays"})
    assert (unknown.code, unknown.field) == ("NOT_FOUND", "folder")
    assert state_of(alice) == before

    assistant = agent(alice.person)
    assert call(assistant, "move_messages", {"message_ids": pair, "folder": "inbox"})["changed"] == 2
    assert [folder_of(alice, m) for m in pair] == ["inbox", "inbox"]
    large = refusal(assistant, "move_messages", {"message_ids": eleven(alice), "folder": "spam"})
    assert large.code == "CONFIRMATION_REQUIRED" and large.proposal is not None
    assert {c["after"]["folder"] for c in large.proposal["changes"]} == {"spam"}
    assert_no_mail_text(world, large.proposal)
    assert {folder_of(alice, m) for m in eleven(alice)} == {"inbox"}

    assert_not_found(
        me,
        "move_messages",
        lambda x: {"message_ids": [x], "folder": "archive"},
        mallory.messages["trip-0"],
        "message_ids",
    )
    assert state_of(mallory) == theirs


def test_it_trashes_messages_and_restores_them_where_they_came_from(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    theirs = state_of(mallory)
    me = person(alice.person)
    zeppelin, trip = alice.messages["zeppelin"], alice.messages["trip-0"]
    call(me, "move_messages", {"message_ids": [zeppelin], "folder": "archive"})

    trashed = call(me, "trash_messages", {"message_ids": [zeppelin, trip]})
    assert trashed == {"changed": 2, "message_ids": [zeppelin, trip]}
    assert (folder_of(alice, zeppelin), folder_of(alice, trip)) == ("trash", "trash")
    assert_audited(
        alice,
        "trash_messages",
        [
            {"id": zeppelin, "before": {"folder": "archive"}, "after": {"folder": "trash"}},
            {"id": trip, "before": {"folder": "inbox"}, "after": {"folder": "trash"}},
        ],
        me,
    )
    # trashing twice keeps where it came from
    assert call(me, "trash_messages", {"message_ids": [zeppelin]})["changed"] == 0

    assistant = agent(alice.person)
    restored = call(assistant, "restore_messages", {"message_ids": [zeppelin, trip, alice.messages["quoted"]]})
    assert restored == {"changed": 2, "message_ids": [zeppelin, trip]}
    assert (folder_of(alice, zeppelin), folder_of(alice, trip)) == ("archive", "inbox")
    assert all(m.trashed_from_id is None for m in messages(alice, [zeppelin, trip]))
    assert_audited(
        alice,
        "restore_messages",
        [
            {"id": zeppelin, "before": {"folder": "trash"}, "after": {"folder": "archive"}},
            {"id": trip, "before": {"folder": "trash"}, "after": {"folder": "inbox"}},
        ],
        assistant,
    )

    ten = alice.notices[:10]
    assert call(assistant, "trash_messages", {"message_ids": ten})["changed"] == 10
    call(me, "restore_messages", {"message_ids": ten})
    assert {folder_of(alice, m) for m in ten} == {"inbox"}

    large = refusal(me, "trash_messages", {"message_ids": eleven(alice)})
    assert large.code == "CONFIRMATION_REQUIRED" and large.proposal is not None
    assert large.proposal["count"] == 11
    assert_no_mail_text(world, large.proposal)
    assert {folder_of(alice, m) for m in eleven(alice)} == {"inbox"}
    assert call(me, "trash_messages", {"message_ids": eleven(alice)}, confirm=True)["changed"] == 11
    assert {folder_of(alice, m) for m in eleven(alice)} == {"trash"}

    back = refusal(assistant, "restore_messages", {"message_ids": eleven(alice)})
    assert back.code == "CONFIRMATION_REQUIRED" and back.proposal is not None
    assert {c["after"]["folder"] for c in back.proposal["changes"]} == {"inbox"}
    assert_no_mail_text(world, back.proposal)
    assert {folder_of(alice, m) for m in eleven(alice)} == {"trash"}
    call(assistant, "restore_messages", {"message_ids": eleven(alice)}, confirmation_token=back.proposal["token"])
    assert {folder_of(alice, m) for m in eleven(alice)} == {"inbox"}

    for name in ("trash_messages", "restore_messages"):
        assert_not_found(me, name, lambda x: {"message_ids": [x]}, mallory.messages["trip-0"], "message_ids")
    assert state_of(mallory) == theirs


# ---------------------------------------------------------------- summaries


def test_it_summarizes_messages_with_text_from_the_messages(world: World, settings: Settings) -> None:
    alice, mallory = world.alice, world.mallory
    theirs = state_of(mallory)
    me = person(alice.person)
    keys = ("trip-0", "quoted", "long", "newsletter")
    out = call(me, "summarize_messages", {"message_ids": alice.ids(*keys)})
    assert out["summarizer"]["kind"] == "local" and out["summarizer"]["model"].startswith("textrank")
    assert out["marked_read"] == []
    by_id = {s["message_id"]: s for s in out["summaries"]}
    assert [s["message_id"] for s in out["summaries"]] == alice.ids(*keys)
    assert by_id[alice.messages["trip-0"]] == {
        "message_id": alice.messages["trip-0"],
        "state": "done",
        "summary": "Message 0 of alice-trip.",
        "truncated": False,
        "reason": None,
    }
    quoted = by_id[alice.messages["quoted"]]
    assert quoted["summary"] == "Can we meet on Tuesday? Bring the numbers." and "ignore" not in quoted["summary"]
    long = by_id[alice.messages["long"]]
    # the report says one sentence 330 times: its summary says it once
    assert long["state"] == "done" and long["summary"] == LONG_SENTENCE.strip() and not long["truncated"]
    assert "Seasonal gardening tips" in by_id[alice.messages["newsletter"]]["summary"]
    assert not any(flags(alice, alice.ids(*keys), "read"))

    twenty = alice.notices + alice.ids("trip-1", "trip-2")
    assert len(call(agent(alice.person), "summarize_messages", {"message_ids": twenty})["summaries"]) == 20
    error = refusal(me, "summarize_messages", {"message_ids": [*twenty, alice.messages["zeppelin"]]})
    assert (error.code, error.field) == ("LIMIT_EXCEEDED", "message_ids")
    assert "20" in error.message
    settings.OPERATIONS = {**settings.OPERATIONS, "SUMMARIZE_MAX": 3}
    assert refusal(me, "summarize_messages", {"message_ids": alice.ids(*keys)}).code == "LIMIT_EXCEEDED"

    assert_not_found(me, "summarize_messages", lambda x: {"message_ids": [x]}, mallory.messages["long"], "message_ids")
    assert state_of(mallory) == theirs


def test_summarizing_marks_read_only_when_asked_and_confirmed(world: World) -> None:
    alice, theirs = world.alice, state_of(world.mallory)
    me = person(alice.person)
    one = alice.ids("zeppelin")
    before = read_flags()
    error = refusal(me, "summarize_messages", {"message_ids": one, "mark_read": True})
    assert error.code == "CONFIRMATION_REQUIRED" and error.proposal is not None
    assert error.proposal["changes"] == [{"id": one[0], "before": {"read": False}, "after": {"read": True}}]
    assert_no_mail_text(world, error.proposal)
    assert read_flags() == before

    out = call(me, "summarize_messages", {"message_ids": one, "mark_read": True}, confirm=True)
    assert out["marked_read"] == one and out["summaries"][0]["summary"] == "The airship hangar invoice is attached."
    assert flags(alice, one, "read") == [True]
    assert_audited(
        alice, "summarize_messages", [{"id": one[0], "before": {"read": False}, "after": {"read": True}}], me
    )

    assistant = agent(alice.person)
    pair = alice.ids("quoted", "long")
    proposal = refusal(assistant, "summarize_messages", {"message_ids": pair, "mark_read": True}).proposal
    assert proposal is not None and proposal["count"] == 2
    assert_no_mail_text(world, proposal)
    assert flags(alice, pair, "read") == [False, False]
    out = call(
        assistant,
        "summarize_messages",
        {"message_ids": pair, "mark_read": True},
        confirmation_token=proposal["token"],
    )
    assert sorted(out["marked_read"]) == sorted(pair) and flags(alice, pair, "read") == [True, True]
    assert state_of(world.mallory) == theirs


# ---------------------------------------------------------------- proposals, scopes, other tenants


def _large_proposals(box: Mailbox) -> list[tuple[str, dict[str, Any]]]:
    many = eleven(box)
    return [
        ("mark_read", {"message_ids": many}),
        ("set_pinned", {"message_ids": many, "pinned": True}),
        ("add_labels", {"message_ids": many, "label_ids": [box.labels["Receipts"], box.labels["Travel"]]}),
        ("move_messages", {"message_ids": many, "folder": "archive"}),
        ("trash_messages", {"message_ids": many}),
        ("delete_label", {"label_id": box.labels["Travel"]}),
        ("summarize_messages", {"message_ids": box.ids("long", "quoted", "newsletter", "trip-0"), "mark_read": True}),
    ]


def test_proposals_never_carry_mail_text(world: World) -> None:
    alice, theirs = world.alice, state_of(world.mallory)
    before = state_of(alice)
    for caller in (person(alice.person), agent(alice.person, credential_id="key-proposals")):
        for name, input in _large_proposals(alice):
            error = refusal(caller, name, input)
            assert error.code == "CONFIRMATION_REQUIRED", name
            assert error.proposal is not None and error.proposal["operation"] == name
            assert error.proposal["count"] == len(error.proposal["changes"]) > 0
            assert_no_mail_text(world, error.proposal)
    assert state_of(alice) == before
    # the other direction of each change, once the messages are read, pinned, labelled, in the archive, trashed
    me = person(alice.person)
    many = eleven(alice)
    call(me, "mark_read", {"message_ids": many}, confirm=True)
    call(me, "add_labels", {"message_ids": many, "label_ids": [alice.labels["Receipts"]]}, confirm=True)
    call(me, "trash_messages", {"message_ids": many}, confirm=True)
    for name, input in (
        ("mark_unread", {"message_ids": many}),
        ("remove_labels", {"message_ids": many, "label_ids": [alice.labels["Receipts"]]}),
        ("restore_messages", {"message_ids": many}),
    ):
        proposal = refusal(agent(alice.person), name, input).proposal
        assert proposal is not None and proposal["count"] == 11, name
        assert_no_mail_text(world, proposal)
    assert state_of(world.mallory) == theirs


def _mutations(box: Mailbox) -> dict[str, dict[str, Any]]:
    return {
        "mark_read": {"message_ids": box.ids("trip-0")},
        "mark_unread": {"message_ids": box.notices[:1]},
        "set_pinned": {"message_ids": box.ids("trip-0"), "pinned": True},
        "add_labels": {"message_ids": box.ids("zeppelin"), "label_ids": [box.labels["Travel"]]},
        "remove_labels": {"message_ids": box.ids("trip-0"), "label_ids": [box.labels["Travel"]]},
        "create_label": {"account_id": box.personal, "name": "Bills"},
        "rename_label": {"label_id": box.labels["Travel"], "name": "Trips"},
        "delete_label": {"label_id": box.labels["Receipts"]},
        "move_messages": {"message_ids": box.ids("trip-0"), "folder": "archive"},
        "trash_messages": {"message_ids": box.ids("trip-0")},
        "restore_messages": {"message_ids": box.ids("trip-0")},
        "summarize_messages": {"message_ids": box.ids("trip-0")},
    }


def test_an_agent_with_only_the_read_scope_cannot_organize(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    theirs, before = state_of(mallory), state_of(alice)
    mutations = _mutations(alice)
    organizing = {op.name for op in registry if op.handler.__module__ == ORGANIZE_MODULE}
    assert organizing == set(mutations), f"add inputs for {sorted(organizing ^ set(mutations))}"
    for kind, how in (("apikey", "new key"), ("oauth", "reconnects")):
        reader = agent(alice.person, scopes=set(), workspaces=(), credential_kind=kind)
        for name, input in [*mutations.items(), *_mutations(mallory).items()]:
            error = refusal(reader, name, input)
            assert (error.code, error.missing_scope) == ("INSUFFICIENT_SCOPE", "write"), name
            assert "Organize and draft" in error.message and how in error.message
            assert error.proposal is None
    assert state_of(alice) == before
    assert state_of(mallory) == theirs
    assert last_event(alice, "delete_label").outcome == "INSUFFICIENT_SCOPE"


def test_every_mutation_runs_for_a_writer_and_is_audited(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    theirs = state_of(mallory)
    mallory_events = AuditEvent.objects.for_tenant(mallory.person.tenant).count()
    writer = agent(alice.person, credential_id="key-writer")
    me = person(alice.person)
    for name, input in _mutations(alice).items():
        caller = me if name == "delete_label" else writer
        result = call(caller, name, input, confirm=name == "delete_label")
        event = last_event(alice, name)
        assert event.outcome == "ok", name
        assert (event.principal, event.credential_id) == (caller.principal.value, caller.credential_id)
        if name != "summarize_messages":  # without mark_read it changes nothing, so it touches nothing
            assert event.targets and all({"id", "before", "after"} == set(t) for t in event.targets), name
            assert result != {"changed": 0, "message_ids": []}, name
        assert event.input_digest and "alice-trip" not in json.dumps(event.targets)
    assert AuditEvent.objects.for_tenant(mallory.person.tenant).count() == mallory_events
    assert state_of(mallory) == theirs


def _id_inputs(box: Mailbox) -> list[tuple[str, Callable[[str], dict[str, Any]], str]]:
    """Each organize operation with each id it takes: (operation, input around one id, field)."""
    msg = box.messages["trip-0"]
    return [
        ("mark_read", lambda x: {"message_ids": [x]}, "message_ids"),
        ("mark_unread", lambda x: {"message_ids": [x]}, "message_ids"),
        ("set_pinned", lambda x: {"message_ids": [x], "pinned": True}, "message_ids"),
        ("add_labels", lambda x: {"message_ids": [x], "label_ids": [box.labels["Travel"]]}, "message_ids"),
        ("add_labels", lambda x: {"message_ids": [msg], "label_ids": [x]}, "label_ids"),
        ("remove_labels", lambda x: {"message_ids": [x], "label_ids": [box.labels["Travel"]]}, "message_ids"),
        ("remove_labels", lambda x: {"message_ids": [msg], "label_ids": [x]}, "label_ids"),
        ("create_label", lambda x: {"account_id": x, "name": "Stolen"}, "account_id"),
        ("rename_label", lambda x: {"label_id": x, "name": "Stolen"}, "label_id"),
        ("delete_label", lambda x: {"label_id": x}, "label_id"),
        ("move_messages", lambda x: {"message_ids": [x], "folder": "archive"}, "message_ids"),
        ("trash_messages", lambda x: {"message_ids": [x]}, "message_ids"),
        ("restore_messages", lambda x: {"message_ids": [x]}, "message_ids"),
        ("summarize_messages", lambda x: {"message_ids": [x]}, "message_ids"),
        ("summarize_messages", lambda x: {"message_ids": [x], "mark_read": True}, "message_ids"),
    ]


def test_another_tenants_ids_in_every_organize_operation_are_not_found(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    theirs, before = state_of(mallory), state_of(alice)
    stranger = {
        "message_ids": mallory.messages["trip-0"],
        "label_ids": mallory.labels["Travel"],
        "label_id": mallory.labels["Receipts"],
        "account_id": mallory.personal,
    }
    covered = {name for name, _, _ in _id_inputs(alice)}
    assert covered == {op.name for op in registry if op.handler.__module__ == ORGANIZE_MODULE}
    for caller in (person(alice.person), agent(alice.person), agent(alice.person, workspaces=())):
        for name, build, field in _id_inputs(alice):
            assert_not_found(caller, name, build, stranger[field], field)
    # one of hers among alice's own: the whole call is refused and nothing of alice's changes either
    me = person(alice.person)
    for name in ("mark_read", "trash_messages", "summarize_messages"):
        mixed = {"message_ids": [alice.messages["trip-1"], mallory.messages["trip-1"]]}
        error = refusal(me, name, mixed)
        assert error.as_dict() == {"code": "NOT_FOUND", "message": "message_ids: no such item", "field": "message_ids"}
    assert state_of(alice) == before
    assert state_of(mallory) == theirs
    assert Folder.objects.for_tenant(mallory.person.tenant).count() == 6
