"""The worker's steps through the gate's internal door, retries before DATA, and a person settling an unknown
outcome, against the real loopback servers (Dovecot + aiosmtpd). Mallory's tenant reaches none of it."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from apps.audit.log import input_digest
from apps.audit.models import AuditEvent
from apps.core.errors import OakenError
from apps.gate.internal import call_internal
from apps.outbound import requests as outbound_requests
from apps.outbound.models import OutboundRequest, OutboxEntry
from apps.worker import delivery
from tests.callers import as_agent, as_person, call, joined, refusal
from tests.conftest import Person
from tests.loopback import free_port
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user, request

SENDER = {"read", "write", "send"}
STEPS = ("claim_outbound_send", "begin_outbound_data", "record_outbound_outcome", "release_scheduled_send",
         "recover_outbound_send", "reconcile_outbound")  # fmt: skip


def _email(account_id: Any, to: list[str]) -> dict[str, Any]:
    return {
        "account_id": str(account_id),
        "to": to,
        "subject": "Figures",
        "body": "The totals.\n",
        "idempotency_key": uuid.uuid4().hex,
    }


def _row(p: Person, request_id: str) -> OutboundRequest:
    return OutboundRequest.objects.for_tenant(p.tenant).get(pk=request_id)


def _steps(p: Person, request_id: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(operation, principal, outcome, after) of every audited call that touched the request, in order."""
    found = []
    for event in AuditEvent.objects.for_tenant(p.tenant).order_by("seq"):
        for target in event.targets:
            if target["id"] == request_id:
                found.append((event.operation, event.principal, event.outcome, target["after"]))
    return found


def _refused_claims(p: Person, request_id: str) -> int:
    """Claims of the request that the gate refused (each one audited, with the input's digest)."""
    digest = input_digest({"request_id": request_id})
    return (
        AuditEvent.objects.for_tenant(p.tenant)
        .filter(operation="claim_outbound_send", outcome="CONFLICT", input_digest=digest)
        .count()
    )


def _time_passes(p: Person, request_id: str) -> None:
    """The retry's wait is over (the clock the claim reads is the real one, so the outbox row moves back)."""
    OutboxEntry.objects.for_tenant(p.tenant).filter(request_id=request_id).update(
        available_at=timezone.now() - timedelta(seconds=1)
    )


@pytest.fixture
def world(alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer) -> dict[str, Any]:
    me, bob = mail_user(imap_server, "alice"), mail_user(imap_server, "bob")
    account = imap_account(alice, imap_server, smtp_server, me)
    theirs = imap_account(mallory, imap_server, smtp_server, mail_user(imap_server, "eve"))
    return {"me": me, "bob": bob, "account": account, "theirs": theirs}


def _smtp_port(account: Any, port: int) -> None:
    account.credentials = {**account.credentials, "smtp": {**account.credentials["smtp"], "port": port}}
    account.save(update_fields=["credentials"])


# ---------------------------------------------------------------- retries before DATA


