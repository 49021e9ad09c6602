"""Idempotency keys are kept at least 24 hours, then purged; spent tokens are purged after a day."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from apps.gate.models import ConfirmationToken, IdempotencyRecord
from apps.gate.tasks import purge_expired
from config.celery import app
from tests.conftest import Person


def _record(p: Person, key: str, age: timedelta) -> None:
    IdempotencyRecord.objects.create(
        tenant=p.tenant,
        caller_key="c",
        operation="create_label",
        key=key,
        input_digest="0" * 64,
        response={},
        created_at=timezone.now() - age,
    )


def test_records_younger_than_the_retention_stay(alice: Person, mallory: Person, settings) -> None:
    assert settings.OPERATIONS["IDEMPOTENCY_RETENTION_HOURS"] >= 24
    _record(alice, "fresh", timedelta(hours=23))
    _record(alice, "old", timedelta(hours=49))
    _record(mallory, "theirs-old", timedelta(hours=49))
    _record(mallory, "theirs-fresh", timedelta(hours=1))
    ConfirmationToken.objects.create(
        tenant=alice.tenant,
        caller_key="c",
        operation="x",
        input_digest="0" * 64,
        token_hash="a" * 64,
        expires_at=timezone.now() - timedelta(days=2),
    )
    assert purge_expired() == {"idempotency_records": 2, "confirmation_tokens": 1}
    assert list(IdempotencyRecord.objects.for_tenant(alice.tenant).values_list("key", flat=True)) == ["fresh"]
    assert list(IdempotencyRecord.objects.for_tenant(mallory.tenant).values_list("key", flat=True)) == ["theirs-fresh"]


def test_beat_runs_the_purge() -> None:
    schedule = app.conf.beat_schedule
    assert any(entry["task"] == "gate.purge_expired" for entry in schedule.values())
