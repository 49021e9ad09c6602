"""Outbound mail against real servers on loopback (Dovecot + aiosmtpd): requests, approval, exactly-once
delivery, unknown outcomes reconciled through Sent, limits and budgets. Mallory's tenant sees none of it."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from email import message_from_bytes
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.core import redis_client as redis_module
from apps.core.errors import OakenError
from apps.gate.internal import call_internal
from apps.outbound import requests as outbound_requests
from apps.outbound.models import OutboundRequest, OutboxEntry, State
from apps.worker import delivery
from tests.callers import as_agent, as_person, call, refusal
from tests.conftest import Person
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user, request

SENDER = {"read", "write", "send"}


def _agent(p: Person, credential_id: str = "key-send") -> Any:
    return as_agent(p, scopes=SENDER, credential_id=credential_id)


def _email(account_id: Any, to: list[str], key: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "account_id": str(account_id),
        "to": to,
        "subject": "Quarterly figures",
        "body": "The totals are in.\n",
        "idempotency_key": key or uuid.uuid4().hex,
        **extra,
    }


def _inbox_ids(imap: ImapServer, user: str, folder: str = "INBOX") -> list[str]:
    return [str(message_from_bytes(raw)["Message-ID"]) for _, raw, _ in imap.folder_messages(user, folder)]


def _row(p: Person, request_id: str) -> OutboundRequest:
    return OutboundRequest.objects.for_tenant(p.tenant).get(pk=request_id)


def _transitions(p: Person, request_id: str) -> list[tuple[str, Any, Any]]:
    """(operation, before, after) of every audited state change of the request, in order."""
    found = []
    for event in AuditEvent.objects.for_tenant(p.tenant).order_by("seq"):
        for target in event.targets:
            if target["id"] == request_id and isinstance(target["after"], dict) and "state" in target["after"]:
                before = (target["before"] or {}).get("state")
                found.append((event.operation, before, target["after"]["state"]))
    return found


@pytest.fixture
def world(alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer) -> dict[str, Any]:
    me, bob, eve = mail_user(imap_server, "alice"), mail_user(imap_server, "bob"), mail_user(imap_server, "eve")
    account = imap_account(alice, imap_server, smtp_server, me)
    theirs = imap_account(mallory, imap_server, smtp_server, eve)
    return {"me": me, "bob": bob, "eve": eve, "account": account, "theirs": theirs}


def test_an_agent_request_waits_for_a_person_and_is_delivered_once(
    alice: Person, mallory: Person, world: dict[str, Any], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    agent = _agent(alice)
    made = request(agent, "send_email", _email(world["account"].pk, [world["bob"]], key="k1"))
    assert made["state"] == "awaiting_approval"
    assert made["approval_url"].endswith(f"/outbound?request={made['request_id']}")
    assert "approve" in made["next"] and smtp_server.connections == 0
    # a retry with the same key is the same request (a completed key asks for no confirmation again: issue 14,
    # item 8); other content under the key is refused
    again = call(agent, "send_email", _email(world["account"].pk, [world["bob"]], key="k1"))
    assert again["request_id"] == made["request_id"]
    changed = _email(world["account"].pk, [world["bob"], "x@example.test"], key="k1")
    mismatch = refusal(agent, "send_email", changed)
    assert (mismatch.code, mismatch.field, mismatch.proposal) == ("IDEMPOTENCY_MISMATCH", "idempotency_key", None)

    # nobody but a person of this tenant decides: not the agent, not the system, not another tenant
    assert refusal(agent, "approve_outbound", {"request_id": made["request_id"]}).code == "NOT_AVAILABLE"
    with pytest.raises(OakenError) as by_the_system:
        call_internal(alice.tenant, "approve_outbound", {"request_id": made["request_id"]})
    assert by_the_system.value.code == "NOT_AVAILABLE" and _row(alice, made["request_id"]).state == "awaiting_approval"
    assert refusal(as_person(mallory), "approve_outbound", {"request_id": made["request_id"]}).code == "NOT_FOUND"
    assert call(as_person(mallory), "list_outbound")["requests"] == []
    waiting = call(as_person(alice), "list_outbound", {"state": "awaiting_approval"})["requests"]
    assert [w["request"]["request_id"] for w in waiting] == [made["request_id"]]
    assert waiting[0]["to"] == [world["bob"]] and waiting[0]["principal"] == "agent"

    approved = call(
        as_person(alice), "approve_outbound", {"request_id": made["request_id"], "content_hash": made["content_hash"]}
    )
    assert approved["state"] == "queued" and approved["approval_url"] is None
    assert OutboxEntry.objects.for_tenant(alice.tenant).filter(request_id=made["request_id"]).exists()
    assert refusal(as_person(alice), "approve_outbound", {"request_id": made["request_id"]}).code == "CONFLICT"

    assert delivery.deliver(made["request_id"]) == "sent"
    assert delivery.deliver(made["request_id"]) == "not claimed"  # a duplicated task
    assert smtp_server.data_commands == 1
    mid = f"<{made['message_id']}>"
    assert _inbox_ids(imap_server, world["bob"]) == [mid]
    assert _inbox_ids(imap_server, world["me"], "Sent") == [mid]  # the server keeps none: Oaken appended it
    assert call(agent, "get_outbound_request", {"request_id": made["request_id"]})["state"] == "sent"
    assert _transitions(alice, made["request_id"]) == [
        ("send_email", None, "requested"),
        ("send_email", "requested", "awaiting_approval"),
        ("approve_outbound", "awaiting_approval", "approved"),
        ("approve_outbound", "approved", "queued"),
        ("claim_outbound_send", "queued", "sending"),
        ("record_outbound_outcome", "sending", "sent"),
    ]
    # another credential of the same person, and another tenant, do not see the agent's request
    other = _agent(alice, credential_id="key-other")
    assert refusal(other, "get_outbound_request", {"request_id": made["request_id"]}).code == "NOT_FOUND"
    assert refusal(_agent(mallory), "get_outbound_request", {"request_id": made["request_id"]}).code == "NOT_FOUND"
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


def test_a_rejected_request_is_never_sent(alice: Person, world: dict[str, Any], smtp_server: SmtpServer) -> None:
    made = request(_agent(alice), "send_email", _email(world["account"].pk, [world["bob"]]))
    assert call(as_person(alice), "reject_outbound", {"request_id": made["request_id"]})["state"] == "rejected"
    assert delivery.deliver(made["request_id"]) == "not claimed" and smtp_server.connections == 0


@pytest.mark.usefixtures("one_budget_hour")
def test_a_send_policy_approves_what_it_allows(
    alice: Person, mallory: Person, world: dict[str, Any], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    agent = _agent(alice)
    policy = request(
        as_person(alice),
        "create_send_policy",
        {"name": "team", "allowed_domains": ["example.test"], "recipients_per_hour": 3},
    )
    assert (
        refusal(
            agent, "create_send_policy", {"name": "x", "allowed_domains": ["a.test"], "recipients_per_hour": 9}
        ).code
        == "NOT_AVAILABLE"
    )
    assert call(as_person(mallory), "list_send_policies")["policies"] == []

    allowed = request(agent, "send_email", _email(world["account"].pk, [world["bob"]]))
    assert allowed["state"] == "queued"
    assert _row(alice, allowed["request_id"]).approved_via == "policy"
    assert delivery.deliver(allowed["request_id"]) == "sent"
    assert _inbox_ids(imap_server, world["bob"]) == [f"<{allowed['message_id']}>"]

    elsewhere = request(agent, "send_email", _email(world["account"].pk, ["someone@elsewhere.test"]))
    assert elsewhere["state"] == "awaiting_approval"
    over = request(
        agent, "send_email", _email(world["account"].pk, ["a@example.test", "b@example.test", "c@example.test"])
    )
    assert over["state"] == "awaiting_approval"  # 1 + 3 > 3 recipients this hour: a person decides

    # mallory's agent gets nothing from alice's policy
    assert request(_agent(mallory), "send_email", _email(world["theirs"].pk, [world["bob"]]))["state"] == (
        "awaiting_approval"
    )
    call(as_person(alice), "delete_send_policy", {"policy_id": policy["id"]}, confirm=True)
    assert request(agent, "send_email", _email(world["account"].pk, [world["bob"]]))["state"] == "awaiting_approval"


def test_a_change_after_approval_makes_a_new_request(
    alice: Person, world: dict[str, Any], smtp_server: SmtpServer
) -> None:
    agent = _agent(alice)
    draft = call(
        agent,
        "create_draft",
        {"account_id": str(world["account"].pk), "to": [world["bob"]], "subject": "Offer", "body": "We offer 100.\n"},
    )
    later = (timezone.now() + timedelta(hours=2)).isoformat()
    first = request(agent, "schedule_draft", {"draft_id": draft["id"], "send_at": later, "idempotency_key": "s1"})
    call(as_person(alice), "approve_outbound", {"request_id": first["request_id"]})
    assert _row(alice, first["request_id"]).state == "approved"

    # a scheduled send is not edited through an agent door: cancel first
    edit = {"draft_id": draft["id"], "body": "We offer 1000.\n"}
    assert refusal(agent, "update_draft", edit).code == "CONFLICT"
    assert (
        call(agent, "cancel_scheduled_send", {"request_id": first["request_id"], "idempotency_key": "c1"})["state"]
        == "cancelled"
    )
    call(agent, "update_draft", edit)
    # the same key for the changed draft is refused; a new key makes a new request, waiting for a person again
    reused = refusal(agent, "schedule_draft", {"draft_id": draft["id"], "send_at": later, "idempotency_key": "s1"})
    assert reused.code == "IDEMPOTENCY_MISMATCH"
    second = request(agent, "schedule_draft", {"draft_id": draft["id"], "send_at": later, "idempotency_key": "s2"})
    assert second["request_id"] != first["request_id"] and second["content_hash"] != first["content_hash"]
    assert second["state"] == "awaiting_approval"
    assert delivery.release_scheduled(timezone.now() + timedelta(hours=3)) == 0  # cancelled, and not approved

    # content that moves after approval (behind the operations' back) is never sent
    call(as_person(alice), "approve_outbound", {"request_id": second["request_id"]})
    OutboundRequest.objects.for_tenant(alice.tenant).filter(pk=second["request_id"]).update(body="tampered")
    assert delivery.release_scheduled(timezone.now() + timedelta(hours=3)) == 1
    assert delivery.deliver(second["request_id"]) == "failed"
    assert _row(alice, second["request_id"]).error == "content_changed" and smtp_server.connections == 0


def test_a_scheduled_send_waits_for_its_time(alice: Person, world: dict[str, Any], smtp_server: SmtpServer) -> None:
    me = as_person(alice)
    draft = call(me, "create_draft", {"account_id": str(world["account"].pk), "to": [world["bob"]], "subject": "Later"})
    send_at = timezone.now() + timedelta(minutes=30)
    made = request(
        me, "schedule_draft", {"draft_id": draft["id"], "send_at": send_at.isoformat(), "idempotency_key": "later"}
    )
    assert made["state"] == "approved"  # a person's own request: approved by them, waiting for its time
    assert delivery.deliver(made["request_id"]) == "not claimed"
    assert delivery.release_scheduled(timezone.now()) == 0
    assert delivery.release_scheduled(send_at + timedelta(seconds=1)) == 1
    assert delivery.deliver(made["request_id"]) == "sent" and smtp_server.data_commands == 1


def test_a_reply_threads_in_the_receiving_mailbox(
    alice: Person, world: dict[str, Any], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    from tests.test_drafts import stored_message

    original = stored_message(
        alice,
        world["account"],
        sender=world["bob"],
        subject="Re: Quarterly plans",
        message_id="orig-2@example.test",
        references=["orig-1@example.test"],
        text="Shall we meet on Monday?\nBob\n",
    )
    me = as_person(alice)
    draft = call(me, "reply_to_message", {"message_id": str(original.pk), "body": "Monday works."})
    assert draft["subject"] == "Re: Quarterly plans" and draft["to"] == [world["bob"]]
    made = request(me, "send_draft", {"draft_id": draft["id"], "idempotency_key": "reply"})
    assert made["state"] == "queued"
    assert delivery.deliver(made["request_id"]) == "sent"
    [(_, raw, _)] = imap_server.folder_messages(world["bob"], "INBOX")
    received = message_from_bytes(raw)
    assert received["In-Reply-To"] == "<orig-2@example.test>"
    assert received["References"].split() == ["<orig-1@example.test>", "<orig-2@example.test>"]
    assert received["Subject"] == "Re: Quarterly plans" and received["Message-ID"] == f"<{made['message_id']}>"
    payload = received.get_payload(decode=True)
    assert isinstance(payload, bytes)
    text = payload.decode()
    assert text.startswith("Monday works.") and "> Shall we meet on Monday?" in text


def test_a_connection_lost_after_data_is_unknown_never_resent_and_reconciled(
    alice: Person, world: dict[str, Any], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    smtp_server.drop_after_data = True
    made = request(as_person(alice), "send_email", _email(world["account"].pk, [world["bob"]]))
    assert delivery.deliver(made["request_id"]) == "unknown"
    row = _row(alice, made["request_id"])
    assert row.state == "unknown" and row.error == "connection_lost_after_data" and not row.copied_to_sent
    assert delivery.deliver(made["request_id"]) == "not claimed"
    assert delivery.sweep(timezone.now() + timedelta(hours=1)) == {"requeued": 0, "reclaimed": 0, "unknown": 0}
    assert smtp_server.data_commands == 1
    assert call(as_person(alice), "get_outbound_request", {"request_id": made["request_id"]})["state"] == "unknown"

    # not in Sent: still unknown (it may have gone out), and still never resent
    assert delivery.reconcile(made["request_id"]) == "unknown"
    # the provider's copy shows up in Sent: reconciled as sent by its own Message-ID
    imap_server.append(world["me"], "Sent", smtp_server.received[0].data)
    assert delivery.reconcile(made["request_id"]) == "sent"
    assert _row(alice, made["request_id"]).state == "sent" and smtp_server.data_commands == 1
    assert _transitions(alice, made["request_id"])[-2:] == [
        ("record_outbound_outcome", "sending", "unknown"),
        ("reconcile_outbound", "unknown", "sent"),
    ]


def test_the_sweeper_hands_lost_tasks_over_and_never_resends_after_data(
    alice: Person, world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    me = as_person(alice)
    lost = request(me, "send_email", _email(world["account"].pk, [world["bob"]]))
    claimed = request(me, "send_email", _email(world["account"].pk, [world["bob"]]))
    begun = request(me, "send_email", _email(world["account"].pk, [world["bob"]]))
    rows = OutboundRequest.objects.for_tenant(alice.tenant)
    rows.filter(pk=claimed["request_id"]).update(state=State.SENDING)
    rows.filter(pk=begun["request_id"]).update(state=State.SENDING, smtp_started_at=timezone.now())
    handed: list[str] = []
    monkeypatch.setattr(outbound_requests, "enqueue_on_commit", lambda request_id: handed.append(str(request_id)))
    assert delivery.sweep(timezone.now()) == {"requeued": 0, "reclaimed": 0, "unknown": 0}
    assert delivery.sweep(timezone.now() + timedelta(hours=1)) == {"requeued": 1, "reclaimed": 1, "unknown": 1}
    assert sorted(handed) == sorted([lost["request_id"], claimed["request_id"]])
    assert _row(alice, claimed["request_id"]).state == "queued" and _row(alice, begun["request_id"]).state == "unknown"
    assert _row(alice, lost["request_id"]).outbox.enqueue_count == 2


@pytest.mark.django_db(transaction=True)
def test_three_concurrent_deliveries_make_at_most_one_data(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    account = imap_account(alice, imap_server, smtp_server, mail_user(imap_server, "alice"))
    bob = mail_user(imap_server, "bob")
    made = request(as_person(alice), "send_email", _email(account.pk, [bob]))
    start, results = threading.Barrier(3), []

    def deliver() -> None:
        try:
            start.wait()
            results.append(delivery.deliver(made["request_id"]))
        finally:
            connection.close()

    workers = [threading.Thread(target=deliver) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(results) == ["not claimed", "not claimed", "sent"]
    assert smtp_server.data_commands == 1 and len(imap_server.folder_messages(bob, "INBOX")) == 1
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("one_budget_hour")
def test_concurrent_requests_never_exceed_the_hourly_budget(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer, settings: Any
) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "CONFIRMATION_TOKENS_PER_CALLER": 100}
    account = imap_account(alice, imap_server, smtp_server, mail_user(imap_server, "alice"))
    agent = _agent(alice, credential_id="key-burst")
    inputs = [_email(account.pk, [f"r{i}-{j}@example.test" for j in range(5)], key=f"b{i}") for i in range(50)]
    tokens = [refusal(agent, "send_email", data).proposal["token"] for data in inputs]  # type: ignore[index]
    start, outcomes = threading.Barrier(50), []

    def send(data: dict[str, Any], token: str) -> None:
        try:
            start.wait()
            try:
                outcomes.append(call(agent, "send_email", data, confirmation_token=token)["state"])
            except Exception as error:
                outcomes.append(getattr(error, "code", type(error).__name__))
        finally:
            connection.close()

    workers = [threading.Thread(target=send, args=pair) for pair in zip(inputs, tokens, strict=True)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(set(outcomes)) == ["RATE_LIMITED", "awaiting_approval"]
    made = OutboundRequest.objects.for_tenant(alice.tenant)
    assert sum(made.values_list("recipient_count", flat=True)) == 200 == 5 * outcomes.count("awaiting_approval")
    # another key of the same person has its own budget
    assert request(_agent(alice, credential_id="key-calm"), "send_email", _email(account.pk, ["z@example.test"]))
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


def test_the_51st_recipient_is_refused(alice: Person, world: dict[str, Any], smtp_server: SmtpServer) -> None:
    me, agent = as_person(alice), _agent(alice)
    fifty = [f"r{i}@example.test" for i in range(50)]
    over = refusal(
        me, "send_email", _email(world["account"].pk, fifty[:40], cc=fifty[40:], bcc=["r50@example.test"]), confirm=True
    )
    assert (over.code, over.field) == ("LIMIT_EXCEEDED", "to")
    # an agent is refused before any proposal or token
    refused = refusal(agent, "send_email", _email(world["account"].pk, [*fifty, "r50@example.test"]))
    assert refused.code == "LIMIT_EXCEEDED" and refused.proposal is None
    # duplicates (any case, any field, with display names) count once
    same = [*fifty, "R0@EXAMPLE.TEST", "Someone <r1@example.test>"]
    ok = request(me, "send_email", _email(world["account"].pk, same, bcc=["r2@Example.Test"]))
    assert ok["recipients"] == 50
    assert not OutboundRequest.objects.for_tenant(alice.tenant).exclude(pk=ok["request_id"]).exists()


def test_without_redis_nothing_is_requested_or_sent(
    alice: Person, world: dict[str, Any], smtp_server: SmtpServer, settings: Any
) -> None:
    agent = _agent(alice)
    token = refusal(agent, "send_email", _email(world["account"].pk, [world["bob"]], key="r1")).proposal["token"]  # type: ignore[index]
    settings.REDIS_URL = "unix:///nonexistent/redis.sock"
    redis_module.redis_client.cache_clear()
    try:
        for caller, extra in ((as_person(alice), {"confirm": True}), (agent, {"confirmation_token": token})):
            refused = refusal(caller, "send_email", _email(world["account"].pk, [world["bob"]], key="r1"), **extra)
            assert (refused.code, refused.http_status) == ("SERVICE_UNAVAILABLE", 503)
    finally:
        redis_module.redis_client.cache_clear()
    assert not OutboundRequest.objects.for_tenant(alice.tenant).exists()
    assert smtp_server.connections == 0 and smtp_server.data_commands == 0


def test_other_tenants_and_workspaces_cannot_reach_the_account(
    alice: Person, mallory: Person, world: dict[str, Any]
) -> None:
    theirs = _email(world["account"].pk, [world["bob"]])
    assert refusal(as_person(mallory), "send_email", theirs, confirm=True).code == "NOT_FOUND"
    assert refusal(_agent(mallory), "send_email", theirs).code == "NOT_FOUND"
    restricted = as_agent(alice, scopes=SENDER, workspaces=("elsewhere",))
    assert refusal(restricted, "send_email", theirs).code == "OUT_OF_SCOPE"
    writer = as_agent(alice, scopes={"read", "write"})
    assert refusal(writer, "send_email", theirs).missing_scope == "send"
    assert not OutboundRequest.objects.for_tenant(alice.tenant).exists()


@pytest.mark.django_db(transaction=True)
def test_an_approval_reaches_a_real_worker_through_the_outbox(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    import time

    from celery.contrib.testing.worker import start_worker

    from config.celery import app

    account = imap_account(alice, imap_server, smtp_server, mail_user(imap_server, "alice"))
    bob = mail_user(imap_server, "bob")
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        made = request(_agent(alice), "send_email", _email(account.pk, [bob]))
        call(as_person(alice), "approve_outbound", {"request_id": made["request_id"]})  # commits: the task is handed
        deadline = time.monotonic() + 60
        while _row(alice, made["request_id"]).state != "sent" and time.monotonic() < deadline:
            time.sleep(0.2)
    assert _row(alice, made["request_id"]).state == "sent"
    assert smtp_server.data_commands == 1 and _inbox_ids(imap_server, bob) == [f"<{made['message_id']}>"]
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


def test_the_console_page_lists_and_approves_over_the_rest_door(
    alice: Person, mallory: Person, world: dict[str, Any]
) -> None:
    from django.test import Client

    from tests.test_rest_door import api_client, error_of, post

    made = request(_agent(alice), "send_email", _email(world["account"].pk, [world["bob"]]))
    page = Client()
    page.force_login(alice.user)
    html = page.get("/outbound").content.decode()
    assert "<h1>Outbound mail</h1>" in html and "Waiting for you" in html and "Show older requests" in html
    assert 'href="/outbound"' in html and 'href="/policies"' in html and "<script>" not in html
    theirs = post(api_client(mallory.user), "approve_outbound", {"request_id": made["request_id"]})
    assert error_of(theirs)["code"] == "NOT_FOUND"
    mine = api_client(alice.user)
    listed = post(mine, "list_outbound", {"state": "awaiting_approval"}).json()["requests"]
    assert [r["request"]["request_id"] for r in listed] == [made["request_id"]]
    stale = post(mine, "approve_outbound", {"request_id": made["request_id"], "content_hash": "0" * 64})
    assert error_of(stale)["code"] == "CONFLICT"
    approved = post(mine, "approve_outbound", {"request_id": made["request_id"], "content_hash": made["content_hash"]})
    assert approved.json()["state"] == "queued"


def test_the_from_display_name_is_fixed_at_the_request_and_bound_to_its_hash(
    alice: Person,
    mallory: Person,
    world: dict[str, Any],
    imap_server: ImapServer,
    smtp_server: SmtpServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(outbound_requests, "enqueue_on_commit", lambda request_id: None)
    # the From header shows the mailbox's sender name, never its label
    world["account"].name, world["account"].sender_name = "Walker IMAP", "Alice mail"
    world["account"].save(update_fields=["name", "sender_name"])
    # the proposal an agent shows its person names the From header as it will be sent
    proposal = refusal(_agent(alice), "send_email", _email(world["account"].pk, [world["bob"]])).proposal
    assert proposal is not None and proposal["changes"][0]["after"]["from"] == f"Alice mail <{world['me']}>"
    made = request(as_person(alice), "send_email", _email(world["account"].pk, [world["bob"]]))
    assert _row(alice, made["request_id"]).sender_name == "Alice mail"
    assert made["from_header"] == f"Alice mail <{world['me']}>"
    # renaming the account, or changing its sender name, after approval changes nothing that was approved
    world["account"].name, world["account"].sender_name = "Renamed", "Renamed sender"
    world["account"].save(update_fields=["name", "sender_name"])
    assert delivery.deliver(made["request_id"]) == "sent"
    [(_, raw, _)] = imap_server.folder_messages(world["bob"], "INBOX")
    assert message_from_bytes(raw)["From"] == f"Alice mail <{world['me']}>"
    # a display name changed behind the operations' back is content that moved: never sent
    other = request(as_person(alice), "send_email", _email(world["account"].pk, [world["bob"]]))
    OutboundRequest.objects.for_tenant(alice.tenant).filter(pk=other["request_id"]).update(sender_name="Your bank")
    assert delivery.deliver(other["request_id"]) == "failed"
    assert _row(alice, other["request_id"]).error == "content_changed" and smtp_server.data_commands == 1
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


def test_a_retried_confirmed_send_gets_the_first_answer_before_its_spent_token_is_looked_at(
    alice: Person, mallory: Person, world: dict[str, Any], smtp_server: SmtpServer
) -> None:
    agent = _agent(alice)
    email = _email(world["account"].pk, [world["bob"]], key="after-a-timeout")
    token = refusal(agent, "send_email", email).proposal["token"]  # type: ignore[index]
    first = call(agent, "send_email", email, confirmation_token=token)
    # the agent timed out and repeats the very call, spent token and all: the same request, nothing new
    again = call(agent, "send_email", email, confirmation_token=token)
    assert again["request_id"] == first["request_id"]
    assert call(agent, "send_email", email)["request_id"] == first["request_id"]
    assert OutboundRequest.objects.for_tenant(alice.tenant).count() == 1
    # other content under the key is still refused, and the spent token does nothing for a new key
    other = _email(world["account"].pk, [world["bob"], "x@example.test"], key="after-a-timeout")
    assert refusal(agent, "send_email", other, confirmation_token=token).code == "IDEMPOTENCY_MISMATCH"
    fresh = _email(world["account"].pk, [world["bob"]], key="another")
    assert refusal(agent, "send_email", fresh, confirmation_token=token).code == "CONFIRMATION_INVALID"
    # the key is this caller's: another tenant's agent with the same key has made nothing, and must confirm
    theirs = _email(world["theirs"].pk, [world["bob"]], key="after-a-timeout")
    assert refusal(_agent(mallory), "send_email", theirs).code == "CONFIRMATION_REQUIRED"
    assert OutboundRequest.objects.for_tenant(alice.tenant).count() == 1
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


def test_the_audit_counts_a_request_changed_twice_in_one_call_once(
    alice: Person, mallory: Person, world: dict[str, Any]
) -> None:
    made = request(_agent(alice), "send_email", _email(world["account"].pk, [world["bob"]]))
    call(as_person(alice), "approve_outbound", {"request_id": made["request_id"], "content_hash": made["content_hash"]})
    listed = call(as_person(alice), "list_audit_events", {"limit": 50})["events"]
    events = {e["operation"]: e for e in reversed(listed) if e["targets"]}  # the call that changed it
    # each call changed the one request twice (requested, then awaiting approval; approved, then queued): both
    # changes stay recorded, and the words count one outbound request, not two
    for operation in ("send_email", "approve_outbound"):
        event = events[operation]
        assert [t["id"] for t in event["targets"]].count(made["request_id"]) == 2, event["targets"]
        assert " on 1 outbound request" in event["description"], event["description"]
        assert "on 2" not in event["description"]
    assert events["approve_outbound"]["description"] == (
        "alice@example.test approve outbound on 1 outbound request in the console"
    )
    assert call(as_person(mallory), "list_audit_events", {"operation": "approve_outbound"})["events"] == []
