"""Outbound requests: made bound to their content, approved by a person or a send policy, queued through the
outbox, cancelled or rejected. Every state change is a guarded UPDATE … WHERE state IN (expected), so two
actors can never both move the same request, and every change is audited by the operation that makes it
(act.touch): a person's or an agent's, or one of the worker's internal operations (apps.outbound.execution)."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from celery import current_app
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from apps.core.acts import Act
from apps.core.bounds import Bounds, bounds
from apps.core.errors import OakenError
from apps.core.kinds import Principal
from apps.core.links import absolute_url
from apps.mail.models import AccountKind, MailAccount
from apps.outbound import budget, provenance
from apps.outbound.compose import (
    Recipients,
    check_attachment_limits,
    check_recipient_limit,
    content_hash,
    new_message_id,
    sender_name_of,
)
from apps.outbound.models import (
    CANCELLABLE,
    Automation,
    BudgetExhaustion,
    Draft,
    Kind,
    OutboundAttachment,
    OutboundRequest,
    OutboxEntry,
    SendPolicy,
    State,
)
from apps.workspaces.models import Tenant

DELIVER_TASK = "outbound.deliver"
log = logging.getLogger("oaken.outbound")


@dataclass(frozen=True)
class Content:
    """Everything a request sends; its hash is what approval binds to."""

    account: MailAccount
    found: Recipients
    subject: str
    body: str
    in_reply_to: str = ""
    references: tuple[str, ...] = ()
    send_at: datetime | None = None
    # (filename, content type, bytes)
    attachments: tuple[tuple[str, str, bytes], ...] = ()
    # Kind: an e-mail, or an unsubscribe (by e-mail, or a one-click POST to `url`) from `source_message`
    kind: str = Kind.EMAIL
    url: str = ""
    source_message: Any = None

    @property
    def sender(self) -> str:
        return self.account.email_address

    @property
    def sender_name(self) -> str:
        # the mailbox's sender name, never its label; the request keeps its own copy from the moment it is made
        return sender_name_of(self.account.sender_name)

    def digest(self) -> str:
        return content_hash(
            account_id=str(self.account.pk),
            sender=self.sender,
            sender_name=self.sender_name,
            found=self.found,
            subject=self.subject,
            body=self.body,
            in_reply_to=self.in_reply_to,
            references=self.references,
            send_at=self.send_at,
            attachments=[(n, t, hashlib.sha256(c).hexdigest()) for n, t, c in self.attachments],
            kind=self.kind,
            url=self.url,
        )


def check_can_send(account: MailAccount) -> MailAccount:
    """The account, if it can send mail: connected over IMAP/SMTP, with an address of its own."""
    if account.kind != AccountKind.IMAP or not account.email_address:
        raise OakenError.invalid("account_id", "this account cannot send mail (it is not connected over IMAP/SMTP)")
    return account


def checked(content: Content, *, bounds: Bounds, files_field: str = "attachments") -> Content:
    """The content, held to the sending bounds: recipients, the body's length, the files (named `files_field`)."""
    check_recipient_limit(content.found, bounds.SEND_RECIPIENTS_MAX)
    if len(content.body) > bounds.SEND_BODY_MAX_CHARS:
        raise OakenError("LIMIT_EXCEEDED", f"body: at most {bounds.SEND_BODY_MAX_CHARS} characters", field="body")
    check_attachment_limits(bounds, [len(data) for _, _, data in content.attachments], files_field)
    return content


def stored_digest(request: OutboundRequest) -> str:
    """The content hash recomputed from what is stored now (delivery refuses a request whose content moved)."""
    return content_hash(
        account_id=str(request.account_id),
        sender=request.sender,
        sender_name=request.sender_name,
        found=Recipients(list(request.to), list(request.cc), list(request.bcc)),
        subject=request.subject,
        body=request.body,
        in_reply_to=request.in_reply_to,
        references=list(request.references),
        send_at=request.send_at,
        # the bytes themselves, as they would go out, not the digest stored beside them
        attachments=[
            (a.filename, a.content_type, hashlib.sha256(bytes(a.content)).hexdigest())
            for a in request.attachments.order_by("position")
        ],
        kind=request.kind,
        url=request.unsubscribe_url,
    )


