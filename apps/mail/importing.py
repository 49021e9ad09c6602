"""Importing mbox files, Maildirs and .eml folders into a local mail account."""

from __future__ import annotations

import gc
import multiprocessing
import os
import queue
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from apps.core.ids import new_id
from apps.mail.bulk import copy_rows, text_array
from apps.mail.models import (
    STANDARD_FOLDERS,
    AccountKind,
    Attachment,
    Folder,
    FolderKind,
    ImportFailure,
    ImportRun,
    ImportState,
    MailAccount,
    Message,
    RawMessage,
    Thread,
)
from apps.mail.parsing.headers import normalize_subject
from apps.mail.rows import MessageRow, row_or_reason
from apps.mail.sources import RawItem, SourceError, detect_kind, iter_source
from apps.mail.threader import Threader, is_reply_subject
from apps.workspaces.models import Tenant, Workspace

_PARSE_BATCH_TIMEOUT = 600
_T = TypeVar("_T")


class ImportRefusedError(Exception):
    """The import cannot run; `code` is stable and `field` names the argument at fault."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


@dataclass(frozen=True)
class ImportCounts:
    run_id: uuid.UUID
    account_id: uuid.UUID
    imported: int
    duplicates: int
    failed: int


def ensure_local_account(*, tenant: Tenant, workspace: Workspace, name: str) -> MailAccount:
    """The workspace's local account with this name, created (with its standard folders) if missing."""
    account = MailAccount.objects.for_tenant(tenant).filter(workspace=workspace, name=name).first()
    if account is None:
        with transaction.atomic():
            account = MailAccount.objects.create(tenant=tenant, workspace=workspace, name=name, kind=AccountKind.LOCAL)
            Folder.objects.bulk_create(
                Folder(tenant=tenant, account=account, kind=kind, name=kind.label) for kind in STANDARD_FOLDERS
            )
    elif account.kind != AccountKind.LOCAL:
        raise ImportRefusedError("INVALID_INPUT", "mail can only be imported into a local account", "account")
    return account


def _batches(items: Iterator[RawItem], size: int) -> Iterator[list[RawItem]]:
    while batch := list(islice(items, size)):
        yield batch


