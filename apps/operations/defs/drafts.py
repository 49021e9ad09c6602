"""Drafts, replies and forwards (SPEC §16): written in Oaken, sent only through an outbound request (§10)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, NamedTuple

from pydantic import Field, StringConstraints

from apps.core import words
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.mail.models import MailAccount, Message
from apps.mail.selectors import access_message_by_id
from apps.operations.context import Context
from apps.operations.defs.files import ATTACHMENTS_HELP, AttachmentIn, Files, attached_files
from apps.operations.defs.shapes import Closed, HeaderText, Id, MailBody, MailText, cut
from apps.operations.defs.snippets import filled, snippet_of, with_snippet
from apps.operations.registry import ALWAYS, NEVER, Bound, Ceiling, OpClass, Preview, operation
from apps.operations.targets import OptionalAccountIn, account_of, an_account, reach
from apps.outbound import drafts
from apps.outbound.compose import Recipients, check_attachment_limits, recipients
from apps.outbound.models import Draft
from apps.outbound.selectors import access_draft_by_id, draft_files, drafts_in_reach, forwardable_attachments

# Drafts hold at most this many addresses per field; the per-e-mail recipient limit applies when sending.
ADDRESSES_MAX = 500
Address = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=3, max_length=320),
    Field(json_schema_extra={"format": "email"}),
]
Subject = Annotated[HeaderText, StringConstraints(max_length=2000)]


class DraftAttachmentOut(Closed):
    id: str = Field(description="keep this file in update_draft's attachments with {draft_attachment_id: id}")
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
    body: MailBody
    body_truncated: bool
    body_length: int
    in_reply_to: MailText
    references: list[MailText]
    source_message_id: str | None
    attachments: list[DraftAttachmentOut]
    created_at: datetime
    updated_at: datetime


def draft_out(ctx: Context, draft: Draft) -> DraftOut:
    body, truncated, length = cut(draft.body, ctx.bounds.TEXT_MAX_CHARS)
    files = draft_files(tenant=ctx.tenant, draft=draft)
    return DraftOut(
        id=str(draft.pk),
        account_id=str(draft.account_id),
        to=list(draft.to),
        cc=list(draft.cc),
        bcc=list(draft.bcc),
        subject=draft.subject,
        body=body,
        body_truncated=truncated,
        body_length=length,
        in_reply_to=draft.in_reply_to,
        references=list(draft.references),
        source_message_id=str(draft.source_message_id) if draft.source_message_id else None,
        attachments=[
            DraftAttachmentOut(id=str(f.pk), filename=f.filename, content_type=f.content_type, size=len(f.content))
            for f in files
        ],
        created_at=draft.created_at,
        updated_at=draft.updated_at,
    )


def draft_of(ctx: Context, draft_id: str) -> Draft:
    return access_draft_by_id(draft_id, reach=reach(ctx))


def _check_body(ctx: Context, body: str | None) -> None:
    if body is not None and len(body) > ctx.bounds.SEND_BODY_MAX_CHARS:
        raise OakenError("LIMIT_EXCEEDED", f"body: at most {ctx.bounds.SEND_BODY_MAX_CHARS} characters", field="body")


# ---------------------------------------------------------------- create_draft

SNIPPET_HELP = (
    "a snippet of yours (list_snippets): its text, placeholders filled, goes where the body goes, before the "
    "body given with it"
)


def _snippet_body(
    ctx: Context, snippet_id: str | None, body: str, *, account: MailAccount, message: Message | None, subject: str
) -> str:
    """The body a draft gets: the one given, after a snippet's filled text when one is named (held to the bound)."""
    if snippet_id is None:
        return body
    text = filled(ctx, snippet_of(ctx, snippet_id), account=account, message=message, subject=subject)
    whole = with_snippet(text, body)
    _check_body(ctx, whole)
    return whole


# what sending would refuse, refused (and published) where a draft is written: its text and its number of files
BODY_BOUND = Bound("body", "SEND_BODY_MAX_CHARS")
MAIL_BOUNDS = (BODY_BOUND, Bound("attachments", "SEND_ATTACHMENTS_MAX"))


class CreateDraftIn(Closed):
    account_id: Id
    to: list[Address] = Field(default=[], max_length=ADDRESSES_MAX)
    cc: list[Address] = Field(default=[], max_length=ADDRESSES_MAX)
    bcc: list[Address] = Field(default=[], max_length=ADDRESSES_MAX)
    subject: Subject = ""
    body: str = ""
    attachments: list[AttachmentIn] = Field(default=[], max_length=100, description=ATTACHMENTS_HELP)
    snippet_id: Id | None = Field(default=None, description=SNIPPET_HELP)


