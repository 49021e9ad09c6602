"""Summaries on the Celery workers: claim what the cache lacks, fan it out as one group, wait a bounded time.

A call names what it wants summarized (jobs: a message, or a thread's messages oldest first). What the cache holds
for this tenant, content and summarizer is answered from it. The rest is claimed (a pending row owned by a new
task id, so two calls never queue the same summary twice), and the claims go to the workers as one Celery group;
a summary another call already claimed is waited for, not queued again. The call waits up to
SUMMARY_WAIT_SECONDS: what is not done by then is answered `pending`, and its worker still fills the cache for the
next call. When the broker cannot take the group, or no worker answers while nothing moved, the claims are
withdrawn and the call is refused with SERVICE_UNAVAILABLE: it never hangs.

This runs outside any database transaction (the gate calls it before the operation's own transaction opens):
the workers must see the claims, and no transaction may stay open while they work.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from celery import current_app, group, signature
from celery.exceptions import TimeoutError as CeleryTimeout
from celery.result import AsyncResult, ResultSet
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from apps.core.bounds import bounds
from apps.core.errors import OakenError
from apps.mail.models import Message
from apps.summaries.models import Scope, State, Summary, SummarySource
from apps.summaries.summarizers import Identity, Mail, current_summarizer
from apps.workspaces.models import Tenant

log = logging.getLogger("oaken.summaries")

SUMMARIZE_TASK = "summaries.summarize"
# how long to wait before asking whether any worker is there, when none of the call's tasks has started
_FIRST_LOOK_SECONDS = 1.0
_PING_SECONDS = 1.0
# the broker is tried this often before the call is refused
_PUBLISH_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}


@dataclass(frozen=True)
class Job:
    """Something to summarize: its scope, the hash of its content, and the messages it is made of, in order."""

    scope: str
    content_hash: str
    message_ids: tuple[Any, ...]

    @property
    def key(self) -> tuple[str, str]:
        return (self.scope, self.content_hash)


@dataclass(frozen=True)
class Outcome:
    state: str  # done | pending | failed
    text: str = ""
    truncated: bool = False
    reason: str = ""


def message_job(message: Message) -> Job:
    return Job(Scope.MESSAGE, message.content_hash, (message.pk,))


def thread_job(messages: Sequence[Message]) -> Job:
    """A thread's messages (oldest first) as one summary: keyed by their content hashes in that order."""
    digest = hashlib.sha256("\n".join(m.content_hash for m in messages).encode()).hexdigest()
    return Job(Scope.THREAD, digest, tuple(m.pk for m in messages))


def current_identity() -> Identity:
    return current_summarizer().identity(bounds.SUMMARY_MAX_CHARS)


def workers_away() -> OakenError:
    return OakenError(
        "SERVICE_UNAVAILABLE", "the summary workers cannot be reached right now; nothing was summarized, try again"
    )


def _rows(tenant: Tenant, identity: Identity, jobs: Sequence[Job]) -> dict[tuple[str, str], Summary]:
    rows = Summary.objects.for_tenant(tenant).filter(
        kind=identity.kind,
        model=identity.model,
        prompt_version=identity.prompt_version,
        content_hash__in={j.content_hash for j in jobs},
    )
    return {(r.scope, r.content_hash): r for r in rows}


def cached(*, tenant: Tenant, jobs: Sequence[Job]) -> dict[tuple[str, str], Outcome]:
    """The summaries the cache holds done for these jobs, without queueing anything."""
    rows = _rows(tenant, current_identity(), jobs)
    return {key: _outcome(row) for key, row in rows.items() if row.state == State.DONE}


