"""The hottest reads, in plain SQL straight into plain rows (no model instances, no ORM query to compile on each
call): what get_message shows of one message, in one statement, within the tenant and the caller's reach.
Table and column names are the models' own; every value is a parameter."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, NamedTuple

from django.db import connection

from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.core.rows import binary_rows
from apps.mail.models import Attachment, Folder, Label, MailAccount, Message, MessageLabel, Thread
from apps.mail.selectors import NAME_AN_ACCOUNT, Reach, in_reach
from apps.workspaces.models import Workspace

# what a summary shows (shapes.MessageSummary) of the message `m` in its folder `f`, labels ordered by name; _summary
# reads them back (ids as text: no UUID objects made only to be written out again)
_SUMMARY_COLUMNS = """m.id::text, m.account_id::text, m.thread_id::text, f.kind, f.name, m.subject, m.sender_name,
       m.sender_address, m.date, m.snippet, m.read, m.pinned, m.has_attachments,
       ARRAY(SELECT ml.label_id::text FROM {ml} ml JOIN {lb} l ON l.id = ml.label_id
              WHERE ml.message_id = m.id AND ml.tenant_id = m.tenant_id ORDER BY l.name),
       m.snoozed_until, m.returned_at"""
_SUMMARY_WIDTH = 16
# where a listing puts a message, newest first: the time a snooze brought it back, else its Date (models.LISTED_AT,
# the listing indexes' own expression); the Date shown is never changed
LISTED_AT = "coalesce(m.returned_at, m.date)"


@cache
def _message_sql(extra: str) -> str:
    m, f, a, w = (x._meta.db_table for x in (Message, Folder, MailAccount, Workspace))
    ml, lb, at = (x._meta.db_table for x in (MessageLabel, Label, Attachment))
    return f"""
SELECT {_SUMMARY_COLUMNS.format(ml=ml, lb=lb)},
       m.to_addresses::text, m.cc_addresses::text, m.message_id, left(m.text_body, %(text_max)s),
       char_length(m.text_body), m.html_body <> '', m.content_hash, w.name,
       (SELECT json_agg(json_build_array(x.id, x.filename, x.content_type, x.size, x.inline)
                        ORDER BY x.filename, x.id)::text
          FROM (SELECT y.id, y.filename, y.content_type, y.size, y.inline FROM {at} y
                 WHERE y.message_id = m.id AND y.tenant_id = m.tenant_id
                 ORDER BY y.filename, y.id LIMIT %(attachments_max)s) x),
       (SELECT count(*) FROM {at} x WHERE x.message_id = m.id AND x.tenant_id = m.tenant_id),
       {extra}
  FROM {m} m JOIN {f} f ON f.id = m.folder_id JOIN {a} a ON a.id = m.account_id JOIN {w} w ON w.id = a.workspace_id
 WHERE m.tenant_id = %(tenant)s AND m.id = %(id)s
