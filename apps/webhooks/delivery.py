"""Delivering the feed to webhooks: in order, one at a time per endpoint, retried, signed (Standard Webhooks).

The protocol (the beat's `webhooks.deliver`, any number of workers at once):
1. due: an active webhook that no one holds, whose backoff is over, with events past its cursor or deliveries
   pending;
2. claim: its row taken with SELECT … FOR UPDATE SKIP LOCKED and a claim written (a token, until a deadline) and
   committed: of any number of workers only one holds an endpoint, and no transaction stays open while the network
   is waited on. The claim is renewed before each POST and released at the end; a worker that dies leaves a claim
   that lapses, and the next worker goes on (the endpoint may then see a delivery twice: it deduplicates by
   webhook-id);
3. fill: the feed after the webhook's cursor, filtered by its types and by the workspaces its person still reaches
   among the ones it names, becomes delivery rows (one per (webhook, event)), a batch ahead at most;
4. send the pending rows in seq order; before each, the event's workspace is checked against the person's reach
   again (skipped if it fell out). 2xx is delivered; anything else, or no answer in WEBHOOK_TIMEOUT_SECONDS, is a
   failure: the row and the endpoint wait base·2^(n-1) seconds (capped, with jitter) and nothing later is sent
   before it, so an endpoint sees its events in order. An endpoint failing WEBHOOK_FAILING_HOURS without a success
   is disabled, and its person told (apps.webhooks.services.disable_failing).
`now` may be given (tests drive time with it); the signature's timestamp is always the wall clock of the POST,
since a consumer checks it against its own clock. Nothing of a secret, a URL or an answer is logged: fixed words.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from apps.core import pinned
from apps.core.bounds import bounds
from apps.core.errors import OakenError
from apps.events import feed
from apps.events.models import Event
from apps.webhooks import signing
from apps.webhooks.models import DeliveryState, Webhook, WebhookDelivery, WebhookState
from apps.webhooks.selectors import carries, reachable_workspaces
from apps.webhooks.services import disable_failing, secrets_in_force
from apps.workspaces.models import Workspace

log = logging.getLogger("oaken.webhooks")

# why a delivery failed, in a fixed word (never the server's words)
_NOT_CONNECTED = {
    "unresolved": "host_unresolved",
    "private": "host_private",
    "unreachable": "unreachable",
    "tls": "tls_failed",
}
ANSWER_MAX_BYTES = 4096


@dataclass(frozen=True)
class Answer:
    status: int | None
    error: str  # "" for a 2xx

    @property
    def ok(self) -> bool:
        return not self.error


def post(url: str, body: bytes, headers: dict[str, str], *, timeout: float) -> Answer:
    """POST to the endpoint over apps.core.pinned's connection (a checked public address unless
    WEBHOOK_ALLOW_PRIVATE_HOSTS; TLS verified, against WEBHOOK_CA_FILE alone when set); `timeout` bounds connecting,
    the handshake, and the whole exchange after. A redirect is a failure, never followed."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        pinned_to = pinned.open_https(
            parts.hostname or "",
            parts.port or 443,
            timeout=timeout,
            allow_private=settings.WEBHOOK_ALLOW_PRIVATE_HOSTS,
            ca_file=settings.WEBHOOK_CA_FILE,
        )
    except pinned.Unreachable as exc:
        return Answer(None, _NOT_CONNECTED[exc.reason])
    try:
        pinned_to.answer_within(timeout)
        pinned_to.request("POST", target, body=body, headers=headers)
        response = pinned_to.getresponse()
        status = response.status
        response.read(ANSWER_MAX_BYTES)  # never kept
    except TimeoutError:
        return Answer(None, "timeout")
    except (OSError, http.client.HTTPException):
        return Answer(None, "answer_lost")
    finally:
        pinned_to.close()
    return Answer(status, "" if 200 <= status < 300 else "status")


def payload(event: Event, workspace: str | None) -> dict[str, Any]:
    """The body: Standard Webhooks' {type, timestamp, data}, `data` the event as list_events gives it (ids only,
    with its feed `seq`), so a consumer handles a delivery and a page of the feed alike."""
    return {
        "type": event.type,
        "timestamp": event.at.isoformat().replace("+00:00", "Z"),
        "data": {
            "id": str(event.pk),
            "seq": event.seq,
            "at": event.at.isoformat().replace("+00:00", "Z"),
            "type": event.type,
            "workspace": workspace,
            "account_id": str(event.account_id) if event.account_id is not None else None,
            "subject_id": str(event.subject_id) if event.subject_id is not None else None,
            "data": event.data,
        },
    }


def backoff(attempts: int) -> timedelta:
    """The wait after the n-th failed attempt: base·2^(n-1) up to the cap, between half and all of it (jitter, so
    endpoints failing together are not all tried again at one instant)."""
    base, cap = bounds.WEBHOOK_RETRY_BASE_SECONDS, bounds.WEBHOOK_RETRY_MAX_SECONDS
    full = min(cap, base * 2 ** min(attempts - 1, 30))
    return timedelta(seconds=full * (0.5 + random.random() / 2))  # noqa: S311 (jitter, not a secret)