def cached_texts(*, tenant: Tenant, scope: str, content_hashes: Sequence[str]) -> dict[str, str]:
    """content hash -> the text the cache holds done for it by the current summarizer (what a listing shows
    beside each message: one narrow read, no rows built)."""
    if not content_hashes:
        return {}
    identity = current_identity()
    with connection.cursor() as cursor:
        cursor.execute(
            _TEXTS_SQL,
            {
                "tenant": tenant.pk,
                "scope": scope,
                "kind": identity.kind,
                "model": identity.model,
                "prompt": identity.prompt_version,
                "done": State.DONE,
                "hashes": list(set(content_hashes)),
            },
        )
        return dict(cursor.fetchall())


# what cached_texts reads, in plain SQL: on every get_message and listing, where compiling the ORM query cost more
# than running it
_TEXTS_SQL = f"""
SELECT content_hash, text FROM {Summary._meta.db_table}
 WHERE tenant_id = %(tenant)s AND scope = %(scope)s AND kind = %(kind)s AND model = %(model)s
   AND prompt_version = %(prompt)s AND state = %(done)s AND content_hash = ANY(%(hashes)s)
"""  # noqa: S608 (the table name is the model's own; every value is a parameter)


def cached_text_column(tenant_column: str, hash_column: str) -> tuple[str, dict[str, Any]]:
    """cached_texts for one message as a column of another statement: SQL that reads the text the cache holds done
    for the row's tenant and content hash by the current summarizer (NULL when none), and its parameters (named
    apart from the statement's own). get_message reads the message and its summary in one round trip."""
    identity = current_identity()
    sql = f"""(SELECT s.text FROM {Summary._meta.db_table} s
  WHERE s.tenant_id = {tenant_column} AND s.content_hash = {hash_column} AND s.scope = %(summary_scope)s
    AND s.kind = %(summary_kind)s AND s.model = %(summary_model)s AND s.prompt_version = %(summary_prompt)s
    AND s.state = %(summary_done)s LIMIT 1)"""  # noqa: S608 (the caller's column names; every value is a parameter)
    # plain strings: psycopg finds no dumper for an enum class and walks its bases for one on every call
    return sql, {
        "summary_scope": Scope.MESSAGE.value,
        "summary_kind": identity.kind,
        "summary_model": identity.model,
        "summary_prompt": identity.prompt_version,
        "summary_done": State.DONE.value,
    }


def _outcome(row: Summary) -> Outcome:
    if row.state == State.DONE:
        return Outcome(State.DONE, row.text, row.truncated)
    if row.state == State.FAILED:
        return Outcome(State.FAILED, reason=row.reason)
    return Outcome(State.PENDING)


def _claim(tenant: Tenant, identity: Identity, job: Job, row: Summary | None, cutoff: Any) -> tuple[Summary, bool]:
    """(the row, whether this call owns it now): a new pending row, or a failed or abandoned one taken over."""
    task_id = str(uuid.uuid4())
    now = timezone.now()
    if row is None:
        try:
            with transaction.atomic():
                return Summary.objects.create(
                    tenant=tenant,
                    scope=job.scope,
                    content_hash=job.content_hash,
                    kind=identity.kind,
                    model=identity.model,
                    prompt_version=identity.prompt_version,
                    state=State.PENDING,
                    task_id=task_id,
                    claimed_at=now,
                ), True
        except IntegrityError:  # another call claimed it first
            row = _rows(tenant, identity, [job]).get(job.key)
            if row is None:  # and withdrew it since
                return _claim(tenant, identity, job, None, cutoff)
    taken = (
        Summary.objects.for_tenant(tenant)
        .filter(pk=row.pk)
        .filter(Q(state=State.FAILED) | Q(state=State.PENDING, claimed_at__lte=cutoff))
        .update(state=State.PENDING, task_id=task_id, claimed_at=now, reason="", text="", done_at=None)
    )
    row.refresh_from_db()
    return row, bool(taken)


