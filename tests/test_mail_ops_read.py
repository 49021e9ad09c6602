"""Reading mail through the gate (SPEC §2, §8, §9, §11): accounts, folders, labels, messages, threads,
search, counts, reference texts, status and raw bytes; workspace reach for agents; nothing marks read.

Mallory, in another tenant, has her own imported mail: every id of hers behaves exactly like an id
that does not exist, and none of her data shows up in alice's answers.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from pytest_django import DjangoDbBlocker, Settings

from apps.core.errors import NOT_AVAILABLE_MESSAGE
from apps.core.pages import encode_cursor
from apps.mail.models import MailAccount, Message
from apps.mail.selectors import NAME_AN_ACCOUNT
from apps.operations.registry import Ceiling, OpClass, registry
from apps.outbound.models import Automation
from tests.mailbox import (
    LONG_BODY,
    Mailbox,
    World,
    agent,
    call,
    module_world,
    person,
    read_flags,
    refusal,
)

# ---------------------------------------------------------------- fixtures and helpers


@pytest.fixture(scope="module")
def shared(
    django_db_setup: None, django_db_blocker: DjangoDbBlocker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    with module_world(django_db_blocker, Path(tmp_path_factory.mktemp("read"))) as world:
        yield world


@pytest.fixture
def world(shared: World, db: None) -> World:
    return shared


def ids_of(output: dict[str, Any], key: str = "messages") -> list[str]:
    """The ids of a listing's items (a search's: of its hits' messages)."""
    items = output[key] if key in output or "hits" not in output else [hit["message"] for hit in output["hits"]]
    return [item["id"] for item in items]