class NewDraft(NamedTuple):
    account: MailAccount
    found: Recipients
    files: Files
    body: str


def _new_draft(ctx: Context, data: CreateDraftIn) -> NewDraft:
    account = account_of(ctx, data.account_id)
    found = recipients(data.to, data.cc, data.bcc)
    _check_body(ctx, data.body)
    body = _snippet_body(ctx, data.snippet_id, data.body, account=account, message=None, subject=data.subject)
    return NewDraft(account, found, attached_files(ctx, data.attachments), body)


def _create_preview(ctx: Context, data: CreateDraftIn) -> Preview:
    new: NewDraft = ctx.targets
    return Preview(
        (
            Change(
                "new draft",
                None,
                {"account_id": data.account_id, "recipients": new.found.count, "attachments": len(data.attachments)},
            ),
        )
    )


@operation(
    name="create_draft",
    summary="Write a new draft in an account (nothing is sent: sending is requested with send_draft).",
    input=CreateDraftIn,
    output=DraftOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_create_preview,
    confirm=NEVER,
    targets=_new_draft,
    bounds=MAIL_BOUNDS,
)
def create_draft(ctx: Context, data: CreateDraftIn) -> DraftOut:
    account, found, files, body = ctx.targets
    draft = drafts.create_draft(act=ctx, account=account, found=found, subject=data.subject, body=body, files=files)
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
        description="null: unchanged; a list replaces the draft's files (keep one with draft_attachment_id; "
        f"{ATTACHMENTS_HELP})",
    )


class DraftEdit(NamedTuple):
    draft: Draft
    files: Files | None  # None: the draft keeps its files


def _draft_edit(ctx: Context, data: UpdateDraftIn) -> DraftEdit:
    # in the change's transaction, the draft is held until it commits
    draft = access_draft_by_id(data.draft_id, reach=reach(ctx), lock=ctx.in_transaction)
    recipients(data.to or [], data.cc or [], data.bcc or [])
    _check_body(ctx, data.body)
    files = attached_files(ctx, data.attachments, draft) if data.attachments is not None else None
    return DraftEdit(draft, files)


def _updated(draft: Draft, data: UpdateDraftIn) -> dict[str, Any]:
    return drafts.edited_fields(draft, to=data.to, cc=data.cc, bcc=data.bcc, subject=data.subject, body=data.body)


def _update_preview(ctx: Context, data: UpdateDraftIn) -> Preview:
    edit: DraftEdit = ctx.targets
    changed = drafts.changed_fields(act=ctx, draft=edit.draft, new=_updated(edit.draft, data), files=edit.files)
    return Preview((Change(str(edit.draft.pk), None, {"changed": changed}),))


@operation(
    name="update_draft",
    summary="Change a draft's recipients, subject, body or files (fields left out stay as they are).",
    input=UpdateDraftIn,
    output=DraftOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_update_preview,
    confirm=NEVER,
    targets=_draft_edit,
    bounds=MAIL_BOUNDS,
)
def update_draft(ctx: Context, data: UpdateDraftIn) -> DraftOut:
    edit: DraftEdit = ctx.targets
    draft = drafts.update_draft(act=ctx, draft=edit.draft, new=_updated(edit.draft, data), files=edit.files)
    return draft_out(ctx, draft)


# ---------------------------------------------------------------- delete_draft


class DraftIn(Closed):
    draft_id: Id


class DraftDeletedOut(Closed):
    draft_id: str
    deleted: bool


def _the_draft(ctx: Context, data: DraftIn) -> Draft:
    return draft_of(ctx, data.draft_id)


def _delete_preview(ctx: Context, data: DraftIn) -> Preview:
    draft: Draft = ctx.targets
    subject = words.named(draft.subject) if draft.subject else "with no subject"
    return Preview(
        (Change(str(draft.pk), {"draft": "exists"}, {"draft": "deleted"}),),
        summary=f"Delete the draft {subject}. Requests already made from it keep their own copy.",
        title="Delete this draft?",
        verb="Delete draft",
    )


@operation(
    name="delete_draft",
    summary="Delete a draft (requests already made from it keep their own copy of the content).",
    input=DraftIn,
    output=DraftDeletedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_delete_preview,
    confirm=ALWAYS,
    targets=_the_draft,
)
def delete_draft(ctx: Context, data: DraftIn) -> DraftDeletedOut:
    draft: Draft = ctx.targets
    deleted = drafts.delete_draft(act=ctx, draft=draft)
    return DraftDeletedOut(draft_id=str(draft.pk), deleted=deleted)


