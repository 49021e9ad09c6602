"""list_conversations (issue 37): one row per thread of a listing, with its counts, senders and the start of its
newest message, paged like list_messages and within the same reach (SPEC §8).

Mallory, in another tenant, has the same mail: none of her conversations shows up in alice's answers, and her
ids behave like ids that do not exist.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from pytest_django import DjangoDbBlocker

from apps.mail.models import Message, Thread
from apps.mail.selectors import NAME_AN_ACCOUNT
from apps.operations.registry import Ceiling, OpClass, registry
from tests.mailbox import World, agent, call, module_world, person, refusal


@pytest.fixture(scope="module")
def shared(
    django_db_setup: None, django_db_blocker: DjangoDbBlocker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    with module_world(django_db_blocker, Path(tmp_path_factory.mktemp("conversations"))) as world:
        yield world


@pytest.fixture
def world(shared: World, db: None) -> World:
    return shared


def threads_of(output: dict[str, Any]) -> list[str]:
    return [row["thread_id"] for row in output["conversations"]]


def walk(caller: Any, input: dict[str, Any]) -> list[str]:
    seen: list[str] = []
    cursor = None
    for _ in range(100):
        page = call(caller, "list_conversations", {**input, "cursor": cursor} if cursor else input)
        seen += threads_of(page)
        cursor = page["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError("the listing never ended")


def newest_threads(world: World, account: str) -> list[str]:
    """The account's threads by their newest message, newest first (as the listing orders them)."""
    latest: dict[str, Any] = {}
    for thread, date in (
        Message.objects.for_tenant(world.alice.person.tenant)
        .filter(account_id=account)
        .values_list("thread_id", "date")
    ):
        key = str(thread)
        latest[key] = max(latest.get(key, date), date)
    return sorted(latest, key=lambda t: (latest[t], t), reverse=True)


def test_it_is_a_read_an_agent_may_call(world: World) -> None:
    op = registry.get("list_conversations")
    assert op is not None and op.op_class is OpClass.READ and op.ceiling is Ceiling.ON
    assert threads_of(call(agent(world.alice.person), "list_conversations", {"account_id": world.alice.personal}))


def test_it_lists_one_row_per_conversation_with_its_counts_and_senders(world: World) -> None:
    alice = world.alice
    me = person(alice.person)
    inbox = call(me, "list_conversations", {"account_id": alice.personal, "folder": "inbox"})
    rows = inbox["conversations"]
    # 25 messages, three of them one conversation
    assert len(rows) == 23 and inbox["next_cursor"] is None
    assert threads_of(inbox) == newest_threads(world, alice.personal)
    trip = next(r for r in rows if r["thread_id"] == alice.threads["trip-0"])
    assert trip["message_count"] == 3 and trip["unread_count"] == 3
    assert trip["message_ids"] == alice.ids("trip-2", "trip-1", "trip-0")
    assert trip["latest_message_id"] == alice.messages["trip-2"]
    assert trip["subject"] == "Harbour trip plans"
    assert trip["snippet"].startswith("Message 2 of alice-trip")
    assert trip["label_ids"] == [alice.labels["Travel"]]
    assert trip["participants"] and all(p["address"] for p in trip["participants"])
    assert trip["pinned"] is False and trip["account_id"] == alice.personal
    zeppelin = next(r for r in rows if r["thread_id"] == alice.threads["zeppelin"])
    assert (zeppelin["message_count"], zeppelin["label_ids"]) == (1, [alice.labels["Receipts"]])
    assert zeppelin["participants"] == [{"name": "Sender", "address": "sender@example.test"}]
    read = next(r for r in rows if r["latest_message_id"] == alice.messages["notice-00"])
    assert read["unread_count"] == 0
    # nothing of mallory's
    theirs = set(world.mallory.threads.values())
    assert theirs.isdisjoint(threads_of(inbox))
    assert theirs.isdisjoint(threads_of(call(me, "list_conversations", {})))
    assert theirs.isdisjoint(threads_of(call(person(alice.person), "list_conversations", {"unread_only": True})))