def walk(caller: Any, name: str, input: dict[str, Any]) -> list[str]:
    """Every id of a paged listing, following next_cursor to the end."""
    seen: list[str] = []
    cursor = None
    for _ in range(100):
        page = call(caller, name, {**input, "cursor": cursor} if cursor else input)
        seen += ids_of(page)
        cursor = page["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError("the listing never ended")


def newest_first(box: Mailbox, *, account: str | None = None) -> list[str]:
    messages = Message.objects.for_tenant(box.person.tenant)
    if account is not None:
        messages = messages.filter(account_id=account)
    return [str(pk) for pk in messages.order_by("-date", "-id").values_list("pk", flat=True)]


def assert_not_found(caller: Any, name: str, input: dict[str, Any], field: str) -> None:
    """The id behaves exactly like a random uuid that exists nowhere, and like a malformed id."""
    stranger = refusal(caller, name, input)
    absent = refusal(caller, name, {**input, field: str(uuid.uuid4())})
    malformed = refusal(caller, name, {**input, field: "not-an-id"})
    assert stranger.code == "NOT_FOUND", (name, field, stranger.code)
    assert (
        stranger.as_dict()
        == absent.as_dict()
        == malformed.as_dict()
        == {
            "code": "NOT_FOUND",
            "message": f"{field}: no such item",
            "field": field,
        }
    )


def mallory_message(world: World) -> str:
    return world.mallory.messages["zeppelin"]


# ---------------------------------------------------------------- accounts, folders, labels


def test_it_lists_only_the_accounts_of_the_callers_tenant(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    accounts = call(person(alice.person), "list_accounts")["accounts"]
    assert [(a["id"], a["name"], a["kind"], a["workspace"]) for a in accounts] == [
        (alice.personal, "Personal", "local", "default"),
        (alice.work, "Work", "local", "work"),
    ]
    assert [a["id"] for a in call(person(mallory.person), "list_accounts")["accounts"]] == [mallory.personal]
    assert_not_found(person(alice.person), "list_folders", {"account_id": mallory.personal}, "account_id")


def test_it_lists_an_accounts_folders_with_totals_and_unread(world: World) -> None:
    alice = world.alice
    folders = call(person(alice.person), "list_folders", {"account_id": alice.personal})
    assert folders["account_id"] == alice.personal
    counts = {f["kind"]: (f["name"], f["total"], f["unread"]) for f in folders["folders"]}
    assert counts == {
        "archive": ("Archive", 0, 0),
        "drafts": ("Drafts", 0, 0),
        "inbox": ("Inbox", 25, 20),  # five parcel notices were marked read
        "sent": ("Sent", 0, 0),
        "spam": ("Spam", 0, 0),
        "trash": ("Trash", 0, 0),
    }
    work = call(person(alice.person), "list_folders", {"account_id": alice.work})["folders"]
    assert {f["kind"]: (f["total"], f["unread"]) for f in work}["inbox"] == (3, 3)
    # mallory's account is invisible, to alice and to her agent alike
    assert_not_found(person(alice.person), "list_folders", {"account_id": world.mallory.personal}, "account_id")
    assert_not_found(agent(alice.person), "list_folders", {"account_id": world.mallory.personal}, "account_id")


def test_it_lists_labels_of_one_account_or_of_every_account(world: World) -> None:
    alice = world.alice
    labels = call(person(alice.person), "list_labels")["labels"]
    assert {(x["name"], x["account_id"], x["color"]) for x in labels} == {
        ("Travel", alice.personal, "#00aa00"),
        ("Receipts", alice.personal, ""),
        ("Clients", alice.work, "#0000ff"),
    }
    personal = call(person(alice.person), "list_labels", {"account_id": alice.personal})["labels"]
    assert [x["name"] for x in personal] == ["Receipts", "Travel"]
    assert set(world.mallory.labels.values()).isdisjoint(x["id"] for x in labels)
    assert_not_found(person(alice.person), "list_labels", {"account_id": world.mallory.personal}, "account_id")


# ---------------------------------------------------------------- list_messages


def test_it_lists_messages_by_account_folder_label_and_unread_state(world: World) -> None:
    alice = world.alice
    me = person(alice.person)
    everything = call(me, "list_messages")
    assert ids_of(everything) == newest_first(alice)
    assert len(everything["messages"]) == 28 and everything["next_cursor"] is None
    assert set(ids_of(everything)).isdisjoint(world.mallory.messages.values())

    personal = call(me, "list_messages", {"account_id": alice.personal})
    assert ids_of(personal) == newest_first(alice, account=alice.personal)
    assert ids_of(personal)[0] == alice.messages["newsletter"]
    assert {m["account_id"] for m in personal["messages"]} == {alice.personal}

    inbox = call(me, "list_messages", {"account_id": alice.personal, "folder": "inbox"})
    assert ids_of(inbox) == ids_of(personal)
    assert ids_of(call(me, "list_messages", {"account_id": alice.personal, "folder": "Inbox"})) == ids_of(personal)
    assert call(me, "list_messages", {"account_id": alice.personal, "folder": "archive"})["messages"] == []

    travel = call(me, "list_messages", {"label_id": alice.labels["Travel"]})["messages"]
    assert [m["id"] for m in travel] == alice.ids("trip-2", "trip-1", "trip-0")
    assert all(m["label_ids"] == [alice.labels["Travel"]] for m in travel)

    unread = ids_of(call(me, "list_messages", {"account_id": alice.personal, "unread_only": True}))
    assert len(unread) == 20 and set(unread).isdisjoint(alice.notices[:5])
    assert set(alice.notices[5:]) <= set(unread)

    summary = next(m for m in personal["messages"] if m["id"] == alice.messages["zeppelin"])
    assert summary["subject"] == "Zeppelin repair invoice"
    assert summary["sender"] == {"name": "Sender", "address": "sender@example.test"}
    assert summary["folder"] == "inbox" and summary["read"] is False and summary["pinned"] is False
    assert summary["label_ids"] == [alice.labels["Receipts"]]
    assert summary["thread_id"] == alice.threads["zeppelin"]
    assert summary["snippet"].startswith("The airship hangar invoice")

    assert_not_found(me, "list_messages", {"account_id": world.mallory.personal}, "account_id")
    assert_not_found(me, "list_messages", {"label_id": world.mallory.labels["Travel"]}, "label_id")


def test_it_refuses_a_folder_it_cannot_place(world: World) -> None:
    alice = world.alice
    me = person(alice.person)
    no_account = refusal(me, "list_messages", {"folder": "inbox"})
    assert (no_account.code, no_account.field) == ("INVALID_INPUT", "folder")
    unknown = refusal(me, "list_messages", {"account_id": alice.personal, "folder": "Holidays"})
    assert (unknown.code, unknown.field) == ("NOT_FOUND", "folder")
    assert_not_found(me, "list_messages", {"account_id": world.mallory.personal, "folder": "inbox"}, "account_id")


def test_its_cursor_walks_every_message_exactly_once_newest_first(world: World) -> None:
    alice = world.alice
    me = person(alice.person)
    for limit in (1, 3, 4, 27, 28, 29):
        seen = walk(me, "list_messages", {"limit": limit})
        assert seen == newest_first(alice), limit
    # the two notices that share one date both appear, ordered by id
    tied = alice.ids("notice-04", "notice-05")
    assert set(tied) <= set(walk(me, "list_messages", {"account_id": alice.personal, "limit": 2}))
    unread = walk(me, "list_messages", {"account_id": alice.personal, "unread_only": True, "limit": 3})
    assert len(unread) == len(set(unread)) == 20
    assert set(walk(person(world.mallory.person), "list_messages", {"limit": 2})) == set(
        world.mallory.messages.values()
    )
    # a cursor at the position of one of mallory's messages is only a position: alice sees her own mail
    theirs = Message.objects.for_tenant(world.mallory.person.tenant).get(pk=world.mallory.messages["newsletter"])
    assert theirs.date is not None
    after = call(
        me, "list_messages", {"cursor": encode_cursor([theirs.date.isoformat(), str(theirs.pk)]), "limit": 200}
    )
    assert set(ids_of(after)) <= set(alice.messages.values()) and len(after["messages"]) > 0


def test_its_cursor_walks_messages_without_a_date_too(world: World) -> None:
    alice = world.alice
    undated = alice.ids("notice-07", "trip-1", "long")
    Message.objects.for_tenant(alice.person.tenant).filter(pk__in=undated).update(date=None)
    for limit in (1, 2, 3, 5):
        seen = walk(person(alice.person), "list_messages", {"limit": limit})
        assert len(seen) == len(set(seen)) == 28, limit
        assert set(seen) == set(alice.messages.values())
        dated = [m for m in seen if m not in undated]
        assert dated == [m for m in newest_first(alice) if m not in undated]
    assert set(walk(person(world.mallory.person), "list_messages", {"limit": 4})) == set(
        world.mallory.messages.values()
    )


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage!!",
        _b64("not json"),
        _b64('{"a": 1}'),
        encode_cursor(["2026-03-01T09:00:00+00:00"]),
        encode_cursor(["yesterday", str(uuid.uuid4())]),
        encode_cursor(["2026-03-01T09:00:00+00:00", "not-an-id"]),
        encode_cursor([5, 6]),
    ],
)
def test_it_refuses_a_cursor_it_did_not_give_out(world: World, cursor: str) -> None:
    error = refusal(person(world.alice.person), "list_messages", {"cursor": cursor})
    assert (error.code, error.field) == ("INVALID_INPUT", "cursor")
    assert cursor not in error.message
    mallory = refusal(person(world.mallory.person), "list_messages", {"cursor": cursor})
    assert mallory.as_dict() == error.as_dict()
    # her account is looked at before the cursor: it does not exist, whatever the cursor
    assert_not_found(
        person(world.alice.person),
        "list_messages",
        {"account_id": world.mallory.personal, "cursor": cursor},
        "account_id",
    )


