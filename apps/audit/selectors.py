"""Reads of the audit log, always within one tenant: pages of events, one event, a stretch of the chain, and the
reads a page folds into one line per person and day."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from django.contrib.postgres.aggregates import ArrayAgg
from django.db.models import Count, Max, Min, Q
from django.db.models.functions import TruncDate

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


def event_by_seq(*, tenant: Tenant, seq: int, where: Q) -> AuditEvent | None:
    """The tenant's event at sequence number `seq`, when it matches `where` (who may see it)."""
    return AuditEvent.objects.for_tenant(tenant).filter(where, seq=seq).first()


def event_by_hash(*, tenant: Tenant, digest: str) -> AuditEvent | None:
    return AuditEvent.objects.for_tenant(tenant).filter(hash=digest).order_by("seq").first()


def visible_seqs(*, tenant: Tenant, where: Q, seqs: list[int]) -> set[int]:
    """Which of these sequence numbers name an event matching `where`."""
    return set(AuditEvent.objects.for_tenant(tenant).filter(where, seq__in=seqs).values_list("seq", flat=True))


@dataclass(frozen=True)
class ReadsRun:
    """One person's reads on one day (UTC) within a stretch of the chain: how many, when, which operations."""

    person_id: uuid.UUID | None
    count: int
    first_seq: int
    last_seq: int
    first_at: datetime
    last_at: datetime
    operations: list[str]


def reads_by_person_day(*, tenant: Tenant, where: Q, after: int, before: int | None) -> list[ReadsRun]:
    """The events matching `where` with sequence numbers after `after` and before `before` (None: no end), counted
    per person and UTC day, newest run first: what a folded line of the log says instead of listing them."""
    events = AuditEvent.objects.for_tenant(tenant).filter(where, seq__gt=after)
    if before is not None:
        events = events.filter(seq__lt=before)
    runs = (
        events.annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("person_id", "day")
        .annotate(
            count=Count("id"),
            first_seq=Min("seq"),
            last_seq=Max("seq"),
            first_at=Min("created_at"),
            last_at=Max("created_at"),
            operations=ArrayAgg("operation", distinct=True),
        )
        .order_by("-last_seq")
    )
    return [
        ReadsRun(
            person_id=r["person_id"],
            count=r["count"],
            first_seq=r["first_seq"],
            last_seq=r["last_seq"],
            first_at=r["first_at"],
            last_at=r["last_at"],
            operations=sorted(r["operations"]),
        )
        for r in runs
    ]


def changes_newest_first(*, tenant: Tenant, where: Q, operations: list[str], limit: int) -> list[AuditEvent]:
    """The tenant's successful calls of these (changing) operations matching `where`, newest first, at most `limit`."""
    rows = AuditEvent.objects.for_tenant(tenant).filter(where, outcome="ok", operation__in=operations)
    return list(rows.order_by("-seq")[:limit])


def changes_after(*, tenant: Tenant, seq: int, operations: list[str], limit: int) -> list[AuditEvent]:
    """The tenant's successful calls of these operations after sequence number `seq`, oldest first, at most `limit`:
    who changed a thing since an event."""
    rows = AuditEvent.objects.for_tenant(tenant).filter(seq__gt=seq, outcome="ok", operation__in=operations)
    return list(rows.order_by("seq")[:limit])