def test_its_filters_narrow_the_conversations(world: World) -> None:
    alice = world.alice
    me = person(alice.person)
    unread = call(me, "list_conversations", {"account_id": alice.personal, "unread_only": True})["conversations"]
    assert len(unread) == 18 and all(r["unread_count"] for r in unread)
    assert call(me, "list_conversations", {"account_id": alice.personal, "pinned_only": True})["conversations"] == []
    call(me, "set_pinned", {"message_ids": alice.ids("trip-1"), "pinned": True})
    pinned = call(me, "list_conversations", {"account_id": alice.personal, "pinned_only": True})
    assert threads_of(pinned) == [alice.threads["trip-1"]] and pinned["conversations"][0]["pinned"] is True
    assert pinned["conversations"][0]["message_ids"] == alice.ids("trip-1")
    travel = call(me, "list_conversations", {"label_id": alice.labels["Travel"]})
    assert threads_of(travel) == [alice.threads["trip-0"]]
    assert call(me, "list_conversations", {"account_id": alice.personal, "folder": "archive"})["conversations"] == []
    # archiving one message of it: the conversation is in both folders, each with its own messages
    call(me, "move_messages", {"message_ids": alice.ids("trip-0"), "folder": "archive"})
    archive = call(me, "list_conversations", {"account_id": alice.personal, "folder": "archive"})["conversations"]
    assert [(r["thread_id"], r["message_ids"], r["message_count"]) for r in archive] == [
        (alice.threads["trip-0"], alice.ids("trip-0"), 3)
    ]
    # mallory's pinned mail is hers alone
    assert call(person(world.mallory.person), "list_conversations", {"pinned_only": True})["conversations"] == []


def test_its_cursor_walks_every_conversation_exactly_once(world: World) -> None:
    alice = world.alice
    me = person(alice.person)
    whole = newest_threads(world, alice.personal)
    for limit in (1, 2, 5, 22, 23, 24):
        assert walk(me, {"account_id": alice.personal, "limit": limit}) == whole, limit
    undated = alice.ids("notice-07", "trip-1", "long")
    Message.objects.for_tenant(alice.person.tenant).filter(pk__in=undated).update(date=None)
    for limit in (1, 3):
        seen = walk(me, {"account_id": alice.personal, "limit": limit})
        assert len(seen) == len(set(seen)) == 23 and set(seen) == set(whole), limit
    assert set(walk(person(world.mallory.person), {"limit": 2})) == set(world.mallory.threads.values())
    bad = refusal(me, "list_conversations", {"cursor": "garbage!!"})
    assert (bad.code, bad.field) == ("INVALID_INPUT", "cursor")


def test_it_keeps_to_the_callers_reach(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    me = person(alice.person)
    for field, value in (("account_id", mallory.personal), ("label_id", mallory.labels["Travel"])):
        stranger = refusal(me, "list_conversations", {field: value})
        absent = refusal(me, "list_conversations", {field: str(uuid.uuid4())})
        assert stranger.as_dict() == absent.as_dict() and stranger.code == "NOT_FOUND"
    assistant = agent(alice.person, workspaces=("default",))
    outside = refusal(assistant, "list_conversations", {"account_id": alice.work})
    assert (outside.code, outside.field) == ("OUT_OF_SCOPE", "account_id")
    across = refusal(assistant, "list_conversations", {})
    assert (across.code, across.message) == ("OUT_OF_SCOPE", NAME_AN_ACCOUNT)
    narrowed = call(assistant, "list_conversations", {"account_id": alice.personal})
    assert narrowed == call(me, "list_conversations", {"account_id": alice.personal})
    work = Thread.objects.for_tenant(alice.person.tenant).filter(account_id=alice.work)
    assert {str(t) for t in work.values_list("pk", flat=True)}.isdisjoint(threads_of(narrowed))


_MAIL_TABLES = re.compile(r"\b(mail_message|mail_mailaccount|mail_folder|mail_label|mail_thread)\b")


def test_it_takes_the_same_two_statements_for_a_page_of_two_as_of_twenty(world: World) -> None:
    alice = world.alice
    counts = []
    for limit in (2, 20):
        with CaptureQueriesContext(connection) as seen:
            page = call(person(alice.person), "list_conversations", {"account_id": alice.personal, "limit": limit})
        assert len(page["conversations"]) == limit
        counts.append(sum(1 for q in seen.captured_queries if _MAIL_TABLES.search(q["sql"])))
    assert counts[0] == counts[1] <= 2, counts