def _link(tenant: Tenant, row: Summary, job: Job) -> None:
    """Record the messages the summary is made of, so deleting any of them deletes it."""
    links = [
        SummarySource(tenant=tenant, summary=row, message_id=pk, position=i) for i, pk in enumerate(job.message_ids)
    ]
    try:
        with transaction.atomic():
            SummarySource.objects.bulk_create(links, ignore_conflicts=True)
    except IntegrityError:  # a message deleted meanwhile; the summary goes with it
        Summary.objects.for_tenant(tenant).filter(pk=row.pk).delete()


def publish(signatures: list[Any]) -> None:
    """Hand the summaries to the workers, as one group (tests that run them in the calling process replace this)."""
    group(signatures).apply_async(retry=True, retry_policy=_PUBLISH_RETRY)


def _claim_all(tenant: Tenant, identity: Identity, jobs: Sequence[Job]) -> tuple[list[Summary], list[Summary]]:
    """(the rows this call claimed, the pending rows other calls own) for the jobs the cache lacks."""
    cutoff = timezone.now() - timedelta(seconds=bounds.SUMMARY_PENDING_MAX_SECONDS)
    rows = _rows(tenant, identity, jobs)
    mine: list[Summary] = []
    waited: list[Summary] = []
    for job in {j.key: j for j in jobs}.values():
        row = rows.get(job.key)
        if row is None or row.state == State.FAILED or (row.state == State.PENDING and row.claimed_at <= cutoff):
            row, owned = _claim(tenant, identity, job, row, cutoff)
            if owned:
                mine.append(row)
            elif row.state == State.PENDING:
                waited.append(row)
        elif row.state == State.PENDING:
            waited.append(row)
        _link(tenant, row, job)
    return mine, waited


def _publish_claims(tenant: Tenant, mine: list[Summary]) -> None:
    if not mine:
        return
    try:
        publish([signature(SUMMARIZE_TASK, kwargs={"summary_id": str(r.pk)}, task_id=r.task_id) for r in mine])
    except Exception as exc:  # the broker is away (kombu's OperationalError, a socket error)
        log.warning("summaries could not be queued: %s", type(exc).__name__)
        _withdraw(tenant, mine)
        raise workers_away() from None


def summaries_for(*, tenant: Tenant, jobs: Sequence[Job], wait_seconds: float) -> dict[tuple[str, str], Outcome]:
    """Each job's outcome: from the cache, or from the workers within `wait_seconds` (else pending)."""
    identity = current_identity()
    mine, waited = _claim_all(tenant, identity, jobs)
    _publish_claims(tenant, mine)
    outstanding = _pending(tenant, mine + waited)
    if outstanding:
        try:
            _wait(tenant, mine, outstanding, wait_seconds)
        except (OakenError, DatabaseError):
            raise
        except Exception as exc:  # the result backend (Redis) went away while waiting
            log.warning("summaries could not be waited for: %s", type(exc).__name__)
            _withdraw(tenant, mine)
            raise workers_away() from None
    fresh = _rows(tenant, identity, jobs)
    return {job.key: _outcome(fresh[job.key]) if job.key in fresh else Outcome(State.PENDING) for job in jobs}


def queue(*, tenant: Tenant, jobs: Sequence[Job]) -> int:
    """Hand what the cache lacks to the workers without waiting (background summaries); how many were queued."""
    mine, _ = _claim_all(tenant, current_identity(), jobs)
    _publish_claims(tenant, mine)
    return len(mine)


def _pending(tenant: Tenant, rows: list[Summary]) -> list[Summary]:
    return list(Summary.objects.for_tenant(tenant).filter(pk__in=[r.pk for r in rows], state=State.PENDING))


def _wait(tenant: Tenant, mine: list[Summary], rows: list[Summary], seconds: float) -> None:
    """Wait for the rows' tasks until they are done or `seconds` passed; refuse when no worker is there."""
    until = time.monotonic() + seconds
    results = ResultSet([AsyncResult(r.task_id) for r in rows])
    first = min(_FIRST_LOOK_SECONDS, seconds)
    _join(results, first)
    left = _pending(tenant, rows)
    if not left:
        return
    if not _moving(rows, left) and not _workers_answer():
        _withdraw(tenant, mine)
        raise workers_away()
    _join(results, max(until - time.monotonic(), 0))
    left = _pending(tenant, rows)
    if left and not _moving(rows, left) and not _workers_answer():
        _withdraw(tenant, mine)
        raise workers_away()


