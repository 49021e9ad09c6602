"""The issue's done-when, literally: a real Celery worker process is killed (SIGKILL) while the loopback SMTP
server holds the message it sent, the same task is then delivered three more times (the broker's redelivery to
a fresh worker, a direct call on that worker, a call in this process) and the sweeper runs: at most one DATA in
all, the request ends unknown and is never resent, and reconciliation settles it only once its copy is in Sent.
A worker killed before DATA is taken back by beat's sweep on a fresh worker and its mail goes out once.
Mallory's tenant sees none of it."""

from __future__ import annotations

import ast
import json
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from email import message_from_bytes
from typing import Any

import pytest
from django.utils import timezone

from apps.audit.log import input_digest
from apps.audit.models import AuditEvent
from apps.core.redis_client import redis_client
from apps.outbound import requests as outbound_requests
from apps.outbound.models import OutboundRequest
from apps.worker import delivery
from apps.worker.tasks import deliver_task, reconcile_unknown_task, sweep_outbox_task
from tests.callers import as_agent, as_person
from tests.celeryworker import worker_process
from tests.conftest import Person
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user, request


def _wait_until(check: Callable[[], bool], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.2)


def _row(p: Person, request_id: str) -> OutboundRequest:
    return OutboundRequest.objects.for_tenant(p.tenant).get(pk=request_id)


def _unacked_deliveries(request_id: str) -> int:
    """outbound.deliver messages for the request that Redis holds as handed out but not acknowledged."""
    found = 0
    for raw in redis_client().hvals("unacked"):
        headers = json.loads(raw)[0].get("headers", {})
        if headers.get("task") == "outbound.deliver" and request_id in str(headers.get("argsrepr", "")):
            found += 1
    return found


def _claims(p: Person, request_id: str, outcome: str) -> int:
    digest = input_digest({"request_id": request_id})
    return (
        AuditEvent.objects.for_tenant(p.tenant)
        .filter(operation="claim_outbound_send", outcome=outcome, input_digest=digest)
        .count()
    )