def transition(
    tenant: Tenant, request_id: Any, expected: State | Sequence[State], new: State, **fields: Any
) -> State | None:
    """Move the request to `new` if it is in one of the expected states; the state it left, or None."""
    states = [expected] if isinstance(expected, State) else list(expected)
    rows = OutboundRequest.objects.for_tenant(tenant).filter(pk=request_id)
    for state in states:
        if rows.filter(state=state).update(state=new, updated_at=timezone.now(), **fields) == 1:
            return state
    return None


def approval_url(request_id: Any) -> str:
    return absolute_url(f"/outbound?request={request_id}")


def budget_name(*, act: Act) -> budget.BudgetName:
    """Whose hourly budget a request spends: the agent's credential, or the person."""
    caller = act.caller
    if caller.principal == Principal.AGENT:
        return budget.BudgetName(str(act.tenant.pk), caller.credential_kind, caller.credential_id)
    return budget.BudgetName(str(act.tenant.pk), "person", str(caller.user.pk) if caller.user else "-")


def _existing(key: str, digest: str, *, act: Act) -> OutboundRequest | None:
    found = OutboundRequest.objects.for_tenant(act.tenant).filter(caller_key=act.caller.key, idempotency_key=key)
    first = found.first()
    if first is not None and first.content_hash != digest:
        raise OakenError(
            "IDEMPOTENCY_MISMATCH", "idempotency_key was already used for different content", field="idempotency_key"
        )
    return first


def check_key(content: Content, *, act: Act, operation: str, idempotency_key: str) -> OutboundRequest | None:
    """The request this caller already made with this key for this content (None: not made yet); a key used
    for other content is refused at once, before any proposal."""
    return _existing(f"{operation}:{idempotency_key}", content.digest(), act=act)


def store_files(
    files: Sequence[tuple[str, str, bytes]], *, tenant: Tenant, draft: Draft | None = None, request: Any = None
) -> None:
    """An e-mail's files (name, type, bytes), in this order, for a draft or a request (each with its hash)."""
    OutboundAttachment.objects.bulk_create(
        OutboundAttachment(
            tenant=tenant,
            draft=draft,
            request=request,
            filename=name,
            content_type=ctype,
            content=data,
            sha256=hashlib.sha256(data).hexdigest(),
            position=i,
        )
        for i, (name, ctype, data) in enumerate(files)
    )