def _join(results: ResultSet, seconds: float) -> None:
    if seconds <= 0:
        return
    # a task that calls an operation (the internal door) may wait too: the wait is bounded
    with contextlib.suppress(CeleryTimeout):
        results.join_native(timeout=seconds, propagate=False, disable_sync_subtasks=False)


def _moving(rows: list[Summary], left: list[Summary]) -> bool:
    """Whether a worker is evidently there: a task finished, or one still pending has started."""
    if len(left) < len(rows):
        return True
    return any(AsyncResult(r.task_id).state not in ("PENDING",) for r in left)


def _workers_answer() -> bool:
    try:
        return bool(current_app.control.ping(timeout=_PING_SECONDS, limit=1))
    except Exception as exc:  # the broker is away
        log.warning("the workers could not be asked: %s", type(exc).__name__)
        return False


def _withdraw(tenant: Tenant, rows: list[Summary]) -> None:
    """Forget this call's claims that no worker took: a queued task that finds its claim gone does nothing."""
    for row in rows:
        Summary.objects.for_tenant(tenant).filter(pk=row.pk, task_id=row.task_id, state=State.PENDING).delete()


# ---------------------------------------------------------------- on the worker


def run(summary_id: str, *, task_id: str | None) -> str:
    """Write the summary a claim asks for, if the claim is still this task's; what happened, in a word."""
    row = Summary.objects.unscoped().filter(pk=summary_id).select_related("tenant").first()
    if row is None or row.state != State.PENDING or row.task_id != task_id:
        return "skipped"
    limit = bounds.SUMMARY_MAX_CHARS
    summarizer = current_summarizer()
    if summarizer.identity(limit) != Identity(row.kind, row.model, row.prompt_version):
        return _finish(row, State.FAILED, reason="the summarizer changed while this waited")
    mails = _mails(row)
    if not mails:
        return "skipped"
    from apps.summaries.llm import SummaryFailed

    try:
        written = summarizer.summarize(mails, limit)
    except SummaryFailed as failure:
        return _finish(row, State.FAILED, reason=str(failure))
    except Exception as exc:
        log.error("a summary failed: %s", type(exc).__name__)
        return _finish(row, State.FAILED, reason="the summarizer failed")
    return _finish(row, State.DONE, text=written.text, truncated=written.truncated)


def _mails(row: Summary) -> list[Mail]:
    ids = list(
        SummarySource.objects.for_tenant(row.tenant)
        .filter(summary=row)
        .order_by("position", "message_id")
        .values_list("position", "message_id")
    )
    if row.scope == Scope.MESSAGE:
        ids = ids[:1]
    else:
        seen: dict[int, Any] = {}
        for position, pk in ids:
            seen.setdefault(position, pk)
        ids = sorted(seen.items())
    found = {
        m.pk: m
        for m in Message.objects.for_tenant(row.tenant)
        .filter(pk__in=[pk for _, pk in ids])
        .only("subject", "sender_name", "sender_address", "date", "text_body")
    }
    return [
        Mail(
            subject=m.subject,
            sender=f"{m.sender_name} <{m.sender_address}>" if m.sender_name else m.sender_address,
            date=m.date,
            body=m.text_body,
        )
        for m in (found.get(pk) for _, pk in ids)
        if m is not None
    ]


def _finish(row: Summary, state: str, *, text: str = "", truncated: bool = False, reason: str = "") -> str:
    Summary.objects.for_tenant(row.tenant).filter(pk=row.pk, task_id=row.task_id, state=State.PENDING).update(
        state=state, text=text, truncated=truncated, reason=reason, done_at=timezone.now()
    )
    return state