# ---------------------------------------------------------------- list_drafts


class ListDraftsIn(OptionalAccountIn):
    limit: int | None = Field(default=None, ge=1, description="at most this many, newest first")


class DraftsOut(Closed):
    drafts: list[DraftOut]


@operation(
    name="list_drafts",
    summary="List drafts, newest first (of one account, or of every account in reach).",
    input=ListDraftsIn,
    output=DraftsOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=an_account,
    bounds=(Bound("limit", "PAGE_SIZE_MAX"),),
)
def list_drafts(ctx: Context, data: ListDraftsIn) -> DraftsOut:
    account: MailAccount | None = ctx.targets
    drafts = drafts_in_reach(reach=reach(ctx))
    if account is not None:
        drafts = drafts.filter(account_id=account.pk)
    limit = data.limit or ctx.bounds.PAGE_SIZE_DEFAULT
    return DraftsOut(drafts=[draft_out(ctx, d) for d in drafts.order_by("-updated_at")[:limit]])


# ---------------------------------------------------------------- reply_to_message


class ReplyIn(Closed):
    message_id: Id
    body: str = ""
    reply_all: bool = Field(default=False, description="also the original's other To and Cc recipients")
    quote: bool = Field(default=True, description="quote the original's text below the reply")
    snippet_id: Id | None = Field(default=None, description=SNIPPET_HELP + " (above the quoted text)")


class Sourced(NamedTuple):
    message: Message
    body: str


def _source(ctx: Context, data: ReplyIn | ForwardIn) -> Sourced:
    """The message replied to or forwarded, and the body its draft gets."""
    message = access_message_by_id(data.message_id, reach=reach(ctx))
    _check_body(ctx, data.body)
    body = _snippet_body(
        ctx, data.snippet_id, data.body, account=message.account, message=message, subject=message.subject
    )
    return Sourced(message, body)


def _reply_preview(ctx: Context, data: ReplyIn) -> Preview:
    message, _ = ctx.targets
    to, cc = drafts.reply_recipients(message, reply_all=data.reply_all)
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
    targets=_source,
    bounds=(BODY_BOUND,),
)
def reply_to_message(ctx: Context, data: ReplyIn) -> DraftOut:
    message, body = ctx.targets
    draft = drafts.reply_draft(act=ctx, message=message, body=body, reply_all=data.reply_all, quote=data.quote)
    return draft_out(ctx, draft)


# ---------------------------------------------------------------- forward_message


class ForwardIn(Closed):
    message_id: Id
    to: list[Address] = Field(
        default=[], max_length=ADDRESSES_MAX, description="may be left for later (update_draft); send_draft needs one"
    )
    cc: list[Address] = Field(default=[], max_length=ADDRESSES_MAX)
    body: str = Field(default="", description="a note above the forwarded message")
    attachments: bool = Field(default=True, description="forward the original's attachments")
    snippet_id: Id | None = Field(default=None, description=SNIPPET_HELP + " (above the forwarded message)")


class Forward(NamedTuple):
    message: Message
    found: Recipients
    body: str


def _forward(ctx: Context, data: ForwardIn) -> Forward:
    message, body = _source(ctx, data)
    return Forward(message, recipients(data.to, data.cc, []), body)


def _forward_preview(ctx: Context, data: ForwardIn) -> Preview:
    message, found, _ = ctx.targets
    return Preview((Change("new draft", None, {"forward_of": str(message.pk), "recipients": found.count}),))


@operation(
    name="forward_message",
    summary="Write a draft forwarding a message (its text and attachments) to new recipients. Nothing is sent.",
    input=ForwardIn,
    output=DraftOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_forward_preview,
    confirm=NEVER,
    targets=_forward,
    bounds=(BODY_BOUND,),
)
def forward_message(ctx: Context, data: ForwardIn) -> DraftOut:
    message, found, body = ctx.targets
    files = forwardable_attachments(tenant=ctx.tenant, message=message) if data.attachments else []
    try:
        # the bounds the draft's sending will hold it to: refused now, not after the person wrote to it
        check_attachment_limits(ctx.bounds, [f.size for f in files], "forwarded")
    except OakenError as error:
        raise OakenError(
            "LIMIT_EXCEEDED",
            f"attachments: {error.message.removeprefix('forwarded: ')}; forward without them (attachments: false)",
            field="attachments",
        ) from None
    draft = drafts.forward_draft(act=ctx, message=message, found=found, note=body, attachments=files)
    return draft_out(ctx, draft)
