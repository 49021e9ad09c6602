"""Plugins that read mail as an honest author would (tests/test_plugins.py): a message's own text and headers,
and a mutation with a preview."""

from __future__ import annotations

from oaken_plugin import MESSAGE_HEADERS, MESSAGE_TEXT, Closed, MailText, Plugin, Service
from pydantic import Field

reader = Plugin(name="reader", version="0.1")


class AccountIn(Closed):
    account_id: str = Field(min_length=1, max_length=64)
    limit: int = Field(default=50, ge=1, le=200)


class Seen(Closed):
    message_id: str
    kind: str
    sender: MailText
    first_line: MailText


class SeenOut(Closed):
    seen: list[Seen]


@reader.operation(
    name="senders",
    summary="Who wrote the account's newest mail, and how it begins.",
    input=AccountIn,
    output=SeenOut,
    reads=(MESSAGE_HEADERS, MESSAGE_TEXT),
)
def senders(service: Service, data: AccountIn) -> SeenOut:
    return SeenOut(
        seen=[
            Seen(message_id=p.message_id, kind=p.kind, sender=p.sender, first_line=(p.text.splitlines() or [""])[0])
            for p in service.parts
        ]
    )


notes = Plugin(name="notes", version="0.1")


class NoteIn(Closed):
    text: str = Field(min_length=1, max_length=200)


class NoteOut(Closed):
    kept: str


@notes.operation(
    name="keep",
    summary="Keep a note.",
    input=NoteIn,
    output=NoteOut,
    op_class="mutate",
    preview=lambda data: f"keep a note of {len(data.text)} characters",
)
def keep(service: Service, data: NoteIn) -> NoteOut:
    return NoteOut(kept=data.text)