def test_a_refused_connection_is_retried_with_backoff_until_it_goes_out(
    alice: Person,
    mallory: Person,
    world: dict[str, Any],
    imap_server: ImapServer,
    smtp_server: SmtpServer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.OPERATIONS = {
        **settings.OPERATIONS,
        "SEND_ATTEMPTS_MAX": 3,
        "SEND_RETRY_BASE_SECONDS": 60,
        "SEND_RETRY_MAX_SECONDS": 100,
    }
    handed: list[str] = []
    monkeypatch.setattr(outbound_requests, "enqueue_on_commit", lambda request_id: handed.append(str(request_id)))
    _smtp_port(world["account"], free_port())  # nothing listens there: the connection is refused
    made = request(as_person(alice), "send_email", _email(world["account"].pk, [world["bob"]]))
    rid = made["request_id"]
    assert handed == [rid]  # the approval handed it to a worker
    handed.clear()

    started = timezone.now()
    assert delivery.deliver(rid) == "queued"
    row, entry = _row(alice, rid), OutboxEntry.objects.for_tenant(alice.tenant).get(request_id=rid)
    assert (row.state, row.attempts, row.error, row.smtp_started_at) == ("queued", 1, "smtp_unreachable", None)
    assert started + timedelta(seconds=59) < entry.available_at < timezone.now() + timedelta(seconds=61)
    assert entry.enqueued_at is None  # waits in the database, never in a broker ETA
    seen = call(as_person(alice), "get_outbound_request", {"request_id": rid})
    assert (seen["state"], seen["attempts"], seen["error"]) == ("queued", 1, "smtp_unreachable")
    assert seen["retry_at"] is not None and "tried again at retry_at" in seen["next"]

    # not before its time: a duplicated task claims nothing, the sweeper hands nothing over
    assert delivery.deliver(rid) == "not claimed"
    assert delivery.sweep(timezone.now())["requeued"] == 0 and handed == []
    assert delivery.sweep(entry.available_at + timedelta(seconds=1))["requeued"] == 1 and handed == [rid]
    # handed once: the next sweep leaves it to that task
    assert delivery.sweep(entry.available_at + timedelta(seconds=2))["requeued"] == 0

    # the second attempt fails too, and waits twice as long (capped at 100 s)
    _time_passes(alice, rid)
    assert delivery.deliver(rid) == "queued"
    entry.refresh_from_db()
    assert timezone.now() + timedelta(seconds=98) < entry.available_at < timezone.now() + timedelta(seconds=101)

    # the server is back: the third attempt goes out, once
    _smtp_port(world["account"], smtp_server.port)
    _time_passes(alice, rid)
    assert delivery.deliver(rid) == "sent"
    assert smtp_server.data_commands == 1 and _row(alice, rid).attempts == 3
    delivered = [str(m["Message-ID"]) for m in _inbox(imap_server, world["bob"])]
    assert delivered == [f"<{made['message_id']}>"]

    steps = [
        (op, who, outcome, after.get("state"), after.get("attempt"))
        for op, who, outcome, after in _steps(alice, rid)
        if op in STEPS
    ]
    assert steps == [
        ("claim_outbound_send", "internal", "ok", "sending", 1),
        ("record_outbound_outcome", "internal", "ok", "queued", 1),
        ("claim_outbound_send", "internal", "ok", "sending", 2),
        ("record_outbound_outcome", "internal", "ok", "queued", 2),
        ("claim_outbound_send", "internal", "ok", "sending", 3),
        ("begin_outbound_data", "internal", "ok", None, 3),
        ("record_outbound_outcome", "internal", "ok", "sent", 3),
    ]
    assert _refused_claims(alice, rid) == 1  # the early duplicate, refused and on record
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


def _inbox(imap: ImapServer, user: str) -> list[Any]:
    from email import message_from_bytes

    return [message_from_bytes(raw) for _, raw, _ in imap.folder_messages(user, "INBOX")]


def test_a_temporary_refusal_is_retried_a_bounded_number_of_times(
    alice: Person, world: dict[str, Any], smtp_server: SmtpServer, settings: Any
) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "SEND_ATTEMPTS_MAX": 2}
    smtp_server.defer_mail = 10  # 451 to every MAIL FROM
    made = request(as_person(alice), "send_email", _email(world["account"].pk, [world["bob"]]))
    assert delivery.deliver(made["request_id"]) == "queued"
    _time_passes(alice, made["request_id"])
    assert delivery.deliver(made["request_id"]) == "failed"
    row = _row(alice, made["request_id"])
    assert (row.state, row.attempts, row.error) == ("failed", 2, "sender_deferred")
    assert smtp_server.mail_commands == 2 and smtp_server.data_commands == 0
    last = _steps(alice, made["request_id"])[-1]
    assert last[0] == "record_outbound_outcome" and last[3]["attempts_exhausted"] is True
    seen = call(as_person(alice), "get_outbound_request", {"request_id": made["request_id"]})
    assert (seen["state"], seen["retry_at"], seen["error"]) == ("failed", None, "sender_deferred")
    _time_passes(alice, made["request_id"])
    assert delivery.deliver(made["request_id"]) == "not claimed"
    assert delivery.sweep(timezone.now() + timedelta(hours=2)) == {"requeued": 0, "reclaimed": 0, "unknown": 0}
    assert smtp_server.mail_commands == 2


