"""Drafts, replies and forwards (SPEC §16): written in Oaken, sent only through an outbound request (§10)."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Annotated, Any

from django.db.models import QuerySet
from pydantic import Field, StringConstraints

from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.core.kinds import Principal
from apps.mail.models import Attachment, Message
from apps.operations.context import Context
from apps.operations.defs.files import ATTACHMENTS_HELP, AttachmentIn, Files, attached_files
from apps.operations.defs.mail_read import OptionalAccountIn, account_of, message_of, reach
from apps.operations.defs.shapes import Closed, HeaderText, Id, MailText, cut
from apps.operations.registry import ALWAYS, NEVER, Bound, Ceiling, OpClass, Preview, operation
from apps.outbound.compose import (
    check_attachment_limits,
    forward_subject,
    normalize_address,
    quoted,
    recipients,
    reply_subject,
    stored_attachment,
)
from apps.outbound.models import Draft, OutboundAttachment, OutboundRequest, State

# Drafts hold at most this many addresses per field; the per-e-mail recipient limit applies when sending.
ADDRESSES_MAX = 500
Address = Annotated[str, StringConstraints(strip_whitespace=True, min_length=3, max_length=320)]
Subject = Annotated[HeaderText, StringConstraints(max_length=2000)]
OPEN_STATES = (State.REQUESTED, State.AWAITING_APPROVAL, State.APPROVED, State.QUEUED, State.SENDING)


class DraftAttachmentOut(Closed):
    filename: MailText
    content_type: MailText
    size: int


class DraftOut(Closed):
    id: str
    account_id: str
    to: list[MailText]
    cc: list[MailText]
    bcc: list[MailText]
    subject: MailText
    body: MailText
    body_truncated: bool
    body_length: int
    in_reply_to: MailText
    references: list[MailText]
    source_message_id: str | None
    attachments: list[DraftAttachmentOut]
    created_at: datetime
    updated_at: datetime


def draft_out(ctx: Context, draft: Draft) -> DraftOut:
    body, truncated, length = cut(draft.body, ctx.bounds["TEXT_MAX_CHARS"])
    files = OutboundAttachment.objects.for_tenant(ctx.tenant).filter(draft=draft).order_by("position")
    return DraftOut(
        id=str(draft.pk), account_id=str(draft.account_id), to=list(draft.to), cc=list(draft.cc),
        bcc=list(draft.bcc), subject=draft.subject, body=body, body_truncated=truncated, body_length=length,
        in_reply_to=draft.in_reply_to, references=list(draft.references),
        source_message_id=str(draft.source_message_id) if draft.source_message_id else None,
        attachments=[DraftAttachmentOut(filename=f.filename, content_type=f.content_type, size=len(f.content))
                     for f in files],
        created_at=draft.created_at, updated_at=draft.updated_at,
    )  # fmt: skip


def drafts_in_reach(ctx: Context) -> QuerySet[Draft]:
    return Draft.objects.for_tenant(ctx.tenant).filter(account__in=reach(ctx).accounts())


def draft_of(ctx: Context, draft_id: str) -> Draft:
    """The draft, checked like a message: another tenant's id is NOT_FOUND, another workspace's OUT_OF_SCOPE."""

    def load() -> Draft:
        draft = Draft.objects.for_tenant(ctx.tenant).filter(pk=parse_id(draft_id, "draft_id")).first()
        if draft is None:
            raise OakenError.not_found("draft_id")
        account_of(ctx, str(draft.account_id))  # the workspace check, on the draft's field name
        return draft

    try:
        return ctx.remember(("draft", draft_id), load)
    except OakenError as error:
        if error.field == "account_id":
            raise OakenError(error.code, error.message.replace("account_id", "draft_id"), field="draft_id") from None
        raise


def _check_body(ctx: Context, body: str | None) -> None:
    if body is not None and len(body) > ctx.bounds["SEND_BODY_MAX_CHARS"]:
        raise OakenError("LIMIT_EXCEEDED", f"body: at most {ctx.bounds['SEND_BODY_MAX_CHARS']} characters",
                        field="body")  # fmt: skip


def _agent_may_edit(ctx: Context, draft: Draft) -> None:
    """A draft with a send under way or scheduled is not edited through an agent door: cancel it first."""
    if ctx.caller.principal != Principal.AGENT:
        return
    if OutboundRequest.objects.for_tenant(ctx.tenant).filter(draft=draft, state__in=OPEN_STATES).exists():
        raise OakenError("CONFLICT", "this draft has a send requested or scheduled: cancel it with "
                        "cancel_scheduled_send first", field="draft_id")  # fmt: skip


# ---------------------------------------------------------------- create_draft


class CreateDraftIn(Closed):
    account_id: Id
    to: list[Address] = Field(default=[], max_length=ADDRESSES_MAX)
    cc: list[Address] = Field(default=[], max_length=ADDRESSES_MAX)
    bcc: list[Address] = Field(default=[], max_length=ADDRESSES_MAX)
    subject: Subject = ""
    body: str = ""
    attachments: list[AttachmentIn] = Field(default=[], max_length=100, description=ATTACHMENTS_HELP)


def _draft_files(ctx: Context, items: list[AttachmentIn]) -> Files:
    # the data-scope check and the handler share one decoding
    files: Files = ctx.remember(("draft files",), lambda: attached_files(ctx, items))
    return files


def _attach(ctx: Context, draft: Draft, files: Files) -> None:
    """The files become the draft's, in this order (send_draft sends them as they are)."""
    OutboundAttachment.objects.bulk_create(
        OutboundAttachment(tenant=ctx.tenant, draft=draft, filename=name, content_type=ctype, content=data,
                           sha256=hashlib.sha256(data).hexdigest(), position=i)
        for i, (name, ctype, data) in enumerate(files)
    )  # fmt: skip


