"""Reads of the audit log, always within one tenant: pages of events, one event, a stretch of the chain."""

from __future__ import annotations

from django.db.models import Q

from apps.audit.models import AuditEvent
from apps.workspaces.models import Tenant


def events_page(*, tenant: Tenant, where: Q, before: int | None, limit: int) -> list[AuditEvent]:
    """The tenant's events matching `where`, newest first, before the sequence number `before` when given."""
    events = AuditEvent.objects.for_tenant(tenant).filter(where)
    if before is not None:
        events = events.filter(seq__lt=before)
    return list(events.order_by("-seq")[:limit])


def event_by_id(*, tenant: Tenant, event_id: int) -> AuditEvent | None:
    return AuditEvent.objects.for_tenant(tenant).filter(pk=event_id).first()


def events_between(*, tenant: Tenant, after: int, upto: int, limit: int) -> list[AuditEvent]:
    """The tenant's events after sequence number `after` up to `upto`, oldest first, at most `limit`."""
    return list(AuditEvent.objects.for_tenant(tenant).filter(seq__gt=after, seq__lte=upto).order_by("seq")[:limit])
