"""What a plugin author needs to write an Oaken plugin, and nothing of Oaken itself (docs/plugins.md).

A plugin is an installed package with an entry point in the group `oaken.plugins` naming a `Plugin`:

    [project.entry-points."oaken.plugins"]
    calendar = "oaken_calendar:plugin"

Its operations are named `<plugin>.<name>`, take and return pydantic models (extra fields forbidden), and run
in a separate process that holds no database, Redis or secret credentials: a handler gets a `Service`
(its settings, the clock, and the mail parts the operation declared it reads, read by Oaken within the
caller's scope) and the validated input, and returns the output. This module imports no Django and no Oaken.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, WithJsonSchema

__all__ = [
    "MAIL_TEXT_MAX_CHARS",
    "MESSAGE_HEADERS",
    "MESSAGE_TEXT",
    "Closed",
    "MailText",
    "Operation",
    "Part",
    "Plugin",
    "Service",
]

# Text taken from mail (written by strangers) in an output: cut at this length, and fenced as data (never
# instructions) at Oaken's MCP door, like Oaken's own mail fields.
MAIL_TEXT_MAX_CHARS = 2000


def _cut(value: str) -> str:
    return value if len(value) <= MAIL_TEXT_MAX_CHARS else value[: MAIL_TEXT_MAX_CHARS - 1] + "…"


MailText = Annotated[str, AfterValidator(_cut), WithJsonSchema({"type": "string", "x-untrusted": True})]


class Closed(BaseModel):
    """A model that refuses fields it does not declare (every plugin input and output must be one)."""

    model_config = ConfigDict(extra="forbid")


# What an operation may declare it reads (`reads=`) besides the MIME types of attachments: a message's own text
# (its text/plain body, or the text of its HTML) and its headers ("Name: value" lines: From, To, Cc, Reply-To,
# Subject, Date, Message-ID, In-Reply-To, List-Id and the other headers Oaken keeps).
MESSAGE_TEXT = "message/text"
MESSAGE_HEADERS = "message/headers"


class Part(Closed):
    """A part of a message the caller may read, of a kind the operation declared (`reads`): an attachment of a
    declared MIME type, or the message's own text or headers."""

    message_id: str
    account_id: str
    subject: MailText
    sender: MailText
    date: datetime | None
    filename: MailText
    content_type: str  # the attachment's type; text/plain for a message's text, text/rfc822-headers for headers
    text: str  # the part decoded to text (mail text: treat it as data)
    kind: Literal["attachment", "text", "headers"] = "attachment"


@dataclass(frozen=True)
class Service:
    """What a handler has: its settings (the plugin's settings model), the moment of the call, and the parts."""

    settings: BaseModel
    now: datetime
    parts: tuple[Part, ...] = ()


_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


@dataclass(frozen=True)
class Operation:
    name: str  # without the plugin's prefix
    summary: str
    input: type[BaseModel]
    output: type[BaseModel]
    op_class: Literal["read", "mutate"]
    handler: Callable[[Service, Any], BaseModel]
    # a mutation says what it will do, in words, before it runs (the gate shows it for confirmation)
    preview: Callable[[Any], str] | None = None
    # what Oaken reads for the call (MIME types of attachments, MESSAGE_TEXT, MESSAGE_HEADERS): of the message
    # named by the input's `message_id`, else of the newest messages of the input's `account_id` (at most its
    # `limit` parts, and Oaken's bound)
    reads: tuple[str, ...] = ()


@dataclass
class Plugin:
    """A plugin: its name (the operations' prefix), version, settings model, health check and operations."""

    name: str
    version: str
    settings: type[BaseModel] = Closed
    # True when the plugin can work (it runs in the plugin's process, with no arguments, under a timeout)
    health: Callable[[], bool] | None = None
    operations: list[Operation] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError("a plugin's name is snake_case, up to 40 characters")

    def operation(
        self,
        *,
        name: str,
        summary: str,
        input: type[BaseModel],
        output: type[BaseModel],
        op_class: Literal["read", "mutate"] = "read",
        preview: Callable[[Any], str] | None = None,
        reads: tuple[str, ...] = (),
    ) -> Callable[[Callable[[Service, Any], BaseModel]], Callable[[Service, Any], BaseModel]]:
        """Declare an operation around its handler."""

        def define(handler: Callable[[Service, Any], BaseModel]) -> Callable[[Service, Any], BaseModel]:
            self.operations.append(Operation(name, summary, input, output, op_class, handler, preview, reads))
            return handler

        return define

    def find(self, name: str) -> Operation | None:
        return next((op for op in self.operations if op.name == name), None)

    def describe(self) -> dict[str, Any]:
        """What Oaken asks the plugin's process at start: names, classes and JSON schemas (Oaken checks it all)."""
        return {
            "name": self.name,
            "version": self.version,
            "settings_schema": self.settings.model_json_schema(),
            "operations": [
                {
                    "name": op.name,
                    "summary": op.summary,
                    "op_class": op.op_class,
                    "input_schema": op.input.model_json_schema(),
                    "output_schema": op.output.model_json_schema(mode="serialization"),
                    "has_preview": op.preview is not None,
                    "reads": list(op.reads),
                }
                for op in self.operations
            ],
        }
