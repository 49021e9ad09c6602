"""Outbound housekeeping as Celery tasks; delivery itself runs through the gate, from apps.worker.tasks."""

from __future__ import annotations

from celery import shared_task

from apps.outbound import rollup


@shared_task(name="outbound.roll_up_budgets", ignore_result=True)
def roll_up_budgets_task() -> dict[str, object]:
    """Copy the hourly send budgets from Redis into PostgreSQL for the console (harmless twice or at once)."""
    return rollup.roll_up()