@pytest.mark.slow
def _alice_and_mallorys_waiting_request(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> tuple[str, str, Any, Any]:
    """Alice's mail user, bob's, alice's connected account, and a request of mallory's (another tenant) that
    waits for her approval and must stay untouched by whatever happens to alice's."""
    me, bob = mail_user(imap_server, "alice"), mail_user(imap_server, "bob")
    account = imap_account(alice, imap_server, smtp_server, me)
    theirs = imap_account(mallory, imap_server, smtp_server, mail_user(imap_server, "mallory"))
    hers = request(
        as_agent(mallory, scopes={"read", "write", "send"}),
        "send_email",
        {
            "account_id": str(theirs.pk),
            "to": [bob],
            "subject": "Hers",
            "body": "Waits.\n",
            "idempotency_key": uuid.uuid4().hex,
        },
    )
    return me, bob, account, hers


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_send_and_three_more_deliveries_make_at_most_one_data(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer, settings: Any
) -> None:
    me, bob, account, hers = _alice_and_mallorys_waiting_request(alice, mallory, imap_server, smtp_server)
    smtp_server.stall_after_data = True  # the server takes the message and answers nothing

    # the worker waits for DATA's answer far longer than the test takes to kill it
    with worker_process("doomed", env={"OAKEN_SMTP_TIMEOUT_SECONDS": "300"}) as doomed:
        made = request(
            as_person(alice),
            "send_email",
            {
                "account_id": str(account.pk),
                "to": [bob],
                "subject": "Once",
                "body": "Exactly once.\n",
                "idempotency_key": uuid.uuid4().hex,
            },
        )
        rid = made["request_id"]  # the approval committed and handed the task to the broker
        _wait_until(
            lambda: smtp_server.data_commands == 1 and _row(alice, rid).smtp_started_at is not None,
            "the worker is in the middle of DATA",
        )
        doomed.kill()
    smtp_server.release()
    row = _row(alice, rid)
    assert (row.state, row.attempts) == ("sending", 1)
    assert _unacked_deliveries(rid) == 1  # the killed worker never acknowledged its task

    fast_redelivery = {"visibility_timeout": 2, "unacked_restore_interval": 1, "unacked_restore_throttle": 1}
    with worker_process("fresh", transport_options=fast_redelivery):
        # 1. the broker hands the unacknowledged task to the fresh worker, whose claim is refused
        _wait_until(
            lambda: _claims(alice, rid, "CONFLICT") == 1 and _unacked_deliveries(rid) == 0,
            "the broker redelivered the task and the fresh worker finished it",
        )
        # 2. the same task sent again, to the fresh worker
        assert deliver_task.delay(rid).get(timeout=60) == "not claimed"
        # 3. and called directly here
        assert delivery.deliver(rid) == "not claimed"
        assert _row(alice, rid).state == "sending" and smtp_server.data_commands == 1

        # the sweeper: nothing while the claim is young; once it is stale, unknown (DATA began), never handed over
        assert delivery.sweep(timezone.now()) == {"requeued": 0, "reclaimed": 0, "unknown": 0}
        stale = timezone.now() + timedelta(seconds=settings.OPERATIONS["SENDING_STALE_SECONDS"] + 1)
        assert delivery.sweep(stale) == {"requeued": 0, "reclaimed": 0, "unknown": 1}
        assert delivery.sweep(stale + timedelta(days=1)) == {"requeued": 0, "reclaimed": 0, "unknown": 0}
        assert deliver_task.delay(rid).get(timeout=60) == "not claimed"
        row = _row(alice, rid)
        assert (row.state, row.error, row.attempts) == ("unknown", "worker_lost_after_data", 1)

        # reconciliation on the worker (beat's task keeps no result: its looks are counted on the request):
        # not in Sent, so still unknown, and still never resent
        reconcile_unknown_task.delay()
        _wait_until(lambda: _row(alice, rid).reconcile_attempts == 1, "the worker looked in Sent")
        assert _row(alice, rid).state == "unknown"
        # the provider's copy turns up in Sent: settled as sent by the request's own Message-ID
        imap_server.append(me, "Sent", smtp_server.received[0].data)
        reconcile_unknown_task.delay()
        _wait_until(lambda: _row(alice, rid).state == "sent", "the worker found the copy in Sent")
        assert _row(alice, rid).reconcile_attempts == 1

    assert smtp_server.data_commands == 1
    [(_, raw, _)] = imap_server.folder_messages(bob, "INBOX")
    assert message_from_bytes(raw)["Message-ID"] == f"<{made['message_id']}>"
    assert _row(alice, rid).state == "sent"
    # one claim won; the redelivery, the two tasks sent again and the direct call were each refused, on record
    assert (_claims(alice, rid, "ok"), _claims(alice, rid, "CONFLICT")) == (1, 4)
    moves = [
        (event.operation, event.principal, target["after"].get("state"))
        for event in AuditEvent.objects.for_tenant(alice.tenant).order_by("seq")
        for target in event.targets
        if target["id"] == rid and isinstance(target["after"], dict)
    ]
    assert moves[-4:] == [
        ("claim_outbound_send", "internal", "sending"),
        ("begin_outbound_data", "internal", None),
        ("recover_outbound_send", "internal", "unknown"),
        ("reconcile_outbound", "internal", "sent"),
    ]
    # mallory's request, waiting in her tenant all along, was not touched by any of it
    assert OutboundRequest.objects.for_tenant(mallory.tenant).get(pk=hers["request_id"]).state == "awaiting_approval"
    assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(operation__contains="outbound").exists()


def _run_on(worker: Any, task: Any) -> Any:
    """Send `task` (one beat sends, which keeps no result) and wait for the worker to log what it returned."""
    task_id = task.delay().id
    marker = f"[{task_id}] succeeded in "
    _wait_until(lambda: marker in worker.output, f"the worker ran {task.name}")
    line = next(line for line in worker.output.splitlines() if marker in line)
    return ast.literal_eval(line.split(marker, 1)[1].split(": ", 1)[1])


def _claim_ages(p: Person, request_id: str, seconds: float) -> None:
    """The claim's worker has been silent that long (the sweeper reads the real clock, so the row moves back)."""
    OutboundRequest.objects.for_tenant(p.tenant).filter(pk=request_id).update(
        updated_at=timezone.now() - timedelta(seconds=seconds)
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_before_data_is_taken_back_by_the_sweep_task_and_its_mail_goes_out_once(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer, settings: Any
) -> None:
    """Beat's sweep, run by a fresh worker, takes the dead worker's claim back (nothing was sent: DATA never
    began) and hands the request over again; it goes out exactly once. A request queued behind it whose message
    cannot be built fails once, on the fresh worker, without a word to the SMTP server, and stays failed."""
    _, bob, account, hers = _alice_and_mallorys_waiting_request(alice, mallory, imap_server, smtp_server)
    smtp_server.stall_at_rcpt = True  # the server hears MAIL FROM and RCPT TO, and answers the RCPT nothing

    def send(subject: str) -> str:
        made = request(
            as_person(alice),
            "send_email",
            {
                "account_id": str(account.pk),
                "to": [bob],
                "subject": subject,
                "body": "Once.\n",
                "idempotency_key": uuid.uuid4().hex,
            },
        )
        return str(made["request_id"])

    with worker_process("doomed", env={"OAKEN_SMTP_TIMEOUT_SECONDS": "300"}) as doomed:
        rid = send("Once")
        _wait_until(lambda: smtp_server.rcpt_commands == 1, "the worker waits for RCPT's answer")
        # queued behind it, while the worker is busy: a request stored before its subject was checked at input,
        # a header the e-mail library refuses to write (its digest made again, so it is what was approved)
        poison = send("Poison")
        row = _row(alice, poison)
        row.subject = "a\r\nBcc: evil@example.test"
        row.content_hash = outbound_requests.stored_digest(row)
        row.save(update_fields=["subject", "content_hash"])
        doomed.kill()
    smtp_server.stall_at_rcpt = False
    smtp_server.release()
    row = _row(alice, rid)
    assert (row.state, row.attempts, row.smtp_started_at) == ("sending", 1, None)
    assert smtp_server.data_commands == 0 and _unacked_deliveries(rid) == 1

    fast_redelivery = {"visibility_timeout": 2, "unacked_restore_interval": 1, "unacked_restore_throttle": 1}
    with worker_process("fresh", transport_options=fast_redelivery) as fresh:
        # the poison fails at once on the fresh worker; the dead worker's task, handed over again, is refused
        _wait_until(lambda: _row(alice, poison).state == "failed", "the fresh worker settled the poison")
        _wait_until(
            lambda: _claims(alice, rid, "CONFLICT") == 1 and _unacked_deliveries(rid) == 0,
            "the broker redelivered the dead worker's task and the fresh worker finished it",
        )
        assert _row(alice, rid).state == "sending"
        # beat's sweep on the worker: nothing while the claim is young
        assert _run_on(fresh, sweep_outbox_task) == {"requeued": 0, "reclaimed": 0, "unknown": 0}
        # once the claim is stale: taken back before DATA, queued again and handed to a worker, which sends it
        _claim_ages(alice, rid, settings.OPERATIONS["SENDING_STALE_SECONDS"] + 1)
        assert _run_on(fresh, sweep_outbox_task) == {"requeued": 0, "reclaimed": 1, "unknown": 0}
        _wait_until(lambda: _row(alice, rid).state == "sent", "the fresh worker sent it")
        # and nothing more happens to either, however often the sweep runs or their tasks come again
        _claim_ages(alice, rid, settings.OPERATIONS["SENDING_STALE_SECONDS"] + 1)
        assert _run_on(fresh, sweep_outbox_task) == {"requeued": 0, "reclaimed": 0, "unknown": 0}
        assert deliver_task.delay(rid).get(timeout=60) == "not claimed"
        assert deliver_task.delay(poison).get(timeout=60) == "not claimed"

    row = _row(alice, rid)
    assert (row.state, row.attempts, row.error) == ("sent", 2, "")
    assert smtp_server.data_commands == 1
    [(_, raw, _)] = imap_server.folder_messages(bob, "INBOX")
    assert message_from_bytes(raw)["Subject"] == "Once"
    failed = _row(alice, poison)
    assert (failed.state, failed.error, failed.attempts, failed.smtp_started_at) == (
        "failed",
        "message_could_not_be_built",
        1,
        None,
    )
    assert smtp_server.mail_commands == 2  # the dead worker's and the fresh worker's, both for "Once"
    moves = [
        (event.operation, target["after"].get("state"), target["after"].get("error"))
        for event in AuditEvent.objects.for_tenant(alice.tenant).order_by("seq")
        for target in event.targets
        if target["id"] == rid and isinstance(target["after"], dict) and event.outcome == "ok"
    ]
    assert moves[-5:] == [
        ("claim_outbound_send", "sending", None),
        ("recover_outbound_send", "queued", "worker_lost"),
        ("claim_outbound_send", "sending", None),
        ("begin_outbound_data", None, None),
        ("record_outbound_outcome", "sent", None),
    ]
    settled = [
        (event.operation, target["after"].get("state"))
        for event in AuditEvent.objects.for_tenant(alice.tenant).filter(outcome="ok").order_by("seq")
        for target in event.targets
        if target["id"] == poison and isinstance(target["after"], dict) and target["after"].get("state")
    ]
    assert settled[-2:] == [("claim_outbound_send", "sending"), ("record_outbound_outcome", "failed")]
    # mallory's request, waiting in her tenant all along, was not touched by any of it
    assert OutboundRequest.objects.for_tenant(mallory.tenant).get(pk=hers["request_id"]).state == "awaiting_approval"
    assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(operation__contains="outbound").exists()
