"""Standing send behaviours (issue 40): automatic replies a person approves once and Oaken then sends by itself.

What is sent by itself stays as the person approved it. An automation's content (subject, text, audience, window,
schedule) is bound to `content_hash` when it is made; nothing edits it afterwards: a change is a new automation,
and approving it cancels the one before. A person's own is approved as they make it (they confirmed exactly this);
an agent's waits for a person, who approves it on /outbound against the hash they were shown. An agent may cancel
one, never change one.

Each reply is an outbound request approved by that standing authority ("standing"): no person approves it again,
but it goes through the same outbox, delivery and audit as any send, and spends the mailbox's hourly budget for
automatic sends and its approver's own budget when it is delivered (apps.outbound.execution), waiting in `queued`
while they are spent or cannot be checked. Each message is decided once (AutoReplyDecision); each address gets at
most one reply per window (AutoReplied), both settled by the database under concurrent workers (RFC 3834).
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Count
from django.utils.crypto import salted_hmac

from apps.audit.log import canonical_json
from apps.core.acts import Act
from apps.core.bounds import bounds
from apps.core.errors import OakenError
from apps.core.ids import new_id
from apps.core.kinds import Principal
from apps.core.links import absolute_url
from apps.mail.models import FolderKind, MailAccount, Message
from apps.outbound import provenance, requests
from apps.outbound.compose import recipients, reply_subject
from apps.outbound.drafts import forwarded
from apps.outbound.models import (
    CANCELLABLE,
    Automation,
    AutomationKind,
    AutomationState,
    AutoReplyDecision,
    OutboundRequest,
)
from apps.outbound.selectors import forwardable_attachments

REPLIED = "replied"
FORWARDED = "forwarded"

# senders no automatic reply goes to (RFC 3834 §2, RFC 5230 §4.6): robots, lists' own addresses, bounces
_ROBOT = re.compile(
    r"^(?:no-?reply|do-?not-?reply|donotreply|mailer-daemon|postmaster|bounces?|listserv|majordomo|owner-.*|.*-request"
    r"|.*-bounces?|noreply-.*|no-reply-.*)$",
    re.IGNORECASE,
)
_BULK = ("bulk", "list", "junk")
# folders whose mail is never answered by itself
_NOT_ANSWERED = (FolderKind.SENT, FolderKind.DRAFTS, FolderKind.SPAM, FolderKind.TRASH)


@dataclass(frozen=True)
class AutomationContent:
    """What an automation sends and to whom: what a person approves (its hash). An automatic reply: its subject,
    text, audience, window and schedule; a forward: where every message goes."""

    account: MailAccount
    kind: str = AutomationKind.AUTO_REPLY
    subject: str = ""
    body: str = ""
    audience: str = ""
    once_per_days: int = 0
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    tz: str = "UTC"
    forward_to: str = ""
    # a forwarding rule's: the rule, and its terms (what decides which messages go: apps.operations.forwarding)
    rule_id: Any = None
    terms: str = ""

    def digest(self) -> str:
        return hashlib.sha256(
            canonical_json(
                {
                    "kind": str(self.kind),
                    "account": str(self.account.pk),
                    "sender": self.account.email_address,
                    "subject": self.subject,
                    "body": self.body,
                    "audience": self.audience,
                    "once_per_days": self.once_per_days,
                    "starts_at": _utc(self.starts_at),
                    "ends_at": _utc(self.ends_at),
                    "tz": self.tz,
                    "forward_to": self.forward_to,
                    "rule": str(self.rule_id) if self.rule_id is not None else None,
                    "terms": self.terms,
                }
            ).encode("utf-8", "surrogatepass")
        ).hexdigest()


def _utc(moment: datetime | None) -> str | None:
    """A moment as the hash takes it: in UTC, whatever offset it was given with (the database gives it back in
    UTC, and the same automation must hash the same before and after)."""
    return moment.astimezone(UTC).isoformat() if moment is not None else None


def content_of(automation: Automation) -> AutomationContent:
    return AutomationContent(
        account=automation.account,
        kind=automation.kind,
        subject=automation.subject,
        body=automation.body,
        audience=automation.audience,
        once_per_days=automation.once_per_days,
        starts_at=automation.starts_at,
        ends_at=automation.ends_at,
        tz=automation.tz,
        forward_to=automation.forward_to,
        rule_id=automation.rule_id,
        terms=automation.terms,
    )


def _state(automation: Automation) -> dict[str, Any]:
    return {"state": automation.state, "kind": automation.kind, "account_id": str(automation.account_id)}


def request_automation(content: AutomationContent, *, act: Act) -> Automation:
    """A new automation for the mailbox: active at once when a person makes it (replacing the mailbox's one of its
    kind), else waiting for a person's approval."""
    caller = act.caller
    requests.check_can_send(content.account)
    # what its credential read before asking (SPEC §23): shown to the person who decides
    origin = provenance.assess(
        act=act,
        account=content.account,
        recipients=[content.forward_to] if content.forward_to else [],
        text=f"{content.subject}\n{content.body}",
    ).as_json()
    automation = Automation.objects.create(
        tenant=act.tenant,
        account=content.account,
        kind=content.kind,
        state=AutomationState.AWAITING_APPROVAL,
        subject=content.subject,
        body=content.body,
        audience=content.audience,
        once_per_days=content.once_per_days,
        starts_at=content.starts_at,
        ends_at=content.ends_at,
        tz=content.tz,
        forward_to=content.forward_to,
        rule_id=content.rule_id,
        terms=content.terms,
        content_hash=content.digest(),
        requested_by=caller.user,
        principal=caller.principal.value,
        door=act.door,
        credential_id=caller.credential_id,
        credential_kind=caller.credential_kind,
        provenance=origin,
        created_at=act.now,
        updated_at=act.now,
    )
    act.touch(automation.pk, None, _state(automation))
    if caller.principal == Principal.PERSON:
        approve(automation, act=act, content_hash=automation.content_hash)
        automation.refresh_from_db()
    return automation


