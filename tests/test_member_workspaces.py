"""Whose mailbox it is: a MEMBER reaches only the workspaces given to them, through every door, and so do their
API keys and connections (an agent never reaches further than its person). OWNERs and ADMINs reach every one;
existing members keep every workspace until an ADMIN narrows them. A second tenant sees none of it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.test import Client

from apps.agents.keys import issue_key
from apps.workspaces.models import Membership, Workspace
from tests.callers import as_agent, as_person, call, joined, membership, refusal
from tests.commands import run
from tests.conftest import Mailbox, Person, give_mail
from tests.oauthflow import connect
from tests.test_mcp_door import post as mcp_post
from tests.test_mcp_door import rpc
from tests.test_rest_door import api_client, error_of
from tests.test_rest_door import post as rest_post


@dataclass
class World:
    alice: Person  # OWNER; her own mailbox is in `default`
    bob: Person  # MEMBER of alice's tenant, given `team` only
    mallory: Person  # another tenant
    team: Workspace
    own: Mailbox  # alice's own mailbox, in `default`
    team_mail: Mailbox  # in `team`
    mallory_mail: Mailbox


@pytest.fixture
def world(alice: Person, mallory: Person, tmp_path: Path) -> World:
    team = Workspace.objects.create(tenant=alice.tenant, name="team")
    own = give_mail(alice, tmp_path, "own")
    team_mail = give_mail(Person(alice.user, alice.tenant, team), tmp_path, "team")
    mallory_mail = give_mail(mallory, tmp_path, "mallory")
    bob = joined(alice, "bob@example.test")
    _give(alice, bob, [str(team.pk)])
    return World(alice, bob, mallory, team, own, team_mail, mallory_mail)


def _give(by: Person, whom: Person, ids: list[str] | None) -> dict[str, Any]:
    body = {"membership_id": str(membership(whom).pk), "workspace_ids": ids}
    return call(as_person(by), "set_member_workspaces", body, confirm=True)


def _subjects(out: dict[str, Any]) -> set[str]:
    """The subjects listed (the MCP door's fences around mail text taken off)."""
    return {re.sub(r"\[/?untrusted:[0-9a-f]+\]", "", m["subject"]) for m in out["messages"]}


def _everything_seen_by(caller: Any) -> set[str]:
    return _subjects(call(caller, "list_messages", {"limit": 100}))


# ---------------------------------------------------------------- the person, in-process and over each door


def test_a_member_given_one_workspace_reads_only_its_mail(world: World) -> None:
    bob = as_person(world.bob)
    assert _everything_seen_by(bob) == set(world.team_mail.subjects)  # narrowed, not refused, for a person
    assert [a["name"] for a in call(bob, "list_accounts")["accounts"]] == ["team mail"]
    assert [w["name"] for w in call(bob, "list_workspaces")["workspaces"]] == ["team"]
    assert call(bob, "status")["workspaces"] == ["team"]
    threads = call(bob, "list_conversations", {"limit": 100})["conversations"]
    assert {m for t in threads for m in t["message_ids"]} <= set(world.team_mail.message_ids)
    found = call(bob, "search", {"query": "note", "mode": "keyword", "limit": 50})
    assert {h["message"]["subject"] for h in found["hits"]} == set(world.team_mail.subjects)
    for op, data in [
        ("get_message", {"message_id": world.own.message_ids[0]}),
        ("list_messages", {"account_id": world.own.account_id}),
        ("mark_read", {"message_ids": [world.own.message_ids[0]]}),
    ]:
        assert refusal(bob, op, data).code == "OUT_OF_SCOPE", op
    # another tenant's ids are simply not there
    assert refusal(bob, "get_message", {"message_id": world.mallory_mail.message_ids[0]}).code == "NOT_FOUND"
    # the owner and the other tenant are untouched
    assert _everything_seen_by(as_person(world.alice)) == set(world.own.subjects) | set(world.team_mail.subjects)
    assert _everything_seen_by(as_person(world.mallory)) == set(world.mallory_mail.subjects)


def test_a_member_cannot_draft_or_send_from_a_mailbox_not_given(world: World) -> None:
    bob = as_person(world.bob)
    draft = {"account_id": world.own.account_id, "to": ["x@example.org"], "subject": "hi"}
    assert refusal(bob, "create_draft", draft).code == "OUT_OF_SCOPE"
    send = {**draft, "body": "hello", "idempotency_key": "bob-key-0001"}
    assert refusal(bob, "send_email", send, confirm=True).code == "OUT_OF_SCOPE"


def test_the_rest_door_holds_a_member_to_their_workspaces(world: World) -> None:
    client = api_client(world.bob.user)
    tenant = world.alice.tenant.pk
    listed = rest_post(client, "list_messages", {"limit": 100}, tenant=tenant)
    assert listed.status_code == 200 and _subjects(listed.json()) == set(world.team_mail.subjects)
    refused = rest_post(client, "get_message", {"message_id": world.own.message_ids[0]}, tenant=tenant)
    assert refused.status_code == 403 and error_of(refused)["code"] == "OUT_OF_SCOPE"
    assert world.own.subjects[0] not in refused.content.decode()


def test_the_cli_holds_a_member_to_their_workspaces(world: World) -> None:
    tenant = str(world.alice.tenant.pk)
    code, out = run("call", "list_messages", "--user", world.bob.user.email, "--tenant", tenant)
    assert code == 0, out
    assert _subjects(json.loads(out)) == set(world.team_mail.subjects)
    input = json.dumps({"message_id": world.own.message_ids[0]})
    code, out = run("call", "get_message", "--user", world.bob.user.email, "--tenant", tenant, "--input", input)
    assert code != 0 and json.loads(out)["error"]["code"] == "OUT_OF_SCOPE"


# ---------------------------------------------------------------- their agents


def _key(p: Person, workspaces: list[str]) -> str:
    return issue_key(
        membership=membership(p), scopes=["read", "write"], workspaces=workspaces, allow_list=None, expires_at=None
    )[1]


def _tool(token: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    response = mcp_post(Client(), rpc("tools/call", {"name": name, "arguments": arguments}), token=token)
    assert response.status_code == 200, response.content[:300]
    result: dict[str, Any] = response.json()["result"]
    return result


def _tool_output(token: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = _tool(token, name, arguments)
    assert not result.get("isError"), result
    out: dict[str, Any] = result["structuredContent"]
    return out


def _tool_error(token: str, name: str, arguments: dict[str, Any]) -> str:
    result = _tool(token, name, arguments)
    assert result.get("isError"), result
    code: str = json.loads(result["content"][0]["text"])["error"]["code"]
    return code


def test_an_api_key_of_a_member_reaches_no_further_than_its_person(world: World) -> None:
    every = _key(world.bob, [])  # "every workspace": every one its person is given
    assert [a["name"] for a in _tool_output(every, "list_accounts", {})["accounts"]] == ["team mail"]
    listed = _tool_output(every, "list_messages", {"account_id": world.team_mail.account_id})
    assert _subjects(listed) == set(world.team_mail.subjects)
    assert _tool_error(every, "get_message", {"message_id": world.own.message_ids[0]}) == "OUT_OF_SCOPE"
    assert _tool_error(every, "list_messages", {"account_id": world.own.account_id}) == "OUT_OF_SCOPE"
    # a key that lists the owner's workspace by name reaches nothing of it
    named = _key(world.bob, ["default"])
    assert _tool_output(named, "list_accounts", {})["accounts"] == []
    assert _tool_error(named, "get_message", {"message_id": world.own.message_ids[0]}) == "OUT_OF_SCOPE"
    assert _tool_error(named, "get_message", {"message_id": world.team_mail.message_ids[0]}) == "OUT_OF_SCOPE"
    # narrowed or widened, the same key follows its person from the next call on
    _give(world.alice, world.bob, None)
    assert {a["name"] for a in _tool_output(named, "list_accounts", {})["accounts"]} == {"own mail"}
    _give(world.alice, world.bob, [])
    assert _tool_output(every, "list_accounts", {})["accounts"] == []


def _bobs_browser(world: World) -> Client:
    browser = Client()
    browser.force_login(world.bob.user)
    session = browser.session
    session["tenant_id"] = str(world.alice.tenant.pk)  # the console's tenant: alice's, not bob's own
    session.save()
    return browser


def test_an_oauth_connection_of_a_member_reaches_no_further_than_its_person(world: World) -> None:
    _, tokens = connect(_bobs_browser(world), workspaces=("team",))
    token = tokens["access_token"]
    assert [a["name"] for a in _tool_output(token, "list_accounts", {})["accounts"]] == ["team mail"]
    assert _tool_error(token, "get_message", {"message_id": world.own.message_ids[0]}) == "OUT_OF_SCOPE"
    _give(world.alice, world.bob, [])  # every workspace taken away: the connection loses it at once
    assert _tool_error(token, "get_message", {"message_id": world.team_mail.message_ids[0]}) == "OUT_OF_SCOPE"


def test_a_connection_listing_workspaces_not_given_reaches_none_of_them(world: World) -> None:
    Workspace.objects.create(tenant=world.alice.tenant, name="secret-plans")
    # the consent page offers only the workspaces the person is given
    browser = _bobs_browser(world)
    from tests.oauthflow import start

    page = browser.get(start(browser).url()).content.decode()
    offered = set(re.findall(r'name="workspaces" value="([^"]+)"', page))
    assert offered == {"team"}, offered
    # and a grant forged to list others reaches only those the person is given
    caller = as_agent(world.bob, workspaces=("default", "secret-plans", "team"))
    assert caller.workspace_filter == ("team",)
    assert as_agent(world.alice, workspaces=()).workspace_filter is None


# ---------------------------------------------------------------- who gives them, and what stays as it was


def test_admins_and_owners_reach_every_workspace_whatever_they_were_given(world: World) -> None:
    admin = joined(world.alice, "ada@example.test", role="ADMIN")
    Membership.objects.filter(tenant=world.alice.tenant, user=admin.user).update(workspace_ids=[world.team.pk])
    assert _everything_seen_by(as_person(admin)) == set(world.own.subjects) | set(world.team_mail.subjects)
    # promoted, bob reaches every one; made a MEMBER again, he is held to what he was given
    call(
        as_person(world.alice),
        "change_member_role",
        {"membership_id": str(membership(world.bob).pk), "role": "ADMIN"},
        confirm=True,
    )
    assert _everything_seen_by(as_person(world.bob)) == set(world.own.subjects) | set(world.team_mail.subjects)
    call(
        as_person(world.alice),
        "change_member_role",
        {"membership_id": str(membership(world.bob).pk), "role": "MEMBER"},
        confirm=True,
    )
    assert _everything_seen_by(as_person(world.bob)) == set(world.team_mail.subjects)


def test_a_member_joined_before_keeps_every_workspace(world: World) -> None:
    carol = joined(world.alice, "carol@example.test")  # no workspaces given: as every member before the upgrade
    assert membership(carol).workspace_ids is None
    assert _everything_seen_by(as_person(carol)) == set(world.own.subjects) | set(world.team_mail.subjects)
    rows = {m["email"]: m for m in call(as_person(world.alice), "list_members")["members"]}
    assert rows["carol@example.test"]["reaches"] == "every" and rows["carol@example.test"]["workspaces"] == []
    assert rows["bob@example.test"]["reaches"] == "given" and rows["bob@example.test"]["workspaces"] == ["team"]
    assert rows["bob@example.test"]["workspace_ids"] == [str(world.team.pk)]
    assert rows["alice@example.test"]["reaches"] == "every"
    assert rows["bob@example.test"]["can_choose_workspaces"] and not rows["alice@example.test"]["can_choose_workspaces"]


def test_a_member_learns_no_other_members_workspaces(world: World) -> None:
    hidden = Workspace.objects.create(tenant=world.alice.tenant, name="secret-plans")
    carol = joined(world.alice, "carol@example.test")
    _give(world.alice, carol, [str(hidden.pk)])
    seen = json.dumps(call(as_person(world.bob), "list_members"))
    assert "secret-plans" not in seen and str(hidden.pk) not in seen
    rows = {m["email"]: m for m in json.loads(seen)["members"]}
    assert rows["carol@example.test"]["reaches"] == "hidden" and rows["alice@example.test"]["reaches"] == "hidden"
    assert rows["bob@example.test"]["reaches"] == "given" and rows["bob@example.test"]["workspaces"] == ["team"]
    assert not any(row["can_choose_workspaces"] for row in rows.values())


def test_only_an_admin_chooses_and_only_the_tenants_workspaces(world: World) -> None:
    body = {"membership_id": str(membership(world.bob).pk), "workspace_ids": None}
    refused = refusal(as_person(world.bob), "set_member_workspaces", body, confirm=True)
    assert refused.code == "FORBIDDEN"
    theirs = str(Workspace.objects.for_tenant(world.mallory.tenant).get().pk)
    foreign = {**body, "workspace_ids": [theirs]}
    assert refusal(as_person(world.alice), "set_member_workspaces", foreign, confirm=True).code == "NOT_FOUND"
    # the other tenant's admin cannot name alice's member at all
    assert refusal(as_person(world.mallory), "set_member_workspaces", body, confirm=True).code == "NOT_FOUND"
    assert membership(world.bob).workspace_ids == [world.team.pk]


def test_the_change_is_confirmed_in_words_and_audited(world: World) -> None:
    body = {"membership_id": str(membership(world.bob).pk), "workspace_ids": None}
    asked = refusal(as_person(world.alice), "set_member_workspaces", body)
    assert asked.code == "CONFIRMATION_REQUIRED"
    said = " ".join(asked.proposal["lines"]) if asked.proposal else ""
    assert "every mailbox of this tenant" in said and "own mail" in said
    from apps.audit.models import AuditEvent

    _give(world.alice, world.bob, None)
    event = AuditEvent.objects.for_tenant(world.alice.tenant).filter(operation="set_member_workspaces").last()
    assert event is not None and event.outcome == "ok"
    assert not AuditEvent.objects.for_tenant(world.mallory.tenant).filter(operation="set_member_workspaces").exists()


# ---------------------------------------------------------------- invitations say it


def test_an_invitation_names_the_mailboxes_and_its_membership_gets_them(
    world: World, django_capture_on_commit_callbacks: Any
) -> None:
    mail.outbox.clear()
    invite = {"email": "dora@example.test", "role": "MEMBER", "workspace_ids": [str(world.team.pk)]}
    asked = refusal(as_person(world.alice), "invite_member", invite)
    said = " ".join(asked.proposal["lines"]) if asked.proposal else ""
    assert "team mail" in said and "own mail" not in said and "no other mailbox" in said
    with django_capture_on_commit_callbacks(execute=True):  # the mail goes once the invitation is committed
        out = call(as_person(world.alice), "invite_member", invite, confirm=True)
    assert out["workspaces"] == ["team"]
    body = str(mail.outbox[-1].body)
    assert "team mail" in body and "own mail" not in body
    token = re.search(r"/invitations/([\w-]+)", body)
    assert token is not None
    from tests.conftest import make_person

    dora = make_person("dora@example.test")
    from apps.accounts.models import User

    User.objects.filter(pk=dora.user.pk).update(email_verified_at=dora.user.date_joined)
    browser = Client()
    browser.force_login(dora.user)
    page = browser.get(f"/invitations/{token.group(1)}")
    assert page.status_code == 200 and "team mail" in page.content.decode() and "own mail" not in page.content.decode()
    assert browser.post(f"/invitations/{token.group(1)}").status_code == 200
    joined_as = Membership.objects.for_tenant(world.alice.tenant).get(user=dora.user)
    assert joined_as.workspace_ids == [world.team.pk]
    seen = Person(dora.user, world.alice.tenant, world.team)
    assert _everything_seen_by(as_person(seen)) == set(world.team_mail.subjects)


def test_an_invitation_refuses_another_tenants_workspace(world: World) -> None:
    theirs = str(Workspace.objects.for_tenant(world.mallory.tenant).get().pk)
    invite = {"email": "eve@example.test", "workspace_ids": [theirs]}
    assert refusal(as_person(world.alice), "invite_member", invite, confirm=True).code == "NOT_FOUND"


def test_a_key_used_before_a_narrowing_replays_nothing_after_it(world: World) -> None:
    _give(world.alice, world.bob, None)
    bob = as_person(world.bob)
    first = call(bob, "create_label", {"account_id": world.own.account_id, "name": "later"}, idempotency_key="k-1")
    assert (
        call(bob, "create_label", {"account_id": world.own.account_id, "name": "later"}, idempotency_key="k-1") == first
    )
    _give(world.alice, world.bob, [str(world.team.pk)])
    refused = refusal(
        as_person(world.bob),
        "create_label",
        {"account_id": world.own.account_id, "name": "later"},
        idempotency_key="k-1",
    )
    assert refused.code == "OUT_OF_SCOPE" and refused.field == "idempotency_key"
    # a key used within what the person still reaches replays as before
    team = {"account_id": world.team_mail.account_id, "name": "later"}
    kept = call(as_person(world.bob), "create_label", team, idempotency_key="k-2")
    assert call(as_person(world.bob), "create_label", team, idempotency_key="k-2") == kept
