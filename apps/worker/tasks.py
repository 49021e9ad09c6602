"""Celery tasks that enter through the internal door: thin interfaces over apps.worker.delivery."""

from __future__ import annotations

from celery import shared_task

from apps.outbound.models import OutboundRequest, State
from apps.outbound.requests import DELIVER_TASK
from apps.worker import delivery


@shared_task(name=DELIVER_TASK, acks_late=True)
def deliver_task(request_id: str) -> str:
    """Deliver one approved request; any number of copies of this task deliver it at most once."""
    return str(delivery.deliver(request_id))


@shared_task(name="outbound.release_scheduled", ignore_result=True)
def release_scheduled_task() -> int:
    return delivery.release_scheduled()


@shared_task(name="outbound.sweep_outbox", ignore_result=True)
def sweep_outbox_task() -> dict[str, int]:
    return delivery.sweep()


@shared_task(name="outbound.reconcile_unknown", ignore_result=True)
def reconcile_unknown_task() -> dict[str, int]:
    """Look for every request of unknown outcome in its account's Sent folder."""
    found = {"sent": 0, "unknown": 0}
    ids = OutboundRequest.objects.unscoped().filter(state=State.UNKNOWN).values_list("pk", flat=True)[:200]
    for request_id in list(ids):
        found["sent" if delivery.reconcile(request_id) == State.SENT else "unknown"] += 1
    return found
