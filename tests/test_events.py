"""The event feed (issue 41 item 1): what happened, ids only, numbered per tenant in the order it committed, read
with a cursor, scoped as mail is. Written by the database in the change's own transaction (a rolled-back change
leaves no event); a cursor older than retention is CURSOR_EXPIRED, never a silent gap; racing writers never make a
poller skip an event. Mallory's tenant, with the same kinds of mail, never shows in Alice's feed nor hers in his."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from apps.core.errors import OakenError
from apps.events import feed
from apps.events.models import Event
from apps.mail.importing import import_mail
from apps.mail.models import MailAccount, Message
from apps.workspaces.models import Workspace
from tests.callers import as_agent, as_person, call, refusal
from tests.concurrency import race
from tests.conftest import Person
from tests.mailfactory import raw_message, write_mbox
from tests.outbound_accounts import request
from tests.test_unsubscribe import _mailbox

SECRET = "Quarterly numbers for the board"
SENDER = frozenset({"read", "write", "send"})


def deliver(p: Person, tmp: Path, name: str, count: int, *, workspace: Workspace | None = None) -> list[str]:
    """`count` messages imported into p's account `name`; their ids, oldest first."""
    raws = [
        raw_message(subject=f"{SECRET} {i}", body=f"{SECRET}.\n", message_id=f"<{name}-{i}-{p.tenant.pk}@example.test>")
        for i in range(count)
    ]
    path = write_mbox(tmp / f"{name}-{p.tenant.pk}.mbox", raws)
    import_mail(tenant=p.tenant, workspace=workspace or p.workspace, account_name=name, path=path)
    rows = Message.objects.for_tenant(p.tenant).filter(account__name=name).order_by("pk")
    return [str(pk) for pk in rows.values_list("pk", flat=True)]


def everything(caller: Any, **query: Any) -> list[dict[str, Any]]:
    """Every event the caller may read, page by page from the start."""
    found: list[dict[str, Any]] = []
    after = None
    while True:
        page = call(caller, "list_events", {**query, "limit": 3} | ({"after": after} if after is not None else {}))
        found += page["events"]
        if not page["events"] and page["cursor"] == page["latest"]:
            return found
        after = page["cursor"]


def kinds(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(e["type"], e["subject_id"]) for e in events]


def test_mail_drafts_and_requests_are_reported_in_order_with_ids_only(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    ids = deliver(alice, tmp_path, "Personal", 2)
    theirs = deliver(mallory, tmp_path, "Personal", 2)
    me = as_person(alice)
    call(me, "mark_read", {"message_ids": ids[:1]})
    label = call(me, "create_label", {"account_id": _account(alice, "Personal"), "name": "Board"})["label"]["id"]
    call(me, "add_labels", {"message_ids": ids, "label_ids": [label]}, confirm=True)
    call(me, "trash_messages", {"message_ids": ids[1:]}, confirm=True)
    mailbox = str(_mailbox(alice, "alice@example.test").pk)
    draft = call(me, "create_draft", {"account_id": mailbox, "subject": SECRET, "body": SECRET})
    call(me, "update_draft", {"draft_id": draft["id"], "body": SECRET + "!"})
    call(me, "delete_draft", {"draft_id": draft["id"]}, confirm=True)
    agent = as_agent(alice, scopes=SENDER)
    asked = request(agent, "send_email", {"account_id": mailbox, "to": ["bob@example.org"], "subject": SECRET,
                                          "body": SECRET, "idempotency_key": "ev-1"})  # fmt: skip
    call(me, "approve_outbound", {"request_id": asked["request_id"]})

    events = everything(me)
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(events) + 1))  # gapless, in order, from the first
    assert kinds(events)[:2] == [("message.received", ids[0]), ("message.received", ids[1])]
    changed = [e for e in events if e["type"] == "message.changed"]
    assert [(e["subject_id"], e["data"]["changed"]) for e in changed] == [
        (ids[0], ["read"]),
        (ids[0], ["labels"]),
        (ids[1], ["labels"]),
        (ids[1], ["folder"]),
    ]
    assert kinds([e for e in events if e["type"].startswith("draft.")]) == [
        ("draft.created", draft["id"]),
        ("draft.updated", draft["id"]),
        ("draft.deleted", draft["id"]),
    ]
    request_id = asked["request_id"]
    outbound = [(e["type"], e["data"].get("state")) for e in events if e["subject_id"] == request_id]
    assert outbound[0] == ("outbound.requested", "requested")
    assert ("outbound.awaiting_approval", "awaiting_approval") in outbound and ("approval.needed", None) in outbound
    assert outbound.index(("outbound.awaiting_approval", "awaiting_approval")) < outbound.index(
        ("outbound.approved", "approved")
    )
    assert {e["workspace"] for e in events} == {alice.workspace.name}
    # ids and fixed words only: the mail's text never reaches the feed
    assert SECRET not in json.dumps(events) and "bob@example.org" not in json.dumps(events)
    # filters: a family, and one mailbox
    only = everything(me, types=["outbound."], account_id=mailbox)
    assert {e["type"].split(".")[0] for e in only} == {"outbound"} and len(only) == len(outbound) - 1

    # the other tenant: its own feed, numbered from 1, with none of alice's; hers has none of its
    their_events = everything(as_person(mallory))
    assert kinds(their_events) == [("message.received", theirs[0]), ("message.received", theirs[1])]
    assert [e["seq"] for e in their_events] == [1, 2]
    assert not set(theirs) & {e["subject_id"] for e in events}


