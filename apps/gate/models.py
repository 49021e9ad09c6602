"""What the gate keeps: confirmation tokens and idempotency records."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.utils import timezone

from apps.core.tenancy import TenantOwned


class ConfirmationToken(TenantOwned):
    """A single-use token for one proposal: stored only as a hash, bound to caller, operation and input."""

    caller_key = models.CharField(max_length=300)
    operation = models.CharField(max_length=200)
    input_digest = models.CharField(max_length=64)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    # set by any attempt to use it, and when a newer token pushes it past the per-caller cap
    used_at = models.DateTimeField(null=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["tenant", "caller_key", "created_at"], name="token_by_caller", condition=Q(used_at__isnull=True)
            ),
        ]


class IdempotencyRecord(TenantOwned):
    """The first successful response to a key; replayed for retries with the same input."""

    caller_key = models.CharField(max_length=300)
    operation = models.CharField(max_length=200)
    key = models.CharField(max_length=255)
    input_digest = models.CharField(max_length=64)
    response = models.JSONField()
    # the workspaces the first call reached (Caller.workspace_filter; NULL: every one): a repeat by a caller who
    # reaches less now is refused rather than answered with what it may no longer see
    reach = ArrayField(models.CharField(max_length=100), null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "caller_key", "operation", "key"], name="idempotency_key_once"),
        ]
        indexes = [models.Index(fields=["created_at"], name="idempotency_by_age")]