def _move(automation: Automation, expected: str, new: str, **fields: Any) -> bool:
    rows = Automation.objects.for_tenant(automation.tenant).filter(pk=automation.pk, state=expected)
    return rows.update(state=new, **fields) == 1


def approve(automation: Automation, *, act: Act, content_hash: str | None) -> None:
    """A person's approval, of exactly the content they were shown; the mailbox's active one of its kind ends (a
    forwarding rule's: the rule's active one to the same destination)."""
    if content_hash is not None and content_hash != automation.content_hash:
        raise OakenError("CONFLICT", "this automation is not what was shown: reload it", field="content_hash")
    stored = Automation.objects.for_tenant(act.tenant).filter(pk=automation.pk)
    if stored.values_list("content_hash", flat=True).get() != content_of(automation).digest():
        raise OakenError("CONFLICT", "this automation's content moved since it was made", field="automation_id")
    before = Automation.objects.for_tenant(act.tenant).filter(
        account=automation.account_id, kind=automation.kind, rule=automation.rule_id, state=AutomationState.ACTIVE
    )
    if automation.rule_id is not None:  # a rule forwards to each of its destinations
        before = before.filter(forward_to=automation.forward_to)
    for old in before.exclude(pk=automation.pk):
        _move(old, AutomationState.ACTIVE, AutomationState.CANCELLED, cancelled_at=act.now, updated_at=act.now)
        act.touch(old.pk, {"state": AutomationState.ACTIVE}, {"state": AutomationState.CANCELLED, "replaced": True})
    # mail stored from now on is answered: the engine starts after the id of this moment
    moved = _move(
        automation,
        AutomationState.AWAITING_APPROVAL,
        AutomationState.ACTIVE,
        approved_by=act.caller.user,
        decided_at=act.now,
        scanned_to=id_at(act.now),
        updated_at=act.now,
    )
    if not moved:
        raise OakenError("CONFLICT", "this automation is no longer waiting for approval", field="automation_id")
    act.touch(automation.pk, {"state": AutomationState.AWAITING_APPROVAL}, {"state": AutomationState.ACTIVE})


def reject(automation: Automation, *, act: Act, reason: str = "") -> None:
    moved = _move(
        automation,
        AutomationState.AWAITING_APPROVAL,
        AutomationState.REJECTED,
        approved_by=None,
        decided_at=act.now,
        reject_reason=reason,
        updated_at=act.now,
    )
    if not moved:
        raise OakenError("CONFLICT", "this automation is no longer waiting for approval", field="automation_id")
    act.touch(
        automation.pk,
        {"state": AutomationState.AWAITING_APPROVAL},
        {"state": AutomationState.REJECTED, "reason_given": bool(reason)},
    )


