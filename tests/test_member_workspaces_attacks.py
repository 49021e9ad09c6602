"""Attacks on "a MEMBER reaches only the workspaces given to them", as an outsider would make them: a member
limited to `team` (and their keys and connections) tries to learn of or act on another workspace's mail by every
side road found in review: other members' rows, an idempotent replay, a send scheduled before the narrowing, a
member given nothing, ids of every kind, another tenant's admin, renamed workspaces, a confirmation token issued
before. Fixtures and helpers are those of tests/test_member_workspaces.py."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from django.utils import timezone

from apps.mail.models import STANDARD_FOLDERS, AccountKind, Folder, MailAccount
from apps.outbound.models import OutboundRequest
from apps.worker import delivery
from apps.workspaces.models import Membership, Workspace
from tests.callers import as_person, call, joined, membership, refusal
from tests.conftest import Person, give_mail
from tests.test_member_workspaces import World, _give, _key, _subjects, _tool_error, _tool_output
from tests.test_member_workspaces import world as world

# ---------------------------------------------------------------- what review found, and is now closed


def test_other_members_rows_name_no_workspace_not_given(world: World, tmp_path: Path) -> None:
    secret = Workspace.objects.create(tenant=world.alice.tenant, name="secret-plans")
    give_mail(Person(world.alice.user, world.alice.tenant, secret), tmp_path, "secret")
    carol = joined(world.alice, "carol@example.test")
    _give(world.alice, carol, [str(secret.pk)])
    bob = as_person(world.bob)
    assert [w["name"] for w in call(bob, "list_workspaces")["workspaces"]] == ["team"]
    rows = call(bob, "list_members")["members"]
    assert {name for row in rows for name in row["workspaces"]} == {"team"}
    assert {pk for row in rows for pk in row["workspace_ids"]} == {str(world.team.pk)}


def test_a_replay_after_the_narrowing_hands_back_no_mail(world: World) -> None:
    _give(world.alice, world.bob, None)  # every workspace, for now
    reply = {"message_id": world.own.message_ids[0], "body": "noted", "quote": True}
    first = call(as_person(world.bob), "reply_to_message", reply, idempotency_key="reply-1")
    assert "own body" in first["body"]  # the quoted text of alice's own mail
    _give(world.alice, world.bob, [str(world.team.pk)])
    bob = as_person(world.bob)
    assert refusal(bob, "reply_to_message", reply, idempotency_key="reply-2").code == "OUT_OF_SCOPE"
    replayed = refusal(bob, "reply_to_message", reply, idempotency_key="reply-1")
    assert replayed.code == "OUT_OF_SCOPE" and "own body" not in replayed.message


def test_a_send_scheduled_before_the_narrowing_is_not_sent_after_it(world: World) -> None:
    default = Workspace.objects.for_tenant(world.alice.tenant).get(name="default")
    account = MailAccount.objects.create(
        tenant=world.alice.tenant,
        workspace=default,
        name="Sales",
        kind=AccountKind.IMAP,
        email_address="sales@example.test",
        credentials={
            "imap": {"host": "127.0.0.1", "port": 1, "security": "none", "username": "x", "password": "x"},
            "smtp": {"host": "127.0.0.1", "port": 1, "security": "none", "username": "", "password": ""},
        },
    )
    Folder.objects.bulk_create(
        Folder(tenant=world.alice.tenant, account=account, kind=kind, name=kind.label) for kind in STANDARD_FOLDERS
    )
    _give(world.alice, world.bob, None)
    bob = as_person(world.bob)
    send_at = timezone.now() + timedelta(minutes=30)
    made = []
    for n in range(2):
        draft = call(bob, "create_draft", {"account_id": str(account.pk), "to": ["x@example.org"], "subject": "Later"})
        schedule = {"draft_id": draft["id"], "send_at": send_at.isoformat(), "idempotency_key": f"later-{n}"}
        made.append(call(bob, "schedule_draft", schedule, confirm=True))
    assert all(row["state"] == "approved" for row in made)
    body = {"membership_id": str(membership(world.bob).pk), "workspace_ids": [str(world.team.pk)]}
    asked = refusal(as_person(world.alice), "set_member_workspaces", body)
    assert asked.proposal is not None and "2 sends of theirs still waiting" in " ".join(asked.proposal["lines"])
    _give(world.alice, world.bob, [str(world.team.pk)])
    # at its time nothing is released from a mailbox no longer his: it fails, and says why
    assert delivery.release_scheduled(send_at + timedelta(seconds=1)) == 0
    rows = OutboundRequest.objects.for_tenant(world.alice.tenant).filter(pk__in=[m["request_id"] for m in made])
    assert {(r.state, r.error) for r in rows} == {("failed", "requester_lost_access")}
    # an admin sees it; bob does not, and nothing of it reached the other tenant
    seen = call(as_person(world.alice), "get_outbound_request", {"request_id": made[0]["request_id"]})
    assert seen["state"] == "failed"
    narrowed = as_person(world.bob)  # as his next call builds him
    assert refusal(narrowed, "get_outbound_request", {"request_id": made[0]["request_id"]}).code == "NOT_FOUND"
    assert not OutboundRequest.objects.for_tenant(world.mallory.tenant).exists()


def test_a_send_of_a_removed_member_is_not_sent(world: World) -> None:
    """The same holds when the person is removed from the tenant while their send waits."""
    from apps.outbound.execution import requester_reaches

    _give(world.alice, world.bob, None)
    request = OutboundRequest(tenant=world.alice.tenant, requested_by=world.bob.user)
    request.account = MailAccount.objects.for_tenant(world.alice.tenant).get(pk=world.own.account_id)
    assert requester_reaches(request, tenant=world.alice.tenant)
    _give(world.alice, world.bob, [str(world.team.pk)])
    assert not requester_reaches(request, tenant=world.alice.tenant)
    Membership.objects.for_tenant(world.alice.tenant).filter(user=world.bob.user).delete()
    request.account = MailAccount.objects.for_tenant(world.alice.tenant).get(pk=world.team_mail.account_id)
    assert not requester_reaches(request, tenant=world.alice.tenant)
    request.requested_by = world.alice.user
    assert requester_reaches(request, tenant=world.alice.tenant)


# ---------------------------------------------------------------- what held from the start


def test_a_member_given_no_workspace_reaches_nothing(world: World) -> None:
    _give(world.alice, world.bob, [])
    bob = as_person(world.bob)
    assert bob.workspace_filter == ()
    assert call(bob, "list_accounts")["accounts"] == []
    assert call(bob, "list_messages", {"limit": 100})["messages"] == []
    assert call(bob, "list_conversations", {"limit": 100})["conversations"] == []
    assert call(bob, "search", {"query": "note", "mode": "keyword", "limit": 50})["hits"] == []
    assert call(bob, "mailbox_counts")["accounts"] == []
    assert call(bob, "list_labels")["labels"] == []
    assert call(bob, "list_drafts")["drafts"] == []
    assert call(bob, "list_signatures")["signatures"] == []
    assert call(bob, "list_workspaces")["workspaces"] == []
    status = call(bob, "status")
    assert status["workspaces"] == [] and status["accounts"] == 0
    for op, data in [
        ("get_message", {"message_id": world.team_mail.message_ids[0]}),
        ("get_raw_message", {"message_id": world.own.message_ids[0]}),
        ("list_folders", {"account_id": world.team_mail.account_id}),
        ("summarize_messages", {"message_ids": [world.own.message_ids[0]]}),
    ]:
        assert refusal(bob, op, data).code in ("OUT_OF_SCOPE", "NOT_FOUND"), op
    every = _key(world.bob, [])
    assert _tool_output(every, "list_accounts", {})["accounts"] == []
    assert _tool_error(every, "get_message", {"message_id": world.team_mail.message_ids[0]}) == "OUT_OF_SCOPE"


def test_reads_by_id_of_another_workspace_are_refused(world: World) -> None:
    bob = as_person(world.bob)
    from apps.mail.models import Message

    thread = str(Message.objects.for_tenant(world.alice.tenant).get(pk=world.own.message_ids[0]).thread_id)
    for op, data in [
        ("get_thread", {"thread_id": thread}),
        ("summarize_thread", {"thread_id": thread}),
        ("get_message_html", {"message_id": world.own.message_ids[0]}),
        ("get_raw_message", {"message_id": world.own.message_ids[0]}),
        ("list_folders", {"account_id": world.own.account_id}),
        ("list_labels", {"account_id": world.own.account_id}),
        ("mailbox_counts", {"account_id": world.own.account_id}),
        ("list_drafts", {"account_id": world.own.account_id}),
        ("search", {"query": "note", "account_id": world.own.account_id}),
        ("reply_to_message", {"message_id": world.own.message_ids[0]}),
        ("forward_message", {"message_id": world.own.message_ids[0], "to": ["x@example.org"]}),
        ("create_label", {"account_id": world.own.account_id, "name": "x"}),
        ("trash_messages", {"message_ids": [world.own.message_ids[0]]}),
        ("set_pinned", {"message_ids": [world.own.message_ids[0]], "pinned": True}),
        ("sync_mailbox", {"account_id": world.own.account_id}),
    ]:
        code = refusal(bob, op, data, confirm=True).code if op not in ("get_thread",) else refusal(bob, op, data).code
        assert code in ("OUT_OF_SCOPE", "INVALID_INPUT"), (op, code)
    counts = call(bob, "mailbox_counts")["accounts"]
    assert {c["account_id"] for c in counts} == {world.team_mail.account_id}


def test_a_second_tenants_admin_cannot_touch_the_first(world: World) -> None:
    body = {"membership_id": str(membership(world.bob).pk), "workspace_ids": None}
    assert refusal(as_person(world.mallory), "set_member_workspaces", body, confirm=True).code == "NOT_FOUND"
    theirs = str(Workspace.objects.for_tenant(world.mallory.tenant).get().pk)
    mine = joined(world.mallory, "mo@example.test")
    other = {"membership_id": str(membership(mine).pk), "workspace_ids": [str(world.team.pk)]}
    assert refusal(as_person(world.mallory), "set_member_workspaces", other, confirm=True).code == "NOT_FOUND"
    invite = {"email": "x@example.test", "workspace_ids": [str(world.team.pk), theirs]}
    assert refusal(as_person(world.mallory), "invite_member", invite, confirm=True).code == "NOT_FOUND"
    names = {w["name"] for w in call(as_person(world.mallory), "list_workspaces")["workspaces"]}
    assert "team" not in names
    assert Membership.objects.get(pk=membership(world.bob).pk).workspace_ids == [world.team.pk]


def test_renaming_a_workspace_keeps_the_member_on_its_id(world: World) -> None:
    default = Workspace.objects.for_tenant(world.alice.tenant).get(name="default")
    Workspace.objects.for_tenant(world.alice.tenant).filter(pk=world.team.pk).update(name="team-old")
    Workspace.objects.for_tenant(world.alice.tenant).filter(pk=default.pk).update(name="team")
    bob = as_person(world.bob)
    assert _subjects(call(bob, "list_messages", {"limit": 100})) == set(world.team_mail.subjects)
    named = _key(world.bob, ["team"])  # a key naming the name the other workspace now has
    assert _tool_output(named, "list_accounts", {})["accounts"] == []


def test_a_confirmation_token_issued_before_the_narrowing_is_refused_after(world: World) -> None:
    from tests.callers import as_agent

    label = call(as_person(world.alice), "create_label", {"account_id": world.own.account_id, "name": "x"})["label"]
    _give(world.alice, world.bob, None)
    agent = as_agent(world.bob, workspaces=(), credential_id="probe-key")
    proposal = refusal(agent, "delete_label", {"label_id": label["id"]})
    assert proposal.code == "CONFIRMATION_REQUIRED" and proposal.proposal is not None
    _give(world.alice, world.bob, [str(world.team.pk)])
    agent = as_agent(world.bob, workspaces=(), credential_id="probe-key")  # as the next call builds it
    token = proposal.proposal["token"]
    assert refusal(agent, "delete_label", {"label_id": label["id"]}, confirmation_token=token).code == "OUT_OF_SCOPE"