@contextmanager
def parse_pool(max_bytes: int) -> Iterator[Callable[[list[RawItem]], Callable[[], list[MessageRow | str]]]]:
    """Parsing of batches into rows, started now and collected later, so the next batch parses while one is stored.

    Parsing costs more than storing, so it runs in a pool of processes where it can: not inside a
    daemonic process (a Celery prefork child), which may not have children; there it runs inline.
    """
    parse = partial(
        row_or_reason, max_bytes=max_bytes, attachment_text_max=settings.OPERATIONS["ATTACHMENT_TEXT_MAX_CHARS"]
    )
    workers = min(os.cpu_count() or 1, 4)
    if workers < 2 or multiprocessing.current_process().daemon:

        def start_inline(batch: list[RawItem]) -> Callable[[], list[MessageRow | str]]:
            results = [parse(item.data) for item in batch]
            return lambda: results

        yield start_inline
        return
    with multiprocessing.get_context("forkserver").Pool(workers) as pool:

        def start(batch: list[RawItem]) -> Callable[[], list[MessageRow | str]]:
            pending = pool.map_async(
                parse, [item.data for item in batch], chunksize=max(1, len(batch) // (4 * workers))
            )
            # a batch that takes this long means a stuck worker: fail the import rather than hang
            return partial(pending.get, timeout=_PARSE_BATCH_TIMEOUT)

        yield start


def parse_batch(items: list[RawItem]) -> list[MessageRow | str]:
    """Each item parsed into its row, or the reason it cannot be stored."""
    bounds = settings.OPERATIONS
    max_bytes, text_max = bounds["IMPORT_MAX_MESSAGE_BYTES"], bounds["ATTACHMENT_TEXT_MAX_CHARS"]
    return [row_or_reason(item.data, max_bytes, text_max) for item in items]


@contextmanager
def long_lived_frozen() -> Iterator[None]:
    """Leave the objects that exist now (Django, the modules, the caches) out of garbage collection meanwhile.

    A sync or an import makes millions of short-lived objects, enough for full collections, and each one
    walks every long-lived object again: a third of a second of a 10,000-message sync. Nothing is frozen
    when something else already froze objects (a server keeping pages shared after fork manages that)."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def read_ahead(produce: Iterator[_T], depth: int = 1) -> Iterator[Iterator[_T]]:
    """`produce` run in a thread, up to `depth` items ahead of the caller taking them; its errors are raised
    in the caller. Reading mail and parsing it (Python) then overlap with the caller's waits on the database.

    When the context ends, the thread stops after the item it is making, and is waited for."""
    ready: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                ready.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in produce:
                if not put((True, item)):
                    return
        except BaseException as exc:
            put((False, exc))
            return
        put((False, None))

    def take() -> Iterator[_T]:
        while True:
            fine, value = ready.get()
            if fine:
                yield value
            elif value is None:
                return
            else:
                raise value

    thread = threading.Thread(target=run, name="oaken-read-ahead", daemon=True)
    thread.start()
    try:
        yield take()
    finally:
        stop.set()
        thread.join()


class MessageStore:
    """Stores parsed messages into one account, a batch per transaction: duplicates (same Message-ID and
    content) are dropped, threads assigned, rows written by COPY. Imports and IMAP sync both store
    through it; `_placement` and `_after_batch` are where they differ."""

    def __init__(self, account: MailAccount) -> None:
        self.account = account
        self.tenant = account.tenant
        self.bounds = settings.OPERATIONS
        self.threader = Threader(account, timedelta(days=self.bounds["THREAD_SUBJECT_WINDOW_DAYS"]))
        self._merged_done: set[uuid.UUID] = set()

    def run_batch(self, items: list[RawItem], outcomes: list[MessageRow | str]) -> None:
        """Store one batch: each item with its row, or the reason it could not be parsed."""
        parsed: list[tuple[RawItem, MessageRow]] = []
        failures: list[tuple[RawItem, str]] = []
        for item, outcome in zip(items, outcomes, strict=True):
            if isinstance(outcome, str):
                failures.append((item, outcome))
            else:
                parsed.append((item, outcome))
        with transaction.atomic():
            with connection.cursor() as cursor:
                # One writer per account at a time: duplicate detection and threading read, then write.
                # The batch's commit does not wait for its WAL to reach the disk: a database crash can lose
                # the last batches, never part of one, and the import's or sync's own end (a plain commit)
                # waits for all of them. A sync fetches lost batches again (the folder's highest UID went
                # with them); an import counts only what it kept.
                cursor.execute(
                    "SELECT set_config('synchronous_commit', 'off', true),"
                    " pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    [f"import:{self.account.pk}"],
                )
            fresh, duplicates = self._drop_duplicates(parsed)
            self._store(fresh)
            self._after_batch(items, fresh, duplicates, failures)

    def _placement(self, item: RawItem) -> tuple[uuid.UUID, bool, uuid.UUID | None, int | None]:
        """Where a new message goes: its folder id, its read flag, and its IMAP folder id and UID (if any)."""
        raise NotImplementedError

    def _after_batch(
        self,
        items: list[RawItem],
        fresh: list[tuple[RawItem, MessageRow]],
        duplicates: list[tuple[RawItem, MessageRow]],
        failures: list[tuple[RawItem, str]],
    ) -> None:
        """Bookkeeping in the batch's own transaction (counts, failures, sync state)."""

    def _drop_duplicates(
        self, parsed: list[tuple[RawItem, MessageRow]]
    ) -> tuple[list[tuple[RawItem, MessageRow]], list[tuple[RawItem, MessageRow]]]:
        keys = list({(p.message_id, p.content_hash) for _, p in parsed})
        with connection.cursor() as cursor:
            # One probe of the unique (account, message_id, content_hash) index per key; the OFFSET 0 fence
            # keeps the planner from reading the whole account (for a new account it expects one row).
            cursor.execute(
                """
                SELECT m.message_id, m.content_hash
                  FROM unnest(%s::text[], %s::text[]) AS k(message_id, content_hash)
                 CROSS JOIN LATERAL (
                       SELECT tenant_id, message_id, content_hash FROM mail_message
                        WHERE account_id = %s AND message_id = k.message_id AND content_hash = k.content_hash
                       OFFSET 0) AS m
                 WHERE m.tenant_id = %s
                """,
                [text_array(k for k, _ in keys), text_array(h for _, h in keys), self.account.pk, self.tenant.pk],
            )
            seen = set(cursor.fetchall())
        fresh, duplicates = [], []
        for item, p in parsed:
            key = (p.message_id, p.content_hash)
            if key not in seen:
                seen.add(key)
                fresh.append((item, p))
            else:
                duplicates.append((item, p))
        return fresh, duplicates

    def _store(self, batch: list[tuple[RawItem, MessageRow]]) -> None:
        if not batch:
            return
        now = timezone.now()
        dates = [p.date or now for _, p in batch]
        self.threader.prepare(
            mentions=(m for _, p in batch for m in (p.message_id, p.in_reply_to, *p.references)),
            reply_subjects=(normalize_subject(p.subject) for _, p in batch if is_reply_subject(p.subject)),
            earliest=min(dates),
        )
        tenant_id, account_id = self.tenant.pk, self.account.pk
        messages: list[list[object]] = []
        raws: list[tuple[object, ...]] = []
        attachments: list[tuple[object, ...]] = []
        threads: list[uuid.UUID] = []
        assign = self.threader.assign
        for (item, p), date in zip(batch, dates, strict=True):
            thread_id = assign(
                message_id=p.message_id, in_reply_to=p.in_reply_to, references=p.references, subject=p.subject,
                date=date,
            )  # fmt: skip
            pk = new_id()
            threads.append(thread_id)
            folder_id, read, imap_folder_id, imap_uid = self._placement(item)
            messages.append([
                pk, tenant_id, account_id, folder_id, thread_id, p.message_id, p.in_reply_to, p.references,
                p.subject, *p.people, date, now, *p.content, read, False, p.has_attachments, p.content_hash,
                p.headers, imap_folder_id, imap_uid,
            ])  # fmt: skip
            raws.append((new_id(), tenant_id, pk, item.data))
            if p.attachments:
                attachments.extend((new_id(), tenant_id, pk, *a) for a in p.attachments)
        # a later message of the batch may have merged an earlier one's thread away
        threads = [self.threader.resolve(t) for t in threads]
        for message, thread_id in zip(messages, threads, strict=True):
            message[4] = thread_id
        self._save_threads(threads, dates)
        copy_rows(Message, _MESSAGE_COLUMNS, messages)
        copy_rows(RawMessage, ("id", "tenant_id", "message_id", "data"), raws)
        copy_rows(Attachment, _ATTACHMENT_COLUMNS, attachments)
        merged_into = self._apply_merges()
        if merged_into:
            self._refresh_thread_stats(merged_into)

    def _save_threads(self, threads: list[uuid.UUID], dates: list[datetime]) -> None:
        """Write the threads this batch started (those still in use after merges) with their counts and dates,
        and add the batch's messages to the counts and date ranges of the threads that were there before."""
        totals: dict[uuid.UUID, list[Any]] = {}
        for thread_id, date in zip(threads, dates, strict=True):
            entry = totals.setdefault(thread_id, [0, date, date])
            entry[0] += 1
            entry[1], entry[2] = min(entry[1], date), max(entry[2], date)
        new = self.threader.new_threads
        tenant_id, account_id = self.tenant.pk, self.account.pk
        copy_rows(
            Thread,
            _THREAD_COLUMNS,
            [
                (thread_id, tenant_id, account_id, *new[thread_id], *totals[thread_id])
                for thread_id in totals
                if thread_id in new
            ],
        )
        ids = [thread_id for thread_id in totals if thread_id not in new]
        new.clear()
        if not ids:
            return
        with connection.cursor() as cursor:
            cursor.execute(
                """
                UPDATE mail_thread AS t
                   SET message_count = t.message_count + v.n,
                       first_message_at = LEAST(t.first_message_at, v.first),
                       last_message_at = GREATEST(t.last_message_at, v.last)
                  FROM unnest(%s::uuid[], %s::int[], %s::timestamptz[], %s::timestamptz[]) AS v(id, n, first, last)
                 WHERE t.id = v.id AND t.tenant_id = %s
                """,
                [ids, [totals[i][0] for i in ids], [totals[i][1] for i in ids], [totals[i][2] for i in ids],
                 self.tenant.pk],
            )  # fmt: skip

    def _apply_merges(self) -> set[uuid.UUID]:
        """Move the messages of merged threads into the thread that absorbed them; returns the absorbers."""
        stale = [tid for tid in self.threader.merged if tid not in self._merged_done]
        if not stale:
            return set()
        self._merged_done.update(stale)
        targets = {old: self.threader.resolve(old) for old in stale}
        with connection.cursor() as cursor:
            for old, target in targets.items():
                cursor.execute(
                    "UPDATE mail_message SET thread_id = %s WHERE tenant_id = %s AND thread_id = %s",
                    [target, self.tenant.pk, old],
                )
        Thread.objects.for_tenant(self.tenant).filter(account=self.account, id__in=stale).delete()
        return set(targets.values())

    def _refresh_thread_stats(self, thread_ids: set[uuid.UUID]) -> None:
        refresh_thread_stats(self.tenant, thread_ids)


def refresh_thread_stats(tenant: Tenant, thread_ids: set[uuid.UUID]) -> None:
    """Recount threads from their messages (after messages moved between threads, or were removed)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE mail_thread AS t
               SET message_count = s.n, first_message_at = s.first, last_message_at = s.last
              FROM (SELECT thread_id, count(*) AS n, min(date) AS first, max(date) AS last
                      FROM mail_message WHERE tenant_id = %s AND thread_id = ANY(%s)
                     GROUP BY thread_id) AS s
             WHERE t.id = s.thread_id AND t.tenant_id = %s
            """,
            [tenant.pk, list(thread_ids), tenant.pk],
        )