"""  # noqa: S608 (every name is the models' own; every value is a parameter)


def message_detail(
    message_id: str,
    *,
    reach: Reach,
    text_max: int,
    attachments_max: int,
    field: str = "message_id",
    extra: tuple[str, dict[str, Any]] = ("NULL", {}),
) -> dict[str, Any]:
    """One message as get_message shows it (its text cut at text_max, with its full length), its label ids (by
    label name) and its first attachments_max attachments (by file name, with how many it has), and its content
    hash; NOT_FOUND or OUT_OF_SCOPE as the selectors.
    `extra`: one more column of the same statement (SQL over the message `m`, and its parameters), as "extra"
    (the layer above reads what another domain keeps about the message without a round trip of its own)."""
    params: dict[str, Any] = {
        "tenant": reach.tenant.pk,
        "id": parse_id(message_id, field),
        "text_max": text_max,
        "attachments_max": attachments_max,
    }
    params.update(extra[1])
    with binary_rows() as cursor:
        cursor.execute(_message_sql(extra[0]), params)
        row = cursor.fetchone()
    if row is None:
        raise OakenError.not_found(field)
    to, cc, header_id, text, length, has_html, content_hash, workspace, attachments, count, also = row[_SUMMARY_WIDTH:]
    in_reach(reach, workspace, field)
    return _summary(row[:_SUMMARY_WIDTH], ()) | {
        "to": json.loads(to),
        "cc": json.loads(cc),
        "message_id_header": header_id,
        "text": text,
        "truncated": length > len(text),
        "text_length": length,
        "has_html": has_html,
        "attachments": json.loads(attachments) if attachments else [],
        "attachment_count": count,
        "content_hash": content_hash,
        "extra": also,
    }


# ---------------------------------------------------------------- listings of message summaries

# The conditions a listing of summaries may name, each a fixed piece of SQL over the message `m` and the names of
# its parameters (the values a caller gives, in that order); the tenant's own condition is in every statement.
_WHERE: dict[str, tuple[str, tuple[str, ...]]] = {
    # the accounts of the workspaces a caller may reach (added whenever the reach is restricted)
    "reach": (
        "m.account_id IN (SELECT a.id FROM {a} a JOIN {w} w ON w.id = a.workspace_id"
        " WHERE a.tenant_id = %(tenant)s AND w.name = ANY(%(workspaces)s))",
        ("workspaces",),
    ),
    "account": ("m.account_id = %(account)s", ("account",)),
    "folder": ("m.folder_id = %(folder)s", ("folder",)),
    "label": (
        "EXISTS (SELECT FROM {ml} x WHERE x.message_id = m.id AND x.tenant_id = %(tenant)s AND x.label_id = %(label)s)",
        ("label",),
    ),
    "unread": ("NOT m.read", ()),
    "pinned": ("m.pinned", ()),
    "snoozed": ("m.snoozed_until IS NOT NULL", ()),
    "thread": ("m.thread_id = %(thread)s", ("thread",)),
    "ids": ("m.id = ANY(%(ids)s)", ("ids",)),
    # after a position of newest first (by LISTED_AT), undated last: (date, id), or (None, id) among the undated
    "older": (
        f"({LISTED_AT} < %(date)s OR ({LISTED_AT} = %(date)s AND m.id < %(pk)s) OR {LISTED_AT} IS NULL)",
        ("date", "pk"),
    ),
    "older_undated": (f"({LISTED_AT} IS NULL AND m.id < %(pk)s)", ("pk",)),
    # a saved view's filters (apps.search.saved), as search's scope has them: a part of the sender's address or
    # name, of a recipient's (To or Cc), read state, attachments, and dates (values from like_pattern)
    "sender": ("(m.sender_address ILIKE %(sender)s OR m.sender_name ILIKE %(sender)s)", ("sender",)),
    "recipient": (
        "(m.to_addresses::text ILIKE %(recipient)s OR m.cc_addresses::text ILIKE %(recipient)s)",
        ("recipient",),
    ),
    "read": ("m.read", ()),
    "has_attachment": ("m.has_attachments = %(has_attachment)s", ("has_attachment",)),
    "since": ("m.date >= %(since)s", ("since",)),
    # what wait_for_message waits for: mail that came in (not what the mailbox sent, nor its drafts) since a time
    # Oaken stored it, whose subject holds a part (a like_pattern)
    "incoming": ("f.kind NOT IN ('sent', 'drafts')", ()),
    "arrived_after": ("m.received_at > %(arrived_after)s", ("arrived_after",)),
    "subject": ("m.subject ILIKE %(subject)s", ("subject",)),
    "until": ("m.date < %(until)s", ("until",)),
}


def like_pattern(part: str) -> str:
    """An ILIKE pattern matching text that holds `part` as written (its %, _ and backslashes taken literally)."""
    return "%" + part.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


# a listing, newest first by LISTED_AT (so a message a snooze brought back is on top); a thread, by Date
_ORDER = {
    "newest": f"{LISTED_AT} DESC NULLS LAST, m.id DESC",
    "oldest": "m.date, m.id",
    "arrived": "m.received_at, m.id",
    "none": "m.id",
}


@cache
def _summaries_sql(where: tuple[str, ...], order: str, extra: tuple[str, ...]) -> str:
    m, f, a, w, ml, lb = (x._meta.db_table for x in (Message, Folder, MailAccount, Workspace, MessageLabel, Label))
    conditions = "".join(f"\n   AND {_WHERE[name][0].format(a=a, w=w, ml=ml)}" for name in where)
    also = "".join(f",\n       {sql}" for sql in extra)
    return f"""
SELECT {_SUMMARY_COLUMNS.format(ml=ml, lb=lb)}{also}
  FROM {m} m JOIN {f} f ON f.id = m.folder_id
 WHERE m.tenant_id = %(tenant)s{conditions}
 ORDER BY {_ORDER[order]} LIMIT %(limit)s
