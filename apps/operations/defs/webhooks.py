"""Webhooks (issue 41, SPEC §22): a person's https endpoint told of the feed's events, signed by the Standard
Webhooks specification, in order, retried. For persons only (SPEC §15: never offered to agents, on any door).

A webhook is a hint that wakes a consumer: it reads what it needs through the gate and recovers what it missed from
`list_events`, the durable truth (docs/webhooks.md). Its secret is shown once, in the answer of the call that made
it (create, rotate), stored encrypted, and never in an audit event, an error or a log: the audit names where a
webhook delivers by its host only (the path and query may hold the consumer's own token).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from django.db.models import Count, Q
from pydantic import Field

from apps.core import words
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.operations.context import Context
from apps.operations.defs.events import MailEventType
from apps.operations.defs.shapes import Closed, Empty, Id
from apps.operations.registry import ALWAYS, Bound, Callers, Ceiling, OpClass, Preview, operation
from apps.webhooks import services
from apps.webhooks.models import DeliveryState, Webhook, WebhookDelivery, WebhookState
from apps.webhooks.selectors import access_event_for, access_webhook_by_id, visible_webhooks

# https, a host (a name or an address; an IPv6 one in brackets), an optional port, then printable ASCII without a
# fragment: the shape, published; the rest (a port that exists, an address that is not loopback or private unless
# the operator allows it) is checked by apps.webhooks.services.endpoint_problem, naming the field
URL_PATTERN = r"^https://([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?([/?][!-\"$-~]*)?$"
_URL: Any = Field(
    min_length=1,
    max_length=services.URL_MAX_CHARS,
    pattern=URL_PATTERN,
    description="where deliveries are POSTed: an https URL, with a port that exists, at an address that is not "
    "loopback or private (unless the operator allows them)",
)
WorkspaceName = Annotated[str, Field(min_length=1, max_length=100)]
_TYPES: Any = Field(
    default_factory=list,
    max_length=30,
    description="the events it is told of: exact types, or a family ending with a dot ('outbound.'), as "
    "list_events takes them; empty: every type",
)
_WORKSPACES: Any = Field(
    default_factory=list,
    max_length=50,
    description="workspace names; empty: every workspace you reach. Only workspaces you still reach are delivered",
)


class WebhookOut(Closed):
    id: str
    url: str
    description: str
    types: list[str]
    workspaces: list[str]
    state: Literal["active", "disabled"]
    disabled_reason: Literal["", "failing", "by_person"] = Field(
        description="why it is disabled: 'failing' (its endpoint failed every delivery for a day: the feed has a "
        "webhook.disabled event), 'by_person'; '' while active"
    )
    disabled_at: datetime | None
    failing_since: datetime | None = Field(description="since when its deliveries fail (null: the last succeeded)")
    last_success_at: datetime | None
    previous_secret_valid_until: datetime | None = Field(
        description="after a rotation: until when the previous secret still signs beside the new one"
    )
    pending: int = Field(description="deliveries waiting to be sent")
    mine: bool = Field(description="yours (an ADMIN also sees the tenant's other webhooks)")
    created_at: datetime


def webhook_out(row: Webhook, ctx: Context, pending: int | None = None) -> WebhookOut:
    if pending is None:
        pending = WebhookDelivery.objects.for_tenant(ctx.tenant).filter(webhook=row, state="pending").count()
    return WebhookOut(
        id=str(row.pk),
        url=row.url,
        description=row.description,
        types=list(row.types),
        workspaces=list(row.workspaces),
        state=row.state,  # type: ignore[arg-type]
        disabled_reason=row.disabled_reason,  # type: ignore[arg-type]
        disabled_at=row.disabled_at,
        failing_since=row.failing_since,
        last_success_at=row.last_success_at,
        previous_secret_valid_until=row.previous_until
        if row.previous_until is not None and row.previous_until > ctx.now
        else None,
        pending=pending,
        mine=row.user_id == getattr(ctx.caller.user, "pk", None),
        created_at=row.created_at,
    )


def _checked_url(url: str) -> None:
    if problem := services.endpoint_problem(url):
        raise OakenError.invalid("url", problem)


def _checked_workspaces(names: list[str]) -> list[str]:
    if any(not name or len(name) > 100 for name in names):
        raise OakenError.invalid("workspaces", "workspace names are 1 to 100 characters")
    return list(dict.fromkeys(names))


def _what(types: list[str]) -> str:
    """'every event', 'message received and all outbound events': the types in words."""
    if not types:
        return "every event"
    said = ("all " + t[:-1] if t.endswith(".") else t.replace(".", " ").replace("_", " ") for t in types)
    return words.listed(said) + " events"


# --- create ------------------------------------------------------------------------------------------------


class CreateWebhookIn(Closed):
    url: str = _URL
    types: list[MailEventType] = _TYPES
    workspaces: list[WorkspaceName] = _WORKSPACES
    description: str = Field(default="", max_length=200)


class CreatedWebhookOut(Closed):
    webhook: WebhookOut
    secret: str = Field(
        description="the signing secret (whsec_…), shown this once: verify each delivery's webhook-signature with it"
    )


def _room(ctx: Context, data: CreateWebhookIn) -> None:
    _checked_url(data.url)
    _checked_workspaces(data.workspaces)
    mine = Webhook.objects.for_tenant(ctx.tenant).filter(user=ctx.caller.user).count()
    if mine >= ctx.bounds.WEBHOOKS_MAX:
        raise OakenError(
            "LIMIT_EXCEEDED",
            f"you have {ctx.bounds.WEBHOOKS_MAX} webhooks, the most one person keeps: delete one first",
        )


def _create_preview(ctx: Context, data: CreateWebhookIn) -> Preview:
    host = services.endpoint_host(data.url)
    return Preview(
        (Change("new webhook", None, {"host": host, "types": data.types, "workspaces": data.workspaces}),),
        summary=f"Send {_what(list(data.types))} of {words.workspaces(data.workspaces)} to {words.named(host)}, "
        "signed with a new secret that is shown once.",
        title="Create this webhook?",
        verb="Create webhook",
        lines=(
            f"Deliveries go to {words.named(host)}.",
            "Only events of workspaces you reach are sent, ids only, never mail text.",
        ),
    )


@operation(
    name="create_webhook",
    summary="Create a webhook: an https endpoint told of events (ids only), signed (Standard Webhooks). Its secret "
    "is shown once.",
    input=CreateWebhookIn,
    output=CreatedWebhookOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_create_preview,
    confirm=ALWAYS,
    targets=_room,
    returns_secret=True,
    callers=Callers.PERSONS,
)
def create_webhook(ctx: Context, data: CreateWebhookIn) -> CreatedWebhookOut:
    assert ctx.caller.user is not None
    row, secret = services.create_webhook(
        tenant=ctx.tenant,
        user=ctx.caller.user,
        url=data.url,
        description=data.description,
        types=list(dict.fromkeys(data.types)),
        workspaces=_checked_workspaces(data.workspaces),
        now=ctx.now,
    )
    ctx.touch(row.pk, None, {"host": services.endpoint_host(row.url), "types": row.types, "workspaces": row.workspaces})
    return CreatedWebhookOut(webhook=webhook_out(row, ctx, pending=0), secret=secret)


# --- list --------------------------------------------------------------------------------------------------


class WebhooksOut(Closed):
    webhooks: list[WebhookOut]


@operation(
    name="list_webhooks",
    summary="Your webhooks (an ADMIN sees the tenant's): where they deliver, what, their state and failures; never "
    "their secrets.",
    input=Empty,
    output=WebhooksOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    callers=Callers.PERSONS,
)
def list_webhooks(ctx: Context, data: Empty) -> WebhooksOut:
    rows = visible_webhooks(actor=ctx.caller).annotate(
        waiting=Count("deliveries", filter=Q(deliveries__state=DeliveryState.PENDING))
    )
    return WebhooksOut(webhooks=[webhook_out(r, ctx, pending=r.waiting) for r in rows.order_by("-created_at")])


# --- update ------------------------------------------------------------------------------------------------


class UpdateWebhookIn(Closed):
    webhook_id: Id
    url: str | None = Field(
        default=None,
        min_length=1,
        max_length=services.URL_MAX_CHARS,
        pattern=URL_PATTERN,
        description="a new endpoint, as create_webhook takes it",
    )
    types: list[MailEventType] | None = Field(default=None, max_length=30)
    workspaces: list[WorkspaceName] | None = Field(default=None, max_length=50)
    description: str | None = Field(default=None, max_length=200)
    enabled: bool | None = Field(
        default=None,
        description="false: stop delivering (what is pending is given up); true: deliver again from the newest "
        "event on (read what happened meanwhile from list_events)",
    )


def _own(ctx: Context, data: UpdateWebhookIn | RotateWebhookSecretIn | RedeliverEventIn) -> Webhook:
    return access_webhook_by_id(data.webhook_id, actor=ctx.caller, own=True)


def _update_target(ctx: Context, data: UpdateWebhookIn) -> Webhook:
    row = _own(ctx, data)
    if data.url is not None:
        _checked_url(data.url)
    if data.workspaces is not None:
        _checked_workspaces(data.workspaces)
    return row


def _update_fields(data: UpdateWebhookIn) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if data.url is not None:
        fields["url"] = data.url
    if data.types is not None:
        fields["types"] = list(dict.fromkeys(data.types))
    if data.workspaces is not None:
        fields["workspaces"] = _checked_workspaces(data.workspaces)
    if data.description is not None:
        fields["description"] = data.description
    return fields


def _shown(row: Webhook, fields: dict[str, Any], enabled: bool | None) -> dict[str, Any]:
    """What a change moves, as the audit and a proposal show it: the host for the URL, the state."""
    shown = {k: v for k, v in fields.items() if k not in ("url", "description")}
    if "url" in fields:
        shown["host"] = services.endpoint_host(fields["url"])
    if "description" in fields:
        shown["description"] = "changed"
    if enabled is not None:
        shown["state"] = WebhookState.ACTIVE if enabled else WebhookState.DISABLED
    return shown


def _before(row: Webhook, shown: dict[str, Any]) -> dict[str, Any]:
    now = {"host": services.endpoint_host(row.url), "types": row.types, "workspaces": row.workspaces}
    now |= {"state": row.state, "description": "as it was"}
    return {k: now[k] for k in shown}


def _update_preview(ctx: Context, data: UpdateWebhookIn) -> Preview:
    row: Webhook = ctx.targets
    shown = _shown(row, _update_fields(data), data.enabled)
    lines = []
    if "host" in shown:
        lines.append(f"Deliveries go to {words.named(shown['host'])}.")
    if "types" in shown:
        lines.append(f"It is told of {_what(shown['types'])}.")
    if "workspaces" in shown:
        lines.append(f"It covers {words.workspaces(shown['workspaces'])}.")
    if "description" in shown:
        lines.append("Its description changes.")
    if data.enabled is False:
        lines.append("It stops delivering; what is waiting is given up.")
    if data.enabled is True:
        lines.append("It delivers again, from the newest event on.")
    return Preview(
        (Change(str(row.pk), _before(row, shown), shown),),
        summary=f"Change the webhook to {words.named(services.endpoint_host(row.url))}."
        if lines
        else f"Leave the webhook to {words.named(services.endpoint_host(row.url))} as it is.",
        title="Change this webhook?",
        verb="Save webhook",
        lines=tuple(lines) or ("Nothing changes.",),
    )


@operation(
    name="update_webhook",
    summary="Change a webhook of yours: its URL, event types, workspaces, description; disable or enable it.",
    input=UpdateWebhookIn,
    output=WebhookOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_update_preview,
    confirm=ALWAYS,
    targets=_update_target,
    callers=Callers.PERSONS,
)
def update_webhook(ctx: Context, data: UpdateWebhookIn) -> WebhookOut:
    row: Webhook = ctx.targets
    fields = _update_fields(data)
    shown = _shown(row, fields, data.enabled)
    before = _before(row, shown)
    if fields:
        services.update_webhook(row, now=ctx.now, **fields)
    if data.enabled is False and row.state == WebhookState.ACTIVE:
        services.disable_webhook(row, reason="by_person", now=ctx.now)
    elif data.enabled is True and row.state == WebhookState.DISABLED:
        services.enable_webhook(row, now=ctx.now)
    if shown:
        ctx.touch(row.pk, before, shown)
    return webhook_out(row, ctx)


# --- delete ------------------------------------------------------------------------------------------------


class WebhookIn(Closed):
    webhook_id: Id


def _visible(ctx: Context, data: WebhookIn) -> Webhook:
    return access_webhook_by_id(data.webhook_id, actor=ctx.caller)


def _delete_preview(ctx: Context, data: WebhookIn) -> Preview:
    row: Webhook = ctx.targets
    host = services.endpoint_host(row.url)
    return Preview(
        (Change(str(row.pk), {"host": host}, None),),
        summary=f"Delete the webhook to {words.named(host)}. Nothing more is delivered to it; the feed keeps every "
        "event.",
        title="Delete this webhook?",
        verb="Delete webhook",
    )


class WebhookDeletedOut(Closed):
    deleted: str


@operation(
    name="delete_webhook",
    summary="Delete a webhook (yours; an ADMIN: any of the tenant's): nothing more is delivered to it.",
    input=WebhookIn,
    output=WebhookDeletedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_delete_preview,
    confirm=ALWAYS,
    targets=_visible,
    callers=Callers.PERSONS,
)
def delete_webhook(ctx: Context, data: WebhookIn) -> WebhookDeletedOut:
    row: Webhook = ctx.targets
    ctx.touch(row.pk, {"host": services.endpoint_host(row.url)}, None)
    services.delete_webhook(row)
    return WebhookDeletedOut(deleted=str(row.pk))


# --- rotate ------------------------------------------------------------------------------------------------


class RotateWebhookSecretIn(Closed):
    webhook_id: Id


class RotatedWebhookSecretOut(Closed):
    webhook: WebhookOut
    secret: str = Field(description="the new signing secret, shown this once")
    previous_secret_valid_until: datetime | None = Field(
        description="until when the previous secret still signs each delivery beside the new one (null: not at all)"
    )


def _grace(ctx: Context) -> timedelta:
    return timedelta(hours=ctx.bounds.WEBHOOK_SECRET_GRACE_HOURS)


def _rotate_preview(ctx: Context, data: RotateWebhookSecretIn) -> Preview:
    row: Webhook = ctx.targets
    host = services.endpoint_host(row.url)
    hours = ctx.bounds.WEBHOOK_SECRET_GRACE_HOURS
    grace = (
        f"The current secret still signs, beside the new one, for {words.count(hours, 'hour')}."
        if hours
        else "The current secret stops signing at once."
    )
    return Preview(
        (Change(str(row.pk), {"secret": "current"}, {"secret": "new"}),),
        summary=f"Give the webhook to {words.named(host)} a new signing secret, shown once.",
        title="Rotate this secret?",
        verb="Rotate secret",
        lines=(grace,),
    )


@operation(
    name="rotate_webhook_secret",
    summary="A new signing secret for a webhook of yours, shown once; the old one still signs for a grace period.",
    input=RotateWebhookSecretIn,
    output=RotatedWebhookSecretOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_rotate_preview,
    confirm=ALWAYS,
    targets=_own,
    returns_secret=True,
    callers=Callers.PERSONS,
)
def rotate_webhook_secret(ctx: Context, data: RotateWebhookSecretIn) -> RotatedWebhookSecretOut:
    row: Webhook = ctx.targets
    secret = services.rotate_secret(row, now=ctx.now, grace=_grace(ctx))
    until = row.previous_until
    ctx.touch(row.pk, None, {"secret": "rotated", "previous_valid_until": until.isoformat() if until else None})
    return RotatedWebhookSecretOut(webhook=webhook_out(row, ctx), secret=secret, previous_secret_valid_until=until)


# --- deliveries --------------------------------------------------------------------------------------------


class ListWebhookDeliveriesIn(Closed):
    webhook_id: Id
    state: Literal["pending", "delivered", "failed", "skipped"] | None = None
    before: int | None = Field(default=None, ge=0, description="the cursor: deliveries of events before this seq")
    limit: int = Field(default=50, ge=1, le=10_000, description="at most this many (at most PAGE_SIZE_MAX)")


class WebhookDeliveryOut(Closed):
    event_id: str = Field(description="the event's id: the webhook-id header of its deliveries")
    seq: int
    type: str
    state: Literal["pending", "delivered", "failed", "skipped"] = Field(
        description="failed: given up when the webhook was disabled; skipped: out of your reach at its turn"
    )
    attempts: int
    last_attempt_at: datetime | None
    last_status: int | None = Field(description="the endpoint's HTTP status (null: no answer)")
    last_error: str = Field(
        description="why the last attempt failed, in a word: status, timeout, unreachable, answer_lost, "
        "host_unresolved, host_private, tls_failed ('' when it did not)"
    )
    next_attempt_at: datetime | None
    delivered_at: datetime | None


class WebhookDeliveriesOut(Closed):
    deliveries: list[WebhookDeliveryOut]
    cursor: int | None = Field(description="read on with before=cursor (null: nothing older)")


@operation(
    name="list_webhook_deliveries",
    summary="A webhook's deliveries, newest event first: state, attempts, the endpoint's last status, next try.",
    input=ListWebhookDeliveriesIn,
    output=WebhookDeliveriesOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    targets=_visible,
    bounds=(Bound("limit", "PAGE_SIZE_MAX"),),
    callers=Callers.PERSONS,
)
def list_webhook_deliveries(ctx: Context, data: ListWebhookDeliveriesIn) -> WebhookDeliveriesOut:
    row: Webhook = ctx.targets
    rows = WebhookDelivery.objects.for_tenant(ctx.tenant).filter(webhook=row)
    if data.state is not None:
        rows = rows.filter(state=data.state)
    if data.before is not None:
        rows = rows.filter(seq__lt=data.before)
    found = list(rows.order_by("-seq")[: data.limit + 1])
    more = len(found) > data.limit
    found = found[: data.limit]
    return WebhookDeliveriesOut(
        deliveries=[
            WebhookDeliveryOut(
                event_id=str(d.event_id),
                seq=d.seq,
                type=d.type,
                state=d.state,
                attempts=d.attempts,
                last_attempt_at=d.last_attempt_at,
                last_status=d.last_status,
                last_error=d.last_error,
                next_attempt_at=d.next_attempt_at if d.state == DeliveryState.PENDING else None,
                delivered_at=d.delivered_at,
            )
            for d in found
        ],
        cursor=found[-1].seq if more else None,
    )


# --- redeliver ---------------------------------------------------------------------------------------------


class RedeliverEventIn(Closed):
    webhook_id: Id
    event_id: Id = Field(description="an event of the feed this webhook carries (list_events gives ids)")


def _redelivery(ctx: Context, data: RedeliverEventIn) -> tuple[Webhook, Any]:
    row = _own(ctx, data)
    event = access_event_for(row, data.event_id)
    if row.state != WebhookState.ACTIVE:
        raise OakenError("CONFLICT", "webhook_id: the webhook is disabled: enable it first", field="webhook_id")
    return row, event


def _redeliver_preview(ctx: Context, data: RedeliverEventIn) -> Preview:
    row, event = ctx.targets
    host = services.endpoint_host(row.url)
    return Preview(
        (Change(str(event.pk), None, {"webhook": str(row.pk), "state": "pending"}),),
        summary=f"Send event number {event.seq} to {words.named(host)} again, at the webhook's next turn.",
        title="Send this event again?",
        verb="Send again",
        lines=("A consumer that has it already drops the copy by its id.",),
    )


@operation(
    name="redeliver_event",
    summary="Send one event again to a webhook of yours (it keeps its webhook-id, so a consumer drops a copy).",
    input=RedeliverEventIn,
    output=WebhookDeliveryOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_redeliver_preview,
    confirm=ALWAYS,
    targets=_redelivery,
    callers=Callers.PERSONS,
)
def redeliver_event(ctx: Context, data: RedeliverEventIn) -> WebhookDeliveryOut:
    row, event = ctx.targets
    delivery = services.redeliver(row, event, now=ctx.now)
    ctx.touch(event.pk, None, {"webhook": str(row.pk), "state": "pending"})
    return WebhookDeliveryOut(
        event_id=str(delivery.event_id),
        seq=delivery.seq,
        type=delivery.type,
        state="pending",
        attempts=delivery.attempts,
        last_attempt_at=delivery.last_attempt_at,
        last_status=delivery.last_status,
        last_error=delivery.last_error,
        next_attempt_at=delivery.next_attempt_at,
        delivered_at=delivery.delivered_at,
    )