def cancel(automation: Automation, *, act: Act, reason: str = "") -> None:
    """It sends nothing more: neither on new mail nor what it made that has not begun sending (after a flood, what
    waits for the budgets could otherwise go on for days on an authority the person withdrew)."""
    for state in (AutomationState.ACTIVE, AutomationState.AWAITING_APPROVAL):
        ended = {"cancelled_at": act.now, "stopped_reason": reason, "updated_at": act.now}
        if _move(automation, state, AutomationState.CANCELLED, **ended):
            act.touch(automation.pk, {"state": state}, {"state": AutomationState.CANCELLED, "reason": reason or None})
            waiting = OutboundRequest.objects.for_tenant(act.tenant).filter(
                automation=automation, state__in=CANCELLABLE
            )
            for request_id in waiting.values_list("pk", flat=True):
                requests.cancel_waiting(request_id, act=act)
            return
    raise OakenError("CONFLICT", "this automation has already ended", field="automation_id")


# ---------------------------------------------------------------- the engine's side


def id_at(moment: datetime) -> uuid.UUID:
    """The smallest id made at `moment` (ids lead with their time, apps.core.ids.new_id)."""
    millis = int(moment.timestamp() * 1000) & ((1 << 48) - 1)
    return uuid.UUID(int=(millis << 80) | (0x7 << 76) | (0x2 << 62))


# how far behind the newest message the engine reads again: a sync that made its ids earlier may commit later
RESCAN_MARGIN = timedelta(minutes=10)


def waiting_messages(automation: Automation, *, now: datetime, limit: int) -> list[Message]:
    """The mailbox's mail stored since the automation began (less the margin), within its schedule, not yet
    decided, in the order it was stored."""
    start = automation.scanned_to
    if start is None:
        return []
    began = automation.decided_at or now
    floor = id_at(max(began, automation.starts_at) if automation.starts_at else began)
    since = max(floor, id_at(datetime.fromtimestamp(_time_of(start), tz=now.tzinfo) - RESCAN_MARGIN))
    rows = (
        Message.objects.for_tenant(automation.tenant)
        .filter(account=automation.account_id, pk__gte=since)
        .exclude(folder__kind__in=_NOT_ANSWERED)
        .exclude(
            pk__in=AutoReplyDecision.objects.for_tenant(automation.tenant)
            .filter(automation=automation)
            .values("message_key")
        )
        .select_related("folder")
        .defer("text_body", "html_body")
        .order_by("pk")
    )
    if automation.ends_at is not None:
        rows = rows.filter(pk__lt=id_at(automation.ends_at))
    return list(rows[:limit])


def _time_of(message_id: Any) -> float:
    return (int(message_id.int) >> 80) / 1000


def advance(automation: Automation, messages: list[Message]) -> None:
    if messages:
        newest = max(m.pk for m in messages)
        Automation.objects.for_tenant(automation.tenant).filter(pk=automation.pk).update(scanned_to=newest)


def own_addresses(account: MailAccount) -> set[str]:
    """The tenant's mailboxes' addresses (an automatic reply never answers itself or a sibling mailbox)."""
    found = MailAccount.objects.for_tenant(account.tenant).exclude(email_address="")
    return {a.casefold() for a in found.values_list("email_address", flat=True)}


def _addresses(values: Any) -> set[str]:
    return {str(v.get("address", "")).casefold() for v in values or () if isinstance(v, dict)}


def forward_mark(account_id: Any) -> str:
    """The mark an automatic forward from this mailbox carries (X-Oaken-Forwarded): mail carrying any Oaken mark
    is never forwarded again, so two mailboxes forwarding to each other cannot loop."""
    return salted_hmac("oaken.outbound.forward", str(account_id)).hexdigest()[:32]


def why_not(automation: Automation, message: Message, own: set[str]) -> str | None:
    """Why the automation does not act on this message, or None when it may (an automatic reply's window per
    address is settled when it is sent). An automatic reply follows RFC 3834: never to lists, robots, automatic
    mail, a Bcc copy or oneself. A forward takes all mail but what Oaken forwarded already and its destination's."""
    headers = {str(k).casefold(): str(v) for k, v in (message.headers or {}).items()}
    if automation.kind == AutomationKind.FORWARD:
        if "x-oaken-forwarded" in headers:
            return "forwarded_by_oaken"
        if message.sender_address.casefold() == automation.forward_to.casefold():
            return "from_destination"
        return None
    sender = message.sender_address.casefold()
    if not sender or "@" not in sender:
        return "no_sender"
    if "list-id" in headers or "list-unsubscribe" in headers:
        return "mailing_list"
    if headers.get("precedence", "").strip().casefold() in _BULK:
        return "bulk"
    if headers.get("auto-submitted", "no").strip().casefold().split(";")[0].strip() != "no":
        return "automatic"
    if _ROBOT.match(sender.partition("@")[0].partition("+")[0]):
        return "robot"
    if sender in own:
        return "own_address"
    address = automation.account.email_address.casefold()
    if address not in _addresses(message.to_addresses) | _addresses(message.cc_addresses):
        return "not_addressed"
    if automation.audience == "known" and sender not in known_correspondents(automation.account, [sender]):
        return "not_known"
    return None


