"""Snooze (issue 39, item 6): snooze_messages and unsnooze_messages through the gate, and the return at the
snooze's time (apps.worker.snooze), once whatever beats, workers or restarts run it.

A snoozed message of the inbox goes to its account's archive (on a connected mailbox's server too: see
tests/test_snooze_imap.py) and comes back to the inbox unread, on top of the listing, with its Date unchanged.
Mallory, in another tenant, has her own mail: her ids are NOT_FOUND, and nothing of hers changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from pytest_django import DjangoDbBlocker, Settings

from apps.audit.models import AuditEvent
from apps.gate.internal import call_internal
from apps.mail.models import Message
from apps.operations.defs import snooze as snooze_defs
from apps.worker.snooze import return_due
from tests.callers import as_agent, as_person, call, joined, membership, refusal
from tests.mailbox import Mailbox, World, agent, module_world, person, state_of


@pytest.fixture(scope="module")
def shared(
    django_db_setup: None, django_db_blocker: DjangoDbBlocker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    with module_world(django_db_blocker, Path(tmp_path_factory.mktemp("snooze"))) as world:
        yield world


@pytest.fixture
def world(shared: World, db: None) -> World:
    return shared


def row(box: Mailbox, message_id: str) -> Message:
    return Message.objects.for_tenant(box.person.tenant).select_related("folder").get(pk=message_id)


def at(value: Any) -> datetime | None:
    """A time as an operation's output spells it (JSON), read back."""
    return datetime.fromisoformat(value) if value is not None else None


def tomorrow() -> datetime:
    return (timezone.now() + timedelta(days=1)).replace(microsecond=0)


def inbox_ids(box: Mailbox, caller: Any = None) -> list[str]:
    listed = call(caller or person(box.person), "list_messages", {"account_id": box.personal, "folder": "inbox"})
    return [m["id"] for m in listed["messages"]]


def come_due(box: Mailbox, ids: list[str]) -> None:
    """The snooze's time passes (the rows' time set a minute back: the clock is not ours to move)."""
    past = timezone.now() - timedelta(minutes=1)
    snoozed = Message.objects.for_tenant(box.person.tenant).filter(pk__in=ids, snoozed_until__isnull=False)
    snoozed.update(snoozed_until=past)


def events(box: Mailbox, operation: str, outcome: str = "ok") -> list[AuditEvent]:
    rows = AuditEvent.objects.for_tenant(box.person.tenant).filter(operation=operation, outcome=outcome)
    return list(rows.order_by("seq"))


# ---------------------------------------------------------------- snooze and unsnooze


