"""Outbound mail as Celery tasks: thin interfaces over apps.outbound.delivery (the internal door)."""

from __future__ import annotations

from celery import shared_task

from apps.outbound import delivery, rollup
from apps.outbound.models import OutboundRequest, State


@shared_task(name="outbound.deliver", acks_late=True)
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


@shared_task(name="outbound.roll_up_budgets", ignore_result=True)
def roll_up_budgets_task() -> dict[str, object]:
    """Copy the hourly send budgets from Redis into PostgreSQL for the console (harmless twice or at once)."""
    return rollup.roll_up()