def create_request(
    content: Content,
    *,
    act: Act,
    operation: str,
    idempotency_key: str,
    draft_id: Any = None,
    standing: Automation | None = None,
) -> tuple[OutboundRequest, bool]:
    """The request for this content (a retry with the same key gets the first one back: (request, False)).

    A person's own request is approved by them as they make it (they confirmed exactly this content); an
    agent's is approved by a matching send policy of the person it acts for, or waits for a person. One sent by
    itself on a `standing` authority (an automatic reply) is approved by it, and spends its budgets when it is
    delivered (apps.outbound.execution), waiting while they are spent instead of being refused.
    """
    key = f"{operation}:{idempotency_key}"
    digest = content.digest()
    first = _existing(key, digest, act=act)
    if first is not None:
        return first, False
    caller = act.caller
    # where an agent's request came from (SPEC §23): what its credential read decides whether a policy may approve
    origin = provenance.assess(
        act=act,
        account=content.account,
        recipients=[*content.found.to, *content.found.cc, *content.found.bcc],
        text=f"{content.subject}\n{content.body}",
        files=[data for _, _, data in content.attachments],
    ).as_json()
    try:
        with transaction.atomic():
            request = OutboundRequest.objects.create(
                tenant=act.tenant,
                account=content.account,
                draft_id=draft_id,
                state=State.REQUESTED,
                kind=content.kind,
                source_message=content.source_message,
                unsubscribe_url=content.url,
                sender=content.sender,
                sender_name=content.sender_name,
                to=content.found.to,
                cc=content.found.cc,
                bcc=content.found.bcc,
                subject=content.subject,
                body=content.body,
                in_reply_to=content.in_reply_to,
                references=list(content.references),
                send_at=content.send_at,
                message_id=new_message_id(content.sender),
                content_hash=digest,
                recipient_count=content.found.count,
                requested_by=caller.user,
                principal=caller.principal.value,
                door=act.door,
                credential_id=caller.credential_id,
                credential_kind=caller.credential_kind,
                caller_key=caller.key,
                idempotency_key=key,
                automation=standing,
                provenance=origin if caller.principal == Principal.AGENT else {},
                created_at=act.now,
                updated_at=act.now,
            )
    except IntegrityError:
        # the same key committed meanwhile by a concurrent call: that one is the request
        first = _existing(key, digest, act=act)
        assert first is not None
        return first, False
    store_files(content.attachments, tenant=act.tenant, request=request)
    made: dict[str, Any] = {
        "state": State.REQUESTED,
        "recipients": request.recipient_count,
        "account_id": str(content.account.pk),
    }
    if content.kind != Kind.EMAIL:
        # what it is and which message it came from; the URL never (its query string is the list's token)
        made |= {"kind": content.kind, "message_id": str(content.source_message.pk)}
    if origin["flags"] or origin["lockdown"]:
        # the flags' names only: their evidence (addresses, message ids) stays on the request
        made["provenance"] = [*origin["flags"], *(["lockdown"] if origin["lockdown"] else [])]
    act.touch(request.pk, None, made)
    if standing is not None:
        approve(request, via="standing", expected=State.REQUESTED, act=act)
        request.refresh_from_db()
        return request, True
    # a one-click POST reaches one list: it spends one from the hourly budget
    _spend(max(1, request.recipient_count), act=act, account_id=content.account.pk)
    if caller.principal == Principal.PERSON:
        approve(request, via="person", expected=State.REQUESTED, act=act)
    elif (
        content.kind == Kind.EMAIL
        and not provenance.held(origin)
        and (policy := _matching_policy(request, act=act)) is not None
    ):
        # (an unsubscribe goes where a stranger's mail said: no send policy approves one, only a person; nor one
        # whose provenance says it may come from mail the agent read, or its credential's lockdown holds)
        approve(request, via="policy", policy=policy, expected=State.REQUESTED, act=act)
    else:
        transition(act.tenant, request.pk, State.REQUESTED, State.AWAITING_APPROVAL)
        act.touch(request.pk, {"state": State.REQUESTED}, {"state": State.AWAITING_APPROVAL})
    request.refresh_from_db()
    return request, True


def _spend(amount: int, *, act: Act, account_id: Any) -> None:
    """Take the request's recipients from its caller's hourly budget; refused (RATE_LIMITED) when they do not fit,
    and the refusal records that the budget is spent (the feed's budget.exhausted, once an hour)."""
    limit = bounds.SEND_RECIPIENTS_PER_HOUR
    now = time.time()
    name = budget_name(act=act)
    if budget.take(name, amount, limit, now) is None:
        spent = partial(_exhausted, name, tenant=act.tenant, now=now, limit=limit, account_id=account_id)
        raise OakenError(
            "RATE_LIMITED",
            f"at most {limit} recipients an hour for this connection or key",
            retry_after=budget.seconds_left(now),
            record=spent,
        )


def _exhausted(name: budget.BudgetName, *, tenant: Tenant, now: float, limit: int, account_id: Any) -> None:
    """Keep that this budget refused a request this hour: one row per budget and hour (a later refusal, or one
    racing this, inserts nothing), whose insert writes the feed's `budget.exhausted` (events/0003)."""
    row = BudgetExhaustion(
        tenant=tenant,
        kind=name.kind,
        budget_id=name.budget_id[:100],
        window_start=budget.hour_of(now),
        per_hour=limit,
        account_id=account_id,
    )
    BudgetExhaustion.objects.bulk_create([row], ignore_conflicts=True)


def _allowed(policy: SendPolicy, addresses: Iterable[str]) -> bool:
    exact = {a.casefold() for a in policy.allowed_addresses}
    domains = {d.casefold().lstrip("@") for d in policy.allowed_domains}
    return all(a.casefold() in exact or a.rpartition("@")[2].casefold() in domains for a in addresses)