"""  # noqa: S608 (every name is the models' own or a fixed condition above; every value is a parameter)


def summaries(
    reach: Reach,
    where: Mapping[str, Any],
    *,
    order: str = "newest",
    limit: int | None = None,
    extra: Mapping[str, tuple[str, dict[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    """The summaries (shapes.MessageSummary) of the tenant's messages in the caller's reach that meet every
    condition of `where` (names of _WHERE, each with its value: a tuple for several parameters), in `order`, at
    most `limit`; in one statement, labels (ordered by name) included. `extra`: more columns of the same statement
    by key (SQL over the message `m`, and its parameters), each row's value under that key."""
    params: dict[str, Any] = {"tenant": reach.tenant.pk, "limit": limit}
    names = list(where)
    if reach.workspaces is not None:
        names.insert(0, "reach")
        params["workspaces"] = list(reach.workspaces)
    for name, value in where.items():
        wanted = _WHERE[name][1]
        params.update(zip(wanted, value if len(wanted) > 1 else (value,), strict=False))
    extra = extra or {}
    for _, more in extra.values():
        params.update(more)
    keys = tuple(extra)
    with binary_rows() as cursor:
        cursor.execute(_summaries_sql(tuple(names), order, tuple(sql for sql, _ in extra.values())), params)
        rows = cursor.fetchall()
    return [_summary(row, keys) for row in rows]


