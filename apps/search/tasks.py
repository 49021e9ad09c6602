"""Celery tasks for search: thin interfaces over apps.search.indexing."""

from __future__ import annotations

from celery import shared_task

from apps.search.embedders import EmbeddingsUnavailable
from apps.search.indexing import enrich_pending

ENRICH_TASK = "search.enrich"


@shared_task(
    name=ENRICH_TASK, ignore_result=True, autoretry_for=(EmbeddingsUnavailable,), retry_backoff=30, max_retries=5
)
def enrich_task() -> int:
    """Embed what waits for about a minute; a task that stopped with more waiting queues the next one."""
    outcome = enrich_pending(seconds=60)
    if outcome.more:
        enrich_task.delay()
    return outcome.messages