def test_a_snoozed_message_leaves_the_inbox_for_the_archive_and_listings_show_it(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    theirs = state_of(mallory)
    me = person(alice.person)
    pair = alice.ids("notice-00", "notice-01")
    until = tomorrow()
    out = call(me, "snooze_messages", {"message_ids": pair, "until": until.isoformat()})
    assert (out["changed"], out["message_ids"]) == (2, pair)
    assert at(out["snoozed_until"]) == until
    for pk in pair:
        m = row(alice, pk)
        assert (m.folder.kind, m.snoozed_until) == ("archive", until)
        assert pk not in inbox_ids(alice)
    event = events(alice, "snooze_messages")[-1]
    assert {t["id"] for t in event.targets} == set(pair)
    assert all(t["before"] == {"folder": "inbox", "snoozed_until": None} for t in event.targets)
    assert all(t["after"] == {"folder": "archive", "snoozed_until": until.isoformat()} for t in event.targets)

    # the snoozed listing, of messages and of conversations, and the summaries say until when
    snoozed = call(me, "list_messages", {"account_id": alice.personal, "snoozed_only": True})["messages"]
    assert {m["id"] for m in snoozed} == set(pair)
    assert {at(m["snoozed_until"]) for m in snoozed} == {until}
    threads = call(me, "list_conversations", {"account_id": alice.personal, "snoozed_only": True})["conversations"]
    assert {pk for t in threads for pk in t["message_ids"]} == set(pair)
    assert at(call(me, "get_message", {"message_id": pair[0]})["message"]["snoozed_until"]) == until
    unsnoozed = call(me, "get_message", {"message_id": alice.messages["notice-02"]})["message"]
    assert (unsnoozed["snoozed_until"], unsnoozed["returned_at"]) == (None, None)
    # snoozing again moves only the time
    later = until + timedelta(hours=3)
    again = call(me, "snooze_messages", {"message_ids": pair, "until": later.isoformat()})
    assert again["changed"] == 2 and row(alice, pair[0]).snoozed_until == later
    assert state_of(mallory) == theirs


def test_the_time_is_an_offset_or_a_local_time_in_a_zone_and_never_past_or_too_far(
    world: World, settings: Settings
) -> None:
    alice = world.alice
    me = person(alice.person)
    one = alice.ids("notice-03")
    local = (datetime.now(ZoneInfo("Pacific/Auckland")) + timedelta(days=2)).replace(tzinfo=None, microsecond=0)
    call(me, "snooze_messages", {"message_ids": one, "until": local.isoformat(), "tz": "Pacific/Auckland"})
    assert row(alice, one[0]).snoozed_until == local.replace(tzinfo=ZoneInfo("Pacific/Auckland"))
    in_utc = tomorrow().astimezone(UTC).replace(tzinfo=None)
    call(me, "snooze_messages", {"message_ids": one, "until": in_utc.isoformat() + "Z"})
    assert row(alice, one[0]).snoozed_until == in_utc.replace(tzinfo=UTC)

    before = state_of(alice)
    cases = [
        ({"until": local.isoformat()}, "until", "needs tz"),
        ({"until": tomorrow().isoformat(), "tz": "Europe/Paris"}, "tz", "offset"),
        ({"until": local.isoformat(), "tz": "Mars/Olympus"}, "tz", "IANA"),
        ({"until": (timezone.now() - timedelta(minutes=5)).isoformat()}, "until", "past"),
        ({"until": (timezone.now() + timedelta(days=367)).isoformat()}, "until", "SNOOZE_MAX_DAYS"),
        ({"until": "next tuesday"}, "until", ""),
    ]
    for fields, field, words in cases:
        error = refusal(me, "snooze_messages", {"message_ids": one, **fields})
        assert (error.code, error.field) == ("INVALID_INPUT", field), fields
        assert words in error.message, (fields, error.message)
    settings.OPERATIONS = {**settings.OPERATIONS, "SNOOZE_MAX_DAYS": 1}
    error = refusal(
        me, "snooze_messages", {"message_ids": one, "until": (timezone.now() + timedelta(days=2)).isoformat()}
    )
    assert "more than 1 days" in error.message
    assert state_of(alice) == before


def test_unsnooze_brings_messages_back_now_as_read_or_unread_as_they_are(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    me = person(alice.person)
    pair = alice.ids("notice-06", "notice-04")  # notice-06 unread, notice-04 read (the first five are)
    call(me, "snooze_messages", {"message_ids": pair, "until": tomorrow().isoformat()})
    out = call(me, "unsnooze_messages", {"message_ids": [*pair, alice.messages["notice-13"]]})
    assert (out["changed"], out["message_ids"]) == (2, pair)  # notice-13 was not snoozed: left alone
    for pk, read in zip(pair, (False, True), strict=True):
        m = row(alice, pk)
        assert (m.folder.kind, m.snoozed_until, m.returned_at, m.read) == ("inbox", None, None, read)
    assert call(me, "unsnooze_messages", {"message_ids": pair})["changed"] == 0
    # a snoozed message the person put elsewhere meanwhile stays there
    one = alice.ids("notice-07")
    call(me, "snooze_messages", {"message_ids": one, "until": tomorrow().isoformat()})
    call(me, "move_messages", {"message_ids": one, "folder": "sent"})
    call(me, "unsnooze_messages", {"message_ids": one})
    assert (row(alice, one[0]).folder.kind, row(alice, one[0]).snoozed_until) == ("sent", None)
    for name in ("snooze_messages", "unsnooze_messages"):
        extra = {"until": tomorrow().isoformat()} if name == "snooze_messages" else {}
        for stranger in (mallory.messages["trip-0"], "not-an-id"):
            error = refusal(me, name, {"message_ids": [stranger], **extra})
            assert (error.code, error.field) == ("NOT_FOUND", "message_ids"), name


def test_a_snoozed_message_the_person_moves_to_the_inbox_or_throws_away_is_snoozed_no_more(world: World) -> None:
    alice = world.alice
    me = person(alice.person)
    back, away, kept = alice.ids("notice-13", "notice-14", "notice-15")
    until = tomorrow()
    call(me, "snooze_messages", {"message_ids": [back, away, kept], "until": until.isoformat()})
    call(me, "move_messages", {"message_ids": [back], "folder": "inbox"})
    call(me, "trash_messages", {"message_ids": [away]})
    call(me, "move_messages", {"message_ids": [kept], "folder": "sent"})
    assert [(row(alice, pk).folder.kind, row(alice, pk).snoozed_until) for pk in (back, away, kept)] == [
        ("inbox", None),
        ("trash", None),
        ("sent", until),
    ]
    moved = events(alice, "move_messages")[-2].targets
    assert moved == [
        {"id": back, "before": {"folder": "archive", "snoozed_until": until.isoformat()},
         "after": {"folder": "inbox", "snoozed_until": None}}
    ]  # fmt: skip
    come_due(alice, [back, away, kept])
    assert return_due() == 1 and row(alice, kept).folder.kind == "inbox"
    assert row(alice, away).folder.kind == "trash"


def test_trash_and_spam_are_not_snoozed(world: World) -> None:
    alice = world.alice
    me = person(alice.person)
    one = alice.ids("notice-08")
    call(me, "trash_messages", {"message_ids": one})
    error = refusal(me, "snooze_messages", {"message_ids": one, "until": tomorrow().isoformat()})
    assert (error.code, error.field) == ("INVALID_INPUT", "message_ids") and "restore" in error.message


def test_an_agent_with_write_snoozes_confirmed_as_moves_are_and_only_in_its_workspaces(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    theirs = state_of(mallory)
    assistant = agent(alice.person)
    until = tomorrow().isoformat()
    pair = alice.ids("notice-09", "notice-10")
    assert call(assistant, "snooze_messages", {"message_ids": pair, "until": until})["changed"] == 2
    eleven = alice.notices[5:16]
    large = refusal(assistant, "snooze_messages", {"message_ids": eleven, "until": until})
    assert large.code == "CONFIRMATION_REQUIRED" and large.proposal is not None
    assert "Snooze" in large.proposal["summary"]
    assert {c["after"]["snoozed_until"] for c in large.proposal["changes"]} == {until}
    for text in alice.mail_strings():
        assert text not in str(large.proposal)
    assert {row(alice, pk).snoozed_until for pk in eleven if pk not in pair} == {None}
    reader = refusal(as_agent(alice.person, scopes={"read"}), "snooze_messages", {"message_ids": pair, "until": until})
    assert reader.code == "INSUFFICIENT_SCOPE"
    outside = refusal(assistant, "snooze_messages", {"message_ids": alice.ids("work-zeppelin"), "until": until})
    assert outside.code == "OUT_OF_SCOPE"
    # the return is the system's: not an operation persons or agents may call
    for caller in (assistant, person(alice.person)):
        refused = refusal(caller, "return_snoozed_message", {"message_id": pair[0], "until": until})
        assert refused.code == "NOT_AVAILABLE"
    assert state_of(mallory) == theirs


def test_a_member_limited_to_some_workspaces_snoozes_only_there(world: World) -> None:
    alice = world.alice
    bob = joined(alice.person, "bob@example.test")
    call(
        as_person(alice.person),
        "set_member_workspaces",
        {"membership_id": str(membership(bob).pk), "workspace_ids": [str(_work(alice))]},
        confirm=True,
    )
    me = as_person(bob)
    until = tomorrow().isoformat()
    refused = refusal(me, "snooze_messages", {"message_ids": alice.ids("notice-11"), "until": until})
    assert refused.code == "OUT_OF_SCOPE" and row(alice, alice.messages["notice-11"]).snoozed_until is None
    assert call(me, "snooze_messages", {"message_ids": alice.ids("work-zeppelin"), "until": until})["changed"] == 1
    stranger = refusal(me, "snooze_messages", {"message_ids": [world.mallory.messages["trip-0"]], "until": until})
    assert stranger.code == "NOT_FOUND"


def _work(box: Mailbox) -> Any:
    from apps.workspaces.models import Workspace

    return Workspace.objects.for_tenant(box.person.tenant).get(name="work").pk


# ---------------------------------------------------------------- the return


def test_the_return_brings_it_back_unread_on_top_of_the_inbox_once(world: World) -> None:
    alice, mallory = world.alice, world.mallory
    me = person(alice.person)
    old = alice.ids("notice-01")  # one of the older notices: far down the inbox by its date
    call(me, "mark_read", {"message_ids": old})
    date = row(alice, old[0]).date
    call(me, "snooze_messages", {"message_ids": old, "until": tomorrow().isoformat()})
    theirs = alice.ids("notice-02")
    mallory_one = mallory.ids("notice-01")
    call(person(mallory.person), "snooze_messages", {"message_ids": mallory_one, "until": tomorrow().isoformat()})
    assert return_due() == 0  # not due yet: nothing moves
    assert row(alice, old[0]).folder.kind == "archive"

    come_due(alice, old)
    come_due(mallory, mallory_one)
    assert return_due() == 2  # each in its own tenant
    m = row(alice, old[0])
    assert (m.folder.kind, m.snoozed_until, m.read, m.date) == ("inbox", None, False, date)
    assert m.returned_at is not None
    assert inbox_ids(alice)[0] == old[0]  # on top, its Date unchanged
    assert theirs[0] in inbox_ids(alice)
    listed = call(me, "list_messages", {"account_id": alice.personal, "folder": "inbox", "limit": 1})
    assert at(listed["messages"][0]["returned_at"]) == m.returned_at
    assert at(listed["messages"][0]["date"]) == date
    # the pages after the first follow on (the cursor is the listing's own order): every message once
    seen, cursor = [], None
    while True:
        body = {"account_id": alice.personal, "folder": "inbox", "limit": 4, **({"cursor": cursor} if cursor else {})}
        page = call(me, "list_messages", body)
        seen += [x["id"] for x in page["messages"]]
        if not (cursor := page["next_cursor"]):
            break
    assert seen == inbox_ids(alice) and len(seen) == len(set(seen))
    threads = call(me, "list_conversations", {"account_id": alice.personal, "folder": "inbox"})["conversations"]
    assert threads[0]["latest_message_id"] == old[0] and at(threads[0]["listed_at"]) == m.returned_at

    # each change a call through the gate on the internal door, audited
    unread = [e for e in events(alice, "mark_unread") if e.principal == "internal"]
    returned = events(alice, "return_snoozed_message")
    assert len(unread) == len(returned) == 1 and returned[0].door == "internal"
    assert returned[0].targets[0]["after"]["folder"] == "inbox"
    assert return_due() == 0  # again: nothing more
    assert len(events(alice, "return_snoozed_message")) == 1
    assert row(mallory, mallory_one[0]).folder.kind == "inbox"


def test_a_worker_that_died_before_the_return_committed_leaves_it_to_the_next_run(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = world.alice
    one = alice.ids("notice-12")
    call(person(alice.person), "mark_read", {"message_ids": one})
    call(person(alice.person), "snooze_messages", {"message_ids": one, "until": tomorrow().isoformat()})
    come_due(alice, one)

    # a worker died after marking unread, before returning: the next run returns it
    until = row(alice, one[0]).snoozed_until
    call_internal(alice.person.tenant, "mark_unread", {"message_ids": one})
    assert row(alice, one[0]).snoozed_until == until

    # another died inside the return's own transaction (after its UPDATE): nothing of it stays
    class Died(Exception):
        pass

    def die(*args: Any, **kwargs: Any) -> None:
        raise Died

    monkeypatch.setattr(snooze_defs, "ReturnOut", die)
    with contextlib.suppress(Died):  # a worker's death, or the gate's INTERNAL refusal of it
        return_due()
    m = row(alice, one[0])
    assert (m.folder.kind, m.snoozed_until, m.returned_at) == ("archive", until, None)
    monkeypatch.undo()

    assert return_due() == 1
    m = row(alice, one[0])
    assert (m.folder.kind, m.snoozed_until, m.read) == ("inbox", None, False)
    assert return_due() == 0
    assert len(events(alice, "return_snoozed_message")) == 1
    # a return asked for again (a beat that read the row before) is refused, audited, and changes nothing
    before = state_of(alice)
    error = refusal_internal(alice, one[0], until)
    assert error == "CONFLICT" and state_of(alice) == before
    assert len(events(alice, "return_snoozed_message", "CONFLICT")) == 1


def refusal_internal(box: Mailbox, message_id: str, until: Any) -> str:
    from apps.core.errors import OakenError

    try:
        call_internal(
            box.person.tenant, "return_snoozed_message", {"message_id": message_id, "until": until.isoformat()}
        )
    except OakenError as error:
        return error.code
    return "ok"


def test_the_listing_reads_its_order_off_the_index_a_returned_message_included(world: World) -> None:
    """The listing's order (a return, else the Date) is the listing indexes' own expression: a folder's first page
    is read in order off one of them, with no sort, as it was when the order was the Date alone."""
    from django.db import connection

    from apps.mail import reads

    alice = world.alice
    inbox = row(alice, alice.messages["notice-00"]).folder
    sql = reads._summaries_sql(("account", "folder"), "newest", ())
    params: dict[str, Any] = {
        "tenant": alice.person.tenant.pk,
        "account": inbox.account_id,
        "folder": inbox.pk,
        "limit": 20,
    }
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Message._meta.db_table}")
        # a few rows: the planner would sort them; forbidding it shows an index gives the order (or it must sort)
        cursor.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off")
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(line for (line,) in cursor.fetchall())
    main = plan.split("SubPlan")[0]  # (a row's labels are sorted by name in a subplan of their own)
    assert "Index Scan using message_in_" in main and "Sort" not in main, plan
