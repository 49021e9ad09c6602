"""Webhooks (issue 41, SPEC §22): a person's https endpoint told of the feed's events, signed (Standard Webhooks).

A webhook is a hint: the consumer it wakes reads what it needs through the gate, and recovers anything it missed
from the feed (`list_events`), which stays the durable truth. Each endpoint has a cursor on its tenant's feed and a
delivery row per (webhook, event), sent one at a time in `seq` order (apps.webhooks.delivery): a failing head waits
with its followers, retried with backoff, until the endpoint answers or a day of failures disables it.
"""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from apps.core.encryption import EncryptedJSONField
from apps.core.tenancy import TenantOwned


class WebhookState(models.TextChoices):
    ACTIVE = "active", "Active"
    DISABLED = "disabled", "Disabled"


class DisabledReason(models.TextChoices):
    NONE = "", "Not disabled"
    # the endpoint answered no delivery for WEBHOOK_FAILING_HOURS
    FAILING = "failing", "Failing for a day"
    BY_PERSON = "by_person", "Disabled by a person"


class Webhook(TenantOwned):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    url = models.CharField(max_length=2000)
    description = models.CharField(max_length=200, blank=True, default="")
    # exact types, or families ending in '.', as list_events takes them; empty: every type
    types = ArrayField(models.CharField(max_length=40), default=list, blank=True)
    # workspace names; empty: every workspace the person reaches (checked again at each delivery)
    workspaces = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    # {"current": "whsec_…", "previous": "whsec_…"}: encrypted at rest, shown once, never audited or logged;
    # "previous" signs too until previous_until (a rotation's grace period)
    secrets = EncryptedJSONField()
    previous_until = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=10, choices=WebhookState.choices, default=WebhookState.ACTIVE)
    disabled_reason = models.CharField(max_length=20, choices=DisabledReason.choices, blank=True, default="")
    disabled_at = models.DateTimeField(null=True, blank=True)
    # the feed's seq up to which events were looked at (delivery rows made for the ones it carries)
    cursor = models.BigIntegerField(default=0)
    # since when its deliveries fail without a success between (null: the last one succeeded)
    failing_since = models.DateTimeField(null=True, blank=True)
    # the head delivery's next try (null: as soon as there is something to send)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    # one worker's claim on the endpoint (concurrency one): whoever holds an unexpired claim alone sends to it
    claim = models.UUIDField(null=True, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    owner_field: ClassVar[str] = "user"

    class Meta:
        indexes = [models.Index(fields=["state", "next_attempt_at"], name="webhook_due")]

    def __str__(self) -> str:
        return f"webhook {self.pk}"


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    # given up: the endpoint was disabled with it still pending
    FAILED = "failed", "Failed"
    # not sent: out of the person's reach when its turn came, or gone from the feed
    SKIPPED = "skipped", "Skipped"


class WebhookDelivery(TenantOwned):
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    # the feed's event (no foreign key: the feed's retention removes events by itself)
    event_id = models.UUIDField()
    seq = models.BigIntegerField()
    type = models.CharField(max_length=40)
    state = models.CharField(max_length=10, choices=DeliveryState.choices, default=DeliveryState.PENDING)
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    # the endpoint's HTTP status (null: no answer), and why it failed in a fixed word ('' when it did not)
    last_status = models.IntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=40, blank=True, default="")
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["webhook", "event_id"], name="delivery_once_per_event")]
        indexes = [
            models.Index(fields=["webhook", "state", "seq"], name="delivery_queue"),
            models.Index(fields=["created_at"], name="delivery_by_time"),
        ]

    def __str__(self) -> str:
        return f"{self.type} #{self.seq} → {self.webhook_id}"
