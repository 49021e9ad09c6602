"""Grouping messages into threads: References / In-Reply-To first, a reply's subject as the fallback.

Every message id a stored message mentions (its own Message-ID, its In-Reply-To, its References)
belongs to that message's thread. A new message joins the thread of any id it mentions; when it
mentions ids of several threads (a parent arrived after its replies, say), those threads merge.
Only when no id is known does a reply-prefixed subject join a recent thread with the same subject.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache

from django.db import connection

from apps.core.ids import new_id
from apps.mail.bulk import text_array
from apps.mail.models import MailAccount
from apps.mail.parsing.headers import normalize_subject


@lru_cache(maxsize=4096)
def is_reply_subject(subject: str) -> bool:
    """The subject carries a reply or forward prefix (Re:, Fwd:, AW:, …)."""
    return normalize_subject(subject) != " ".join(subject.split()).casefold()


@dataclass
class Threader:
    """Assigns threads to one account's messages, a batch at a time, touching the database once per batch."""

    account: MailAccount
    window: timedelta
    # threads started since the store last saved them: id -> (subject, subject key)
    new_threads: dict[uuid.UUID, tuple[str, str]] = field(default_factory=dict)
    # thread id -> the thread it was merged into
    merged: dict[uuid.UUID, uuid.UUID] = field(default_factory=dict)
    _by_mention: dict[str, uuid.UUID] = field(default_factory=dict)
    _by_subject: dict[str, tuple[uuid.UUID, datetime]] = field(default_factory=dict)

    def resolve(self, thread_id: uuid.UUID) -> uuid.UUID:
        """The thread a (possibly merged) thread id now lives in."""
        while thread_id in self.merged:
            thread_id = self.merged[thread_id]
        return thread_id

    def prepare(self, mentions: Iterable[str], reply_subjects: Iterable[str], earliest: datetime) -> None:
        """Load what the store knows about these ids and reply subjects, before `assign` runs."""
        ids = [m for m in set(mentions) if m and m not in self._by_mention]
        tenant = self.account.tenant
        if ids:
            with connection.cursor() as cursor:
                # One index probe per id. The OFFSET 0 fences keep the planner from folding the
                # tenant and account into the probes: for a new account its statistics say "one
                # row", and it would then filter every row of the account against every id.
                cursor.execute(
                    """
                    SELECT m.thread_id, m.message_id, m."references"
                      FROM unnest(%(ids)s::text[]) AS w(id)
                     CROSS JOIN LATERAL (
                           SELECT tenant_id, thread_id, message_id, "references" FROM mail_message
                            WHERE account_id = %(account)s AND message_id = w.id OFFSET 0) AS m
                     WHERE m.tenant_id = %(tenant)s
                    UNION
                    SELECT m.thread_id, m.message_id, m."references"
                      FROM unnest(%(ids)s::text[]) AS w(id)
                     CROSS JOIN LATERAL (
                           SELECT tenant_id, account_id, thread_id, message_id, "references" FROM mail_message
                            WHERE "references" @> ARRAY[w.id] OFFSET 0) AS m
                     WHERE m.tenant_id = %(tenant)s AND m.account_id = %(account)s
                    """,
                    {"ids": text_array(ids), "account": self.account.pk, "tenant": tenant.pk},
                )
                for thread_id, message_id, references in cursor.fetchall():
                    for mention in (message_id, *references):
                        if mention:
                            self._by_mention.setdefault(mention, thread_id)
        keys = [key for key in set(reply_subjects) if key and key not in self._by_subject]
        if keys:
            with connection.cursor() as cursor:
                # one probe of the (account, subject_key) index per key (fenced as above)
                cursor.execute(
                    """
                    SELECT t.id, t.subject_key, t.last_message_at
                      FROM unnest(%(keys)s::text[]) AS k(key)
                     CROSS JOIN LATERAL (
                           SELECT tenant_id, id, subject_key, last_message_at FROM mail_thread
                            WHERE account_id = %(account)s AND subject_key = k.key AND last_message_at >= %(since)s
                           OFFSET 0) AS t
                     WHERE t.tenant_id = %(tenant)s
                     ORDER BY t.last_message_at
                    """,
                    {
                        "keys": text_array(keys),
                        "account": self.account.pk,
                        "since": earliest - self.window,
                        "tenant": tenant.pk,
                    },
                )
                for thread_id, key, last in cursor.fetchall():
                    self._by_subject[key] = (thread_id, last)

    def assign(
        self, *, message_id: str, in_reply_to: str, references: Sequence[str], subject: str, date: datetime
    ) -> uuid.UUID:
        """The thread for one message; remembers it for the messages that follow."""
        mentions = [m for m in (message_id, in_reply_to, *references) if m]
        found = []
        for mention in mentions:
            known = self._by_mention.get(mention)
            if known is not None:
                resolved = self.resolve(known)
                if resolved not in found:
                    found.append(resolved)
        key = normalize_subject(subject)
        if found:
            thread_id = found[0]
            for other in found[1:]:
                self.merged[other] = thread_id
        else:
            thread_id = self._by_subject_fallback(key, subject, date) or self._new_thread(subject, key)
        for mention in mentions:
            self._by_mention[mention] = thread_id
        if key:
            previous = self._by_subject.get(key)
            if previous is None or previous[1] <= date:
                self._by_subject[key] = (thread_id, date)
        return thread_id

    def _by_subject_fallback(self, key: str, subject: str, date: datetime) -> uuid.UUID | None:
        if not key or not is_reply_subject(subject):
            return None
        candidate = self._by_subject.get(key)
        if candidate is None or abs(date - candidate[1]) > self.window:
            return None
        return self.resolve(candidate[0])

    def _new_thread(self, subject: str, key: str) -> uuid.UUID:
        thread_id = new_id()
        self.new_threads[thread_id] = (subject, key)
        return thread_id
