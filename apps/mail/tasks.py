"""Celery tasks for mail: thin interfaces over the mail services."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import redis
from celery import Task, shared_task
from imapclient.exceptions import IMAPClientError

from apps.mail.imap import MailServerError
from apps.mail.importing import sweep_stale_imports
from apps.mail.mirror import (
    PUSH_FLAGS_TASK,
    PUSH_LABELS_TASK,
    PUSH_MOVES_TASK,
    MirrorBusyError,
    push_flags,
    push_labels,
    push_moves,
)
from apps.mail.services import SYNC_ACCOUNT_TASK
from apps.mail.sync import due_accounts, run_sync
from apps.workspaces.models import Tenant


@shared_task(name=SYNC_ACCOUNT_TASK, ignore_result=True, bind=True)
def sync_account_task(self: Task, *, account_id: str, force: bool = False, watched: bool = False) -> dict[str, object]:
    """Sync one IMAP account (skipped while another worker syncs it, or while it backs off unless forced).

    `watched`: the IDLE watcher asked (apps.mail.watcher), as the server said new mail came. Its mark that a sync
    waits is cleared as this one starts (a later change asks again), and a sync already running, which may
    have begun before the mail came, is waited for (tried again each second) rather than skipped."""
    if watched:
        clear_pending(account_id)
    outcome = run_sync(account_id, force=force)
    if watched and outcome.state == "busy" and self.request.retries < WATCHED_BUSY_RETRIES:
        raise self.retry(countdown=1, max_retries=WATCHED_BUSY_RETRIES)
    return {"state": outcome.state, "stored": outcome.counts.stored, "reason": outcome.reason}


WATCHED_BUSY_RETRIES = 120


def clear_pending(account_id: str) -> None:
    from apps.core.redis_client import redis_client
    from apps.mail.watcher import pending_key

    with contextlib.suppress(redis.RedisError):  # the mark lapses by itself within a minute
        redis_client().delete(pending_key(account_id))


@shared_task(name="mail.sync_due_accounts", ignore_result=True)
def sync_due_accounts_task() -> int:
    """The beat's minute: a sync task for every IMAP account that is not backing off."""
    due = due_accounts()
    for account_id in due:
        sync_account_task.delay(account_id=str(account_id))
    return len(due)


@shared_task(name="mail.sweep_stale_imports", ignore_result=True)
def sweep_stale_imports_task() -> int:
    """Imports whose worker was lost end failed with a reason, never left queued or running."""
    return sweep_stale_imports()


# A server that is down now may answer in a minute; the state pushed is read when the task runs.
_RETRY_ON = (MailServerError, IMAPClientError, OSError, MirrorBusyError)


def _unless_refused(push: Callable[[], int]) -> int:
    """A push, given up (0) when the account's provider refused its grant meanwhile: it waits for a reconnect
    (apps.mail.mirror.resume_pushes), never retried against a refusal."""
    try:
        return push()
    except MailServerError as error:
        if error.reason == "needs_reconnect":
            return 0
        raise


@shared_task(name=PUSH_FLAGS_TASK, autoretry_for=_RETRY_ON, retry_backoff=30, retry_backoff_max=1800, max_retries=8)
def push_flags_task(*, tenant_id: str, message_ids: list[str]) -> int:
    """Set \\Seen and \\Flagged on the server to match Oaken's read and pinned state for these messages."""
    return _unless_refused(lambda: push_flags(tenant=Tenant.objects.get(pk=tenant_id), message_ids=message_ids))


@shared_task(name=PUSH_MOVES_TASK, autoretry_for=_RETRY_ON, retry_backoff=30, retry_backoff_max=1800, max_retries=8)
def push_moves_task(*, tenant_id: str, message_ids: list[str]) -> int:
    """Move these messages on the server to the folders they are in within Oaken."""
    return _unless_refused(lambda: push_moves(tenant=Tenant.objects.get(pk=tenant_id), message_ids=message_ids))


@shared_task(name=PUSH_LABELS_TASK, autoretry_for=_RETRY_ON, retry_backoff=30, retry_backoff_max=1800, max_retries=8)
def push_labels_task(*, tenant_id: str, message_ids: list[str], label_ids: list[str]) -> int:
    """Put these labels on or take them off these Gmail messages on the server, as Oaken holds them."""
    tenant = Tenant.objects.get(pk=tenant_id)
    return _unless_refused(lambda: push_labels(tenant=tenant, message_ids=message_ids, label_ids=label_ids))