def known_correspondents(account: MailAccount, addresses: Iterable[str]) -> set[str]:
    """Which of these addresses the mailbox has written to (in its Sent folder)."""
    wanted = list(dict.fromkeys(a.casefold() for a in addresses))
    if not wanted:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT DISTINCT lower(r->>'address')
            FROM mail_message m JOIN mail_folder f ON f.id = m.folder_id,
                 jsonb_array_elements(m.to_addresses || m.cc_addresses || m.bcc_addresses) r
            WHERE m.tenant_id = %s AND m.account_id = %s AND f.kind = 'sent'
              AND lower(r->>'address') = ANY(%s)
            """,
            [account.tenant_id, account.pk, wanted],
        )
        return {row[0] for row in cursor.fetchall()}


def would_forward(content: AutomationContent, *, since: datetime) -> tuple[int, list[Message]]:
    """How many of the mailbox's messages stored since then a forward would have sent, and the newest three."""
    rows = (
        Message.objects.for_tenant(content.account.tenant)
        .filter(account=content.account, pk__gte=id_at(since))
        .exclude(folder__kind__in=_NOT_ANSWERED)
        .exclude(headers__has_key="x-oaken-forwarded")
        .exclude(sender_address__iexact=content.forward_to)
    )
    return rows.count(), list(rows.only("id", "subject").order_by("-pk")[:3])


def record_skipped(automation: Automation, decisions: list[tuple[Message, str]], *, now: datetime) -> None:
    """The messages it will not answer, and why (once each: a decision already made stays)."""
    AutoReplyDecision.objects.bulk_create(
        [
            AutoReplyDecision(
                tenant_id=automation.tenant_id,
                automation=automation,
                message=m,
                message_key=m.pk,
                sender=m.sender_address[:320],
                outcome=reason,
                decided_at=now,
            )
            for m, reason in decisions
        ],
        ignore_conflicts=True,
    )


def act_on(automation: Automation, message: Message, *, act: Act) -> tuple[str, OutboundRequest | None]:
    """Answer or forward this message on the automation's standing authority, once: (outcome, the request when it
    sent one)."""
    if automation.state != AutomationState.ACTIVE:
        raise OakenError("CONFLICT", "this automation is not active", field="automation_id")
    if automation.content_hash != content_of(automation).digest():
        raise OakenError("CONFLICT", "this automation's content moved since it was approved", field="automation_id")
    reason = why_not(automation, message, own_addresses(automation.account))
    with transaction.atomic():
        decision, made = AutoReplyDecision.objects.for_tenant(act.tenant).get_or_create(
            tenant=act.tenant,
            automation=automation,
            message_key=message.pk,
            defaults={
                "message": message,
                "sender": message.sender_address[:320],
                "outcome": reason or REPLIED,
                "decided_at": act.now,
            },
        )
    if not made:
        return "already_decided", None
    if reason is None:
        reason = _once(automation, message, act=act)
    if reason is not None:
        AutoReplyDecision.objects.for_tenant(act.tenant).filter(pk=decision.pk).update(outcome=reason)
        act.touch(message.pk, None, {automation.kind: reason})
        return reason, None
    if automation.kind == AutomationKind.FORWARD:
        request = _forward(automation, message, act=act)
        AutoReplyDecision.objects.for_tenant(act.tenant).filter(pk=decision.pk).update(
            outcome=FORWARDED, request=request
        )
        return FORWARDED, request
    references = [*message.references, message.message_id] if message.message_id else list(message.references)
    content = requests.Content(
        account=automation.account,
        found=recipients([message.sender_address], [], []),
        subject=automation.subject or reply_subject(message.subject),
        body=automation.body,
        in_reply_to=message.message_id,
        references=tuple(r for r in references if r)[-20:],
    )
    request, _ = requests.create_request(
        content, act=act, operation="auto_reply", idempotency_key=f"{automation.pk}:{message.pk}", standing=automation
    )
    AutoReplyDecision.objects.for_tenant(act.tenant).filter(pk=decision.pk).update(request=request)
    return REPLIED, request


