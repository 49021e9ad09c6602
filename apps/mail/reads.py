"""The hottest reads, in plain SQL straight into plain rows (no model instances, no ORM query to compile on each
call): what get_message shows of one message, in one statement, within the tenant and the caller's reach.
Table and column names are the models' own; every value is a parameter."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from django.contrib.postgres.expressions import ArraySubquery
from django.db import connection
from django.db.models import OuterRef, QuerySet

from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.mail.models import Attachment, Folder, Label, MailAccount, Message, MessageLabel
from apps.mail.selectors import Reach, in_reach
from apps.workspaces.models import Tenant, Workspace


@cache
def _message_sql(extra: str) -> str:
    m, f, a, w = (x._meta.db_table for x in (Message, Folder, MailAccount, Workspace))
    ml, lb, at = (x._meta.db_table for x in (MessageLabel, Label, Attachment))
    return f"""
SELECT m.id, m.account_id, m.thread_id, f.kind, f.name, m.subject, m.sender_name, m.sender_address, m.date,
       m.snippet, m.read, m.pinned, m.has_attachments, m.to_addresses::text, m.cc_addresses::text, m.message_id,
       left(m.text_body, %(text_max)s), char_length(m.text_body), m.html_body <> '', m.content_hash, w.name,
       ARRAY(SELECT ml.label_id FROM {ml} ml JOIN {lb} l ON l.id = ml.label_id
              WHERE ml.message_id = m.id AND ml.tenant_id = m.tenant_id ORDER BY l.name),
       (SELECT json_agg(json_build_array(x.id, x.filename, x.content_type, x.size, x.inline)
                        ORDER BY x.filename)::text
          FROM {at} x WHERE x.message_id = m.id AND x.tenant_id = m.tenant_id),
       {extra}
  FROM {m} m JOIN {f} f ON f.id = m.folder_id JOIN {a} a ON a.id = m.account_id JOIN {w} w ON w.id = a.workspace_id
 WHERE m.tenant_id = %(tenant)s AND m.id = %(id)s
"""  # noqa: S608 (every name is the models' own; every value is a parameter)


def message_detail(
    message_id: str,
    *,
    reach: Reach,
    text_max: int,
    field: str = "message_id",
    extra: tuple[str, dict[str, Any]] = ("NULL", {}),
) -> dict[str, Any]:
    """One message as get_message shows it (its text cut at text_max, with its full length), its label ids (by
    label name) and attachments (by file name), and its content hash; NOT_FOUND or OUT_OF_SCOPE as the selectors.
    `extra`: one more column of the same statement (SQL over the message `m`, and its parameters), as "extra"
    (the layer above reads what another domain keeps about the message without a round trip of its own)."""
    params: dict[str, Any] = {"tenant": reach.tenant.pk, "id": parse_id(message_id, field), "text_max": text_max}
    params.update(extra[1])
    with connection.cursor() as cursor:
        cursor.execute(_message_sql(extra[0]), params)
        row = cursor.fetchone()
    if row is None:
        raise OakenError.not_found(field)
    (pk, account, thread, kind, folder, subject, sender_name, sender_address, date, snippet, read, pinned,
     has_attachments, to, cc, header_id, text, length, has_html, content_hash, workspace, labels,
     attachments, also) = row  # fmt: skip
    in_reach(reach, workspace, field)
    return {
        "id": str(pk),
        "account_id": str(account),
        "thread_id": str(thread),
        "folder": kind if kind != "custom" else folder,
        "subject": subject,
        "sender": {"name": sender_name, "address": sender_address} if sender_address else None,
        "date": date,
        "snippet": snippet,
        "read": read,
        "pinned": pinned,
        "has_attachments": has_attachments,
        "label_ids": [str(label) for label in labels],
        "to": json.loads(to),
        "cc": json.loads(cc),
        "message_id_header": header_id,
        "text": text,
        "truncated": length > len(text),
        "text_length": length,
        "has_html": has_html,
        "attachments": json.loads(attachments) if attachments else [],
        "content_hash": content_hash,
        "extra": also,
    }


# what a listing shows of each message (shapes.MessageSummary), read as values: no model rows, labels in the
# same statement
SUMMARY_FIELDS = (
    "id",
    "account_id",
    "thread_id",
    "folder__kind",
    "folder__name",
    "subject",
    "sender_name",
    "sender_address",
    "date",
    "snippet",
    "read",
    "pinned",
    "has_attachments",
    "content_hash",
)


def summary_rows(messages: QuerySet[Message], tenant: Tenant, **extra: Any) -> QuerySet[Message, dict[str, Any]]:
    """`messages` as the values a summary shows, each with its label ids (ordered by label name) as `label_list`,
    and any `extra` expressions (what the layer above reads about each message in the same statement)."""
    labels = MessageLabel.objects.for_tenant(tenant).filter(message=OuterRef("pk")).order_by("label__name")
    return messages.annotate(label_list=ArraySubquery(labels.values("label_id")), **extra).values(
        *SUMMARY_FIELDS, "label_list", *extra
    )


def summary_of(row: dict[str, Any]) -> dict[str, Any]:
    """A summary_rows row in the shape of shapes.MessageSummary (validated where the output is built)."""
    kind = row["folder__kind"]
    return {
        "id": str(row["id"]),
        "account_id": str(row["account_id"]),
        "thread_id": str(row["thread_id"]),
        "folder": kind if kind != "custom" else row["folder__name"],
        "subject": row["subject"],
        "sender": {"name": row["sender_name"], "address": row["sender_address"]} if row["sender_address"] else None,
        "date": row["date"],
        "snippet": row["snippet"],
        "read": row["read"],
        "pinned": row["pinned"],
        "has_attachments": row["has_attachments"],
        "label_ids": [str(label) for label in row["label_list"]],
    }
