"""The store that imports (apps.mail.importing) and IMAP sync (apps.mail.sync) both write messages through."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from apps.core.bounds import bounds
from apps.core.ids import new_id
from apps.mail.bulk import copy_rows, text_array
from apps.mail.models import Attachment, MailAccount, Message, RawMessage, Thread
from apps.mail.parsing.headers import normalize_subject
from apps.mail.rows import MessageRow
from apps.mail.sources import RawItem
from apps.mail.threader import Threader, is_reply_subject
from apps.workspaces.models import Tenant

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


class MessageStore:
    """Stores parsed messages into one account, a batch per transaction: duplicates (same Message-ID and
    content) are dropped, threads assigned, rows written by COPY. Imports and IMAP sync both store
    through it; `_placement` and `_after_batch` are where they differ."""

    def __init__(self, account: MailAccount) -> None:
        self.account = account
        self.tenant = account.tenant
        self.bounds = bounds
        self.threader = Threader(account, timedelta(days=self.bounds.THREAD_SUBJECT_WINDOW_DAYS))
        self._merged_done: set[uuid.UUID] = set()

    def run_batch(self, items: list[RawItem], outcomes: list[MessageRow | str]) -> None:
        """Store one batch: each item with its row, or the reason it could not be parsed."""
        parsed: list[tuple[RawItem, MessageRow]] = []
        failures: list[tuple[RawItem, str]] = []
        for item, outcome in zip(items, outcomes, strict=True):
            if item.refused:  # an entry the source did not read: failed, with the source's reason
                failures.append((item, item.refused))
            elif isinstance(outcome, str):
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
                message_id=p.message_id,
                in_reply_to=p.in_reply_to,
                references=p.references,
                subject=p.subject,
                date=date,
            )
            pk = new_id()
            threads.append(thread_id)
            folder_id, read, imap_folder_id, imap_uid = self._placement(item)
            messages.append(
                [
                    pk,
                    tenant_id,
                    account_id,
                    folder_id,
                    thread_id,
                    p.message_id,
                    p.in_reply_to,
                    p.references,
                    p.subject,
                    *p.people,
                    date,
                    now,
                    *p.content,
                    read,
                    False,
                    p.has_attachments,
                    p.content_hash,
                    p.headers,
                    imap_folder_id,
                    imap_uid,
                ]
            )
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
                [
                    ids,
                    [totals[i][0] for i in ids],
                    [totals[i][1] for i in ids],
                    [totals[i][2] for i in ids],
                    self.tenant.pk,
                ],
            )

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