class _Importer(MessageStore):
    def __init__(self, run: ImportRun, account: MailAccount) -> None:
        super().__init__(account)
        self.run = run
        self.inbox = Folder.objects.for_tenant(self.tenant).get(account=account, kind=FolderKind.INBOX)

    def _placement(self, item: RawItem) -> tuple[uuid.UUID, bool, uuid.UUID | None, int | None]:
        return self.inbox.pk, False, None, None

    def _after_batch(
        self,
        items: list[RawItem],
        fresh: list[tuple[RawItem, MessageRow]],
        duplicates: list[tuple[RawItem, MessageRow]],
        failures: list[tuple[RawItem, str]],
    ) -> None:
        ImportFailure.objects.bulk_create(
            ImportFailure(tenant=self.tenant, run=self.run, position=item.position[:500], reason=reason[:255])
            for item, reason in failures
        )
        self.run.imported += len(fresh)
        self.run.duplicates += len(duplicates)
        self.run.failed += len(failures)
        self.run.save(update_fields=["imported", "duplicates", "failed"])


_MESSAGE_COLUMNS = (
    "id", "tenant_id", "account_id", "folder_id", "thread_id", "message_id", "in_reply_to", "references",
    "subject", "sender_name", "sender_address", "to_addresses", "cc_addresses", "bcc_addresses",
    "reply_to_addresses", "date", "received_at", "text_body", "html_body", "snippet", "size", "read",
    "pinned", "has_attachments", "content_hash", "headers", "imap_folder_id", "imap_uid",
)  # fmt: skip
_THREAD_COLUMNS = (
    "id", "tenant_id", "account_id", "subject", "subject_key", "message_count", "first_message_at", "last_message_at",
)  # fmt: skip
_ATTACHMENT_COLUMNS = (
    "id", "tenant_id", "message_id", "filename", "content_type", "size",
    "inline", "content", "extracted_text",
)  # fmt: skip


