"""The search index's changes that operations ask for."""

from __future__ import annotations

from django.db import transaction

from apps.search.indexing import rebuild
from apps.search.tasks import enrich_task
from apps.workspaces.models import Tenant


def rebuild_index(*, tenant: Tenant) -> int:
    """Ask for the tenant's mail embedded by another model than the current one to be embedded again, and start
    the embedding once the caller's transaction commits; returns how many messages wait for it."""
    queued = rebuild(tenant=tenant)
    transaction.on_commit(lambda: enrich_task.delay())
    return queued
