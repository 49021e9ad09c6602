"""The audit log: one hash-chained, append-only sequence of events per tenant, and its head."""

from __future__ import annotations

from typing import Any, NoReturn

from django.db import models

from apps.core.kinds import CredentialKind, Door, Principal
from apps.core.tenancy import TenantManager, TenantQuerySet

ZERO_HASH = "0" * 64


class AuditImmutableError(RuntimeError):
    """Audit rows are written once, by apps.audit.log.append_event, and never changed or removed."""


def _refuse_change(what: str) -> NoReturn:
    raise AuditImmutableError(f"audit events are append-only: {what} is refused")


class AuditEventQuerySet(TenantQuerySet["AuditEvent"]):
    """Reads only: bulk writes would bypass the chain, so they are refused like save() and delete()."""

    def update(self, **kwargs: Any) -> int:
        _refuse_change("update")

    def delete(self) -> tuple[int, dict[str, int]]:
        _refuse_change("delete")

    def bulk_update(self, objs: Any, fields: Any, batch_size: int | None = None) -> int:
        _refuse_change("bulk_update")

    def bulk_create(self, objs: Any, *args: Any, **kwargs: Any) -> list[AuditEvent]:
        _refuse_change("bulk_create (append through apps.audit.log.append_event)")


class AuditEventManager(TenantManager):
    _queryset_class = AuditEventQuerySet


class AuditEvent(models.Model):
    """One gate call: who, through which door, what, how it ended, what it touched. Never mail text."""

    id = models.BigAutoField(primary_key=True)
    # The (tenant, seq) constraint's index serves every per-tenant read, so no index of its own.
    tenant = models.ForeignKey("workspaces.Tenant", on_delete=models.PROTECT, related_name="+", db_index=False)
    seq = models.PositiveBigIntegerField()
    created_at = models.DateTimeField()
    principal = models.CharField(max_length=10, choices=Principal.choices)
    person_id = models.UUIDField(null=True, blank=True)
    credential_id = models.CharField(max_length=100, blank=True)
    credential_kind = models.CharField(max_length=10, choices=CredentialKind.choices, blank=True)
    door = models.CharField(max_length=10, choices=Door.choices)
    operation = models.CharField(max_length=200)
    outcome = models.CharField(max_length=50)  # "ok" or an error code
    targets = models.JSONField(default=list)  # [{"id": str, "before": any, "after": any}]
    input_digest = models.CharField(max_length=64, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    objects = AuditEventManager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "seq"], name="audit_event_seq_unique_in_tenant"),
        ]
        # the log as people read it, newest first: a MEMBER's own events, and what one key or connection did
        # (without them a rare credential's page would walk the tenant's whole chain)
        indexes = [
            models.Index(
                fields=["tenant", "person_id", "-seq"],
                name="audit_event_person_seq",
                condition=models.Q(person_id__isnull=False),
            ),
            models.Index(
                fields=["tenant", "credential_id", "-seq"],
                name="audit_event_credential_seq",
                condition=~models.Q(credential_id=""),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.operation} #{self.seq} ({self.outcome})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self._state.adding:
            _refuse_change("save() of a new event (append through apps.audit.log.append_event)")
        _refuse_change(f"changing event {self.pk}")

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        _refuse_change(f"deleting event {self.pk}")


class ChainHead(models.Model):
    """The last event of a tenant's chain; its row lock is what makes appends linear."""

    tenant = models.OneToOneField("workspaces.Tenant", on_delete=models.PROTECT, primary_key=True, related_name="+")
    seq = models.PositiveBigIntegerField(default=0)
    hash = models.CharField(max_length=64, default=ZERO_HASH)
    # the tenant's event feed (apps.events): the last number given out, and the highest one retention removed
    # (a cursor below it has missed events). Kept here so the feed's writers and the audit's share one lock.
    event_seq = models.BigIntegerField(default=0, db_default=0)
    events_pruned = models.BigIntegerField(default=0, db_default=0)

    def __str__(self) -> str:
        return f"head #{self.seq}"
