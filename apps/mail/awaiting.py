"""Waiting for reply: the threads whose last message the mailbox's own side wrote, some days ago, with nothing from
anyone since. Computed at each read, never stored: an answer that arrives (by sync or import) ends the wait by being
the thread's last message.

A message is the mailbox's own when it is in the account's Sent folder (what Oaken sends, a person's or an agent's
approved send, is stored there) or its sender is the account's own address. The thread's last message is its latest
by Date (then id); a thread whose last message is a draft, or lies in the trash or spam, is not waiting.

One statement. Per account in reach (an account named, or every account of the caller's workspaces), the threads are
walked newest first down the thread_recent index (tenant, account, last_message_at DESC) from the cut-off, each
thread's last message read off message_in_thread (thread, date), until a page of waiting threads is found; the
accounts' pages are then merged. A page costs the threads walked to fill it, and the walk stops at the window's end
(AWAITING_REPLY_WINDOW_DAYS before the cut-off: a wait older than that is over): at worst, with nothing waiting, the
threads of that window (about 10 µs each; docs/mail.md has the figures), never the mailbox's whole history.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from django.db.models import F

from apps.accounts.models import Preferences
from apps.core.bounds import bounds
from apps.core.rows import binary_rows
from apps.mail.models import Folder, FolderKind, MailAccount, Message, Thread
from apps.mail.selectors import Reach
from apps.workspaces.models import Membership, Tenant, Workspace

# what a last message may not be to keep its thread waiting: not sent (a draft), or put away by the person
_NOT_WAITING = (FolderKind.DRAFTS.value, FolderKind.TRASH.value, FolderKind.SPAM.value)


@cache
def _awaiting_sql(*, restricted: bool, account: bool, after: bool, not_nudged: bool) -> str:
    m, f, a, w, t = (x._meta.db_table for x in (Message, Folder, MailAccount, Workspace, Thread))
    accounts = "a.tenant_id = %(tenant)s"
    if account:
        accounts += " AND a.id = %(account)s"
    if restricted:
        accounts += (
            f" AND a.workspace_id IN (SELECT w.id FROM {w} w"  # noqa: S608 (the model's own table name)
            " WHERE w.tenant_id = %(tenant)s AND w.name = ANY(%(workspaces)s))"
        )
    position = (
        "\n          AND (t.last_message_at < %(date)s OR (t.last_message_at = %(date)s AND t.id < %(pk)s))"
        if after
        else ""
    )
    nudged = "\n          AND t.awaiting_nudged_for IS DISTINCT FROM last.id" if not_nudged else ""
    return f"""
SELECT x.thread_id::text, x.account_id::text, x.subject, x.message_count, x.message_id::text, x.date,
       x.snippet, x.recipients, x.nudged_at, x.last_message_at
  FROM {a} a
  CROSS JOIN LATERAL (
       SELECT t.id AS thread_id, t.account_id, t.subject, t.message_count, t.last_message_at,
              t.awaiting_nudged_at AS nudged_at, last.id AS message_id, last.date, last.snippet,
              last.to_addresses::text AS recipients
         FROM {t} t
        CROSS JOIN LATERAL (
              SELECT m.id, m.date, m.snippet, m.to_addresses, m.sender_address, lf.kind
                FROM {m} m JOIN {f} lf ON lf.id = m.folder_id
               WHERE m.thread_id = t.id AND m.tenant_id = %(tenant)s
               ORDER BY m.date DESC NULLS LAST, m.id DESC LIMIT 1) last
        WHERE t.tenant_id = %(tenant)s AND t.account_id = a.id
          AND t.last_message_at < %(cutoff)s AND t.last_message_at >= %(since)s{position}
          AND last.kind <> ALL(%(not_waiting)s)
          AND (last.kind = 'sent'
               OR (a.email_address <> '' AND lower(last.sender_address) = lower(a.email_address))){nudged}
        ORDER BY t.last_message_at DESC, t.id DESC LIMIT %(limit)s) x
 WHERE {accounts}
 ORDER BY x.last_message_at DESC, x.thread_id DESC LIMIT %(limit)s