def _create_scope(ctx: Context, data: CreateDraftIn) -> None:
    account_of(ctx, data.account_id)
    recipients(data.to, data.cc, data.bcc)
    _check_body(ctx, data.body)
    _draft_files(ctx, data.attachments)


def _create_preview(ctx: Context, data: CreateDraftIn) -> Preview:
    found = recipients(data.to, data.cc, data.bcc)
    return Preview((Change("new draft", None, {"account_id": data.account_id, "recipients": found.count,
                                               "attachments": len(data.attachments)}),))  # fmt: skip


@operation(
    name="create_draft",
    summary="Write a new draft in an account (nothing is sent: sending is requested with send_draft).",
    input=CreateDraftIn,
    output=DraftOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_create_preview,
    confirm=NEVER,
    data_scope=_create_scope,
)
def create_draft(ctx: Context, data: CreateDraftIn) -> DraftOut:
    account = account_of(ctx, data.account_id)
    found = recipients(data.to, data.cc, data.bcc)
    draft = Draft.objects.create(
        tenant=ctx.tenant, account=account, to=found.to, cc=found.cc, bcc=found.bcc, subject=data.subject,
        body=data.body, created_at=ctx.now, updated_at=ctx.now,
    )  # fmt: skip
    files = _draft_files(ctx, data.attachments)
    _attach(ctx, draft, files)
    ctx.touch(draft.pk, None, {"draft": "created", "account_id": str(account.pk), "attachments": len(files)})
    return draft_out(ctx, draft)


# ---------------------------------------------------------------- update_draft


class UpdateDraftIn(Closed):
    draft_id: Id
    to: list[Address] | None = Field(default=None, max_length=ADDRESSES_MAX, description="null: unchanged")
    cc: list[Address] | None = Field(default=None, max_length=ADDRESSES_MAX, description="null: unchanged")
    bcc: list[Address] | None = Field(default=None, max_length=ADDRESSES_MAX, description="null: unchanged")
    subject: Subject | None = Field(default=None, description="null: unchanged")
    body: str | None = Field(default=None, description="null: unchanged")
    attachments: list[AttachmentIn] | None = Field(
        default=None,
        max_length=100,
        description=f"null: unchanged; a list replaces the draft's files ({ATTACHMENTS_HELP})",
    )


