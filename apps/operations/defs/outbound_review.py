"""Outbound requests, the person's side (SPEC §10): approve_outbound is the `send` class (persons only, ceiling
never); reject_outbound, settle_outbound_request, list_outbound and get_outbound_attachment are persons-only
too. What an agent or a person asks for is in apps.operations.defs.outbound_requests.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from django.db.models import Q
from pydantic import Field

from apps.core import words
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.core.kinds import Scope
from apps.core.pages import cut_page, read_cursor
from apps.operations.context import Context
from apps.operations.defs.outbound_requests import RequestIn, RequestOut, request_out, the_request
from apps.operations.defs.shapes import Closed, FileOut, Id, MailBody, MailText, cut
from apps.operations.registry import ALWAYS, Bound, Callers, Ceiling, OpClass, Preview, operation
from apps.operations.targets import reach
from apps.outbound import execution, requests
from apps.outbound.models import OutboundAttachment, OutboundRequest, State
from apps.outbound.selectors import (
    PageFacts,
    access_outbound_file_by_id,
    outbound_file,
    page_facts,
    visible_outbound_requests,
)

# ---------------------------------------------------------------- approve / reject / list (persons)


class ApproveIn(RequestIn):
    content_hash: str | None = Field(
        default=None, max_length=64, description="the content_hash shown to the person; refused if it differs"
    )


def _approval(ctx: Context, data: ApproveIn) -> OutboundRequest:
    request = the_request(ctx, data)
    if data.content_hash is not None and data.content_hash != request.content_hash:
        raise OakenError("CONFLICT", "this request's content is not what was shown: reload it", field="content_hash")
    return request


@operation(
    name="approve_outbound",
    summary="Approve an outbound request waiting for you: exactly its content is queued for delivery.",
    input=ApproveIn,
    output=RequestOut,
    op_class=OpClass.SEND,
    ceiling=Ceiling.NEVER,
    targets=_approval,
    callers=Callers.PERSONS,
)
def approve_outbound(ctx: Context, data: ApproveIn) -> RequestOut:
    request: OutboundRequest = ctx.targets
    requests.approve(request, via="person", expected=State.AWAITING_APPROVAL, act=ctx)
    request.refresh_from_db()
    return request_out(request)


class RejectIn(RequestIn):
    reason: str | None = Field(
        default=None,
        max_length=10_000,
        description="why, in a few words (at most REJECT_REASON_MAX_CHARS characters): the agent that asked "
        "reads it with get_outbound_request",
    )


def _rejection(ctx: Context, data: RejectIn) -> OutboundRequest:
    limit = ctx.bounds.REJECT_REASON_MAX_CHARS
    if data.reason is not None and len(data.reason.strip()) > limit:
        raise OakenError("LIMIT_EXCEEDED", f"reason: at most {limit} characters", field="reason")
    return the_request(ctx, data)


@operation(
    name="reject_outbound",
    summary="Reject an outbound request waiting for you, optionally saying why: it is never sent, and the agent "
    "that asked reads your reason.",
    input=RejectIn,
    output=RequestOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    targets=_rejection,
    callers=Callers.PERSONS,
    bounds=(Bound("reason", "REJECT_REASON_MAX_CHARS"),),
)
def reject_outbound(ctx: Context, data: RejectIn) -> RequestOut:
    request: OutboundRequest = ctx.targets
    requests.reject(request, act=ctx, reason=(data.reason or "").strip())
    request.refresh_from_db()
    return request_out(request)


class SettleIn(RequestIn):
    outcome: Literal["sent", "not_sent"] = Field(
        description="sent: it reached its recipients after all; not_sent: it did not (either way nothing is resent)"
    )


def _settling(ctx: Context, data: SettleIn) -> OutboundRequest:
    request = the_request(ctx, data)
    if request.state != State.UNKNOWN:
        raise OakenError("CONFLICT", "only a request whose outcome is unknown can be settled", field="request_id")
    return request


def _settle_preview(ctx: Context, data: SettleIn) -> Preview:
    request: OutboundRequest = ctx.targets
    after = State.SENT if data.outcome == "sent" else State.FAILED
    subject = f" {words.named(request.subject)}" if request.subject else ""
    to = f"{subject} to {words.count(request.recipient_count, 'recipient')}"
    what = (
        f"Record that the e-mail{to} was sent after all. Nothing is sent again."
        if data.outcome == "sent"
        else f"Record that the e-mail{to} was not sent. Nothing is sent again."
    )
    return Preview(
        (Change(str(request.pk), {"state": request.state}, {"state": after}),),
        summary=what,
        title="Record how this e-mail ended?",
        verb="Record as sent" if data.outcome == "sent" else "Record as not sent",
    )


@operation(
    name="settle_outbound_request",
    summary="Record how an outbound request of unknown outcome ended: it was sent, or it was not (→ failed). "
    "Nothing is ever resent either way; you are recorded as the one who decided.",
    input=SettleIn,
    output=RequestOut,
    op_class=OpClass.MUTATE,
    scope=Scope.SEND,
    ceiling=Ceiling.NEVER,
    callers=Callers.PERSONS,
    preview=_settle_preview,
    confirm=ALWAYS,
    targets=_settling,
)
def settle_outbound_request(ctx: Context, data: SettleIn) -> RequestOut:
    request: OutboundRequest = ctx.targets
    execution.settle(request, data.outcome == "sent", act=ctx)
    request.refresh_from_db()
    return request_out(request)


class ListOutboundIn(Closed):
    state: Literal[tuple(State.values)] | None = Field(default=None, description="only requests in this state")  # type: ignore[valid-type]
    limit: int | None = Field(default=None, ge=1)
    cursor: str | None = Field(default=None, max_length=500, description="from the previous page's next_cursor")
    request_id: Id | None = Field(
        default=None,
        description="only this request, with its whole body (a list cuts long bodies): what a "
        "person reads in full before approving it",
    )


class OutboundFileOut(Closed):
    id: str = Field(description="the file's id, for get_outbound_attachment")
    filename: MailText
    content_type: str
    size: int


class OutboundDetail(Closed):
    request: RequestOut
    to: list[MailText]
    cc: list[MailText]
    bcc: list[MailText]
    subject: MailBody = Field(description="whole, as it is sent")
    body: MailBody
    body_truncated: bool
    body_chars: int = Field(description="the whole body's length")
    attachments: list[MailText]
    files: list[OutboundFileOut] = Field(description="each attachment as it is sent: name, type and size")
    in_reply_to: MailBody
    references: list[MailBody] = Field(description="the References header's message ids, as they are sent")
    requested_by: str
    principal: str
    door: str
    credential_kind: str
    credential_id: str = Field(description="the API key's or connection's id ('' for a person's own request)")
    credential: str | None = Field(description="the API key's or connection's name (None: a person's own request)")
    approved_via: str
    decided_by: str = Field(description="the person who approved or rejected it ('' if none did)")
    decided_at: datetime | None
    finished_at: datetime | None = Field(description="when it was sent, failed or was cancelled")
    error: str


class OutboundListOut(Closed):
    requests: list[OutboundDetail]
    next_cursor: str | None


def outbound_detail(
    ctx: Context, request: OutboundRequest, *, whole: bool = False, facts: PageFacts | None = None
) -> OutboundDetail:
    body, truncated, length = (
        (request.body, False, len(request.body)) if whole else cut(request.body, ctx.bounds.TEXT_MAX_CHARS)
    )
    if facts is None:
        facts = page_facts(tenant=ctx.tenant, rows=[request])
    files, names = facts.files.get(request.pk, []), facts.names
    return OutboundDetail(
        request=request_out(request, facts.retries),
        to=list(request.to),
        cc=list(request.cc),
        bcc=list(request.bcc),
        subject=request.subject,
        body=body,
        body_truncated=truncated,
        body_chars=length,
        attachments=[name for _, name, _, _ in files],
        files=[OutboundFileOut(id=str(i), filename=n, content_type=t, size=z) for i, n, t, z in files],
        in_reply_to=request.in_reply_to,
        references=list(request.references),
        requested_by=request.requested_by.email if request.requested_by else "",
        principal=request.principal,
        door=request.door,
        credential_kind=request.credential_kind,
        credential_id=request.credential_id,
        credential=names.get((request.credential_kind, request.credential_id)) if request.credential_id else None,
        approved_via=request.approved_via,
        decided_by=request.decided_by.email if request.decided_by else "",
        decided_at=request.decided_at,
        finished_at=request.finished_at,
        error=request.error,
    )


@operation(
    name="list_outbound",
    summary="Outbound requests (yours; an ADMIN sees the tenant's), newest first, a page at a time, with their "
    "full content.",
    input=ListOutboundIn,
    output=OutboundListOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    bounds=(Bound("limit", "PAGE_SIZE_MAX"),),
)
def list_outbound(ctx: Context, data: ListOutboundIn) -> OutboundListOut:
    rows = visible_outbound_requests(actor=ctx.caller, reach=reach(ctx)).select_related("requested_by", "decided_by")
    if data.request_id is not None:
        rows = rows.filter(pk=parse_id(data.request_id, "request_id"))
    if data.state is not None:
        rows = rows.filter(state=data.state)
    after = read_cursor(data.cursor, 2, _position)
    if after is not None:
        rows = rows.filter(Q(created_at__lt=after[0]) | Q(created_at=after[0], pk__lt=after[1]))
    limit = data.limit or ctx.bounds.PAGE_SIZE_DEFAULT
    page, next_cursor = cut_page(
        rows.order_by("-created_at", "-pk")[: limit + 1], limit, lambda r: (r.created_at.isoformat(), str(r.pk))
    )
    facts = page_facts(tenant=ctx.tenant, rows=page)  # a few queries for the whole page, never one per request
    whole = data.request_id is not None
    return OutboundListOut(
        requests=[outbound_detail(ctx, r, whole=whole, facts=facts) for r in page], next_cursor=next_cursor
    )


def _position(created_at: str, request_id: str) -> tuple[datetime, uuid.UUID]:
    when = datetime.fromisoformat(created_at)
    if when.tzinfo is None:
        raise ValueError("not a position")
    return when, uuid.UUID(request_id)


# ---------------------------------------------------------------- get_outbound_attachment (persons)


class OutboundAttachmentIn(Closed):
    attachment_id: Id


class OutboundAttachmentOut(FileOut):
    request_id: str


def _the_file(ctx: Context, data: OutboundAttachmentIn) -> OutboundAttachment:
    return access_outbound_file_by_id(data.attachment_id, actor=ctx.caller, reach=reach(ctx))


@operation(
    name="get_outbound_attachment",
    summary="One file of an outbound request (base64), exactly as it is sent: to read it before approving.",
    input=OutboundAttachmentIn,
    output=OutboundAttachmentOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    targets=_the_file,
    callers=Callers.PERSONS,
)
def get_outbound_attachment(ctx: Context, data: OutboundAttachmentIn) -> OutboundAttachmentOut:
    found: OutboundAttachment = ctx.targets
    return OutboundAttachmentOut.of(outbound_file(tenant=ctx.tenant, file=found), request_id=str(found.request_id))
