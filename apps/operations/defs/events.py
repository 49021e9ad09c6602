"""The event feed (issue 41, SPEC §22): what happened in the tenant, ids only, read with a cursor.

`list_events` is the durable truth a consumer (an assistant, a script, a webhook's receiver recovering what it
missed) reads: every event after its cursor, in the order they happened, scoped exactly as a read of the mail
(SPEC §8): an agent sees the events of the workspaces it is granted and no other, and one whose grant leaves some
mailbox out names the account it asks about. An event says what happened and to which id; the consumer reads the
message, draft or request itself, through the gate.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from apps.core.kinds import Principal
from apps.events import feed
from apps.events.models import Event
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Id
from apps.operations.registry import Bound, Ceiling, OpClass, operation
from apps.operations.targets import account_of, reach
from apps.workspaces.models import Workspace

# what a webhook carries: the events of a workspace's mail
MailEventType = Literal[
    "message.received",
    "message.changed",
    "message.deleted",
    "draft.created",
    "draft.updated",
    "draft.deleted",
    "outbound.requested",
    "outbound.awaiting_approval",
    "outbound.approved",
    "outbound.queued",
    "outbound.sending",
    "outbound.sent",
    "outbound.failed",
    "outbound.unknown",
    "outbound.cancelled",
    "outbound.rejected",
    "approval.needed",
    "rule.applied",
    "account.sync_failed",
    "account.needs_reconnect",
    # families
    "message.",
    "draft.",
    "outbound.",
    "account.",
]
# and the persons' own (apps.events.feed.PERSONS_ONLY: never read by agents, never carried by webhooks): a webhook
# disabled, a send budget spent for the hour, an API key's or a connection's deadline near
EventType = Literal[
    MailEventType,
    "webhook.disabled",
    "budget.exhausted",
    "connection.expiring",
    # families
    "webhook.",
    "budget.",
    "connection.",
]


class ListEventsIn(Closed):
    after: int | None = Field(
        default=None,
        ge=0,
        description="the cursor: the seq of the last event you have (or the cursor a page gave); left out: from the "
        "oldest event kept. A cursor older than the retention answers CURSOR_EXPIRED, saying where to read on",
    )
    types: list[EventType] = Field(
        default_factory=list,
        max_length=30,
        description="only these types; a family ends with a dot ('outbound.' is every state of a request)",
    )
    account_id: Id | None = Field(default=None, description="only this mailbox's events")
    limit: int = Field(default=100, ge=1, le=10_000, description="at most this many (at most EVENTS_PAGE_MAX)")


class EventOut(Closed):
    id: str = Field(description="stable: a consumer deduplicates by it")
    seq: int = Field(description="the tenant's feed number: increasing, in the order events happened")
    at: datetime
    type: str
    workspace: str | None = Field(description="the workspace it concerns (null: the tenant as a whole)")
    account_id: str | None
    subject_id: str | None = Field(
        description="the id it reports: a message (message.*, rule.applied), a draft, an outbound request "
        "(outbound.*, approval.needed), the mailbox (account.*); persons only: a webhook (webhook.*), the API key or "
        "connection (connection.expiring) or the credential or person whose send budget ran out (budget.exhausted)"
    )
    data: dict[str, Any] = Field(description="more ids and fixed words (a request's state; what of a message changed)")


class EventsOut(Closed):
    events: list[EventOut]
    cursor: int = Field(description="read on with after=cursor (it moves past events your filters left out)")
    latest: int = Field(description="the newest event number of the tenant: at cursor == latest you have everything")


def _scope(ctx: Context, data: ListEventsIn) -> tuple[list[Any] | None, Any | None]:
    """The workspaces (ids; None: every one) and the account whose events the caller may read."""
    where = reach(ctx)
    if data.account_id is not None:
        account = account_of(ctx, data.account_id)
        return [account.workspace_id], account.pk
    where.require_account(None)
    if where.workspaces is None:
        return None, None
    ids = Workspace.objects.for_tenant(ctx.tenant).filter(name__in=where.workspaces).values_list("pk", flat=True)
    return list(ids), None


@operation(
    name="list_events",
    summary="What happened, in order, from a cursor: new mail, changed and deleted messages, drafts, every state of "
    "an outbound request, approvals needed, rules applied, mailboxes failing. Ids only: read the thing itself to "
    "see it. Poll with after=cursor.",
    input=ListEventsIn,
    output=EventsOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=_scope,
    bounds=(Bound("limit", "EVENTS_PAGE_MAX"),),
)
def list_events(ctx: Context, data: ListEventsIn) -> EventsOut:
    workspaces, account = ctx.targets
    page = feed.read(
        ctx.tenant,
        after=data.after,
        workspace_ids=workspaces,
        account_id=account,
        types=data.types,
        limit=data.limit,
        # a webhook's events are a person's, as webhooks are (SPEC §15)
        hidden=() if ctx.caller.principal == Principal.PERSON else feed.PERSONS_ONLY,
    )
    names = dict(Workspace.objects.for_tenant(ctx.tenant).values_list("pk", "name"))
    return EventsOut(events=[_out(e, names) for e in page.events], cursor=page.cursor, latest=page.latest)


def _out(event: Event, names: dict[Any, str]) -> EventOut:
    return EventOut(
        id=str(event.pk),
        seq=event.seq,
        at=event.at,
        type=event.type,
        workspace=names.get(event.workspace_id) if event.workspace_id is not None else None,
        account_id=str(event.account_id) if event.account_id is not None else None,
        subject_id=str(event.subject_id) if event.subject_id is not None else None,
        data=event.data,
    )
