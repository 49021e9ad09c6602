"""Writes of webhooks: creating one (its secret shown once), changing, disabling and enabling it, rotating its
secret, asking for a redelivery, and disabling it after a day of failures (the person told through the feed).

A new or re-enabled webhook starts at the feed's newest event: it is told what happens from then on, and what
came before is read from the feed (`list_events`), the durable truth. Secrets never leave this module but in the
answer of the call that made them.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, cast
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection, transaction

from apps.accounts.models import User
from apps.audit.log import append_internal_event
from apps.core import pinned
from apps.core.changes import Change
from apps.events import feed
from apps.events.models import Event
from apps.webhooks import signing
from apps.webhooks.models import DeliveryState, DisabledReason, Webhook, WebhookDelivery, WebhookState
from apps.workspaces.models import Tenant

URL_MAX_CHARS = 2000


def endpoint_problem(url: str) -> str:
    """Why Oaken would not POST to this URL ('' when it would): https, a host, no user or password, no fragment,
    printable ASCII only, and not a loopback or private address written out (a name is checked each time it is
    resolved: apps.core.pinned) unless WEBHOOK_ALLOW_PRIVATE_HOSTS is on. The words never quote the URL."""
    if len(url) > URL_MAX_CHARS or not url.isascii() or any(c <= " " or c == "\x7f" for c in url):
        return f"an https URL of printable characters, at most {URL_MAX_CHARS}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        return "not a URL Oaken can reach"
    if parts.scheme.lower() != "https" or not parts.hostname:
        return "deliveries go to an https URL with a host"
    if "@" in parts.netloc or parts.fragment:
        return "an https URL without a user, a password or a fragment"
    if not settings.WEBHOOK_ALLOW_PRIVATE_HOSTS and pinned.literal_private(parts.hostname):
        return "a loopback or private address is never delivered to"
    return ""


def endpoint_host(url: str) -> str:
    """Where a webhook delivers, as the audit and a confirmation name it: the host (the path and query may hold
    the consumer's own token)."""
    parts = urlsplit(url)
    return f"{parts.hostname}{f':{parts.port}' if parts.port not in (None, 443) else ''}"


def delete_webhook(webhook: Webhook) -> None:
    """The webhook goes, and its deliveries with it (the feed keeps what happened)."""
    Webhook.objects.for_tenant(webhook.tenant).filter(pk=webhook.pk).delete()


def create_webhook(
    *, tenant: Tenant, user: User, url: str, description: str, types: list[str], workspaces: list[str], now: datetime
) -> tuple[Webhook, str]:
    """The new webhook and its secret (the only time it is shown)."""
    secret = signing.new_secret()
    row = Webhook.objects.create(
        tenant=tenant,
        user=user,
        url=url,
        description=description,
        types=types,
        workspaces=workspaces,
        secrets={"current": secret},
        cursor=feed.head(tenant)[0],
        created_at=now,
        updated_at=now,
    )
    return row, secret


def update_webhook(webhook: Webhook, *, now: datetime, **fields: Any) -> None:
    """Change what is given (url, description, types, workspaces); pending deliveries are sent as they are."""
    for name, value in fields.items():
        setattr(webhook, name, value)
    webhook.updated_at = now
    webhook.save(update_fields=[*fields, "updated_at"])


def disable_webhook(webhook: Webhook, *, reason: str, now: datetime) -> None:
    """Stop delivering: what was pending is given up (the feed still has it)."""
    webhook.state = WebhookState.DISABLED
    webhook.disabled_reason = reason
    webhook.disabled_at = now
    webhook.next_attempt_at = None
    webhook.updated_at = now
    webhook.save(update_fields=["state", "disabled_reason", "disabled_at", "next_attempt_at", "updated_at"])
    _give_up_pending(webhook)


def _give_up_pending(webhook: Webhook) -> None:
    pending = WebhookDelivery.objects.for_tenant(webhook.tenant).filter(webhook=webhook, state=DeliveryState.PENDING)
    pending.update(state=DeliveryState.FAILED, next_attempt_at=None)


def enable_webhook(webhook: Webhook, *, now: datetime) -> None:
    """Deliver again, from the feed's newest event on (what happened meanwhile is read from the feed)."""
    webhook.state = WebhookState.ACTIVE
    webhook.disabled_reason = DisabledReason.NONE
    webhook.disabled_at = None
    webhook.failing_since = None
    webhook.next_attempt_at = None
    webhook.cursor = max(webhook.cursor, feed.head(webhook.tenant)[0])
    webhook.updated_at = now
    webhook.save(
        update_fields=[
            "state",
            "disabled_reason",
            "disabled_at",
            "failing_since",
            "next_attempt_at",
            "cursor",
            "updated_at",
        ]
    )


def rotate_secret(webhook: Webhook, *, now: datetime, grace: timedelta) -> str:
    """A new secret (returned: shown once); the one it replaces still signs, beside it, for `grace`."""
    secret = signing.new_secret()
    kept = {"current": secret}
    if grace > timedelta(0):
        kept["previous"] = _secrets(webhook)["current"]
    webhook.secrets = kept
    webhook.previous_until = now + grace if grace > timedelta(0) else None
    webhook.updated_at = now
    webhook.save(update_fields=["secrets", "previous_until", "updated_at"])
    return secret


def _secrets(webhook: Webhook) -> dict[str, str]:
    return cast(dict[str, str], webhook.secrets)


def secrets_in_force(webhook: Webhook, now: datetime) -> list[str]:
    """The secrets that sign a delivery made now: the current one, and the previous one during its grace."""
    held = _secrets(webhook)
    found = [held["current"]]
    previous = held.get("previous")
    if previous and webhook.previous_until is not None and now < webhook.previous_until:
        found.append(previous)
    return found


def redeliver(webhook: Webhook, event: Event, *, now: datetime) -> WebhookDelivery:
    """Send this event again (or for the first time), at the endpoint's next turn: before anything later in the
    feed, since the queue goes by seq. Its webhook-id is the event's, so a consumer that has it drops the copy."""
    row, made = WebhookDelivery.objects.for_tenant(webhook.tenant).get_or_create(
        tenant=webhook.tenant,
        webhook=webhook,
        event_id=event.pk,
        defaults={"seq": event.seq, "type": event.type, "next_attempt_at": now, "created_at": now},
    )
    if not made:
        row.state = DeliveryState.PENDING
        row.next_attempt_at = now
        row.save(update_fields=["state", "next_attempt_at"])
    Webhook.objects.for_tenant(webhook.tenant).filter(pk=webhook.pk).update(next_attempt_at=now)
    return row


_EMIT = "SELECT events_emit(ARRAY[%s]::uuid[], ARRAY[%s]::text[], ARRAY[NULL]::uuid[], ARRAY[NULL]::uuid[], " \
    "ARRAY[%s]::uuid[], ARRAY[%s::jsonb])"  # fmt: skip


def disable_failing(webhook: Webhook, *, now: datetime) -> None:
    """Disable a webhook whose endpoint failed for a day, and tell its person: the webhook's state (the console
    shows it), a `webhook.disabled` event in the feed numbered by the feed's own function from the tenant's chain
    head like every event, and an audit event; one transaction."""
    with transaction.atomic():
        # its row first, then the chain head (events_emit, the audit): the order every webhook change takes
        still = Webhook.objects.for_tenant(webhook.tenant).select_for_update().filter(pk=webhook.pk, state="active")
        if still.first() is None:
            return  # disabled or deleted meanwhile: nothing to tell
        disable_webhook(webhook, reason=DisabledReason.FAILING, now=now)
        with connection.cursor() as cursor:
            cursor.execute(
                _EMIT,
                [webhook.tenant_id, "webhook.disabled", webhook.pk, json.dumps({"reason": DisabledReason.FAILING})],
            )
        append_internal_event(
            "webhook_disabled",
            tenant=webhook.tenant,
            targets=[Change(str(webhook.pk), {"state": "active"}, {"state": "disabled", "reason": "failing"})],
        )