@pytest.mark.parametrize(
    "cursor", ["garbage!!", encode_cursor(["ten"]), encode_cursor([-3]), encode_cursor([None]), encode_cursor([1, 2])]
)
def test_search_refuses_a_cursor_it_did_not_give_out(world: World, cursor: str) -> None:
    error = refusal(person(world.alice.person), "search", {"query": "depot", "cursor": cursor})
    assert (error.code, error.field) == ("INVALID_INPUT", "cursor")
    mallory = refusal(person(world.mallory.person), "search", {"query": "depot", "cursor": cursor})
    assert mallory.as_dict() == error.as_dict()
    assert_not_found(
        person(world.alice.person),
        "search",
        {"query": "depot", "account_id": world.mallory.personal, "cursor": cursor},
        "account_id",
    )


def test_it_refuses_a_page_over_the_maximum_instead_of_cutting_it(world: World, settings: Settings) -> None:
    alice = world.alice
    me = person(alice.person)
    for name, extra in (("list_messages", {}), ("search", {"query": "depot"})):
        error = refusal(me, name, {**extra, "limit": 201})
        assert (error.code, error.field) == ("LIMIT_EXCEEDED", "limit")
        assert "200" in error.message
    assert len(call(me, "list_messages", {"limit": 200})["messages"]) == 28

    settings.OPERATIONS = {**settings.OPERATIONS, "PAGE_SIZE_MAX": 5, "PAGE_SIZE_DEFAULT": 4}
    assert refusal(me, "list_messages", {"limit": 6}).code == "LIMIT_EXCEEDED"
    assert refusal(me, "search", {"query": "depot", "limit": 6}).code == "LIMIT_EXCEEDED"
    page = call(me, "list_messages")
    assert len(page["messages"]) == 4 and page["next_cursor"] is not None
    assert walk(me, "list_messages", {"limit": 5}) == newest_first(alice)
    assert refusal(person(world.mallory.person), "list_messages", {"limit": 6}).code == "LIMIT_EXCEEDED"
    # her account does not exist for alice, before any limit is looked at
    assert_not_found(me, "list_messages", {"account_id": world.mallory.personal, "limit": 6}, "account_id")


# ---------------------------------------------------------------- messages and threads


def test_it_gets_a_message_with_its_headers_text_and_labels(world: World) -> None:
    alice = world.alice
    me = person(alice.person)
    message = call(me, "get_message", {"message_id": alice.messages["trip-1"]})["message"]
    assert message["id"] == alice.messages["trip-1"]
    assert message["account_id"] == alice.personal
    assert message["thread_id"] == alice.threads["trip-0"]
    assert message["subject"] == "Re: Harbour trip plans"
    assert message["to"] == [{"name": "", "address": "alice@example.test"}]
    assert message["cc"] == []
    assert message["message_id_header"] == "alice-trip-1@example.test"
    assert message["text"] == "Message 1 of alice-trip."
    assert (message["truncated"], message["text_length"]) == (False, len(message["text"]))
    assert message["label_ids"] == [alice.labels["Travel"]]
    assert message["read"] is False and message["attachments"] == []

    html = call(me, "get_message", {"message_id": alice.messages["newsletter"]})["message"]
    assert "Seasonal gardening tips: plant the tulips before the frost." in html["text"]
    assert "allotment" in html["text"]
    assert "<p>" not in html["text"] and "color: green" not in html["text"]
    assert html["sender"] == {"name": "Garden Club", "address": "club@example.test"}

    assert_not_found(me, "get_message", {"message_id": mallory_message(world)}, "message_id")
    assert_not_found(
        agent(alice.person, workspaces=()), "get_message", {"message_id": mallory_message(world)}, "message_id"
    )


def test_it_cuts_text_at_the_text_bound_and_says_so(world: World, settings: Settings) -> None:
    alice = world.alice
    me = person(alice.person)
    full = Message.objects.for_tenant(alice.person.tenant).get(pk=alice.messages["long"]).text_body
    assert LONG_BODY.strip() in full and len(full) > 20_000

    long = call(me, "get_message", {"message_id": alice.messages["long"]})["message"]
    assert long["text"] == full[:20_000]
    assert (long["truncated"], long["text_length"]) == (True, len(full))

    settings.OPERATIONS = {**settings.OPERATIONS, "TEXT_MAX_CHARS": 100}
    long = call(me, "get_message", {"message_id": alice.messages["long"]})["message"]
    assert long["text"] == full[:100] and len(long["text"]) == 100
    assert (long["truncated"], long["text_length"]) == (True, len(full))
    short = call(me, "get_message", {"message_id": alice.messages["zeppelin"]})["message"]
    assert short["text"] == "The airship hangar invoice is attached."
    assert (short["truncated"], short["text_length"]) == (False, len(short["text"]))

    theirs = call(person(world.mallory.person), "get_message", {"message_id": world.mallory.messages["long"]})
    assert theirs["message"]["truncated"] is True and theirs["message"]["id"] != alice.messages["long"]
    assert_not_found(me, "get_message", {"message_id": world.mallory.messages["long"]}, "message_id")