def _matching_policy(request: OutboundRequest, *, act: Act) -> SendPolicy | None:
    """A policy of the person this agent acts for that allows every recipient and still has hourly room."""
    if act.caller.user is None:
        return None
    policies = (
        SendPolicy.objects.for_tenant(act.tenant)
        .filter(created_by=act.caller.user)
        .filter(Q(account__isnull=True) | Q(account=request.account_id))
        .order_by("created_at")
    )
    everyone = [*request.to, *request.cc, *request.bcc]
    for policy in policies:
        if (
            _allowed(policy, everyone)
            and budget.take(
                budget.BudgetName(str(act.tenant.pk), "policy", str(policy.pk)),
                request.recipient_count,
                policy.recipients_per_hour,
                time.time(),
            )
            is not None
        ):
            return policy
    return None


def approve(
    request: OutboundRequest,
    *,
    act: Act,
    via: str,
    policy: SendPolicy | None = None,
    expected: State | Sequence[State] = (State.REQUESTED, State.AWAITING_APPROVAL),
) -> None:
    """Approve and write the outbox row in this same transaction; queue it now unless it is scheduled later."""
    before = transition(
        act.tenant,
        request.pk,
        expected,
        State.APPROVED,
        decided_by=act.caller.user if via == "person" else None,
        decided_at=act.now,
        approved_via=via,
        policy=policy,
    )
    if before is None:
        raise OakenError("CONFLICT", "this request is no longer waiting for approval", field="request_id")
    act.touch(
        request.pk,
        {"state": before},
        {"state": State.APPROVED, "via": via, "policy_id": str(policy.pk) if policy else None},
    )
    due = request.send_at is None or request.send_at <= act.now
    OutboxEntry.objects.create(
        tenant=act.tenant,
        request=request,
        available_at=request.send_at or act.now,
        enqueued_at=act.now if due else None,
        enqueue_count=1 if due else 0,
        created_at=act.now,
    )
    if due:
        transition(act.tenant, request.pk, State.APPROVED, State.QUEUED)
        act.touch(request.pk, {"state": State.APPROVED}, {"state": State.QUEUED})
        enqueue_on_commit(request.pk)


def reject(request: OutboundRequest, *, act: Act, reason: str = "") -> None:
    """Never sent; the person's reason is kept for the agent to read (the audit event says only that one was
    given: it is a person's free text, like mail)."""
    before = transition(
        act.tenant,
        request.pk,
        State.AWAITING_APPROVAL,
        State.REJECTED,
        decided_by=act.caller.user,
        decided_at=act.now,
        reject_reason=reason,
    )
    if before is None:
        raise OakenError("CONFLICT", "this request is no longer waiting for approval", field="request_id")
    act.touch(request.pk, {"state": before}, {"state": State.REJECTED, "reason_given": bool(reason)})


def cancel(request: OutboundRequest, *, act: Act) -> None:
    if request.state == State.CANCELLED:
        return
    before = transition(act.tenant, request.pk, CANCELLABLE, State.CANCELLED, finished_at=act.now)
    if before is None:
        raise OakenError(
            "CONFLICT", "this request can no longer be cancelled: sending has begun or ended", field="request_id"
        )
    act.touch(request.pk, {"state": before}, {"state": State.CANCELLED})


def cancel_waiting(request_id: Any, *, act: Act) -> None:
    """Cancel a request if it has not begun sending (one taken by a worker meanwhile goes on)."""
    before = transition(act.tenant, request_id, CANCELLABLE, State.CANCELLED, finished_at=act.now)
    if before is not None:
        act.touch(request_id, {"state": before}, {"state": State.CANCELLED})


def enqueue_on_commit(request_id: Any) -> None:
    """Hand the request to a worker once the approval has committed (the sweeper covers a lost hand-off)."""
    transaction.on_commit(lambda: enqueue(request_id))


def enqueue(request_id: Any) -> None:
    # by name: the task lives in the worker door (apps.worker.tasks), above this layer
    try:
        current_app.send_task(DELIVER_TASK, args=(str(request_id),), retry=False)
    except Exception as exc:  # the broker is away: the outbox sweeper hands it over later
        log.warning("could not hand outbound request %s to a worker: %s", request_id, type(exc).__name__)
