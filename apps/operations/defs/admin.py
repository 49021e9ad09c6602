"""Tenant administration reachable by persons only: exposure settings and the audit log (ceiling never)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from django.db import transaction
from pydantic import Field

from apps.audit.log import verify_chain
from apps.audit.models import AuditEvent
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.core.pages import cut_page, read_cursor
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Empty, Page
from apps.operations.exposure import level_for, plugin_target, tenant_settings
from apps.operations.models import ExposureSetting
from apps.operations.registry import (
    ALWAYS,
    Bound,
    Callers,
    Ceiling,
    OpClass,
    Operation,
    Preview,
    operation,
    registry,
)

# ---------------------------------------------------------------- exposure


class ExposureIn(Closed):
    operation: str = Field(
        min_length=1, max_length=200, description="an operation name, or plugin:<name> for a whole plugin"
    )
    level: Literal["on", "off"]


class ExposureOut(Closed):
    target: str
    level: str
    previous: str


def _exposed(ctx: Context, data: ExposureIn) -> Operation | None:
    """The operation named, or None for a whole plugin (one that offers at least one operation)."""
    if data.operation.startswith("plugin:"):
        if not any(op.plugin == data.operation.removeprefix("plugin:") for op in registry):
            raise OakenError.not_found("operation")
        return None
    op = registry.get(data.operation)
    if op is None:
        raise OakenError.not_found("operation")
    if op.ceiling == Ceiling.NEVER and data.level == "on":
        raise OakenError.invalid("level", "this operation can never be offered to agents")
    return op


def _current(ctx: Context, data: ExposureIn) -> str:
    settings = tenant_settings(ctx.tenant)
    op: Operation | None = ctx.targets
    # a whole plugin starts off, like each of its operations
    return level_for(op, settings) if op is not None else settings.get(data.operation, "off")


def _exposure_preview(ctx: Context, data: ExposureIn) -> Preview:
    return Preview((Change(data.operation, {"level": _current(ctx, data)}, {"level": data.level}),))


@operation(
    name="set_operation_exposure",
    summary="Offer an operation (or a whole plugin) to this tenant's agents, or stop offering it, within its ceiling.",
    input=ExposureIn,
    output=ExposureOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    preview=_exposure_preview,
    confirm=ALWAYS,
    targets=_exposed,
    callers=Callers.PERSONS,
)
def set_operation_exposure(ctx: Context, data: ExposureIn) -> ExposureOut:
    previous = _current(ctx, data)
    ExposureSetting.objects.for_tenant(ctx.tenant).update_or_create(
        tenant=ctx.tenant, target=data.operation, defaults={"level": data.level, "updated_at": ctx.now}
    )
    ctx.touch(data.operation, {"level": previous}, {"level": data.level})
    return ExposureOut(target=data.operation, level=data.level, previous=previous)


class ExposureRow(Closed):
    name: str
    op_class: str
    ceiling: str
    plugin: str | None
    setting: str | None
    offered_to_agents: bool


class ExposureListOut(Closed):
    operations: list[ExposureRow]


@operation(
    name="list_operation_exposure",
    summary="Every operation but the system's own, with its ceiling, this tenant's setting and whether agents get it.",
    input=Empty,
    output=ExposureListOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
)
def list_operation_exposure(ctx: Context, data: Empty) -> ExposureListOut:
    settings = tenant_settings(ctx.tenant)
    rows = []
    # the system's own operations (Celery's) are nobody's to offer or call: nothing for a person to see here
    for op in (op for op in registry if op.callers != Callers.INTERNAL):
        rows.append(
            ExposureRow(
                name=op.name,
                op_class=op.op_class.value,
                ceiling=op.ceiling.value,
                plugin=op.plugin,
                setting=settings.get(op.name) or (settings.get(plugin_target(op.plugin)) if op.plugin else None),
                offered_to_agents=level_for(op, settings) == "on",
            )
        )
    return ExposureListOut(operations=rows)


# ---------------------------------------------------------------- audit


class AuditListIn(Page):
    operation: str | None = Field(default=None, max_length=200)


class AuditEventOut(Closed):
    seq: int
    created_at: datetime
    principal: str
    person_id: str | None
    credential_id: str
    door: str
    operation: str
    outcome: str
    targets: list[dict[str, object]]
    input_digest: str
    hash: str


class AuditListOut(Closed):
    events: list[AuditEventOut]
    next_cursor: str | None


def _seq(seq: object) -> int:
    """The log pages newest first: its cursor is the sequence number of the last event shown."""
    if not isinstance(seq, int):
        raise ValueError("not a sequence number")
    return seq


@operation(
    name="list_audit_events",
    summary="The tenant's audit log, newest first. Never offered to agents.",
    input=AuditListIn,
    output=AuditListOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    bounds=(Bound("limit", "PAGE_SIZE_MAX"),),
)
def list_audit_events(ctx: Context, data: AuditListIn) -> AuditListOut:
    size = data.size(ctx.bounds)
    events = AuditEvent.objects.for_tenant(ctx.tenant)
    if data.operation:
        events = events.filter(operation=data.operation)
    before = read_cursor(data.cursor or None, 1, _seq)
    if before is not None:
        events = events.filter(seq__lt=before)
    page, next_cursor = cut_page(events.order_by("-seq")[: size + 1], size, lambda e: [e.seq])
    return AuditListOut(
        events=[
            AuditEventOut(
                seq=e.seq,
                created_at=e.created_at,
                principal=e.principal,
                person_id=str(e.person_id) if e.person_id else None,
                credential_id=e.credential_id,
                door=e.door,
                operation=e.operation,
                outcome=e.outcome,
                targets=list(e.targets),
                input_digest=e.input_digest,
                hash=e.hash,
            )
            for e in page
        ],
        next_cursor=next_cursor,
    )


class VerifyOut(Closed):
    ok: bool
    events_checked: int
    first_broken_seq: int | None
    reason: str | None


@operation(
    name="verify_audit",
    summary="Walk the tenant's audit hash chain and report the first broken link, if any.",
    input=Empty,
    output=VerifyOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
)
def verify_audit(ctx: Context, data: Empty) -> VerifyOut:
    # The chain is read as committed before this call; this call's own event comes after it.
    with transaction.atomic():
        checked, broken = verify_chain(ctx.tenant.pk)
    return VerifyOut(
        ok=broken is None,
        events_checked=checked,
        first_broken_seq=broken.seq if broken else None,
        reason=broken.reason if broken else None,
    )
