"""Celery tasks for summaries: thin interfaces over apps.summaries.services."""

from __future__ import annotations

from celery import Task, shared_task

from apps.summaries import newmail, services

NEW_MAIL_TASK = "summaries.summarize_new_mail"


@shared_task(name=services.SUMMARIZE_TASK, bind=True, acks_late=True)
def summarize_task(self: Task, summary_id: str) -> str:
    """Write one claimed summary (done, or failed with a fixed reason); a copy whose claim is gone does nothing."""
    return services.run(summary_id, task_id=self.request.id)


@shared_task(name=NEW_MAIL_TASK, ignore_result=True)
def summarize_new_mail_task() -> int:
    """The enricher: queue summaries of new mail in opted-in accounts (nothing unless OAKEN_SUMMARIZE_NEW_MAIL)."""
    return newmail.summarize_new_mail()
