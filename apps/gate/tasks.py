"""Housekeeping for the gate, run by Celery beat."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from apps.core.bounds import bounds
from apps.gate.models import ConfirmationToken, IdempotencyRecord


@shared_task(name="gate.purge_expired", ignore_result=True)
def purge_expired() -> dict[str, int]:
    """Forget idempotency keys past their retention and confirmation tokens a day past their expiry."""
    now = timezone.now()
    keep_keys = timedelta(hours=bounds.IDEMPOTENCY_RETENTION_HOURS)
    keys, _ = IdempotencyRecord.objects.unscoped().filter(created_at__lt=now - keep_keys).delete()
    tokens, _ = ConfirmationToken.objects.unscoped().filter(expires_at__lt=now - timedelta(days=1)).delete()
    return {"idempotency_records": keys, "confirmation_tokens": tokens}