def test_a_permanent_refusal_fails_at_once(alice: Person, world: dict[str, Any], smtp_server: SmtpServer) -> None:
    smtp_server.refuse_rcpt = True  # 550 to every RCPT TO
    made = request(as_person(alice), "send_email", _email(world["account"].pk, [world["bob"]]))
    assert delivery.deliver(made["request_id"]) == "failed"
    row = _row(alice, made["request_id"])
    assert (row.state, row.attempts, row.error, row.refused_recipients) == (
        "failed",
        1,
        "recipients_refused",
        [world["bob"]],
    )
    # the audit says how many were refused, never who
    after = _steps(alice, made["request_id"])[-1][3]
    assert after["refused_recipients"] == 1 and world["bob"] not in str(after)
    _time_passes(alice, made["request_id"])
    assert delivery.deliver(made["request_id"]) == "not claimed"
    assert smtp_server.mail_commands == 1 and smtp_server.data_commands == 0


# ---------------------------------------------------------------- the rules live behind the gate


def test_nothing_is_retried_once_data_began_whatever_a_worker_reports(alice: Person, world: dict[str, Any]) -> None:
    made = request(as_person(alice), "send_email", _email(world["account"].pk, [world["bob"]]))
    rid = made["request_id"]
    claimed = call_internal(alice.tenant, "claim_outbound_send", {"request_id": rid}).output
    assert (claimed["state"], claimed["attempt"]) == ("sending", 1)
    call_internal(alice.tenant, "begin_outbound_data", {"request_id": rid, "attempt": 1})
    # DATA may begin once per claim
    with pytest.raises(OakenError) as twice:
        call_internal(alice.tenant, "begin_outbound_data", {"request_id": rid, "attempt": 1})
    assert twice.value.code == "CONFLICT"
    report = {"request_id": rid, "attempt": 1, "outcome": "temporary", "error": "smtp_deferred"}
    told = call_internal(alice.tenant, "record_outbound_outcome", report)
    assert (told.output["state"], told.output["retry_at"]) == ("unknown", None)
    assert delivery.sweep(timezone.now() + timedelta(days=1)) == {"requeued": 0, "reclaimed": 0, "unknown": 0}
    assert delivery.deliver(rid) == "not claimed"


def test_a_claim_taken_back_can_never_begin_data(alice: Person, world: dict[str, Any], settings: Any) -> None:
    """A worker slow enough for the sweeper to take its claim back, and a second worker claiming the request
    again: only the claim that holds may begin DATA, so two workers can never both send it."""
    made = request(as_person(alice), "send_email", _email(world["account"].pk, [world["bob"]]))
    rid = made["request_id"]
    call_internal(alice.tenant, "claim_outbound_send", {"request_id": rid})  # attempt 1, then silence
    stale = timezone.now() + timedelta(seconds=settings.OPERATIONS["SENDING_STALE_SECONDS"] + 1)
    assert delivery.sweep(stale)["reclaimed"] == 1 and _row(alice, rid).state == "queued"
    second = call_internal(alice.tenant, "claim_outbound_send", {"request_id": rid}).output
    assert second["attempt"] == 2
    for name, extra in (("begin_outbound_data", {}), ("record_outbound_outcome", {"outcome": "sent"})):
        with pytest.raises(OakenError) as late:
            call_internal(alice.tenant, name, {"request_id": rid, "attempt": 1, **extra})
        assert (late.value.code, late.value.field) == ("CONFLICT", "attempt")
    call_internal(alice.tenant, "begin_outbound_data", {"request_id": rid, "attempt": 2})
    recovered = [after for op, _, _, after in _steps(alice, rid) if op == "recover_outbound_send"]
    assert recovered == [{"state": "queued", "attempt": 1, "error": "worker_lost"}]


