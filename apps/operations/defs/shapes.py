"""Input and output shapes shared by operation definitions. Every model forbids unknown fields."""

from __future__ import annotations

import base64
import re
import zoneinfo
from datetime import datetime
from functools import cache
from typing import Annotated, Self

from django.conf import settings
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, WithJsonSchema

from apps.core.bidi import mark_bidi_controls
from apps.core.bounds import Bounds, bounds
from apps.core.names import display_name_problem
from apps.mail.models import Folder
from apps.mail.selectors import StoredFile


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


Id = Annotated[str, StringConstraints(min_length=1, max_length=64)]
# Text taken from mail (written by strangers): the MCP door fences it as data, never instructions (SPEC §14).
_UNTRUSTED = WithJsonSchema({"type": "string", "x-untrusted": True})
# how a mail field cut at MAIL_FIELD_MAX_CHARS ends, saying how long it was
CUT_MARK = "…[cut: {length} characters in all]"


@cache
def _never_cut() -> int:
    """The least MAIL_FIELD_MAX_CHARS may be (its range, held by a system check): no value this short is ever cut,
    so most of a listing's texts pass without the setting being read."""
    least: int | None = settings.OPERATIONS_RANGES["MAIL_FIELD_MAX_CHARS"][1]
    return least or 0


def _capped(value: str) -> str:
    """At most MAIL_FIELD_MAX_CHARS, the mark included (so a value checked twice is cut once)."""
    if len(value) <= _never_cut():
        return value
    limit = bounds.MAIL_FIELD_MAX_CHARS
    if len(value) <= limit:
        return value
    mark = CUT_MARK.format(length=len(value))
    return value[: limit - len(mark)] + mark


# Short text from mail (a subject, a name, an address, a file name): its bidirectional controls made visible
# ("[U+202E]", apps.core.bidi: a name cannot pose as another), capped, and says so when cut.
MailText = Annotated[str, AfterValidator(mark_bidi_controls), AfterValidator(_capped), _UNTRUSTED]
# A message's or a draft's body: cut by TEXT_MAX_CHARS where it is built, with truncated and the full length.
MailBody = Annotated[str, _UNTRUSTED]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]

# every character Python's str.splitlines() breaks at: a header value holding one would break the header it is in
# (as regular-expression escapes, the same in Python and in the JSON Schema pattern that publishes the rule)
_LINE_BREAKS = "\\r\\n\\x0b\\x0c\\x1c-\\x1e\\x85\\u2028\\u2029"
_LINE_BREAK = re.compile(f"[{_LINE_BREAKS}]")


def _one_line(value: str) -> str:
    if _LINE_BREAK.search(value):
        raise ValueError("must be one line (a header value holds no line break)")
    return value


# Text that goes into a mail header (a subject): one line, so it can never start another header.
HeaderText = Annotated[str, AfterValidator(_one_line), Field(json_schema_extra={"pattern": f"^[^{_LINE_BREAKS}]*$"})]


def _display_name(value: str) -> str:
    """A display name for a From header: surrounding spaces go; what it may hold is apps.core.names' rule. Its
    length is the operation's Bound."""
    value = value.strip()
    problem = display_name_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


# A person's name, a mailbox's sender name: what a From header shows before the address ('' for none).
DisplayName = Annotated[
    str,
    AfterValidator(_display_name),
    Field(json_schema_extra={"pattern": "^[^\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029\\u202a-\\u202e\\u2066-\\u2069@]*$"}),
]


@cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def _known_zone(value: str) -> str:
    if value not in _zones():
        raise ValueError("is not an IANA time zone name")
    return value


# An IANA time zone name the server's tz database holds (which its updates change: beyond what a document says)
TimeZone = Annotated[str, StringConstraints(max_length=64), AfterValidator(_known_zone)]


class Empty(Closed):
    pass


class Page(Closed):
    limit: int | None = Field(default=None, ge=1, description="page size (default and maximum are settings)")
    cursor: str | None = Field(default=None, max_length=500, description="from the previous page's next_cursor")

    def size(self, bounds: Bounds) -> int:
        """How many rows a page holds: the limit asked for (held to PAGE_SIZE_MAX by a Bound), or the default."""
        return self.limit or bounds.PAGE_SIZE_DEFAULT


class MessageIds(Closed):
    message_ids: list[Id] = Field(min_length=1)


class AddressOut(Closed):
    name: MailText
    address: MailText


class MessageSummary(Closed):
    id: str
    account_id: str
    thread_id: str
    folder: str
    subject: MailText
    sender: AddressOut | None
    date: datetime | None
    snippet: MailText
    read: bool
    pinned: bool
    has_attachments: bool
    label_ids: list[str]
    snoozed_until: datetime | None = Field(
        description="snoozed: until when it is away from the inbox (snooze_messages); null when not snoozed"
    )
    returned_at: datetime | None = Field(
        description="when a snooze (or the waiting-for-reply nudge) last brought it back to the inbox: listings put "
        "it there, its date unchanged"
    )


def folder_label(folder: Folder) -> str:
    """How operations name a folder: its kind, or its name for custom folders."""
    return folder.kind if folder.kind != "custom" else folder.name


def cut(text: str, limit: int) -> tuple[str, bool, int]:
    """(text cut to limit, whether it was cut, full length)."""
    return (text[:limit], len(text) > limit, len(text))


class FileOut(Closed):
    """A file to download whole (base64): a message's attachment or an outbound request's file."""

    id: str
    filename: MailText
    content_type: MailText
    size: int
    content_base64: str

    @classmethod
    def of(cls, file: StoredFile, *, content_type: str | None = None, **owner: str) -> Self:
        """The shape of a stored file; `owner` names what it belongs to (message_id, request_id)."""
        return cls(
            id=str(file.id),
            filename=file.filename,
            content_type=file.content_type if content_type is None else content_type,
            size=len(file.content),
            content_base64=base64.b64encode(file.content).decode(),
            **owner,
        )