def _lease() -> timedelta:
    return timedelta(seconds=2 * bounds.WEBHOOK_TIMEOUT_SECONDS + 30)


_DUE = f"""
SELECT w.id FROM {Webhook._meta.db_table} w LEFT JOIN audit_chainhead h ON h.tenant_id = w.tenant_id
WHERE w.state = %(active)s AND (w.claimed_until IS NULL OR w.claimed_until <= %(now)s)
  AND (w.next_attempt_at IS NULL OR w.next_attempt_at <= %(now)s)
  AND (coalesce(h.event_seq, 0) > w.cursor OR EXISTS (
      SELECT 1 FROM {WebhookDelivery._meta.db_table} d WHERE d.webhook_id = w.id AND d.state = %(pending)s))
ORDER BY coalesce(w.next_attempt_at, w.created_at) LIMIT %(limit)s
"""  # noqa: S608 (the models' own table names; every value is a parameter)


def due(now: datetime, limit: int = 100) -> list[uuid.UUID]:
    """Webhooks with something to send now, every tenant's (a system job)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _DUE, {"active": WebhookState.ACTIVE, "now": now, "pending": DeliveryState.PENDING, "limit": limit}
        )
        return [row[0] for row in cursor.fetchall()]


@dataclass
class Claim:
    webhook: Webhook
    token: uuid.UUID


def claim(webhook_id: uuid.UUID, now: datetime) -> Claim | None:
    """Hold the endpoint (concurrency one), or None when another worker holds it or it is no longer active."""
    token = uuid.uuid4()
    with transaction.atomic():
        row = (
            Webhook.objects.unscoped()
            .select_for_update(skip_locked=True, of=("self",))
            .select_related("tenant")
            .filter(pk=webhook_id, state=WebhookState.ACTIVE)
            .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lte=now))
            .first()
        )
        if row is None:
            return None
        row.claim, row.claimed_until = token, now + _lease()
        row.save(update_fields=["claim", "claimed_until"])
    return Claim(row, token)


def _holds(held: Claim, now: datetime) -> bool:
    """Renew the claim; False when it lapsed and another worker took the endpoint (or it was disabled)."""
    renewed = (
        Webhook.objects.for_tenant(held.webhook.tenant)
        .filter(pk=held.webhook.pk, claim=held.token, state=WebhookState.ACTIVE)
        .update(claimed_until=now + _lease())
    )
    return renewed == 1


def release(held: Claim) -> None:
    Webhook.objects.for_tenant(held.webhook.tenant).filter(pk=held.webhook.pk, claim=held.token).update(
        claim=None, claimed_until=None
    )


def fill(webhook: Webhook, workspaces: set[uuid.UUID], now: datetime) -> int:
    """Delivery rows for the events past the cursor that the webhook carries, up to a batch ahead of what is
    pending; the cursor moves past what was looked at. How many rows were made."""
    tenant = webhook.tenant
    pending = WebhookDelivery.objects.for_tenant(tenant).filter(webhook=webhook, state=DeliveryState.PENDING)
    room = bounds.WEBHOOK_CLAIM_BATCH - pending.count()
    if room <= 0:
        return 0
    try:
        page = feed.read(
            tenant,
            after=webhook.cursor,
            workspace_ids=workspaces,
            account_id=None,
            types=webhook.types,
            limit=room,
            hidden=feed.PERSONS_ONLY,
        )
    except OakenError as error:
        if error.code != "CURSOR_EXPIRED":
            raise
        # retention removed events this endpoint never got to (it was away for longer than the feed keeps them):
        # go on from the oldest kept; the consumer recovers from the feed, which says what it no longer has
        webhook.cursor = feed.head(tenant)[1]
        Webhook.objects.for_tenant(tenant).filter(pk=webhook.pk).update(cursor=webhook.cursor)
        return 0
    rows = [
        WebhookDelivery(
            tenant=tenant, webhook=webhook, event_id=e.pk, seq=e.seq, type=e.type, next_attempt_at=now, created_at=now
        )
        for e in page.events
    ]
    with transaction.atomic():
        WebhookDelivery.objects.for_tenant(tenant).bulk_create(rows, ignore_conflicts=True)
        Webhook.objects.for_tenant(tenant).filter(pk=webhook.pk).update(cursor=page.cursor)
    webhook.cursor = page.cursor
    return len(rows)


def _headers(webhook: Webhook, event_id: str, body: str, now: datetime) -> dict[str, str]:
    timestamp = int(time.time())
    return {
        "Content-Type": "application/json",
        "User-Agent": "Oaken webhooks",
        "webhook-id": event_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signing.signature(
            secrets_in_force(webhook, now), msg_id=event_id, timestamp=timestamp, body=body
        ),
        "Connection": "close",
    }


def _delivered(delivery: WebhookDelivery, answer: Answer, now: datetime) -> None:
    tenant = delivery.webhook.tenant
    with transaction.atomic():
        WebhookDelivery.objects.for_tenant(tenant).filter(pk=delivery.pk).update(
            state=DeliveryState.DELIVERED,
            attempts=F("attempts") + 1,
            last_attempt_at=now,
            last_status=answer.status,
            last_error="",
            next_attempt_at=None,
            delivered_at=now,
        )
        Webhook.objects.for_tenant(tenant).filter(pk=delivery.webhook_id).update(
            failing_since=None, next_attempt_at=None, last_success_at=now
        )


def _failed(webhook: Webhook, delivery: WebhookDelivery, answer: Answer, now: datetime) -> None:
    """Try again after the backoff, the endpoint waiting with it; disable an endpoint failing for a day."""
    tenant = webhook.tenant
    retry_at = now + backoff(delivery.attempts + 1)
    failing_since = webhook.failing_since or now
    with transaction.atomic():
        WebhookDelivery.objects.for_tenant(tenant).filter(pk=delivery.pk).update(
            attempts=F("attempts") + 1,
            last_attempt_at=now,
            last_status=answer.status,
            last_error=answer.error,
            next_attempt_at=retry_at,
        )
        Webhook.objects.for_tenant(tenant).filter(pk=webhook.pk).update(
            failing_since=failing_since, next_attempt_at=retry_at
        )
    webhook.failing_since, webhook.next_attempt_at = failing_since, retry_at
    if now - failing_since >= timedelta(hours=bounds.WEBHOOK_FAILING_HOURS):
        disable_failing(webhook, now=now)


def _skip(delivery: WebhookDelivery, now: datetime) -> None:
    WebhookDelivery.objects.for_tenant(delivery.webhook.tenant).filter(pk=delivery.pk).update(
        state=DeliveryState.SKIPPED, next_attempt_at=None, last_attempt_at=now
    )


def deliver_claimed(held: Claim, clock: Callable[[], datetime]) -> dict[str, int]:
    """Send what the held endpoint is due, in seq order, until its queue is empty, a failure makes it wait, or a
    batch is sent. Counts of delivered, failed and skipped."""
    webhook = held.webhook
    tenant = webhook.tenant
    counts = {"delivered": 0, "failed": 0, "skipped": 0}
    workspaces = reachable_workspaces(webhook)
    fill(webhook, workspaces, clock())
    names = dict(Workspace.objects.for_tenant(tenant).values_list("pk", "name"))
    for _ in range(bounds.WEBHOOK_CLAIM_BATCH):
        now = clock()
        head = (
            WebhookDelivery.objects.for_tenant(tenant)
            .filter(webhook=webhook, state=DeliveryState.PENDING)
            .select_related("webhook__tenant")
            .order_by("seq")
            .first()
        )
        if head is None:
            if fill(webhook, workspaces, now) == 0:
                break
            continue
        if head.next_attempt_at is not None and head.next_attempt_at > now:
            Webhook.objects.for_tenant(tenant).filter(pk=webhook.pk).update(next_attempt_at=head.next_attempt_at)
            break
        event = Event.objects.for_tenant(tenant).filter(pk=head.event_id).first()
        # the person's reach read again at its turn: a workspace they lost meanwhile is never delivered
        workspaces = reachable_workspaces(webhook)
        if event is None or not carries(webhook, event, workspaces):
            _skip(head, now)
            counts["skipped"] += 1
            continue
        if not _holds(held, now):
            break
        body = json.dumps(payload(event, names.get(event.workspace_id)), separators=(",", ":"))
        answer = post(
            webhook.url,
            body.encode(),
            _headers(webhook, str(event.pk), body, now),
            timeout=bounds.WEBHOOK_TIMEOUT_SECONDS,
        )
        now = clock()
        if answer.ok:
            _delivered(head, answer, now)
            counts["delivered"] += 1
            continue
        log.info("webhook %s: delivery of event #%s failed: %s", webhook.pk, event.seq, answer.error)
        counts["failed"] += 1
        _failed(webhook, head, answer, now)
        break
    return counts


def run(now: datetime | None = None, *, limit: int = 100) -> dict[str, int]:
    """One pass of the beat: every due endpoint this worker can claim, sent what it is due. `now` fixes the clock
    for the pass (tests); otherwise each step reads the wall clock."""
    clock: Callable[[], datetime] = (lambda: now) if now is not None else timezone.now
    totals = {"delivered": 0, "failed": 0, "skipped": 0}
    for webhook_id in due(clock(), limit):
        held = claim(webhook_id, clock())
        if held is None:
            continue
        try:
            for key, n in deliver_claimed(held, clock).items():
                totals[key] += n
        finally:
            release(held)
    return totals


def prune(*, before: datetime) -> int:
    """Forget delivery rows older than `before` that are settled (every tenant's); how many."""
    settled = WebhookDelivery.objects.unscoped().filter(created_at__lt=before).exclude(state=DeliveryState.PENDING)
    return int(settled.delete()[0])