def test_the_workers_steps_are_for_the_system_only_on_every_door(
    alice: Person, mallory: Person, world: dict[str, Any]
) -> None:
    from django.test import Client

    from tests.test_mcp_door import key_for, post, rpc
    from tests.test_rest_door import api_client, error_of
    from tests.test_rest_door import post as rest_post

    made = request(as_person(alice), "send_email", _email(world["account"].pk, [world["bob"]]))
    rid = made["request_id"]
    unknown = refusal(as_person(alice), "no_such_operation", {})
    for name in STEPS:
        for caller in (as_person(alice), as_agent(alice, scopes=SENDER)):
            refused = refusal(caller, name, {"request_id": rid, "attempt": 0})
            assert (refused.code, refused.message) == ("NOT_AVAILABLE", unknown.message)
        over_rest = rest_post(api_client(alice.user), name, {"request_id": rid})
        assert (over_rest.status_code, error_of(over_rest)["code"]) == (404, "NOT_AVAILABLE")
    key = key_for(alice, ["read", "write", "send"])
    over_mcp = post(
        Client(), rpc("tools/call", {"name": "claim_outbound_send", "arguments": {"request_id": rid}}), token=key
    ).json()
    assert over_mcp["result"]["isError"] is True
    assert json.loads(over_mcp["result"]["content"][0]["text"])["error"]["code"] == "NOT_AVAILABLE"
    # another tenant's system sees alice's request as nonexistent
    with pytest.raises(OakenError) as theirs:
        call_internal(mallory.tenant, "claim_outbound_send", {"request_id": rid})
    assert (theirs.value.code, theirs.value.field) == ("NOT_FOUND", "request_id")
    assert _row(alice, rid).state == "queued" and _row(alice, rid).attempts == 0


# ---------------------------------------------------------------- a person settles an unknown outcome


def _unknown(alice: Person, world: dict[str, Any], smtp_server: SmtpServer) -> str:
    smtp_server.drop_after_data = True
    made = request(as_agent(alice, scopes=SENDER), "send_email", _email(world["account"].pk, [world["bob"]]))
    call(as_person(alice), "approve_outbound", {"request_id": made["request_id"]})
    assert delivery.deliver(made["request_id"]) == "unknown"
    smtp_server.drop_after_data = False
    return str(made["request_id"])


def test_a_person_records_that_an_unknown_request_was_not_sent(
    alice: Person, mallory: Person, world: dict[str, Any], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    rid = _unknown(alice, world, smtp_server)
    agent = as_agent(alice, scopes=SENDER)
    seen = call(agent, "get_outbound_request", {"request_id": rid})
    assert seen["state"] == "unknown" and seen["approval_url"] is None  # nothing to approve: no elicitation
    assert f"/outbound?request={rid}" in seen["next"] and "record how it ended" in seen["next"]
    settle = {"request_id": rid, "outcome": "not_sent"}
    # nobody but a person who can see the request decides: not the agent, not the system, not another tenant
    assert refusal(agent, "settle_outbound_request", settle).code == "NOT_AVAILABLE"
    with pytest.raises(OakenError) as system:
        call_internal(alice.tenant, "settle_outbound_request", settle)
    assert system.value.code == "NOT_AVAILABLE"
    assert refusal(as_person(mallory), "settle_outbound_request", settle, confirm=True).code == "NOT_FOUND"
    member = joined(alice, "member@example.test")  # a MEMBER sees only their own requests
    assert refusal(as_person(member), "settle_outbound_request", settle, confirm=True).code == "NOT_FOUND"

    asked = refusal(as_person(alice), "settle_outbound_request", settle)
    assert asked.code == "CONFIRMATION_REQUIRED" and asked.proposal is not None
    assert asked.proposal["changes"] == [{"id": rid, "before": {"state": "unknown"}, "after": {"state": "failed"}}]
    assert _row(alice, rid).state == "unknown"
    settled = call(as_person(alice), "settle_outbound_request", settle, confirm=True)
    assert (settled["state"], settled["error"], settled["approval_url"]) == ("failed", "settled_not_sent", None)
    assert "A person recorded that it was not sent" in settled["next"]
    row = _row(alice, rid)
    assert row.settled_by_id == alice.user.pk and row.settled_at is not None
    event = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="settle_outbound_request", outcome="ok").get()
    assert (event.principal, event.person_id, event.door) == ("person", alice.user.pk, "ui")
    assert event.targets == [
        {"id": rid, "before": {"state": "unknown"}, "after": {"state": "failed", "settled": "not_sent"}}
    ]

    # settled for good: reconciliation, workers and a second decision change nothing, nothing is resent
    imap_server.append(world["me"], "Sent", smtp_server.received[0].data)
    assert delivery.reconcile(rid) == "not unknown" and delivery.deliver(rid) == "not claimed"
    again = refusal(as_person(alice), "settle_outbound_request", {**settle, "outcome": "sent"}, confirm=True)
    assert (again.code, again.field) == ("CONFLICT", "request_id")
    assert _row(alice, rid).state == "failed" and smtp_server.data_commands == 1
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