"""  # noqa: S608 (every name is the models' own; every value is a parameter)


def awaiting_reply(
    reach: Reach,
    *,
    cutoff: datetime,
    since: datetime,
    account: uuid.UUID | None = None,
    after: tuple[datetime, uuid.UUID] | None = None,
    limit: int,
    not_nudged: bool = False,
) -> list[dict[str, Any]]:
    """The threads in the caller's reach (of `account` when given) whose last message is the mailbox's own, dated
    before `cutoff` and not before `since` (the window, AWAITING_REPLY_WINDOW_DAYS), newest first (then by thread
    id), after the position `after` ((last date, thread id)), at most `limit`. not_nudged: only those the nudge has
    not yet brought back for that last message. Each row: the thread, its account, subject and message count, its
    last message (id, date, start, recipients), when it was nudged."""
    params: dict[str, Any] = {
        "tenant": reach.tenant.pk,
        "cutoff": cutoff,
        "since": since,
        "limit": limit,
        "not_waiting": list(_NOT_WAITING),
        "account": account,
        "workspaces": list(reach.workspaces) if reach.workspaces is not None else None,
    }
    if after is not None:
        params["date"], params["pk"] = after
    sql = _awaiting_sql(
        restricted=reach.workspaces is not None,
        account=account is not None,
        after=after is not None,
        not_nudged=not_nudged,
    )
    with binary_rows() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [
        {
            "thread_id": thread,
            "account_id": account_id,
            "subject": subject,
            "message_count": count,
            "last_message_id": message,
            "last_message_at": date,
            "snippet": snippet,
            "to": [{"name": r.get("name") or "", "address": r.get("address") or ""} for r in json.loads(to or "[]")],
            "nudged_at": nudged_at,
            "position": listed,
        }
        for thread, account_id, subject, count, message, date, snippet, to, nudged_at, listed in rows
    ]


def still_awaiting(tenant: Tenant, *, thread: uuid.UUID, message: uuid.UUID) -> bool:
    """Whether `message` is still the thread's last message (nothing came since) in a folder that keeps it waiting:
    the nudge's check, in its own transaction."""
    last = (
        Message.objects.for_tenant(tenant)
        .filter(thread_id=thread)
        .order_by(F("date").desc(nulls_last=True), "-id")
        .values_list("id", "folder__kind")
        .first()
    )
    return last is not None and last[0] == message and last[1] not in _NOT_WAITING


def received_in_thread(tenant: Tenant, *, thread: Thread) -> Message | None:
    """The thread's newest message from the other side that lies in its account's inbox or archive: what the
    nudge brings back to the top of the inbox (None when the person started the thread and nobody wrote yet)."""
    own = thread.account.email_address
    rows = (
        Message.objects.for_tenant(tenant)
        .filter(thread=thread, folder__kind__in=(FolderKind.INBOX, FolderKind.ARCHIVE))
        .select_related("folder")
        .order_by(F("date").desc(nulls_last=True), "-id")
    )
    if own:
        rows = rows.exclude(sender_address__iexact=own)
    return rows.first()


def nudges_due(now: datetime, limit: int) -> list[tuple[Tenant, str, str]]:
    """System work (the nudge beat): (tenant, thread id, its last message's id) of the threads waiting for reply
    that the nudge has not brought back for that message, for every person who turned the nudge on, within each
    tenant they belong to and the workspaces they reach there, after their own number of days; at most `limit`."""
    found: list[tuple[Tenant, str, str]] = []
    seen: set[str] = set()
    people = Preferences.objects.filter(awaiting_reply_nudge=True).values_list("user_id", "awaiting_reply_days")
    for user_id, days in people.order_by("user_id"):
        cutoff = now - timedelta(days=days or bounds.AWAITING_REPLY_DAYS)
        for membership in Membership.objects.filter(user_id=user_id).select_related("tenant").order_by("tenant_id"):
            reach = Reach(membership.tenant, membership.workspace_names(), names_an_account=False)
            since = cutoff - timedelta(days=bounds.AWAITING_REPLY_WINDOW_DAYS)
            for row in awaiting_reply(reach, cutoff=cutoff, since=since, limit=limit, not_nudged=True):
                if row["thread_id"] not in seen:
                    seen.add(row["thread_id"])
                    found.append((membership.tenant, row["thread_id"], row["last_message_id"]))
                if len(found) >= limit:
                    return found
    return found
