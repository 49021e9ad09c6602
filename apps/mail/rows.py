"""What a parsed message becomes in the store's tables, worked out where it is parsed.

The store (apps.mail.store.MessageStore) writes messages a batch at a time, and what it does there is
only what needs the database or the whole batch: duplicates, threads, ids, placement. Everything else a
row holds (cleaned text, serialized address lists and headers, the References to keep, the attachment
rows) is computed here, beside the parsing: in the thread that fetches and parses the next batch, or in
an import's parser processes. So this module must not import Django.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from apps.mail.parsing.headers import Address
from apps.mail.parsing.message import parse_or_reason

# Keys of btree and GIN indexes must stay well under PostgreSQL's per-entry limit.
ID_MAX = 900
REFERENCES_MAX = 100
_SNIPPET_MAX = 200
_SENDER_ADDRESS_MAX = 320
_CONTENT_TYPE_MAX = 255


@dataclass(slots=True)
class MessageRow:
    """A message as the store writes it, but for its ids, thread and placement."""

    message_id: str
    in_reply_to: str
    # the References header's ids, ending with In-Reply-To when References lacks it
    references: list[str]
    subject: str
    date: datetime | None
    content_hash: str
    # sender_name .. reply_to_addresses, in the store's column order
    people: tuple[str, str, str, str, str, str]
    # text_body, html_body, snippet, size
    content: tuple[str, str, str, int]
    has_attachments: bool
    headers: str
    # filename, content_type, size, inline, content, extracted_text
    attachments: list[tuple[str, str, int, bool, bytes, str]]


def clean(text: str) -> str:
    """The text without NUL characters, which PostgreSQL text and jsonb cannot hold."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


@lru_cache(maxsize=8192)
def _address_list_json(addresses: tuple[Address, ...]) -> str:
    return json.dumps([{"name": clean(a.name), "address": clean(a.address)} for a in addresses])


def _addresses_json(addresses: list[Address]) -> str:
    # a mailbox's few correspondents make the same lists again and again
    return _address_list_json(tuple(addresses)) if addresses else "[]"


def row_or_reason(data: bytes, max_bytes: int, attachment_text_max: int) -> MessageRow | str:
    """The row of a message's raw bytes, or the fixed reason (never mail content) why it cannot be stored."""
    p = parse_or_reason(data, max_bytes)
    if isinstance(p, str):
        return p
    in_reply_to = clean(p.in_reply_to)[:ID_MAX]
    references = [clean(r)[:ID_MAX] for r in p.references[-REFERENCES_MAX:]]
    if in_reply_to and in_reply_to not in references:
        # RFC 5322 §3.6.4: a parent without References is referenced by its In-Reply-To
        references.append(in_reply_to)
    sender = p.sender
    return MessageRow(
        message_id=clean(p.message_id)[:ID_MAX],
        in_reply_to=in_reply_to,
        references=references,
        subject=clean(p.subject),
        date=p.date,
        content_hash=p.content_hash,
        people=(
            clean(sender.name) if sender else "",
            clean(sender.address)[:_SENDER_ADDRESS_MAX] if sender else "",
            _addresses_json(p.to),
            _addresses_json(p.cc),
            _addresses_json(p.bcc),
            _addresses_json(p.reply_to),
        ),
        content=(clean(p.text_body), clean(p.html_body), clean(p.snippet)[:_SNIPPET_MAX], p.size),
        has_attachments=any(not a.inline for a in p.attachments),
        headers=json.dumps({name: clean(value) for name, value in p.headers.items()}) if p.headers else "{}",
        attachments=[
            (
                clean(a.filename),
                a.content_type[:_CONTENT_TYPE_MAX],
                a.size,
                a.inline,
                a.content,
                clean(a.extracted_text[:attachment_text_max]),
            )
            for a in p.attachments
        ],
    )