def test_a_person_records_that_an_unknown_request_was_sent(
    alice: Person, mallory: Person, world: dict[str, Any], smtp_server: SmtpServer
) -> None:
    rid = _unknown(alice, world, smtp_server)
    # only an unknown outcome can be settled: a request still waiting cannot be marked sent
    waiting = request(as_agent(alice, scopes=SENDER), "send_email", _email(world["account"].pk, [world["bob"]]))
    early = refusal(
        as_person(alice),
        "settle_outbound_request",
        {"request_id": waiting["request_id"], "outcome": "sent"},
        confirm=True,
    )
    assert (early.code, early.field) == ("CONFLICT", "request_id")
    settled = call(as_person(alice), "settle_outbound_request", {"request_id": rid, "outcome": "sent"}, confirm=True)
    assert (settled["state"], settled["error"]) == ("sent", "")
    assert "A person recorded that it was sent" in settled["next"]
    assert call(as_agent(alice, scopes=SENDER), "get_outbound_request", {"request_id": rid})["state"] == "sent"
    assert smtp_server.data_commands == 1
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


def test_a_workers_late_answer_after_the_sweeper_gave_it_up_is_recorded(
    alice: Person, mallory: Person, world: dict[str, Any], settings: Any
) -> None:
    """DATA of a large message can outlast the sweeper's patience: the request turns unknown, but when the
    server's 250 does come, the worker's knowledge wins over the sweeper's guess (and a person is never asked
    to settle what is known, nor tempted to send it again)."""
    theirs = request(as_person(mallory), "send_email", _email(world["theirs"].pk, [world["bob"]]))
    made = request(as_person(alice), "send_email", _email(world["account"].pk, [world["bob"]]))
    rid = made["request_id"]
    call_internal(alice.tenant, "claim_outbound_send", {"request_id": rid})
    call_internal(alice.tenant, "begin_outbound_data", {"request_id": rid, "attempt": 1})
    # the sweeper looked just before DATA began: its cut is older than the worker's last step
    looked = (timezone.now() - timedelta(minutes=1)).isoformat()
    with pytest.raises(OakenError) as not_lost:
        call_internal(alice.tenant, "recover_outbound_send", {"request_id": rid, "attempt": 1, "silent_since": looked})
    assert not_lost.value.code == "CONFLICT" and _row(alice, rid).state == "sending"
    stale = timezone.now() + timedelta(seconds=settings.OPERATIONS["SENDING_STALE_SECONDS"] + 1)
    assert delivery.sweep(stale)["unknown"] == 1
    assert (_row(alice, rid).state, _row(alice, rid).error) == ("unknown", "worker_lost_after_data")
    # another attempt's answer, or one that knows no more, changes nothing
    with pytest.raises(OakenError):
        call_internal(alice.tenant, "record_outbound_outcome", {"request_id": rid, "attempt": 2, "outcome": "sent"})
    still = call_internal(
        alice.tenant, "record_outbound_outcome", {"request_id": rid, "attempt": 1, "outcome": "unknown"}
    ).output
    assert still["state"] == "unknown"
    sent = call_internal(alice.tenant, "record_outbound_outcome", {"request_id": rid, "attempt": 1, "outcome": "sent"})
    assert sent.output["state"] == "sent" and _row(alice, rid).error == ""
    assert [
        after["state"]
        for op, _, outcome, after in _steps(alice, rid)
        if op == "record_outbound_outcome" and outcome == "ok" and "state" in after
    ] == ["sent"]
    # mallory's request, in her own tenant, is untouched by alice's sweep and unreachable from alice's tenant
    assert OutboundRequest.objects.for_tenant(mallory.tenant).get(pk=theirs["request_id"]).state == "queued"
    with pytest.raises(OakenError) as hidden:
        call_internal(alice.tenant, "claim_outbound_send", {"request_id": theirs["request_id"]})
    assert hidden.value.code == "NOT_FOUND"