def import_mail(
    *, tenant: Tenant, workspace: Workspace, account_name: str, path: Path, batch_size: int | None = None
) -> ImportCounts:
    """Import every message at `path` into the named local account; failures are recorded, not fatal."""
    try:
        kind = detect_kind(path)
    except (SourceError, OSError) as exc:
        raise ImportRefusedError(
            "INVALID_INPUT", "path is not a readable mbox file, Maildir or .eml folder", "path"
        ) from exc
    account = ensure_local_account(tenant=tenant, workspace=workspace, name=account_name)
    run = ImportRun.objects.create(tenant=tenant, account=account, source_name=path.name[:255], source_kind=kind)
    importer = _Importer(run, account)
    size = batch_size or settings.OPERATIONS["IMPORT_BATCH_SIZE"]
    try:
        with long_lived_frozen(), parse_pool(settings.OPERATIONS["IMPORT_MAX_MESSAGE_BYTES"]) as start_parsing:
            previous: tuple[list[RawItem], Callable[[], list[MessageRow | str]]] | None = None
            for batch in _batches(iter_source(path), size):
                pending = (batch, start_parsing(batch))
                if previous is not None:
                    importer.run_batch(previous[0], previous[1]())
                previous = pending
            if previous is not None:
                importer.run_batch(previous[0], previous[1]())
    except Exception as exc:
        run.state, run.error, run.finished_at = ImportState.FAILED, type(exc).__name__, timezone.now()
        run.save(update_fields=["state", "error", "finished_at"])
        raise
    run.state, run.finished_at = ImportState.DONE, timezone.now()
    run.save(update_fields=["state", "finished_at"])
    return ImportCounts(
        run_id=run.pk,
        account_id=account.pk,
        imported=run.imported,
        duplicates=run.duplicates,
        failed=run.failed,
    )
