"""The execution of an approved request, one state change at a time. Each function is the handler's work of an
operation (apps.operations.defs.delivery, the internal door; settle: persons), so the gate audits every step in
the transaction that makes it. Every move is a guarded UPDATE (or a row lock and a check) on the state it
expects and, after the claim, on the claim's attempt number: a step of a claim that was taken back moves nothing.

The rules that make delivery at most once live here, not in the worker that reports to them:
- a claim needs a due request (queued and available, or approved and its send time come);
- DATA may begin once per claim, and only while that claim holds;
- a temporary failure is retried (queued again, available after a backoff) only when DATA never began and
  attempts are left; once DATA began the outcome is sent, failed or unknown, never a retry.

A request made from a draft takes that draft out of Drafts when it is recorded as sent, in the same
transaction (as a mail client does); a request that fails, is rejected or cancelled leaves it where it was.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, Literal

from django.db.models import F, Q

from apps.core.acts import Act
from apps.core.bounds import bounds
from apps.core.errors import OakenError
from apps.outbound import budget, requests
from apps.outbound.models import Draft, OutboundRequest, OutboxEntry, State
from apps.workspaces.models import Membership, Tenant

Outcome = Literal["sent", "refused", "temporary", "unknown"]
LOST_AFTER_DATA = "worker_lost_after_data"


def _rows(request_id: Any, *, act: Act) -> Any:
    return OutboundRequest.objects.for_tenant(act.tenant).filter(pk=request_id)


def _held(request_id: Any, attempt: int, *, act: Act, or_given_up: bool = False) -> OutboundRequest:
    """The request locked, while the claim numbered `attempt` still holds it; CONFLICT otherwise.

    `or_given_up`: also when the sweeper gave that claim up as lost after DATA began (unknown), for the
    worker's own late answer, which is better knowledge than the sweeper's guess."""
    holding = Q(state=State.SENDING)
    if or_given_up:
        holding |= Q(state=State.UNKNOWN, error=LOST_AFTER_DATA, smtp_started_at__isnull=False)
    request = _rows(request_id, act=act).select_for_update().filter(holding, attempts=attempt).first()
    if request is None:
        raise OakenError("CONFLICT", "this delivery's claim no longer holds the request", field="attempt")
    return request


def _draft_sent(request: OutboundRequest, *, act: Act) -> None:
    """The draft the sent request was made from leaves Drafts, audited in the event that records the send. A
    draft changed after the request was made holds other mail than what went out: it stays."""
    if request.draft_id is None:
        return  # not made from a draft, or the draft is gone already (SET_NULL)
    drafts = Draft.objects.for_tenant(act.tenant).filter(pk=request.draft_id, updated_at__lte=request.created_at)
    if drafts.delete()[0]:
        act.touch(request.draft_id, {"draft": "exists"}, {"draft": "deleted", "sent_as": str(request.pk)})


def retry_delay(attempt: int) -> timedelta:
    """The wait after a failed attempt: the base, doubling per attempt, capped."""
    base, cap = bounds.SEND_RETRY_BASE_SECONDS, bounds.SEND_RETRY_MAX_SECONDS
    return timedelta(seconds=min(cap, base * 2 ** max(0, attempt - 1)))


def _retrying(request: OutboundRequest) -> bool:
    return request.state == State.QUEUED and bool(request.attempts)


def retry_at(request: OutboundRequest) -> datetime | None:
    """When a queued request that failed an attempt is tried again."""
    if not _retrying(request):
        return None
    return retry_times(request.tenant, [request]).get(request.pk)


def retry_times(tenant: Tenant, rows: Iterable[OutboundRequest]) -> dict[Any, datetime]:
    """retry_at for each of these requests of the tenant that is queued again after an attempt, in one query."""
    retrying = [r.pk for r in rows if _retrying(r)]
    if not retrying:
        return {}
    found = OutboxEntry.objects.for_tenant(tenant).filter(request_id__in=retrying)
    return dict(found.values_list("request_id", "available_at"))


def claim(request_id: Any, *, act: Act) -> OutboundRequest:
    """Due → sending, as attempt n+1. Content that moved since approval fails here: it is never sent."""
    rows, now = _rows(request_id, act=act), act.now
    # every condition on the request's own row, so the UPDATE's WHERE is re-checked on the row it waited for
    # (a join or subquery could be judged on the version before a concurrent claim); the outbox row's time
    # only moves together with the request's state, which the UPDATE guards
    available = OutboxEntry.objects.for_tenant(act.tenant).filter(request_id=request_id, available_at__lte=now)
    due = {
        State.QUEUED: rows if available.exists() else rows.none(),
        State.APPROVED: rows.filter(Q(send_at__isnull=True) | Q(send_at__lte=now)),
    }
    waiting = _standing_budgets(request_id, available, act=act)
    if waiting is not None:
        return waiting
    for state, candidates in due.items():
        moved = candidates.filter(state=state).update(
            state=State.SENDING, attempts=F("attempts") + 1, smtp_started_at=None, updated_at=now
        )
        # a queued request's time is checked again once its row is ours: a retry scheduled meanwhile by the
        # attempt before (its outbox row moved with its state) waits for its time (raising undoes the UPDATE)
        if moved and state == State.QUEUED and not available.select_for_update().exists():
            raise OakenError("CONFLICT", "this request's next attempt is not due yet", field="request_id")
        if moved:
            break
    else:
        raise OakenError("CONFLICT", "this request is not waiting to be sent (not due, or taken)", field="request_id")
    request = rows.select_related("account").get()
    act.touch(request.pk, {"state": state}, {"state": State.SENDING, "attempt": request.attempts})
    # what was approved is what is sent; and only while the person it is sent for may still send as the mailbox
    # (removed from the tenant, or a MEMBER no longer given its workspace, since it was approved or scheduled)
    error = ""
    if requests.stored_digest(request) != request.content_hash:
        error = "content_changed"
    elif not requester_reaches(request, tenant=act.tenant):
        error = REQUESTER_LOST_ACCESS
    if error:
        requests.transition(act.tenant, request.pk, State.SENDING, State.FAILED, error=error, finished_at=now)
        act.touch(request.pk, {"state": State.SENDING}, {"state": State.FAILED, "error": error})
        request.refresh_from_db()
    return request


REQUESTER_LOST_ACCESS = "requester_lost_access"
BUDGET_SPENT = "budget_spent"
BUDGET_UNAVAILABLE = "budget_unavailable"
# a send that waits because its budgets cannot be checked is tried again this soon
_UNCHECKED_RETRY = timedelta(seconds=30)


def _standing_budgets(request_id: Any, available: Any, *, act: Act) -> OutboundRequest | None:
    """For a due send on a standing authority (an automatic reply): take one from the mailbox's hourly budget for
    automatic sends and from its approver's budget. When they are spent or cannot be checked (Redis away) it is
    not claimed: it stays `queued`, says why (`waiting`), and its outbox row waits (for the next hour, or a little
    while); it goes once they allow, never dropped, never twice. None: claim it (or it is not such a send)."""
    held = _rows(request_id, act=act).filter(state=State.QUEUED, approved_via="standing")
    request = held.select_for_update(of=("self",)).select_related("automation").first()
    if request is None or not available.exists():
        return None
    tenant = str(act.tenant.pk)
    approver = request.automation.approved_by_id if request.automation is not None else None
    names = [
        (budget.BudgetName(tenant, "account", str(request.account_id)), bounds.AUTO_SENDS_PER_HOUR),
        (budget.BudgetName(tenant, "person", str(approver or "-")), bounds.SEND_RECIPIENTS_PER_HOUR),
    ]
    now = time.time()
    waiting, delay = "", timedelta(0)
    try:
        for name, limit in names:
            if budget.take(name, request.recipient_count, limit, now) is None:
                waiting, delay = BUDGET_SPENT, timedelta(seconds=budget.seconds_left(now))
                break
    except OakenError:
        waiting, delay = BUDGET_UNAVAILABLE, _UNCHECKED_RETRY
    if not waiting:
        if request.waiting:
            held.update(waiting="", updated_at=act.now)
        return None
    held.update(waiting=waiting, updated_at=act.now)
    available.update(available_at=act.now + delay, enqueued_at=None)
    act.touch(request.pk, {"state": State.QUEUED}, {"state": State.QUEUED, "waiting": waiting})
    request.refresh_from_db()
    return request


def requester_reaches(request: OutboundRequest, *, tenant: Tenant) -> bool:
    """Whether the person a request is sent for is still a member of its tenant who reaches its mailbox."""
    if request.requested_by_id is None:
        return False
    member = Membership.objects.for_tenant(tenant).filter(user_id=request.requested_by_id).first()
    if member is None:
        return False
    return not member.limited or request.account.workspace_id in (member.workspace_ids or [])


def begin_data(request_id: Any, attempt: int, *, act: Act) -> None:
    """Record, before the DATA command, that it began: from now on this request is never retried."""
    moved = (
        _rows(request_id, act=act)
        .filter(state=State.SENDING, attempts=attempt, smtp_started_at__isnull=True)
        .update(smtp_started_at=act.now, updated_at=act.now)
    )
    if moved != 1:
        raise OakenError("CONFLICT", "this delivery's claim no longer holds the request", field="attempt")
    act.touch(request_id, {"data_begun": False}, {"data_begun": True, "attempt": attempt})


def record_outcome(
    request_id: Any,
    attempt: int,
    outcome: Outcome,
    error: str,
    refused: list[str],
    *,
    act: Act,
    http_status: int | None = None,
) -> OutboundRequest:
    """What the server's answers mean for the request: sent, failed, unknown, or queued for another attempt
    (`http_status`: a list's answer to a one-click POST, kept on the request)."""
    request = _held(request_id, attempt, or_given_up=True, act=act)
    was = State(request.state)
    data_begun = request.smtp_started_at is not None
    if was == State.UNKNOWN and outcome in ("temporary", "unknown"):
        return request  # the worker knows no more than the sweeper did
    if outcome == "temporary" and data_begun:
        outcome, error = "unknown", error or "connection_lost_after_data"  # never retried once DATA began
    elif outcome == "unknown" and not data_begun:
        outcome = "temporary"  # DATA never began: certainly nothing was sent
    now = act.now
    extra: dict[str, Any] = {"attempt": attempt}
    fields: dict[str, Any]
    if outcome == "temporary" and attempt < bounds.SEND_ATTEMPTS_MAX:
        new = State.QUEUED
        available = now + retry_delay(attempt)
        OutboxEntry.objects.for_tenant(act.tenant).filter(request_id=request.pk).update(
            available_at=available, enqueued_at=None
        )
        extra["retry_at"] = available.isoformat()
        fields = {"error": error}
    elif outcome == "sent":
        new, fields = State.SENT, {"error": "", "finished_at": now, "refused_recipients": refused}
    elif outcome == "unknown":
        new, fields = State.UNKNOWN, {"error": error, "refused_recipients": refused}
    else:
        if outcome == "temporary":
            extra["attempts_exhausted"] = True
        new, fields = State.FAILED, {"error": error, "finished_at": now, "refused_recipients": refused}
    if http_status is not None:
        fields["http_status"] = http_status
    requests.transition(act.tenant, request.pk, was, new, **fields)
    if new == State.SENT:
        _draft_sent(request, act=act)
    if error and new != State.SENT:
        extra["error"] = error
    if refused:
        extra["refused_recipients"] = len(refused)  # how many, never who
    if http_status is not None:
        extra["http_status"] = http_status
    act.touch(request.pk, {"state": was}, {"state": new, **extra})
    request.refresh_from_db()
    return request


def release(request_id: Any, *, act: Act) -> OutboundRequest:
    """A scheduled send whose time came (the schedule decides that from send_at): approved → queued, now; failed
    instead when the person it is sent for no longer reaches its mailbox (claim checks it again)."""
    found = _rows(request_id, act=act).filter(state=State.APPROVED).select_related("account").first()
    if found is not None and not requester_reaches(found, tenant=act.tenant):
        fields = {"error": REQUESTER_LOST_ACCESS, "finished_at": act.now}
        if requests.transition(act.tenant, request_id, State.APPROVED, State.FAILED, **fields) is not None:
            act.touch(request_id, {"state": State.APPROVED}, {"state": State.FAILED, "error": REQUESTER_LOST_ACCESS})
            return _rows(request_id, act=act).get()
    if requests.transition(act.tenant, request_id, State.APPROVED, State.QUEUED) is None:
        raise OakenError("CONFLICT", "this request is not an approved scheduled send", field="request_id")
    OutboxEntry.objects.for_tenant(act.tenant).filter(request_id=request_id).update(
        available_at=act.now, enqueued_at=act.now, enqueue_count=F("enqueue_count") + 1
    )
    act.touch(request_id, {"state": State.APPROVED}, {"state": State.QUEUED})
    requests.enqueue_on_commit(request_id)
    return _rows(request_id, act=act).get()


def recover(request_id: Any, attempt: int, silent_since: datetime, *, act: Act) -> OutboundRequest:
    """A claim whose worker went silent (the sweeper judges that from its age): before DATA nothing was sent, so
    it is queued again while attempts are left; after DATA began the outcome is unknown."""
    request = _held(request_id, attempt, act=act)
    if request.updated_at >= silent_since:
        # the worker spoke since the sweeper looked (DATA began just then): it is not lost
        raise OakenError("CONFLICT", "this delivery's worker is still at it", field="attempt")
    fields: dict[str, Any]
    if request.smtp_started_at is not None:
        new, fields = State.UNKNOWN, {"error": LOST_AFTER_DATA}
    elif attempt < bounds.SEND_ATTEMPTS_MAX:
        new, fields = State.QUEUED, {"error": "worker_lost"}
        OutboxEntry.objects.for_tenant(act.tenant).filter(request_id=request.pk).update(
            available_at=act.now, enqueued_at=act.now, enqueue_count=F("enqueue_count") + 1
        )
        requests.enqueue_on_commit(request.pk)
    else:
        new, fields = State.FAILED, {"error": "worker_lost", "finished_at": act.now}
    requests.transition(act.tenant, request.pk, State.SENDING, new, **fields)
    act.touch(request.pk, {"state": State.SENDING}, {"state": new, "attempt": attempt, "error": fields["error"]})
    request.refresh_from_db()
    return request


def reconcile_found(request_id: Any, *, act: Act) -> OutboundRequest:
    """An unknown outcome whose Message-ID turned up in the account's Sent folder: sent."""
    moved = requests.transition(
        act.tenant, request_id, State.UNKNOWN, State.SENT, finished_at=act.now, error="", copied_to_sent=True
    )
    if moved is None:
        raise OakenError("CONFLICT", "this request's outcome is not unknown", field="request_id")
    act.touch(request_id, {"state": State.UNKNOWN}, {"state": State.SENT, "found_in": "sent"})
    _draft_sent(_rows(request_id, act=act).get(), act=act)
    return _rows(request_id, act=act).get()


def settle(request: OutboundRequest, sent: bool, *, act: Act) -> None:
    """A person records how an unknown outcome ended; either way nothing is ever sent again for it."""
    new = State.SENT if sent else State.FAILED
    moved = requests.transition(
        act.tenant,
        request.pk,
        State.UNKNOWN,
        new,
        finished_at=act.now,
        settled_by=act.caller.user,
        settled_at=act.now,
        **({"error": ""} if sent else {"error": "settled_not_sent"}),
    )
    if moved is None:
        raise OakenError("CONFLICT", "this request's outcome is not unknown (any more)", field="request_id")
    act.touch(request.pk, {"state": State.UNKNOWN}, {"state": new, "settled": "sent" if sent else "not_sent"})
    if sent:
        _draft_sent(request, act=act)