def test_a_claim_before_a_retrys_time_is_refused(alice: Person, world: dict[str, Any]) -> None:
    """(The claim checks the time again once the row is its own, for a duplicate task racing the attempt before;
    that interleaving is not reproduced here.)"""
    made = request(as_person(alice), "send_email", _email(world["account"].pk, [world["bob"]]))
    rid = made["request_id"]
    call_internal(alice.tenant, "claim_outbound_send", {"request_id": rid})
    call_internal(
        alice.tenant,
        "record_outbound_outcome",
        {"request_id": rid, "attempt": 1, "outcome": "temporary", "error": "smtp_unreachable"},
    )
    assert _row(alice, rid).state == "queued"
    with pytest.raises(OakenError) as early:
        call_internal(alice.tenant, "claim_outbound_send", {"request_id": rid})
    assert early.value.code == "CONFLICT" and (_row(alice, rid).state, _row(alice, rid).attempts) == ("queued", 1)


# ---------------------------------------------------------------- faults of our own


def test_a_message_that_cannot_be_built_fails_once_and_is_never_retried(
    alice: Person, mallory: Person, world: dict[str, Any], smtp_server: SmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed: list[str] = []
    monkeypatch.setattr(outbound_requests, "enqueue_on_commit", lambda request_id: handed.append(str(request_id)))
    made = request(as_person(alice), "send_email", _email(world["account"].pk, [world["bob"]]))
    rid = made["request_id"]
    theirs = request(as_person(mallory), "send_email", _email(world["theirs"].pk, [world["bob"]]))
    # a request stored before its subject was checked at input: a header the e-mail library refuses to write
    row = _row(alice, rid)
    row.subject = "a\r\nBcc: evil@example.test"
    row.content_hash = outbound_requests.stored_digest(row)
    row.save(update_fields=["subject", "content_hash"])

    assert delivery.deliver(rid) == "failed"
    row.refresh_from_db()
    assert (row.state, row.error, row.smtp_started_at) == ("failed", "message_could_not_be_built", None)
    assert smtp_server.connections == 0
    assert [s[:3] for s in _steps(alice, rid) if s[0] in STEPS] == [
        ("claim_outbound_send", "internal", "ok"),
        ("record_outbound_outcome", "internal", "ok"),
    ]
    # settled: nothing hands it over or claims it again, and the sweeper has nothing to take back
    handed.clear()
    swept = delivery.sweep(timezone.now() + timedelta(hours=1))
    assert rid not in handed and swept["reclaimed"] == 0 and swept["unknown"] == 0
    assert delivery.deliver(rid) == "not claimed"
    assert _row(alice, rid).state == "failed"
    assert _row(mallory, theirs["request_id"]).state == "queued"  # another tenant's request is untouched
