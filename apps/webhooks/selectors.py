"""Reads of webhooks, always within a tenant and as one person sees them; and what a webhook may carry now.

Another tenant's id, or one hidden from the actor, is NOT_FOUND like a missing one. A webhook belongs to its person:
an ADMIN sees the tenant's (to list them, read their deliveries, delete them), but only its person changes one,
rotates its secret or asks for a redelivery (the answer of a rotation is the secret itself).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection

from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.core.tenancy import TenantQuerySet
from apps.events.models import Event
from apps.webhooks.models import Webhook
from apps.workspaces.models import Membership, Workspace


def visible_webhooks(*, actor: Caller) -> TenantQuerySet[Webhook]:
    return Webhook.objects.for_tenant(actor.tenant).visible_to(actor)


def access_webhook_by_id(webhook_id: str, *, actor: Caller, own: bool = False) -> Webhook:
    """The webhook with this id the actor sees (`own`: only one of the actor's own)."""
    rows = visible_webhooks(actor=actor)
    if own:
        rows = rows.filter(user=actor.user)
    row = rows.filter(pk=parse_id(webhook_id, "webhook_id")).first()
    if row is None:
        raise OakenError.not_found("webhook_id")
    return row


def reachable_workspaces(webhook: Webhook) -> set[uuid.UUID]:
    """The workspaces (ids) whose events the webhook may carry now: those it names (all when it names none) that its
    person still reaches; none once they left the tenant. Read at each delivery, so a person who lost a workspace
    gets nothing more of it. A name that is no workspace matches nothing (as an API key's, SPEC §8)."""
    membership = Membership.objects.for_tenant(webhook.tenant).filter(user_id=webhook.user_id).first()
    if membership is None:
        return set()
    reached = membership.workspace_names()
    named = set(webhook.workspaces)
    return {
        pk
        for pk, name in Workspace.objects.for_tenant(webhook.tenant).values_list("pk", "name")
        if (reached is None or name in reached) and (not named or name in named)
    }


def carries(webhook: Webhook, event: Event, workspaces: Collection[uuid.UUID]) -> bool:
    """Whether the webhook carries this event (of its tenant): a type it asks for, a workspace in `workspaces`
    (reachable_workspaces). Events of the tenant as a whole (no workspace) are read from the feed, not delivered."""
    if event.workspace_id is None or event.workspace_id not in workspaces:
        return False
    return not webhook.types or any(
        event.type.startswith(kind) if kind.endswith(".") else event.type == kind for kind in webhook.types
    )


def access_event_for(webhook: Webhook, event_id: str) -> Event:
    """One of the feed's events this webhook carries (a redelivery's); NOT_FOUND for any other."""
    event = Event.objects.for_tenant(webhook.tenant).filter(pk=parse_id(event_id, "event_id")).first()
    if event is None or not carries(webhook, event, reachable_workspaces(webhook)):
        raise OakenError.not_found("event_id")
    return event
