"""Tenant administration reachable by persons only: exposure settings (ceiling never; the audit log is in audit.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Empty
from apps.operations.exposure import level_for, plugin_target, set_exposure, tenant_settings
from apps.operations.registry import (
    ALWAYS,
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
    set_exposure(tenant=ctx.tenant, target=data.operation, level=data.level, now=ctx.now)
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
