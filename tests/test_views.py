"""Saved views: a person's saved searches, listed with bounded counts, used by search and list_messages through
view_id; another person's or another tenant's view is NOT_FOUND, and a view never reaches further than its
caller does now (a limited MEMBER, an agent held to some workspaces)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from apps.audit.models import AuditEvent
from apps.mail.models import Message
from apps.workspaces.models import Workspace
from tests.callers import as_agent, as_person, call, joined, membership, refusal
from tests.conftest import Mailbox, Person, give_mail


def _subjects(out: dict[str, Any]) -> set[str]:
    if "hits" in out:
        return {h["message"]["subject"] for h in out["hits"]}
    return {m["subject"] for m in out["messages"]}


@pytest.fixture
def mail(alice: Person, tmp_path: Path) -> Mailbox:
    box = give_mail(alice, tmp_path, "alice", n=5)
    # two of them unread, one with another sender
    Message.objects.for_tenant(alice.tenant).filter(pk__in=box.message_ids[:2]).update(read=False)
    Message.objects.for_tenant(alice.tenant).filter(pk__in=box.message_ids[2:]).update(read=True)
    Message.objects.for_tenant(alice.tenant).filter(pk=box.message_ids[4]).update(
        sender_address="boss@corp.example", sender_name="The Boss"
    )
    return box


def _view(caller: Any, **data: Any) -> dict[str, Any]:
    return call(caller, "create_view", {"name": "v", **data})


def test_a_filter_view_lists_and_counts_what_it_saved(
    alice: Person, mallory: Person, mail: Mailbox, tmp_path: Path
) -> None:
    give_mail(mallory, tmp_path, "mallory", n=4)
    me = as_person(alice)
    unread = _view(me, name="Unread", unread=True)
    assert unread["lists_with"] == "list_messages" and unread["query"] == ""
    boss = _view(me, name="Boss", **{"from": "corp.example"}, account_id=mail.account_id, folder="inbox")
    listed = {v["name"]: v for v in call(me, "list_views")["views"]}
    assert (listed["Unread"]["count"], listed["Unread"]["count_more"], listed["Unread"]["problem"]) == (2, False, None)
    assert listed["Boss"]["count"] == 1 and listed["Boss"]["sender"] == "corp.example"
    page = call(me, "list_messages", {"view_id": unread["id"]})
    assert len(page["messages"]) == 2 and all(not m["read"] for m in page["messages"])
    assert [m["id"] for m in call(me, "list_messages", {"view_id": boss["id"]})["messages"]] == [mail.message_ids[4]]
    # a view with no words is not searched: listed
    assert refusal(me, "search", {"view_id": unread["id"]}).field == "view_id"
    # a view's filters are not combined with the call's: refused, naming the field
    refused = refusal(me, "list_messages", {"view_id": unread["id"], "unread_only": True})
    assert (refused.code, refused.field) == ("INVALID_INPUT", "unread_only")


def test_a_view_with_words_is_searched(alice: Person, mail: Mailbox) -> None:
    me = as_person(alice)
    words = _view(me, name="Notes 3", query="note 3", mode="keyword")
    assert words["lists_with"] == "search"
    found = call(me, "search", {"view_id": words["id"]})
    assert _subjects(found) == {"alice note 3"}
    assert call(me, "list_views")["views"][0]["count"] == 1
    assert refusal(me, "list_messages", {"view_id": words["id"]}).field == "view_id"
    refused = refusal(me, "search", {"view_id": words["id"], "query": "other"})
    assert refused.field == "query"
    refused = refusal(me, "search", {"view_id": words["id"], "from": "x"})
    assert refused.field == "from"
    assert refusal(me, "search", {}).field == "query"
    # by meaning alone: no count (every message is near something)
    call(me, "update_view", {"view_id": words["id"], "mode": "semantic"})
    assert call(me, "list_views")["views"][0]["count"] is None


def bounded(**values: int) -> Any:
    return override_settings(OPERATIONS={**settings.OPERATIONS, **values})


def test_a_count_stops_at_its_bound(alice: Person, mail: Mailbox) -> None:
    me = as_person(alice)
    _view(me, name="All")
    with bounded(VIEW_COUNT_MAX=3):
        listed = call(me, "list_views")["views"][0]
    assert (listed["count"], listed["count_more"]) == (3, True)
    assert call(me, "list_views")["views"][0]["count"] == 5
    assert call(me, "list_views", {"counts": False})["views"][0]["count"] is None


def test_views_per_person_are_bounded_and_named_once(alice: Person, mail: Mailbox) -> None:
    me = as_person(alice)
    _view(me, name="One")
    assert refusal(me, "create_view", {"name": "One"}).code == "CONFLICT"
    _view(me, name="Two")
    with bounded(VIEWS_MAX=2):
        assert refusal(me, "create_view", {"name": "Three"}).code == "LIMIT_EXCEEDED"


def test_update_and_delete(alice: Person, mail: Mailbox) -> None:
    me = as_person(alice)
    made = _view(me, name="Old", unread=True, **{"from": "zq-secret-part"})
    changed = call(me, "update_view", {"view_id": made["id"], "name": "New", "from": None})
    assert (changed["name"], changed["sender"], changed["unread"]) == ("New", None, True)
    asked = refusal(me, "delete_view", {"view_id": made["id"]})
    assert asked.code == "CONFIRMATION_REQUIRED"
    assert call(me, "delete_view", {"view_id": made["id"]}, confirm=True)["deleted"] is True
    assert call(me, "list_views")["views"] == []
    events = AuditEvent.objects.for_tenant(alice.tenant).filter(
        operation__in=["create_view", "delete_view"], outcome="ok"
    )
    assert events.count() == 2
    assert "zq-secret-part" not in str(
        list(events.values_list("targets", flat=True))
    )  # filters named, not their values


def test_another_tenant_and_another_person_never_find_a_view(
    alice: Person, mallory: Person, mail: Mailbox, tmp_path: Path
) -> None:
    made = _view(as_person(alice), name="Mine", unread=True)
    mallory_box = give_mail(mallory, tmp_path, "mallory")
    bob = joined(alice, "bob@example.test", role="ADMIN")
    for caller in (as_person(mallory), as_agent(mallory), as_person(bob), as_agent(bob)):
        assert call(caller, "list_views")["views"] == []
        for op, data in [
            ("list_messages", {"view_id": made["id"]}),
            ("update_view", {"view_id": made["id"], "name": "x"}),
            ("delete_view", {"view_id": made["id"]}),
        ]:
            assert refusal(caller, op, data, confirm=True).code == "NOT_FOUND", (caller, op)
    # naming another tenant's account in a view of one's own is NOT_FOUND too
    assert refusal(as_person(alice), "create_view", {"name": "x", "account_id": mallory_box.account_id}).code == (
        "NOT_FOUND"
    )


def test_an_agent_uses_its_persons_views_within_its_reach(alice: Person, mail: Mailbox) -> None:
    agent = as_agent(alice, scopes={"read", "write"})
    made = call(agent, "create_view", {"name": "By agent", "unread": True})
    assert [v["id"] for v in call(as_person(alice), "list_views")["views"]] == [made["id"]]
    assert len(call(agent, "list_messages", {"view_id": made["id"]})["messages"]) == 2
    reader = as_agent(alice, scopes={"read"})
    assert refusal(reader, "create_view", {"name": "no"}).code == "INSUFFICIENT_SCOPE"


def test_a_limited_member_meets_out_of_scope_never_the_mail(alice: Person, mail: Mailbox, tmp_path: Path) -> None:
    team = Workspace.objects.create(tenant=alice.tenant, name="team")
    team_mail = give_mail(Person(alice.user, alice.tenant, team), tmp_path, "team")
    bob = joined(alice, "bob@example.test")
    me_bob = as_person(bob)
    # bob, reaching every workspace, saves a view of alice's default mailbox and one of the team's
    default_view = call(me_bob, "create_view", {"name": "Default", "account_id": mail.account_id})
    team_view = call(me_bob, "create_view", {"name": "Team", "account_id": team_mail.account_id})
    # then he is given the team only
    body = {"membership_id": str(membership(bob).pk), "workspace_ids": [str(team.pk)]}
    call(as_person(alice), "set_member_workspaces", body, confirm=True)
    me_bob = as_person(bob)
    listed = {v["name"]: v for v in call(me_bob, "list_views")["views"]}
    assert (listed["Default"]["count"], listed["Default"]["problem"]) == (None, "OUT_OF_SCOPE")
    assert (listed["Team"]["count"], listed["Team"]["problem"]) == (3, None)
    assert refusal(me_bob, "list_messages", {"view_id": default_view["id"]}).code == "OUT_OF_SCOPE"
    assert _subjects(call(me_bob, "list_messages", {"view_id": team_view["id"]})) == set(team_mail.subjects)
    # a view with no account is narrowed to what he reaches, as his own listings are
    everything = call(me_bob, "create_view", {"name": "Everything"})
    assert _subjects(call(me_bob, "list_messages", {"view_id": everything["id"], "limit": 100})) == set(
        team_mail.subjects
    )
    assert refusal(me_bob, "create_view", {"name": "No", "account_id": mail.account_id}).code == "OUT_OF_SCOPE"


@pytest.mark.parametrize(
    "filters",
    [
        {"unread": False},
        {"from": "Boss"},
        {"from": "%"},  # taken literally, as search's scope takes it: no sender holds it
        {"to": "alice@"},
        {"has_attachment": False},
        {"has_attachment": True},
        {"after": "2026-03-01", "tz": "Pacific/Kiritimati"},
        {"before": "2026-03-02", "unread": True},
    ],
)
def test_a_views_listing_and_its_count_agree(
    alice: Person, mallory: Person, mail: Mailbox, filters: dict[str, Any], tmp_path: Path
) -> None:
    """Two paths read a view's filters (the count through search's scope, the listing through the summaries'
    conditions): they find the same messages."""
    give_mail(mallory, tmp_path, "mallory", n=2)
    me = as_person(alice)
    made = _view(me, name="f", **filters)
    listed = call(me, "list_messages", {"view_id": made["id"], "limit": 100})["messages"]
    counted = call(me, "list_views")["views"][0]["count"]
    assert len(listed) == counted
    assert all(m["account_id"] == mail.account_id for m in listed)