_EDITABLE = ("to", "cc", "bcc", "subject", "body")


def _update_scope(ctx: Context, data: UpdateDraftIn) -> None:
    draft_of(ctx, data.draft_id)
    recipients(data.to or [], data.cc or [], data.bcc or [])
    _check_body(ctx, data.body)
    if data.attachments is not None:
        _draft_files(ctx, data.attachments)


def _changed_fields(ctx: Context, draft: Draft, data: UpdateDraftIn) -> list[str]:
    new = _updated(draft, data)
    changed = [name for name in _EDITABLE if getattr(draft, name) != new[name]]
    if data.attachments is not None:
        held = OutboundAttachment.objects.for_tenant(ctx.tenant).filter(draft=draft).order_by("position")
        given = [(name, ctype, hashlib.sha256(content).hexdigest()) for name, ctype, content in
                 _draft_files(ctx, data.attachments)]  # fmt: skip
        if list(held.values_list("filename", "content_type", "sha256")) != given:
            changed.append("attachments")
    return changed


def _updated(draft: Draft, data: UpdateDraftIn) -> dict[str, Any]:
    found = recipients(
        draft.to if data.to is None else data.to,
        draft.cc if data.cc is None else data.cc,
        draft.bcc if data.bcc is None else data.bcc,
    )
    return {
        "to": found.to, "cc": found.cc, "bcc": found.bcc,
        "subject": draft.subject if data.subject is None else data.subject,
        "body": draft.body if data.body is None else data.body,
    }  # fmt: skip


def _update_preview(ctx: Context, data: UpdateDraftIn) -> Preview:
    draft = draft_of(ctx, data.draft_id)
    return Preview((Change(str(draft.pk), None, {"changed": _changed_fields(ctx, draft, data)}),))


@operation(
    name="update_draft",
    summary="Change a draft's recipients, subject, body or files (fields left out stay as they are).",
    input=UpdateDraftIn,
    output=DraftOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_update_preview,
    confirm=NEVER,
    data_scope=_update_scope,
)
def update_draft(ctx: Context, data: UpdateDraftIn) -> DraftOut:
    draft = Draft.objects.for_tenant(ctx.tenant).select_for_update().get(pk=draft_of(ctx, data.draft_id).pk)
    _agent_may_edit(ctx, draft)
    changed = _changed_fields(ctx, draft, data)
    for name, value in _updated(draft, data).items():
        setattr(draft, name, value)
    draft.updated_at = ctx.now
    draft.save()
    if "attachments" in changed:
        OutboundAttachment.objects.for_tenant(ctx.tenant).filter(draft=draft).delete()
        _attach(ctx, draft, _draft_files(ctx, data.attachments or []))
    ctx.touch(draft.pk, None, {"changed": changed})
    return draft_out(ctx, draft)


# ---------------------------------------------------------------- delete_draft


class DraftIn(Closed):
    draft_id: Id


class DraftDeletedOut(Closed):
    draft_id: str
    deleted: bool


def _draft_scope(ctx: Context, data: DraftIn) -> None:
    draft_of(ctx, data.draft_id)


def _delete_preview(ctx: Context, data: DraftIn) -> Preview:
    draft = draft_of(ctx, data.draft_id)
    return Preview((Change(str(draft.pk), {"draft": "exists"}, {"draft": "deleted"}),), summary="delete a draft")


@operation(
    name="delete_draft",
    summary="Delete a draft (requests already made from it keep their own copy of the content).",
    input=DraftIn,
    output=DraftDeletedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_delete_preview,
    confirm=ALWAYS,
    data_scope=_draft_scope,
)
def delete_draft(ctx: Context, data: DraftIn) -> DraftDeletedOut:
    draft = draft_of(ctx, data.draft_id)
    _agent_may_edit(ctx, draft)
    deleted, _ = Draft.objects.for_tenant(ctx.tenant).filter(pk=draft.pk).delete()
    if deleted:
        ctx.touch(draft.pk, {"draft": "exists"}, {"draft": "deleted"})
    return DraftDeletedOut(draft_id=str(draft.pk), deleted=bool(deleted))


