"""Celery tasks for summaries: thin interfaces over apps.summaries.services."""

from __future__ import annotations

from celery import Task, shared_task

from apps.summaries import services


@shared_task(name=services.SUMMARIZE_TASK, bind=True, acks_late=True)
def summarize_task(self: Task, summary_id: str) -> str:
    """Write one claimed summary (done, or failed with a fixed reason); a copy whose claim is gone does nothing."""
    return services.run(summary_id, task_id=self.request.id)