def _once(automation: Automation, message: Message, *, act: Act) -> str | None:
    """What was done already: a reply to this sender within the window; a forward of this same message to the same
    address (by any forward of the mailbox, or as another copy with the same Message-ID)."""
    if automation.kind == AutomationKind.FORWARD:
        # by any forward of this mailbox to the same address: the mailbox's own, a rule's, an earlier version's
        done = AutoReplyDecision.objects.for_tenant(act.tenant).filter(
            automation__account=automation.account_id,
            automation__forward_to__iexact=automation.forward_to,
            outcome=FORWARDED,
        )
        if done.filter(message_key=message.pk).exclude(automation=automation).exists():
            return "forwarded_already"
        if message.message_id and done.filter(message__message_id=message.message_id).exists():
            return "forwarded_already"
        return None
    if not _window_open(automation, message.sender_address.casefold(), now=act.now):
        return "replied_recently"
    return None


def _forward(automation: Automation, message: Message, *, act: Act) -> OutboundRequest:
    """The message to the destination, as a person's forward is made, its files with it when they fit the bounds
    (else a line says they stayed behind)."""
    files = forwardable_attachments(tenant=act.tenant, message=message)
    subject, body, attached = forwarded(tenant=act.tenant, message=message, note="", attachments=files)
    content = requests.Content(
        account=automation.account,
        found=recipients([automation.forward_to], [], []),
        subject=subject,
        body=body,
        attachments=attached,
    )
    try:
        content = requests.checked(content, bounds=bounds)
    except OakenError:
        left = f"[{len(attached)} attachment(s) of this message were too large to forward.]\n\n"
        content = requests.checked(replace(content, body=left + body, attachments=()), bounds=bounds)
    request, _ = requests.create_request(
        content, act=act, operation="forward", idempotency_key=f"{automation.pk}:{message.pk}", standing=automation
    )
    return request


def _window_open(automation: Automation, address: str, *, now: datetime) -> bool:
    """Take the address's window (one reply per `once_per_days`): True when this reply may go. Settled by one
    statement: two workers answering the same sender at once get one True between them."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO outbound_autoreplied AS seen (id, tenant_id, account_id, address, last_at)
            VALUES (%s, %s, %s, %s, %s)
            ON CONFLICT (account_id, address) DO UPDATE SET last_at = EXCLUDED.last_at
              WHERE seen.last_at <= EXCLUDED.last_at - %s * interval '1 day'
            RETURNING id
            """,
            [
                new_id(),
                automation.tenant_id,
                automation.account_id,
                address[:320],
                now,
                automation.once_per_days,
            ],
        )
        return cursor.fetchone() is not None


def history(automation: Automation, *, limit: int) -> list[AutoReplyDecision]:
    rows = AutoReplyDecision.objects.for_tenant(automation.tenant).filter(automation=automation)
    return list(rows.select_related("request").order_by("-decided_at")[:limit])


def counts(
    tenant: Any, automations: Iterable[Automation]
) -> tuple[dict[Any, int], dict[Any, int], dict[Any, list[str]]]:
    """How many replies each automation made, how many of them wait in `queued` for their budgets, and why they
    wait (each reason once: budget_spent, budget_unavailable)."""
    ids = [a.pk for a in automations]
    rows = OutboundRequest.objects.for_tenant(tenant).filter(automation__in=ids)
    made = dict(rows.values("automation_id").annotate(n=Count("id")).values_list("automation_id", "n"))
    waiting = rows.filter(state="queued").exclude(waiting="")
    held: dict[Any, int] = {}
    why: dict[Any, list[str]] = {}
    for automation_id, reason, n in (
        waiting.values("automation_id", "waiting").annotate(n=Count("id")).values_list("automation_id", "waiting", "n")
    ):
        held[automation_id] = held.get(automation_id, 0) + n
        why.setdefault(automation_id, []).append(reason)
    return made, held, {pk: sorted(reasons) for pk, reasons in why.items()}


def approval_url(automation_id: Any) -> str:
    return absolute_url(f"/automations?automation={automation_id}")