def test_it_gets_a_thread_oldest_first_up_to_the_thread_bound(world: World, settings: Settings) -> None:
    alice = world.alice
    me = person(alice.person)
    thread = call(me, "get_thread", {"thread_id": alice.threads["trip-0"]})
    assert thread["thread"] == {
        "id": alice.threads["trip-0"],
        "account_id": alice.personal,
        "subject": "Harbour trip plans",
        "message_count": 3,
    }
    assert ids_of(thread) == alice.ids("trip-0", "trip-1", "trip-2")
    assert thread["truncated"] is False

    settings.OPERATIONS = {**settings.OPERATIONS, "THREAD_MAX_MESSAGES": 2}
    cut = call(me, "get_thread", {"thread_id": alice.threads["trip-0"]})
    assert ids_of(cut) == alice.ids("trip-0", "trip-1") and cut["truncated"] is True

    assert_not_found(me, "get_thread", {"thread_id": world.mallory.threads["trip-0"]}, "thread_id")


def test_search_finds_subject_and_body_words_only_in_the_callers_tenant(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    me = person(alice.person)
    both = set(alice.ids("zeppelin", "work-zeppelin"))
    assert set(ids_of(call(me, "search", {"mode": "keyword", "query": "zeppelin"}))) == both  # subject
    assert set(ids_of(call(me, "search", {"mode": "keyword", "query": "hangar"}))) == both  # body
    assert ids_of(call(me, "search", {"mode": "keyword", "query": "tulips"})) == alice.ids(
        "newsletter"
    )  # text of an HTML message
    assert ids_of(call(me, "search", {"mode": "keyword", "query": "airship invoice"})) == alice.ids("zeppelin")
    assert ids_of(
        call(me, "search", {"mode": "keyword", "query": "zeppelin", "account_id": alice.personal})
    ) == alice.ids("zeppelin")
    assert ids_of(call(me, "search", {"mode": "keyword", "query": "zeppelin -airship"})) == alice.ids("work-zeppelin")
    assert ids_of(call(me, "search", {"mode": "keyword", "query": '"lease renewal"'})) == alice.ids("work-zeppelin")
    assert call(me, "search", {"mode": "keyword", "query": "quokka"}) == {
        "hits": [],
        "next_cursor": None,
        "index_complete": True,
    }
    assert call(me, "search", {"mode": "keyword", "query": "zeppelin quokka"}) == {
        "hits": [],
        "next_cursor": None,
        "index_complete": True,
    }

    assert set(ids_of(call(me, "search", {"mode": "keyword", "query": "parcel"}))) == set(alice.notices)

    notices = walk(me, "search", {"mode": "keyword", "query": "depot", "limit": 5})
    assert len(notices) == len(set(notices)) == 18 and set(notices) == set(alice.notices)

    theirs = set(ids_of(call(person(mallory.person), "search", {"mode": "keyword", "query": "zeppelin"})))
    assert theirs == {mallory.messages["zeppelin"]}
    assert_not_found(me, "search", {"query": "zeppelin", "account_id": mallory.personal}, "account_id")


def test_mailbox_counts_gives_totals_and_unread_per_folder(world: World) -> None:
    alice = world.alice
    counts = call(person(alice.person), "mailbox_counts")["accounts"]
    assert [(a["account_id"], a["name"]) for a in counts] == [(alice.personal, "Personal"), (alice.work, "Work")]
    personal = {f["folder"]: (f["total"], f["unread"]) for f in counts[0]["folders"]}
    assert personal["inbox"] == (25, 20) and personal["trash"] == (0, 0) and len(personal) == 6
    work = {f["folder"]: (f["total"], f["unread"]) for f in counts[1]["folders"]}
    assert work["inbox"] == (3, 3)
    one = call(person(alice.person), "mailbox_counts", {"account_id": alice.work})["accounts"]
    assert [a["account_id"] for a in one] == [alice.work]
    assert [a["account_id"] for a in call(person(world.mallory.person), "mailbox_counts")["accounts"]] == [
        world.mallory.personal
    ]
    assert_not_found(person(alice.person), "mailbox_counts", {"account_id": world.mallory.personal}, "account_id")


# ---------------------------------------------------------------- reference, status, raw


def test_get_reference_states_the_safety_rules_and_the_callers_operations(world: World) -> None:
    assistant = agent(world.alice.person)
    security = call(assistant, "get_reference", {"topic": "security"})
    assert security["topic"] == "security"
    assert "never as instructions" in security["text"]
    assert "trash is recoverable" in security["text"]
    operations = call(assistant, "get_reference", {"topic": "operations"})["text"]
    assert "mark_read (mutate)" in operations and "get_message (read)" in operations
    assert "get_raw_message" not in operations and "list_audit_events" not in operations
    reader = call(agent(world.alice.person, scopes=set()), "get_reference", {"topic": "operations"})["text"]
    assert "mark_read" not in reader and "list_messages (read)" in reader
    error = refusal(assistant, "get_reference", {"topic": "secrets"})
    assert (error.code, error.field) == ("INVALID_INPUT", "topic")
    assert call(agent(world.mallory.person), "get_reference", {"topic": "security"}) == security
    assert_not_found(assistant, "get_message", {"message_id": mallory_message(world)}, "message_id")


def test_status_reports_the_tenant_and_the_workspaces_in_reach(world: World) -> None:
    alice = world.alice
    mine = call(person(alice.person), "status")
    assert (mine["tenant"], mine["workspaces"], mine["accounts"]) == ("Alice's tenant", ["default", "work"], 2)
    assert mine["operations_registered"] == sum(1 for _ in registry)
    restricted = call(agent(alice.person), "status")
    assert (restricted["workspaces"], restricted["accounts"]) == (["default"], 1)
    typo = call(agent(alice.person, workspaces=("defualt",)), "status")
    assert (typo["workspaces"], typo["accounts"]) == (["defualt"], 0)
    theirs = call(person(world.mallory.person), "status")
    assert (theirs["tenant"], theirs["workspaces"], theirs["accounts"]) == ("Mallory's tenant", ["default"], 1)
    assert_not_found(agent(alice.person), "list_folders", {"account_id": world.mallory.personal}, "account_id")


def test_raw_bytes_are_for_persons_only(world: World) -> None:
    alice = world.alice
    raw = call(person(alice.person), "get_raw_message", {"message_id": alice.messages["zeppelin"]})
    data = base64.b64decode(raw["data"])
    assert raw["message_id"] == alice.messages["zeppelin"] and raw["encoding"] == "base64"
    assert raw["size"] == len(data)
    assert b"Subject: Zeppelin repair invoice" in data and b"Message-ID: <alice-zeppelin@example.test>" in data

    for caller in (
        agent(alice.person, scopes={"send"}, workspaces=()),
        agent(alice.person, scopes=set(), credential_kind="oauth"),
    ):
        for message_id in (alice.messages["zeppelin"], mallory_message(world), str(uuid.uuid4())):
            error = refusal(caller, "get_raw_message", {"message_id": message_id})
            assert error.as_dict() == {"code": "NOT_AVAILABLE", "message": NOT_AVAILABLE_MESSAGE}
    assert_not_found(person(alice.person), "get_raw_message", {"message_id": mallory_message(world)}, "message_id")


# ---------------------------------------------------------------- reading never marks read


def _a_rule(box: Mailbox) -> str:
    """A rule that would mark everything read (testing and reading it must not)."""
    rule = {
        "name": f"Read all {uuid.uuid4().hex[:6]}",
        "account_id": box.personal,
        "conditions": [{"field": "age", "op": "newer_than", "days": 3650}],
        "actions": [{"action": "mark_read"}],
        "enabled": False,
    }
    return str(call(person(box.person), "create_rule", rule, confirm=True)["id"])


def _an_automation(box: Mailbox) -> str:
    """An automatic reply of the mailbox, on (reading it must send and change nothing)."""
    account = MailAccount.objects.for_tenant(box.person.tenant).get(pk=box.personal)
    made = Automation.objects.create(
        tenant=box.person.tenant, account=account, kind="auto_reply", state="active", body="Away.", audience="everyone",
        once_per_days=7, content_hash="0" * 64, principal="person", door="ui", approved_by=box.person.user,
    )  # fmt: skip
    return str(made.pk)


def _read_calls(box: Mailbox) -> dict[str, list[dict[str, Any]]]:
    everyone = [box.messages[k] for k in ("trip-0", "trip-1", "newsletter", "long", "notice-09", "zeppelin")]
    return {
        "list_accounts": [{}],
        "list_folders": [{"account_id": box.personal}],
        "list_labels": [{"account_id": box.personal}],
        "list_messages": [
            {"account_id": box.personal},
            {"account_id": box.personal, "folder": "inbox", "unread_only": True, "limit": 3},
            {"label_id": box.labels["Travel"]},
            {"view_id": _a_view(box, "")},
        ],
        "list_conversations": [
            {"account_id": box.personal},
            {"account_id": box.personal, "folder": "inbox", "unread_only": True, "pinned_only": True, "limit": 3},
            {"label_id": box.labels["Travel"]},
        ],
        "get_message": [{"message_id": m} for m in everyone],
        "explain_labels": [{"message_id": m} for m in everyone],
        "get_thread": [{"thread_id": box.threads["trip-0"]}, {"thread_id": box.threads["newsletter"]}],
        "summarize_thread": [{"thread_id": box.threads["trip-0"]}],
        "search": [
            {"query": "zeppelin", "account_id": box.personal},
            {"query": "depot", "account_id": box.personal},
            {"view_id": _a_view(box, "zeppelin")},
        ],
        "mailbox_counts": [{"account_id": box.personal}],
        "get_reference": [{"topic": "security"}, {"topic": "operations"}],
        "status": [{}],
        "get_raw_message": [{"message_id": m} for m in everyone],
        "get_message_html": [
            {"message_id": box.messages["newsletter"]},
            {"message_id": everyone[0], "remote_images": True},
        ],
        "get_attachment": [{"attachment_id": _an_attachment(box)}],
        "list_operation_exposure": [{}],
        "list_audit_events": [{}, {"outcome": "refused"}, {"console_reads": "fold"}],
        "get_audit_event": [{"seq": 1}],
        "verify_audit": [{}],
        "export_audit_chain": [{}],
        "get_preferences": [{}],
        "list_awaiting_reply": [{"account_id": box.personal}, {"account_id": box.personal, "days": 1, "limit": 1}],
        "list_signatures": [{"account_id": box.personal}],
        "list_views": [{}],
        "list_rules": [{}],
        "get_rule": [{"rule_id": _a_rule(box)}],
        "list_automations": [{}, {"account_id": box.personal, "state": "active"}],
        "list_events": [{"account_id": box.personal}, {"account_id": box.personal, "types": ["message."], "limit": 5}],
        # the mail that came before the call's start, matched (the gate answers at once: a door would wait)
        "wait_for_message": [
            {"account_id": box.personal, "arrived_after": "2000-01-01T00:00:00Z"},
            {"account_id": box.personal, "from": "a", "subject_contains": "e", "timeout_seconds": 1},
        ],
        "get_automation": [{"automation_id": _an_automation(box)}],
        "test_rule": [
            {"rule_id": _a_rule(box), "days": 365},
            {
                "account_id": box.personal,
                "days": 365,
                "conditions": [{"field": "about", "text": "travel plans"}, {"field": "subject", "value": "trip"}],
                "match": "any",
                "actions": [{"action": "mark_read"}],
            },
        ],
        "list_snippets": [{}],
        "fill_snippet": [{"snippet_id": _a_snippet(box), "account_id": box.personal, "message_id": everyone[0]}],
        "list_api_keys": [{}],
        "list_webhooks": [{}],
        "list_webhook_deliveries": [{"webhook_id": _a_webhook(box)}, {"webhook_id": _a_webhook(box), "limit": 1}],
        "list_connections": [{}],
        "list_tool_sets": [{}],
        "list_members": [{}],
        "list_workspaces": [{}],
        "list_drafts": [{"account_id": box.personal}],
        "get_outbound_request": [{"request_id": _agent_request(box)}],
        "list_outbound": [{}, {"state": "awaiting_approval"}, {"limit": 1}],
        "get_outbound_attachment": [{"attachment_id": _an_outbound_file(box)}],
        "list_send_policies": [{}],
        "list_send_budgets": [{}, {"limit": 1}],
        "list_plugins": [{}],
        "list_imports": [{}, {"limit": 1}],
        "get_import": [{"import_id": _an_import(box)}],
        # the calendar plugin (plugins/oaken-calendar, installed with Oaken): reads through its own process
        "calendar.list_invites": [{"account_id": box.personal}],
        "calendar.get_invite": [{"message_id": m} for m in everyone],
    }


def _a_view(box: Mailbox, query: str) -> str:
    """A saved view of the person's unread mail in the personal account (using it reads, never marks)."""
    from apps.search.models import SavedView

    row = SavedView.objects.create(
        tenant=box.person.tenant, user=box.person.user, name=f"view {query}", query=query, account_id=box.personal,
        unread=True,
    )  # fmt: skip
    return str(row.pk)


def _a_webhook(box: Mailbox) -> str:
    """A webhook of the person's, as a row (listing its deliveries reads no mail)."""
    from apps.webhooks.models import Webhook

    row = Webhook.objects.create(
        tenant=box.person.tenant, user=box.person.user, url="https://hooks.example.org/in",
        secrets={"current": "whsec_" + "A" * 44},
    )  # fmt: skip
    return str(row.pk)


def _a_snippet(box: Mailbox) -> str:
    from apps.outbound.models import Snippet

    row = Snippet.objects.create(tenant=box.person.tenant, user=box.person.user, name="s", text="Hi {first_name}")
    return str(row.pk)


def _an_attachment(box: Mailbox) -> str:
    """A file attached to the zeppelin invoice, as a row (downloading it reads nothing else)."""
    from apps.mail.models import Attachment

    row = Attachment.objects.create(
        tenant=box.person.tenant, message_id=box.messages["zeppelin"], filename="invoice.txt",
        content_type="text/plain", size=4, content=b"1000",
    )  # fmt: skip
    return str(row.pk)


def _an_import(box: Mailbox) -> str:
    """An import into the personal account, as a row (following one reads no mail)."""
    from apps.mail.models import ImportFailure, ImportRun

    row = ImportRun.objects.create(
        tenant=box.person.tenant, account_id=box.personal, source_name="old.mbox", source_kind="mbox", state="done",
        imported=3, failed=1, total=4,
    )  # fmt: skip
    ImportFailure.objects.create(tenant=box.person.tenant, run=row, position="mbox:#4 (byte 90)", reason="no headers")
    return str(row.pk)


def _agent_request(box: Mailbox) -> str:
    """An outbound request made through agent(p)'s credential, as a row (reading it sends nothing)."""
    from apps.outbound.models import OutboundRequest

    p = box.person
    row = OutboundRequest.objects.create(
        tenant=p.tenant,
        account_id=box.personal,
        state="awaiting_approval",
        sender="alice@example.test",
        to=["bob@example.test"],
        message_id="r@example.test",
        content_hash="0" * 64,
        recipient_count=1,
        requested_by=p.user,
        principal="agent",
        door="mcp",
        credential_id="key-1",
        credential_kind="apikey",
        caller_key="-",
        idempotency_key=f"read-test-{uuid.uuid4().hex}",
    )
    return str(row.pk)


def _an_outbound_file(box: Mailbox) -> str:
    """A file of an agent's outbound request, as a row (downloading it sends nothing)."""
    from apps.outbound.models import OutboundAttachment

    row = OutboundAttachment.objects.create(
        tenant=box.person.tenant, request_id=_agent_request(box), filename="plan.txt", content_type="text/plain",
        content=b"plan", sha256="0" * 64,
    )  # fmt: skip
    return str(row.pk)


def test_reading_never_marks_anything_read(world: World) -> None:
    alice = world.alice
    calls = _read_calls(alice)
    reads = {op.name for op in registry if op.op_class == OpClass.READ}
    assert reads <= set(calls), f"add inputs for the read operations {sorted(reads - set(calls))}"
    before = read_flags()
    assert sum(before.values()) == 10  # five notices each of alice and mallory

    me, assistant = person(alice.person), agent(alice.person)
    # persons only, and plugins' operations (off for agents until an ADMIN offers them)
    persons_only = {op.name for op in registry if op.ceiling == Ceiling.NEVER or op.plugin is not None}
    for name, inputs in calls.items():
        for input in inputs:
            call(me, name, input)
            if name in persons_only:  # raw bytes, administration and plugins are not offered to agents
                assert refusal(assistant, name, input).code == "NOT_AVAILABLE"
            else:
                call(assistant, name, input)
    unread = [alice.messages[k] for k in ("trip-0", "newsletter", "long", "notice-09", "quoted")]
    for caller in (me, assistant):
        summaries = call(caller, "summarize_messages", {"message_ids": unread})
        assert summaries["marked_read"] == [] and len(summaries["summaries"]) == 5
    theirs = person(world.mallory.person)
    call(theirs, "get_message", {"message_id": world.mallory.messages["trip-0"]})
    call(theirs, "summarize_messages", {"message_ids": [world.mallory.messages["notice-09"]]})

    assert read_flags() == before


# ---------------------------------------------------------------- workspace reach (SPEC §8)


def test_a_restricted_agent_lists_only_accounts_in_its_workspaces(world: World) -> None:
    alice = world.alice
    assistant = agent(alice.person, workspaces=("default",))
    accounts = call(assistant, "list_accounts")["accounts"]
    assert [(a["id"], a["workspace"]) for a in accounts] == [(alice.personal, "default")]
    assert [a["id"] for a in call(agent(world.mallory.person), "list_accounts")["accounts"]] == [world.mallory.personal]
    assert_not_found(assistant, "list_folders", {"account_id": world.mallory.personal}, "account_id")


def test_a_restricted_agent_is_refused_mail_outside_its_workspaces(world: World) -> None:
    alice = world.alice
    assistant = agent(alice.person, workspaces=("default",))
    before = read_flags()
    outside: list[tuple[str, dict[str, Any], str]] = [
        ("get_message", {"message_id": alice.messages["standup-0"]}, "message_id"),
        ("get_thread", {"thread_id": alice.threads["standup-0"]}, "thread_id"),
        ("list_folders", {"account_id": alice.work}, "account_id"),
        ("list_labels", {"account_id": alice.work}, "account_id"),
        ("list_messages", {"account_id": alice.work}, "account_id"),
        ("list_messages", {"label_id": alice.labels["Clients"]}, "label_id"),
        ("search", {"query": "zeppelin", "account_id": alice.work}, "account_id"),
        ("mailbox_counts", {"account_id": alice.work}, "account_id"),
        ("summarize_messages", {"message_ids": alice.ids("work-zeppelin")}, "message_ids"),
        ("mark_read", {"message_ids": alice.ids("standup-1")}, "message_ids"),
    ]
    for name, input, field in outside:
        error = refusal(assistant, name, input)
        assert (error.code, error.field) == ("OUT_OF_SCOPE", field), name
        assert error.proposal is None
    # a message in reach next to one outside it: the whole call is refused
    mixed = refusal(assistant, "summarize_messages", {"message_ids": alice.ids("zeppelin", "work-zeppelin")})
    assert (mixed.code, mixed.field) == ("OUT_OF_SCOPE", "message_ids")
    assert read_flags() == before
    # mallory's ids are not "out of scope": they do not exist
    assert_not_found(assistant, "get_message", {"message_id": mallory_message(world)}, "message_id")
    assert_not_found(assistant, "get_thread", {"thread_id": world.mallory.threads["trip-0"]}, "thread_id")


def test_a_restricted_agent_must_name_an_account_to_read_across_accounts(world: World) -> None:
    alice = world.alice
    assistant = agent(alice.person, workspaces=("default",))
    for name, extra in (
        ("list_labels", {}),
        ("list_messages", {}),
        ("list_messages", {"unread_only": True}),
        ("search", {"query": "zeppelin"}),
        ("mailbox_counts", {}),
    ):
        error = refusal(assistant, name, extra)
        assert (error.code, error.field, error.message) == ("OUT_OF_SCOPE", "account_id", NAME_AN_ACCOUNT), name
        assert "name an account_id" in error.message

        narrowed = call(assistant, name, {**extra, "account_id": alice.personal})
        assert narrowed == call(person(alice.person), name, {**extra, "account_id": alice.personal})

    assert ids_of(call(assistant, "search", {"query": "zeppelin", "account_id": alice.personal})) == alice.ids(
        "zeppelin"
    )
    labels = call(assistant, "list_labels", {"account_id": alice.personal})["labels"]
    assert {x["name"] for x in labels} == {"Travel", "Receipts"}
    # a label in reach narrows the listing to its account
    travel = ids_of(call(assistant, "list_messages", {"label_id": alice.labels["Travel"]}))
    assert travel == alice.ids("trip-2", "trip-1", "trip-0")
    # mallory's default-only agent reaches all of her accounts, so nothing needs narrowing
    theirs = call(agent(world.mallory.person), "list_messages")
    assert set(ids_of(theirs)) == set(world.mallory.messages.values())


@pytest.mark.parametrize("workspaces", [(), ("default", "work"), ("work", "default", "elsewhere")])
def test_an_agent_whose_workspaces_cover_every_account_is_not_restricted(
    world: World, workspaces: tuple[str, ...]
) -> None:
    alice = world.alice
    assistant = agent(alice.person, workspaces=workspaces)
    me = person(alice.person)
    assert call(assistant, "list_accounts") == call(me, "list_accounts")
    for name, input in (
        ("list_labels", {}),
        ("list_messages", {}),
        ("search", {"query": "zeppelin"}),
        ("mailbox_counts", {}),
        ("get_message", {"message_id": alice.messages["standup-1"]}),
        ("get_thread", {"thread_id": alice.threads["standup-0"]}),
        ("list_folders", {"account_id": alice.work}),
    ):
        assert call(assistant, name, input) == call(me, name, input), name
    assert len(call(assistant, "list_messages")["messages"]) == 28
    assert_not_found(assistant, "get_message", {"message_id": mallory_message(world)}, "message_id")


def test_a_misspelt_workspace_hides_everything_and_exposes_nothing(world: World) -> None:
    alice = world.alice
    assistant = agent(alice.person, workspaces=("defualt",))
    assert call(assistant, "list_accounts") == {"accounts": []}
    for name, input in (
        ("get_message", {"message_id": alice.messages["zeppelin"]}),
        ("get_thread", {"thread_id": alice.threads["trip-0"]}),
        ("list_folders", {"account_id": alice.personal}),
        ("list_messages", {"account_id": alice.personal}),
        ("list_messages", {}),
        ("list_labels", {}),
        ("search", {"query": "zeppelin"}),
        ("mailbox_counts", {}),
    ):
        assert refusal(assistant, name, input).code == "OUT_OF_SCOPE", name
    assert_not_found(assistant, "get_message", {"message_id": mallory_message(world)}, "message_id")


def test_persons_are_never_limited_by_workspaces(world: World) -> None:
    alice = world.alice
    me = person(alice.person)
    assert me.workspace_filter is None
    assert call(me, "get_message", {"message_id": alice.messages["standup-0"]})["message"]["account_id"] == alice.work
    assert len(call(me, "list_messages", {"account_id": alice.work})["messages"]) == 3
    assert {x["name"] for x in call(me, "list_labels")["labels"]} == {"Travel", "Receipts", "Clients"}
    assert_not_found(me, "get_thread", {"thread_id": world.mallory.threads["trip-0"]}, "thread_id")


# ---------------------------------------------------------------- another tenant's ids


def test_another_tenants_ids_behave_like_ids_that_do_not_exist(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    cases = [
        ("list_folders", {"account_id": mallory.personal}, "account_id"),
        ("list_labels", {"account_id": mallory.personal}, "account_id"),
        ("list_messages", {"account_id": mallory.personal}, "account_id"),
        ("list_messages", {"label_id": mallory.labels["Receipts"]}, "label_id"),
        ("get_message", {"message_id": mallory.messages["trip-0"]}, "message_id"),
        ("get_thread", {"thread_id": mallory.threads["zeppelin"]}, "thread_id"),
        ("search", {"query": "zeppelin", "account_id": mallory.personal}, "account_id"),
        ("mailbox_counts", {"account_id": mallory.personal}, "account_id"),
    ]
    callers = [
        person(alice.person),
        agent(alice.person),
        agent(alice.person, workspaces=()),
        agent(alice.person, workspaces=("defualt",)),
    ]
    for caller in callers:
        for name, input, field in cases:
            assert_not_found(caller, name, input, field)
    assert_not_found(person(alice.person), "get_raw_message", {"message_id": mallory.messages["long"]}, "message_id")
    # and they still exist, for mallory
    assert (
        call(person(mallory.person), "get_message", {"message_id": mallory.messages["trip-0"]})["message"]["id"]
        == (mallory.messages["trip-0"])
    )


def test_dates_in_listings_are_the_messages_own(world: World) -> None:
    alice = world.alice
    page = call(person(alice.person), "list_messages", {"label_id": alice.labels["Travel"]})["messages"]
    assert [datetime.fromisoformat(m["date"]).minute for m in page] == [2, 1, 0]
    assert_not_found(person(alice.person), "list_messages", {"label_id": world.mallory.labels["Travel"]}, "label_id")


# ---------------------------------------------------------------- statements per read (issue 19)

_MAIL_TABLES = re.compile(r"\b(mail_message|mail_mailaccount|mail_folder|mail_label|mail_thread)\b")


def _mail_statements(caller: Any, name: str, input: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """How many statements reading the mail store one call made (the gate's own, the audit's, aside), and its
    answer."""
    with CaptureQueriesContext(connection) as seen:
        answer = call(caller, name, input)
    return sum(1 for q in seen.captured_queries if _MAIL_TABLES.search(q["sql"])), answer


def test_hot_reads_take_the_same_few_statements_for_a_page_of_two_as_of_twenty(world: World) -> None:
    """No read makes a statement per row: list_messages, get_thread and search take as many statements for a page
    of twenty as for two, and list_messages names its account, folder and label in one (the page is the other)."""
    alice = world.alice
    assistant = agent(alice.person, workspaces=("default",))
    label = {"account_id": alice.personal, "folder": "inbox", "label_id": alice.labels["Travel"]}
    cases: list[tuple[str, dict[str, Any], int]] = [
        ("list_messages", {"account_id": alice.personal, "folder": "inbox", "unread_only": True}, 2),
        ("list_messages", label, 2),
        ("search", {"query": "notice", "account_id": alice.personal, "mode": "keyword"}, 0),
    ]
    for name, input, most in cases:
        few, small = _mail_statements(assistant, name, {**input, "limit": 2})
        many, large = _mail_statements(assistant, name, {**input, "limit": 20})
        assert len(ids_of(small)) == 2 < len(ids_of(large)), name
        assert few == many, (name, few, many)
        if most:
            assert many <= most, (name, many)
        items = ids_of(large)
        assert set(items).isdisjoint(world.mallory.messages.values())
        assert set(items) <= set(alice.messages.values())
    page, _ = _mail_statements(assistant, "list_messages", {"account_id": alice.personal, "limit": 20})
    assert page == 2
    threads = [alice.threads["trip-0"], alice.threads["zeppelin"]]
    counts = {_mail_statements(assistant, "get_thread", {"thread_id": t})[0] for t in threads}
    assert len(counts) == 1 and counts.pop() <= 2
    # mallory's agent, with the same statements, sees only her mail
    theirs = ids_of(call(agent(world.mallory.person), "list_messages", {"limit": 20}))
    assert theirs and set(theirs) <= set(world.mallory.messages.values())
