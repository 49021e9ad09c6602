"""Waiting for reply: the threads where the mailbox's own side (the person, or their agent's approved send) wrote
last, some days ago, with no answer since (apps.mail.awaiting computes them at each read: an answer that arrives
ends the wait), and the nudge that brings such a thread back to the inbox once (apps.worker.awaiting, on the
internal door, for the persons who turned it on in set_preferences)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from pydantic import Field

from apps.accounts.selectors import saved_preferences
from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.core.pages import cut_page, read_cursor
from apps.mail import services
from apps.mail.awaiting import awaiting_reply, received_in_thread, still_awaiting
from apps.mail.models import Folder, FolderKind, MailAccount, Message, Thread
from apps.mail.selectors import access_folder_by_name
from apps.operations.context import Context
from apps.operations.defs.shapes import AddressOut, Closed, Id, MailText, Page
from apps.operations.registry import Bound, Callers, Ceiling, OpClass, operation
from apps.operations.targets import OptionalAccountIn, ThreadIn, an_account, reach, the_thread

_DAYS_BOUND = Bound("days", "AWAITING_REPLY_DAYS_MAX", "{field}: at most {maximum} days")


def days_of(ctx: Context) -> int:
    """After how many days a thread waits: the person's own number (or the one whom the calling agent acts for),
    else the AWAITING_REPLY_DAYS bound."""
    user = ctx.caller.user
    found = saved_preferences(user=user) if user is not None else None
    if found is not None and found.awaiting_reply_days:
        return min(found.awaiting_reply_days, ctx.bounds.AWAITING_REPLY_DAYS_MAX)
    return ctx.bounds.AWAITING_REPLY_DAYS


class ListAwaitingIn(Page):
    account_id: Id | None = Field(default=None, description="one account (an agent limited to some workspaces must)")
    days: int | None = Field(
        default=None,
        ge=1,
        description="threads the mailbox wrote last at least this many days ago; leave out for your own setting "
        "(set_preferences awaiting_reply_days)",
    )


def _account(ctx: Context, data: ListAwaitingIn) -> MailAccount | None:
    """The account named (in reach), or None for every account in reach (refused to an agent whose reach is
    partial, as list_conversations)."""
    return an_account(ctx, OptionalAccountIn(account_id=data.account_id))


class AwaitingOut(Closed):
    thread_id: str
    account_id: str
    subject: MailText
    message_count: int = Field(description="messages in the thread")
    last_message_id: str = Field(description="the mailbox's own last message, which nothing answered since")
    last_message_at: datetime | None = Field(description="its date")
    days_waiting: int = Field(description="whole days since it was sent")
    to: list[AddressOut] = Field(description="whom it was sent to (its To)")
    snippet: MailText = Field(description="its start")
    nudged_at: datetime | None = Field(
        description="when the nudge brought the thread back to the inbox for this wait (null: not yet, or off)"
    )


class AwaitingListOut(Closed):
    days: int = Field(description="the number of days this listing waited for")
    threads: list[AwaitingOut]
    next_cursor: str | None


def _after(date_raw: str, pk_raw: str) -> tuple[datetime, uuid.UUID]:
    return datetime.fromisoformat(date_raw), parse_id(pk_raw, "cursor")


def _position(row: dict[str, Any]) -> list[str]:
    return [row["position"].isoformat(), row["thread_id"]]


class AwaitingPage(NamedTuple):
    days: int
    rows: list[dict[str, Any]]
    next_cursor: str | None


def _page(ctx: Context, data: ListAwaitingIn) -> AwaitingPage:
    """The page and the cursor after it, read after every check and before the call's transaction opens."""
    size = data.size(ctx.bounds)
    days = data.days or days_of(ctx)
    account = ctx.targets
    cutoff = ctx.now - timedelta(days=days)
    rows = awaiting_reply(
        reach(ctx),
        cutoff=cutoff,
        since=cutoff - timedelta(days=ctx.bounds.AWAITING_REPLY_WINDOW_DAYS),
        account=account.pk if account is not None else None,
        after=read_cursor(data.cursor, 2, _after),
        limit=size + 1,
    )
    page, cursor = cut_page(rows, size, _position)
    for row in page:
        sent = row["last_message_at"]
        row["days_waiting"] = (ctx.now - sent).days if sent is not None else 0
        del row["position"]
    return AwaitingPage(days, page, cursor)


@operation(
    name="list_awaiting_reply",
    summary="List the threads waiting for reply: the mailbox's own side wrote last (sent by you or an agent's "
    "approved send) at least N days ago (your setting, or days; at most AWAITING_REPLY_WINDOW_DAYS more) and nobody "
    "answered since; newest first, a page at a time.",
    input=ListAwaitingIn,
    output=AwaitingListOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=_account,
    gather=_page,
    bounds=(Bound("limit", "PAGE_SIZE_MAX"), _DAYS_BOUND),
)
def list_awaiting_reply(ctx: Context, data: ListAwaitingIn) -> AwaitingListOut:
    found: AwaitingPage = ctx.gathered
    return AwaitingListOut.model_validate({"days": found.days, "threads": found.rows, "next_cursor": found.next_cursor})


# ---------------------------------------------------------------- the nudge (the system's)


class NudgeIn(ThreadIn):
    message_id: Id = Field(description="the mailbox's own last message the thread waits on, as the task read it")


class NudgeOut(Closed):
    thread_id: str
    returned_message_id: str | None = Field(description="the message brought to the top of the inbox (null: none)")
    nudged_at: datetime


class Nudging(NamedTuple):
    thread: Thread
    message: uuid.UUID
    received: Message | None
    inbox: Folder | None


def _nudging(ctx: Context, data: NudgeIn) -> Nudging:
    thread = the_thread(ctx, data)
    message = parse_id(data.message_id, "message_id")
    received = received_in_thread(ctx.tenant, thread=thread)
    inbox = None
    if received is not None and received.folder.kind == FolderKind.ARCHIVE:
        try:
            inbox = access_folder_by_name(FolderKind.INBOX, account=thread.account)
        except OakenError:
            inbox = None  # no inbox to bring it to: it stays where it is, listed from now
    return Nudging(thread, message, received, inbox)


@operation(
    name="nudge_awaiting_thread",
    summary="The waiting-for-reply nudge brings a thread still waiting on the mailbox's own last message back to "
    "the top of the inbox, marked (once per such message: a thread already nudged for it, or answered, is refused).",
    input=NudgeIn,
    output=NudgeOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    callers=Callers.INTERNAL,
    targets=_nudging,
)
def nudge_awaiting_thread(ctx: Context, data: NudgeIn) -> NudgeOut:
    nudging: Nudging = ctx.targets
    if not still_awaiting(ctx.tenant, thread=nudging.thread.pk, message=nudging.message):
        raise OakenError("CONFLICT", "the thread no longer waits on that message: answered, or written to since")
    if not services.nudge_awaiting(
        act=ctx,
        thread=nudging.thread,
        message_id=str(nudging.message),
        received=nudging.received,
        inbox=nudging.inbox,
    ):
        raise OakenError("CONFLICT", "already nudged for that message")
    returned = str(nudging.received.pk) if nudging.received is not None else None
    return NudgeOut(thread_id=str(nudging.thread.pk), returned_message_id=returned, nudged_at=ctx.now)
