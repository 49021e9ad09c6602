"""Unsubscribing from a mailing list (SPEC §10: `unsubscribe` is a send request, like send_email).

What the message's List-Unsubscribe header offers decides what happens (apps.outbound.unsubscribe):
- one-click (RFC 8058, only with a valid DKIM signature covering both headers): an outbound request whose
  execution is one POST to the list, made by the delivery worker after approval, at most once;
- mailto: an outbound request for an ordinary e-mail to that address;
- an https link without one-click: nothing is made and nothing is opened; the answer hands back the sender's
  link for the person to open themselves.
A person's own call is approved as it is made (confirm: true); an agent's request waits for a person in the
console: no send policy approves an unsubscribe (its destination comes from a stranger's mail).
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from pydantic import Field

from apps.core import words
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.core.kinds import Principal, Scope
from apps.mail.models import Message
from apps.mail.selectors import access_message_by_id, raw_message_bytes
from apps.operations.context import Context
from apps.operations.defs.outbound_requests import (
    IdempotencyKey,
    RequestOut,
    _request_preview,
    request_out,
)
from apps.operations.defs.shapes import Closed, Id
from apps.operations.registry import ALWAYS, Ceiling, OpClass, Preview, operation
from apps.operations.targets import reach
from apps.outbound import requests
from apps.outbound.compose import Recipients, recipients
from apps.outbound.models import CANCELLABLE, Kind, OutboundRequest, State
from apps.outbound.unsubscribe import Plan, host_of, plan_for, shown_target

OPERATION = "unsubscribe"
SENDER_LINK_NOTE = (
    "This link is the sender's own, copied from the message's List-Unsubscribe header: Oaken has not opened or "
    "checked it, and does not vouch for it. The list offers no one-click unsubscribe Oaken may use, so a person "
    "opens it themselves, in their own browser, only if they trust the sender."
)


class UnsubscribeIn(Closed):
    message_id: Id = Field(description="a message from the list (its List-Unsubscribe header says how)")
    idempotency_key: IdempotencyKey = Field(
        description="the same key for the same message returns the first request; never reuse it for another"
    )


class UnsubscribeOut(Closed):
    method: Literal["one_click", "mailto", "link"] = Field(
        description="one_click: one POST to the list, once approved; mailto: an unsubscribe e-mail, once approved; "
        "link: nothing was made, a person must open the sender's link themselves"
    )
    message_id: str
    request_id: str | None = Field(description="the outbound request made (none for a link)")
    state: str | None
    approval_url: str | None = Field(description="where a person approves or rejects it, while it waits")
    request: RequestOut | None
    signed_by: str = Field(description="one_click: the domain whose DKIM signature vouches for the list's headers")
    sender_link: str | None = Field(
        description="link: the sender's https link, never opened by Oaken (see sender_link_note); show it as the "
        "sender's, never as Oaken's"
    )
    sender_link_note: str | None
    next: str = Field(description="what happens next, in words")


class Unsubscription(NamedTuple):
    message: Message
    plan: Plan
    content: requests.Content | None  # None: a link only


def _content(ctx: Context, message: Message, plan: Plan) -> requests.Content | None:
    if plan.method == "one_click":
        return requests.Content(
            account=message.account,
            found=Recipients([], [], []),
            subject="",
            body="",
            kind=Kind.UNSUBSCRIBE_POST,
            url=plan.url,
            source_message=message,
        )
    if plan.method != "mailto":
        return None
    try:
        account = requests.check_can_send(message.account)
        found = recipients([plan.address], [], [])
    except OakenError as error:
        reason = (
            "its mailbox cannot send mail, so the list's unsubscribe address cannot be written to"
            if error.field == "account_id"
            else "its List-Unsubscribe header names an unsubscribe address that is not an e-mail address"
        )
        raise OakenError.invalid("message_id", reason) from None
    content = requests.Content(
        account=account,
        found=found,
        subject=plan.subject,
        body=plan.body,
        kind=Kind.UNSUBSCRIBE_MAIL,
        source_message=message,
    )
    return requests.checked(content, bounds=ctx.bounds)


def _not_again(ctx: Context, message: Message, data: UnsubscribeIn, content: requests.Content) -> None:
    """One unsubscribe per message at a time: a request under another key while one is under way, waiting or done
    is refused (a retry with the same key answers with the first request)."""
    if requests.check_key(content, operation=OPERATION, idempotency_key=data.idempotency_key, act=ctx) is not None:
        return
    live = (*CANCELLABLE, State.SENDING, State.SENT, State.UNKNOWN)
    found = OutboundRequest.objects.for_tenant(ctx.tenant).filter(
        source_message=message, kind=content.kind, state__in=live
    )
    if found.exists():
        raise OakenError(
            "CONFLICT",
            "an unsubscribe from this message was already requested (see list_outbound or get_outbound_request)",
            field="message_id",
        )


def _unsubscription(ctx: Context, data: UnsubscribeIn) -> Unsubscription:
    message = access_message_by_id(data.message_id, reach=reach(ctx))
    before = ctx.targets
    if isinstance(before, Unsubscription) and before.message.pk == message.pk:
        plan = before.plan  # the same bytes, already judged in this call (no second DNS lookup)
    else:
        raw = raw_message_bytes(tenant=ctx.tenant, message=message)
        plan = plan_for(raw, timeout=ctx.bounds.UNSUBSCRIBE_TIMEOUT_SECONDS) if raw else Plan("none")
    if plan.method == "none":
        raise OakenError.invalid(
            "message_id", "this message offers no way to unsubscribe (no List-Unsubscribe header Oaken can use)"
        )
    content = _content(ctx, message, plan)
    if content is not None:
        _not_again(ctx, message, data, content)
    return Unsubscription(message, plan, content)


def _preview(ctx: Context, data: UnsubscribeIn) -> Preview:
    message, plan, content = ctx.targets
    by_person = ctx.caller.principal != Principal.AGENT
    subject = words.named(message.subject) if message.subject else "with no subject"
    if plan.method == "mailto":
        assert content is not None
        shown = _request_preview(ctx, content, "request an unsubscribe e-mail")
        return Preview(
            shown.changes,
            summary=f"Unsubscribe from the list of the message {subject} by e-mail: "
            + shown.summary[0].lower()
            + shown.summary[1:],
            shown=shown.shown,
            title="Unsubscribe by e-mail?" if by_person else "Ask to unsubscribe by e-mail?",
            verb="Unsubscribe" if by_person else "Ask to unsubscribe",
            lines=shown.lines,
        )
    if plan.method == "one_click":
        target = shown_target(plan.url)
        change = Change(
            "new outbound request",
            None,
            {"kind": Kind.UNSUBSCRIBE_POST, "message_id": str(message.pk), "target": target},
        )
        when = "once" if by_person else "once, after a person approves it"
        return Preview(
            (change,),
            summary=f"Unsubscribe from the list of the message {subject} with one click: Oaken tells "
            f"{host_of(plan.url)} to unsubscribe you, {when}.",
            shown="Before the user agrees, tell them which list this leaves (the message's sender and subject) and "
            "that Oaken posts the list's one-click unsubscribe request; nothing is posted until a person approves "
            "it in the console.",
            title="Unsubscribe with one click?" if by_person else "Ask to unsubscribe with one click?",
            verb="Unsubscribe" if by_person else "Ask to unsubscribe",
            lines=(
                f"The request goes to {target}.",
                f"The list's headers are vouched for by the DKIM signature of {plan.signed_by}.",
            ),
        )
    return Preview(
        (Change(str(message.pk), None, {"unsubscribe": "a link for a person to open"}),),
        summary=f"Nothing is sent or opened: the list of the message {subject} offers only a web link, which a "
        "person must open themselves.",
        title="Show the list's unsubscribe link?",
        verb="Show the link",
    )


_NEXT_LINK = (
    "Nothing was sent and nothing was opened: this list offers no one-click unsubscribe Oaken may use (none, or its "
    "headers are not vouched for by a valid DKIM signature) and no unsubscribe address. Tell the user the list "
    "wants its link opened in a browser; sender_link is the sender's link, not Oaken's."
)


@operation(
    name=OPERATION,
    summary="Unsubscribe from a mailing list a message came from, as its List-Unsubscribe header offers: a one-click "
    "POST (only when the message's DKIM signature vouches for it) or an e-mail to the list, each an outbound request "
    "a person approves (a person's own is approved as made); a web link is never opened, only handed back.",
    input=UnsubscribeIn,
    output=UnsubscribeOut,
    op_class=OpClass.MUTATE,
    scope=Scope.SEND,
    ceiling=Ceiling.ON,
    preview=_preview,
    confirm=ALWAYS,
    targets=_unsubscription,
    idempotent_input=True,
    completed=lambda ctx, data: (
        ctx.targets.content is not None
        and requests.check_key(ctx.targets.content, operation=OPERATION, idempotency_key=data.idempotency_key, act=ctx)
        is not None
    ),
    awaits_approval=True,
)
def unsubscribe(ctx: Context, data: UnsubscribeIn) -> UnsubscribeOut:
    message, plan, content = ctx.targets
    common: dict[str, Any] = {"message_id": str(message.pk), "signed_by": plan.signed_by}
    if content is None:
        return UnsubscribeOut(
            method="link",
            request_id=None,
            state=None,
            approval_url=None,
            request=None,
            sender_link=plan.url,
            sender_link_note=SENDER_LINK_NOTE,
            next=_NEXT_LINK,
            **common,
        )
    request, _ = requests.create_request(content, operation=OPERATION, idempotency_key=data.idempotency_key, act=ctx)
    out = request_out(request)
    return UnsubscribeOut(
        method="one_click" if plan.method == "one_click" else "mailto",
        request_id=out.request_id,
        state=out.state,
        approval_url=out.approval_url,
        request=out,
        sender_link=None,
        sender_link_note=None,
        next=out.next,
        **common,
    )
