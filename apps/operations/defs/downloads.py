"""Mail handed out whole, to download: a message's bytes exactly as received and its attachments' files. For a
person's own use: never offered to agents (ceiling never), each held to the raw-message bound."""

from __future__ import annotations

import base64
from typing import Literal

from apps.core.errors import OakenError
from apps.mail.mediatypes import media_type
from apps.mail.models import Attachment, Message
from apps.mail.selectors import access_attachment_by_id, attachment_file, raw_message_bytes
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, FileOut, Id
from apps.operations.registry import Ceiling, OpClass, operation
from apps.operations.targets import MessageIn, reach, the_message

# ---------------------------------------------------------------- get_attachment


class AttachmentIn(Closed):
    attachment_id: Id


class AttachmentFileOut(FileOut):
    message_id: str


def _the_attachment(ctx: Context, data: AttachmentIn) -> Attachment:
    return access_attachment_by_id(data.attachment_id, reach=reach(ctx))


@operation(
    name="get_attachment",
    summary="One attachment's file (base64), to download it. Never offered to agents.",
    input=AttachmentIn,
    output=AttachmentFileOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    targets=_the_attachment,
)
def get_attachment(ctx: Context, data: AttachmentIn) -> AttachmentFileOut:
    found: Attachment = ctx.targets
    if found.size > ctx.bounds.RAW_MESSAGE_MAX_BYTES:
        raise OakenError("LIMIT_EXCEEDED", "the attachment is larger than the raw-message bound")
    file = attachment_file(tenant=ctx.tenant, attachment=found)
    return AttachmentFileOut.of(file, content_type=media_type(file.content_type), message_id=str(found.message_id))


# ---------------------------------------------------------------- get_raw_message


class RawOut(Closed):
    message_id: str
    size: int
    encoding: Literal["base64"]
    data: str


@operation(
    name="get_raw_message",
    summary="The message's bytes exactly as received (base64). Never offered to agents.",
    input=MessageIn,
    output=RawOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    targets=the_message,
)
def get_raw_message(ctx: Context, data: MessageIn) -> RawOut:
    message: Message = ctx.targets
    content = raw_message_bytes(tenant=ctx.tenant, message=message)
    if len(content) > ctx.bounds.RAW_MESSAGE_MAX_BYTES:
        raise OakenError("LIMIT_EXCEEDED", "the raw message is larger than the raw-message bound")
    return RawOut(
        message_id=str(message.pk),
        size=len(content),
        encoding="base64",
        data=base64.b64encode(content).decode(),
    )