def _summary(row: Sequence[Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """A row of _SUMMARY_COLUMNS as a summary, with the columns after them under `keys`."""
    (pk, account, thread, kind, folder, subject, sender_name, sender_address, date, snippet, read, pinned,
     has_attachments, labels, snoozed_until, returned_at, *also) = row  # fmt: skip
    return {
        "id": pk,
        "account_id": account,
        "thread_id": thread,
        "folder": kind if kind != "custom" else folder,
        "subject": subject,
        "sender": {"name": sender_name, "address": sender_address} if sender_address else None,
        "date": date,
        "snippet": snippet,
        "read": read,
        "pinned": pinned,
        "has_attachments": has_attachments,
        "label_ids": labels,
        "snoozed_until": snoozed_until,
        "returned_at": returned_at,
        **dict(zip(keys, also, strict=True)),
    }


# ---------------------------------------------------------------- conversations

# how many of a conversation's senders a row names (the first ones to write, by date)
CONVERSATION_PARTICIPANTS_MAX = 4

# after a conversation's position (its latest date in the listing, newest first, undated last; then its thread id)
_THREADS_AFTER = {
    "older": "(h.latest < %(date)s OR (h.latest = %(date)s AND h.thread_id < %(pk)s) OR h.latest IS NULL)",
    "older_undated": "(h.latest IS NULL AND h.thread_id < %(pk)s)",
}


@cache
def _conversations_sql(where: tuple[str, ...], after: str | None) -> str:
    m, a, w, ml, t = (x._meta.db_table for x in (Message, MailAccount, Workspace, MessageLabel, Thread))
    conditions = "".join(f"\n     AND {_WHERE[name][0].format(a=a, w=w, ml=ml)}" for name in where)
    position = f"WHERE {_THREADS_AFTER[after]}" if after else ""
    return f"""
WITH hit AS (
  SELECT m.thread_id, max({LISTED_AT}) AS latest, max(m.date) AS dated
    FROM {m} m
   WHERE m.tenant_id = %(tenant)s{conditions}
   GROUP BY m.thread_id
), page AS (
  SELECT h.thread_id, h.latest, h.dated FROM hit h {position}
   ORDER BY h.latest DESC NULLS LAST, h.thread_id DESC LIMIT %(limit)s
)
SELECT p.thread_id::text, t.account_id::text, t.subject, p.latest, p.dated,
       (SELECT json_agg(json_build_array(x.id::text, x.snippet) ORDER BY x.date DESC NULLS LAST, x.id DESC)::text
          FROM (SELECT m.id, m.snippet, {LISTED_AT} AS date FROM {m} m  -- the listing's own messages of it
                 WHERE m.thread_id = p.thread_id AND m.tenant_id = %(tenant)s{conditions}
                 ORDER BY {LISTED_AT} DESC NULLS LAST, m.id DESC LIMIT %(ids_max)s) x),
       all_of.total, all_of.unread, all_of.attachments, all_of.pinned,
       ARRAY(SELECT DISTINCT ml.label_id::text FROM {ml} ml JOIN {m} m ON m.id = ml.message_id
              WHERE m.thread_id = p.thread_id AND m.tenant_id = %(tenant)s AND ml.tenant_id = %(tenant)s),
       (SELECT json_agg(json_build_array(s.name, s.address) ORDER BY s.first, s.address)::text
          FROM (SELECT m.sender_address AS address, max(m.sender_name) AS name, min(m.date) AS first
                  FROM {m} m WHERE m.thread_id = p.thread_id AND m.tenant_id = %(tenant)s AND m.sender_address <> ''
                 GROUP BY m.sender_address ORDER BY min(m.date) NULLS LAST, m.sender_address
                 LIMIT %(participants)s) s)
  FROM page p
  JOIN {t} t ON t.id = p.thread_id AND t.tenant_id = %(tenant)s
  CROSS JOIN LATERAL (SELECT count(*) AS total, count(*) FILTER (WHERE NOT m.read) AS unread,
                             coalesce(bool_or(m.has_attachments), false) AS attachments,
                             coalesce(bool_or(m.pinned), false) AS pinned
                        FROM {m} m WHERE m.thread_id = p.thread_id AND m.tenant_id = %(tenant)s) all_of
 ORDER BY p.latest DESC NULLS LAST, p.thread_id DESC
"""  # noqa: S608 (every name is the models' own or a fixed condition above; every value is a parameter)


def conversations(
    reach: Reach,
    where: Mapping[str, Any],
    *,
    after: tuple[str, Any] | None,
    limit: int,
    ids_max: int,
) -> list[dict[str, Any]]:
    """The conversations (threads) with a message in the caller's reach meeting every condition of `where` (as
    summaries reads them), newest first by the latest such message (undated last, then by thread id), after the
    position `after` (("older", (date, thread id)) or ("older_undated", thread id)), at most `limit`; in one
    statement. Each row: its subject, the listing's messages of it (newest first, at most ids_max; the snippet
    is the newest's), its message and unread counts, whether any has attachments or is pinned, every label of
    its messages, and its first senders (CONVERSATION_PARTICIPANTS_MAX)."""
    params: dict[str, Any] = {
        "tenant": reach.tenant.pk,
        "limit": limit,
        "ids_max": ids_max,
        "participants": CONVERSATION_PARTICIPANTS_MAX,
    }
    names = list(where)
    if reach.workspaces is not None:
        names.insert(0, "reach")
        params["workspaces"] = list(reach.workspaces)
    for name, value in where.items():
        wanted = _WHERE[name][1]
        params.update(zip(wanted, value if len(wanted) > 1 else (value,), strict=False))
    if after is not None:
        if after[0] == "older":
            params["date"], params["pk"] = after[1]
        else:
            params["pk"] = after[1]
    with binary_rows() as cursor:
        cursor.execute(_conversations_sql(tuple(names), after[0] if after else None), params)
        rows = cursor.fetchall()
    found = []
    for thread, account, subject, latest, dated, listed, total, unread, attachments, pinned, labels, senders in rows:
        messages = json.loads(listed) if listed else []
        found.append(
            {
                "thread_id": thread,
                "account_id": account,
                "subject": subject,
                "date": dated,
                "listed_at": latest,
                "snippet": messages[0][1] if messages else "",
                "latest_message_id": messages[0][0] if messages else None,
                "message_ids": [pk for pk, _ in messages],
                "message_count": total,
                "unread_count": unread,
                "has_attachments": attachments,
                "pinned": pinned,
                "label_ids": sorted(labels),
                "participants": [{"name": n or "", "address": a} for n, a in json.loads(senders or "[]")],
            }
        )
    return found


# ---------------------------------------------------------------- folder counts


@cache
def _counts_sql() -> str:
    m, f = (x._meta.db_table for x in (Message, Folder))
    return f"""
SELECT f.id::text, f.account_id, f.kind, f.name,
       (SELECT count(*) FROM {m} m
         WHERE m.tenant_id = f.tenant_id AND m.account_id = f.account_id AND m.folder_id = f.id),
       (SELECT count(*) FROM {m} m
         WHERE m.tenant_id = f.tenant_id AND m.account_id = f.account_id AND m.folder_id = f.id AND NOT m.read)
  FROM {f} f
 WHERE f.tenant_id = %(tenant)s AND f.account_id = ANY(%(accounts)s)
 ORDER BY f.kind, f.name
"""  # noqa: S608 (every name is the models' own; every value is a parameter)


def folder_counts(tenant_id: uuid.UUID, accounts: Sequence[uuid.UUID]) -> list[dict[str, Any]]:
    """Each folder of the tenant's `accounts` (checked in reach by the caller) with its total and unread counts, by
    kind and name, in one statement: each count read off an index (the listing's, and the unread messages' own),
    where counting a join of every message took 18 ms for a 10,000-message inbox (now 3-5)."""
    with connection.cursor() as cursor:
        cursor.execute(_counts_sql(), {"tenant": tenant_id, "accounts": list(accounts)})
        rows = cursor.fetchall()
    keys = ("id", "account_id", "kind", "name", "total", "unread")
    return [dict(zip(keys, row, strict=True)) for row in rows]


# ---------------------------------------------------------------- what a listing names


class Listing(NamedTuple):
    """The account, folder and label a listing (or a search) names, each checked in the caller's reach."""

    account: uuid.UUID | None
    folder: uuid.UUID | None
    label: uuid.UUID | None


@cache
def _listing_sql(ask_restricted: bool) -> str:
    """ask_restricted: whether the statement asks if the reach is restricted (only needed when it is restricted
    and no account or label is named: otherwise the accounts are not scanned for an answer nobody reads)."""
    a, w, f, lb = (x._meta.db_table for x in (MailAccount, Workspace, Folder, Label))
    restricted = (
        f"""EXISTS (SELECT FROM {a} a JOIN {w} w ON w.id = a.workspace_id
                WHERE a.tenant_id = %(tenant)s AND w.name <> ALL(%(workspaces)s::text[]))"""
        if ask_restricted
        else "false"
    )
    return f"""
SELECT acc.workspace, fol.id, lab.account_id, lab.workspace,
       {restricted}
  FROM (SELECT) one
  LEFT JOIN LATERAL (SELECT w.name AS workspace FROM {a} a JOIN {w} w ON w.id = a.workspace_id
                      WHERE a.tenant_id = %(tenant)s AND a.id = %(account)s::uuid) acc ON true
  LEFT JOIN LATERAL (SELECT f.id FROM {f} f
                      WHERE f.tenant_id = %(tenant)s AND f.account_id = %(account)s::uuid
                        AND ((f.kind = %(folder)s::text AND f.kind <> 'custom') OR f.name = %(folder)s::text)
                      ORDER BY f.kind = %(folder)s::text AND f.kind <> 'custom' DESC, f.id LIMIT 1) fol ON true
  LEFT JOIN LATERAL (SELECT l.account_id, w.name AS workspace
                       FROM {lb} l JOIN {a} a ON a.id = l.account_id JOIN {w} w ON w.id = a.workspace_id
                      WHERE l.tenant_id = %(tenant)s AND l.id = %(label)s::uuid) lab ON true
"""  # noqa: S608 (every name is the models' own; every value is a parameter)


def _named(value: str | None, field: str) -> uuid.UUID | None:
    """The id a caller named, or None; a malformed one names nothing (NOT_FOUND where it is checked)."""
    if value is None:
        return None
    try:
        return parse_id(value, field)
    except OakenError:
        return None


def listing_of(reach: Reach, *, account_id: str | None, label_id: str | None, folder: str | None) -> Listing:
    """What a listing names, in one statement: the label (NOT_FOUND, or OUT_OF_SCOPE by its account), the account
    (NOT_FOUND or OUT_OF_SCOPE; without one, refused when the reach is restricted, unless a label names it), and
    the folder of the account by kind (inbox, archive, …) or else by name (it needs the account; NOT_FOUND)."""
    account, label = _named(account_id, "account_id"), _named(label_id, "label_id")
    params = {
        "tenant": reach.tenant.pk,
        "workspaces": list(reach.workspaces) if reach.workspaces is not None else None,
        "account": account,
        "folder": folder,
        "label": label,
    }
    with connection.cursor() as cursor:
        ask = reach.names_an_account and reach.workspaces is not None and account_id is None and label_id is None
        cursor.execute(_listing_sql(ask), params)
        account_workspace, folder_pk, label_account, label_workspace, restricted = cursor.fetchone()
    if label_id is not None:
        if label_account is None:
            raise OakenError.not_found("label_id")
        in_reach(reach, label_workspace, "label_id")
    if account_id is not None:
        if account_workspace is None:
            raise OakenError.not_found("account_id")
        in_reach(reach, account_workspace, "account_id")
    elif label_id is None and restricted:
        raise OakenError("OUT_OF_SCOPE", NAME_AN_ACCOUNT, field="account_id")
    if folder is not None:
        if account_id is None:
            raise OakenError.invalid("folder", "needs account_id: folders belong to an account")
        if folder_pk is None:
            raise OakenError.not_found("folder")
    return Listing(account, folder_pk, label)