def _account(p: Person, name: str) -> str:
    return str(MailAccount.objects.for_tenant(p.tenant).get(name=name).pk)


def test_an_agent_granted_one_workspace_never_reads_another(alice: Person, mallory: Person, tmp_path: Path) -> None:
    other = Workspace.objects.create(tenant=alice.tenant, name="Secret team")
    mine = deliver(alice, tmp_path, "Personal", 1)
    hidden = deliver(alice, tmp_path, "Team", 1, workspace=other)
    deliver(mallory, tmp_path, "Personal", 1)
    agent = as_agent(alice)  # granted the default workspace only
    # some mailbox lies outside its grant: it names the one it asks about
    assert refusal(agent, "list_events", {}).code == "OUT_OF_SCOPE"
    seen = everything(agent, account_id=_account(alice, "Personal"))
    assert kinds(seen) == [("message.received", mine[0])]
    assert refusal(agent, "list_events", {"account_id": _account(alice, "Team")}).code == "OUT_OF_SCOPE"
    # another tenant's mailbox is as absent as one that never existed
    assert refusal(agent, "list_events", {"account_id": _account(mallory, "Personal")}).code == "NOT_FOUND"
    # the person sees both workspaces
    assert {e["subject_id"] for e in everything(as_person(alice))} == {mine[0], hidden[0]}


def test_a_cursor_older_than_retention_is_refused_never_skipped(alice: Person, mallory: Person, tmp_path: Path) -> None:
    deliver(alice, tmp_path, "Personal", 3)
    deliver(mallory, tmp_path, "Personal", 2)
    me = as_person(alice)
    assert feed.prune(before=timezone.now() - timedelta(days=1)) == 0
    assert feed.prune(before=timezone.now() + timedelta(seconds=1)) == 5  # both tenants' events, all old now
    with pytest.raises(OakenError) as expired:
        call(me, "list_events", {"after": 1})
    assert (expired.value.code, expired.value.field) == ("CURSOR_EXPIRED", "after")
    assert "from 3" in expired.value.message
    later = deliver(alice, tmp_path, "Later", 1)
    page = call(me, "list_events", {"after": 3})
    assert [(e["seq"], e["subject_id"]) for e in page["events"]] == [(4, later[0])]
    assert call(me, "list_events", {})["events"] == page["events"]  # no cursor: from the oldest kept
    assert call(as_person(mallory), "list_events", {})["cursor"] == 2  # hers moved on her own numbers


def test_a_rolled_back_change_leaves_no_event(alice: Person, tmp_path: Path) -> None:
    ids = deliver(alice, tmp_path, "Personal", 1)
    before = Event.objects.for_tenant(alice.tenant).count()

    @transaction.atomic
    def change_then_fail() -> None:
        Message.objects.for_tenant(alice.tenant).filter(pk=ids[0]).update(read=True)
        raise RuntimeError("the change fails after its write")

    with pytest.raises(RuntimeError):
        change_then_fail()
    assert Event.objects.for_tenant(alice.tenant).count() == before


@pytest.mark.django_db(transaction=True)
def test_racing_writers_commit_in_number_order_and_a_poller_never_skips(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    ids = deliver(alice, tmp_path, "Personal", 8)
    deliver(mallory, tmp_path, "Personal", 1)
    seen: list[int] = []
    stop = threading.Event()

    def poll() -> None:
        after = 0
        while not stop.is_set() or after < feed.read(alice.tenant, after=None, workspace_ids=None, account_id=None,
                                                    types=(), limit=1).latest:  # fmt: skip
            page = feed.read(alice.tenant, after=after, workspace_ids=None, account_id=None, types=(), limit=100)
            seen.extend(e.seq for e in page.events)
            after = page.events[-1].seq if page.events else after
            time.sleep(0.005)
        connection.close()

    poller = threading.Thread(target=poll)
    poller.start()
    queue = list(ids)
    lock = threading.Lock()

    def write() -> None:
        with lock:
            message = queue.pop()
        with transaction.atomic():
            Message.objects.for_tenant(alice.tenant).filter(pk=message).update(read=True)
            time.sleep(0.05)  # hold the transaction open: a later writer must not commit a number before it

    race(8, write)
    stop.set()
    poller.join()
    numbers = list(Event.objects.for_tenant(alice.tenant).order_by("seq").values_list("seq", flat=True))
    assert numbers == list(range(1, 17))  # 8 received, 8 changed
    assert seen == numbers  # every one, once, in order
    assert list(Event.objects.for_tenant(mallory.tenant).values_list("seq", flat=True)) == [1]
