"""The event feed (issue 41, SPEC §22): a per-tenant, append-only log of what happened, ids only, never mail text.

Events are written by PostgreSQL itself (migration 0002's triggers on the tables whose changes they report), in the
statement and so in the transaction of the change: an event exists exactly when its change committed, whatever
wrote it (a gate call, a sync, an import, the delivery worker). Each takes the next number of its tenant's feed
(`seq`, gapless and increasing) from the tenant's audit chain head (`audit_chainhead.event_seq`), under that row's
lock, which every writer of the tenant holds to its commit: events therefore commit in the order of their numbers,
and a reader that has seen number N never later sees a smaller one appear. Sharing the audit's lock (rather than a
counter row of its own) leaves one lock per tenant, so no two writers can take two locks in opposite orders.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from apps.core.tenancy import TenantOwned


class Event(TenantOwned):
    seq = models.BigIntegerField()
    at = models.DateTimeField(default=timezone.now)
    type = models.CharField(max_length=40)
    # what it concerns, by id: null when it concerns the whole tenant
    workspace_id = models.UUIDField(null=True, blank=True)
    account_id = models.UUIDField(null=True, blank=True)
    # the message, draft, request or rule application it reports
    subject_id = models.UUIDField(null=True, blank=True)
    # more ids and fixed words (a request's state, which fields of a message changed): never text from mail
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "seq"], name="event_seq_unique_in_tenant")]
        indexes = [models.Index(fields=["at"], name="event_by_time")]

    def __str__(self) -> str:
        return f"{self.type} #{self.seq}"
