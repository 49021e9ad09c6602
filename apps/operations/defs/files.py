"""The files of an e-mail or a draft as callers give them: new files inline (base64), or attachments of messages
the caller can read, held to the sending bounds (SEND_ATTACHMENTS_MAX, SEND_ATTACHMENT_MAX_BYTES,
SEND_ATTACHMENTS_TOTAL_MAX_BYTES) before anything is stored or proposed."""

from __future__ import annotations

from pydantic import Field

from apps.core.errors import OakenError
from apps.mail.selectors import access_attachment_by_id, attachment_file
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Id
from apps.operations.targets import reach
from apps.outbound.compose import (
    attachment_content_type,
    attachment_filename,
    check_attachment_limits,
    decode_base64,
    stored_attachment,
)
from apps.outbound.models import Draft
from apps.outbound.selectors import access_draft_file_by_id

# an e-mail's files in order: (file name, content type, bytes)
Files = tuple[tuple[str, str, bytes], ...]

ATTACHMENTS_HELP = (
    "files to attach (bounds: SEND_ATTACHMENTS_MAX files, SEND_ATTACHMENT_MAX_BYTES each, "
    "SEND_ATTACHMENTS_TOTAL_MAX_BYTES in all)"
)


class AttachmentIn(Closed):
    """One file of an e-mail: either a new file (filename and content_base64, optionally content_type), an
    attachment of a message the caller can read (attachment_id alone, as get_message lists it), or, in
    update_draft, a file the draft already holds (draft_attachment_id alone, as the draft lists it)."""

    filename: str | None = Field(default=None, max_length=255, description="a new file's name, e.g. report.pdf")
    content_type: str | None = Field(
        default=None,
        max_length=255,
        description="a new file's MIME type, e.g. application/pdf (default: application/octet-stream)",
    )
    content_base64: str | None = Field(
        default=None, description="a new file's bytes in base64 (RFC 4648, standard alphabet; line breaks allowed)"
    )
    attachment_id: Id | None = Field(
        default=None,
        description="instead of a new file: the id of an attachment of a message you can read (from "
        "get_message); its name, type and bytes are sent as they are",
    )
    draft_attachment_id: Id | None = Field(
        default=None,
        description="update_draft only, instead of a new file: the id of a file the draft already holds (from its "
        "attachments), kept as it is",
    )


def _new_file(ctx: Context, item: AttachmentIn, field: str) -> tuple[str, str, bytes]:
    if item.filename is None:
        raise OakenError.invalid(f"{field}.filename", "is required for a new file (or give attachment_id alone)")
    if item.content_base64 is None:
        raise OakenError.invalid(f"{field}.content_base64", "is required for a new file (or give attachment_id alone)")
    name = attachment_filename(item.filename, f"{field}.filename")
    ctype = attachment_content_type(item.content_type, f"{field}.content_type")
    return (
        name,
        ctype,
        decode_base64(item.content_base64, f"{field}.content_base64", ctx.bounds.SEND_ATTACHMENT_MAX_BYTES),
    )


def _stored_file(ctx: Context, attachment_id: str, field: str) -> tuple[str, str, bytes]:
    """An attachment of a message in the caller's reach, held to the sending bound per file."""
    found = access_attachment_by_id(attachment_id, reach=reach(ctx), field=field)
    limit = ctx.bounds.SEND_ATTACHMENT_MAX_BYTES
    if found.size > limit:
        raise OakenError("LIMIT_EXCEEDED", f"{field}: at most {limit} bytes per file", field=field)
    file = attachment_file(tenant=ctx.tenant, attachment=found)
    return (*stored_attachment(file.filename, file.content_type), file.content)


def _draft_file(ctx: Context, draft: Draft | None, draft_attachment_id: str, field: str) -> tuple[str, str, bytes]:
    """A file the draft being changed already holds (another draft's, or another tenant's, is NOT_FOUND)."""
    if draft is None:
        raise OakenError.invalid(field, "names a draft's own file: only update_draft keeps one")
    file = access_draft_file_by_id(draft_attachment_id, tenant=ctx.tenant, draft=draft, field=field)
    return file.filename, file.content_type, file.content


def attached_files(ctx: Context, items: list[AttachmentIn], draft: Draft | None = None) -> Files:
    """The e-mail's files, in order; the count is refused before anything is decoded or loaded. `draft`: the draft
    being changed, whose own files may be kept by id."""
    check_attachment_limits(ctx.bounds, [0] * len(items), "attachments")
    files = []
    for i, item in enumerate(items):
        field = f"attachments.{i}"
        new = item.filename is not None or item.content_type is not None or item.content_base64 is not None
        if item.attachment_id is not None and item.draft_attachment_id is not None:
            raise OakenError.invalid(field, "give attachment_id or draft_attachment_id, not both")
        if item.attachment_id is not None:
            if new:
                raise OakenError.invalid(field, "give attachment_id alone, or filename and content_base64")
            files.append(_stored_file(ctx, item.attachment_id, f"{field}.attachment_id"))
        elif item.draft_attachment_id is not None:
            if new:
                raise OakenError.invalid(field, "give draft_attachment_id alone, or filename and content_base64")
            files.append(_draft_file(ctx, draft, item.draft_attachment_id, f"{field}.draft_attachment_id"))
        else:
            files.append(_new_file(ctx, item, field))
        check_attachment_limits(ctx.bounds, [len(data) for _, _, data in files], "attachments")
    return tuple(files)