# ---------------------------------------------------------------- list_drafts


class ListDraftsIn(OptionalAccountIn):
    limit: int | None = Field(default=None, ge=1, description="at most this many, newest first")


class DraftsOut(Closed):
    drafts: list[DraftOut]


def _list_scope(ctx: Context, data: ListDraftsIn) -> None:
    if data.account_id is not None:
        account_of(ctx, data.account_id)
    else:
        reach(ctx).require_account(None)


@operation(
    name="list_drafts",
    summary="List drafts, newest first (of one account, or of every account in reach).",
    input=ListDraftsIn,
    output=DraftsOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    data_scope=_list_scope,
    bounds=(Bound("limit", "PAGE_SIZE_MAX"),),
)
def list_drafts(ctx: Context, data: ListDraftsIn) -> DraftsOut:
    drafts = drafts_in_reach(ctx)
    if data.account_id is not None:
        drafts = drafts.filter(account_id=account_of(ctx, data.account_id).pk)
    limit = data.limit or ctx.bounds["PAGE_SIZE_DEFAULT"]
    return DraftsOut(drafts=[draft_out(ctx, d) for d in drafts.order_by("-updated_at")[:limit]])


# ---------------------------------------------------------------- reply_to_message


class ReplyIn(Closed):
    message_id: Id
    body: str = ""
    reply_all: bool = Field(default=False, description="also the original's other To and Cc recipients")
    quote: bool = Field(default=True, description="quote the original's text below the reply")


def _own(message: Message) -> str:
    return message.account.email_address.casefold()


def _reply_recipients(message: Message, reply_all: bool) -> tuple[list[str], list[str]]:
    mine = _own(message)
    if message.sender_address.casefold() == mine:  # replying to one's own message: to its recipients again
        to = [a["address"] for a in message.to_addresses]
    else:
        to = [a["address"] for a in message.reply_to_addresses] or [message.sender_address]
    cc: list[str] = []
    if reply_all:
        cc = [a["address"] for a in [*message.to_addresses, *message.cc_addresses]]
    keep = []
    for field, values in (("to", to), ("cc", cc)):
        good = []
        for value in values:
            try:
                address = normalize_address(value, field)
            except OakenError:
                continue  # a malformed address in the original is left out, never guessed at
            if address.casefold() != mine:
                good.append(address)
        keep.append(good)
    found = recipients(keep[0], keep[1], [])
    return found.to, found.cc


def _message_scope(ctx: Context, data: ReplyIn | ForwardIn) -> None:
    message_of(ctx, data.message_id)
    _check_body(ctx, data.body)


def _reply_preview(ctx: Context, data: ReplyIn) -> Preview:
    message = message_of(ctx, data.message_id)
    to, cc = _reply_recipients(message, data.reply_all)
    return Preview((Change("new draft", None, {"reply_to": str(message.pk), "recipients": len(to) + len(cc)}),))


@operation(
    name="reply_to_message",
    summary="Write a reply draft to a message: its sender (or Reply-To), Re: subject, threading headers, "
    "quoted text. Nothing is sent.",
    input=ReplyIn,
    output=DraftOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_reply_preview,
    confirm=NEVER,
    data_scope=_message_scope,
)
def reply_to_message(ctx: Context, data: ReplyIn) -> DraftOut:
    message = message_of(ctx, data.message_id)
    text = Message.objects.for_tenant(ctx.tenant).filter(pk=message.pk).values_list("text_body", flat=True).get()
    to, cc = _reply_recipients(message, data.reply_all)
    body = data.body
    if data.quote:
        sender = f"{message.sender_name} <{message.sender_address}>" if message.sender_name else message.sender_address
        body = f"{body.rstrip()}\n\n{quoted(text, date=message.date, sender=sender)}" if body else quoted(
            text, date=message.date, sender=sender)  # fmt: skip
    references = [r for r in message.references if r]
    if message.message_id and (not references or references[-1] != message.message_id):
        references.append(message.message_id)
    draft = Draft.objects.create(
        tenant=ctx.tenant, account=message.account, to=to, cc=cc, subject=reply_subject(message.subject),
        body=body, in_reply_to=message.message_id, references=references, source_message=message,
        created_at=ctx.now, updated_at=ctx.now,
    )  # fmt: skip
    ctx.touch(draft.pk, None, {"draft": "created", "reply_to": str(message.pk)})
    return draft_out(ctx, draft)


# ---------------------------------------------------------------- forward_message


class ForwardIn(Closed):
    message_id: Id
    to: list[Address] = Field(min_length=1, max_length=ADDRESSES_MAX)
    cc: list[Address] = Field(default=[], max_length=ADDRESSES_MAX)
    body: str = Field(default="", description="a note above the forwarded message")
    attachments: bool = Field(default=True, description="forward the original's attachments")


def _forward_scope(ctx: Context, data: ForwardIn) -> None:
    _message_scope(ctx, data)
    recipients(data.to, data.cc, [])


def _forward_preview(ctx: Context, data: ForwardIn) -> Preview:
    message = message_of(ctx, data.message_id)
    found = recipients(data.to, data.cc, [])
    return Preview((Change("new draft", None, {"forward_of": str(message.pk), "recipients": found.count}),))


def _forwarded_block(message: Message, text: str) -> str:
    def names(items: list[dict[str, str]]) -> str:
        return ", ".join(a.get("address", "") for a in items)

    sender = f"{message.sender_name} <{message.sender_address}>" if message.sender_name else message.sender_address
    lines = ["---------- Forwarded message ----------", f"From: {sender}"]
    if message.date:
        lines.append(f"Date: {message.date.isoformat()}")
    lines.append(f"Subject: {message.subject}")
    if message.to_addresses:
        lines.append(f"To: {names(message.to_addresses)}")
    if message.cc_addresses:
        lines.append(f"Cc: {names(message.cc_addresses)}")
    return "\n".join(lines) + "\n\n" + text


@operation(
    name="forward_message",
    summary="Write a draft forwarding a message (its text and attachments) to new recipients. Nothing is sent.",
    input=ForwardIn,
    output=DraftOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_forward_preview,
    confirm=NEVER,
    data_scope=_forward_scope,
)
def forward_message(ctx: Context, data: ForwardIn) -> DraftOut:
    message = message_of(ctx, data.message_id)
    text = Message.objects.for_tenant(ctx.tenant).filter(pk=message.pk).values_list("text_body", flat=True).get()
    found = recipients(data.to, data.cc, [])
    files = (
        list(Attachment.objects.for_tenant(ctx.tenant).filter(message=message, inline=False).order_by("id"))
        if data.attachments
        else []
    )
    try:
        # the bounds the draft's sending will hold it to: refused now, not after the person wrote to it
        check_attachment_limits(ctx.bounds, [f.size for f in files], "forwarded")
    except OakenError as error:
        raise OakenError("LIMIT_EXCEEDED", f"attachments: {error.message.removeprefix('forwarded: ')}; forward "
                        "without them (attachments: false)", field="attachments") from None  # fmt: skip
    note = data.body.rstrip()
    body = (note + "\n\n" if note else "") + _forwarded_block(message, text)
    draft = Draft.objects.create(
        tenant=ctx.tenant, account=message.account, to=found.to, cc=found.cc, subject=forward_subject(message.subject),
        body=body, source_message=message, created_at=ctx.now, updated_at=ctx.now,
    )  # fmt: skip
    _attach(ctx, draft, tuple((*stored_attachment(f.filename, f.content_type), bytes(f.content)) for f in files))
    ctx.touch(draft.pk, None, {"draft": "created", "forward_of": str(message.pk), "attachments": len(files)})
    return draft_out(ctx, draft)
