"""Tenant administration reachable by persons only: exposure settings (ceiling never; the audit log is in audit.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from apps.core import words
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Empty
from apps.operations.exposure import (
    GROUPS,
    group_members,
    group_of,
    group_words,
    level_for,
    plugin_target,
    set_exposure,
    tenant_settings,
)
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
        min_length=1,
        max_length=200,
        description="an operation name, plugin:<name> for a whole plugin, or group:<name> for each operation of one "
        "of list_operation_exposure's groups (read, organize, draft, send)",
    )
    level: Literal["on", "off"]


class ExposureOut(Closed):
    target: str
    level: str
    previous: str


def _exposed(ctx: Context, data: ExposureIn) -> Operation | list[Operation] | None:
    """The operation named, None for a whole plugin (one that offers at least one operation), or the operations of
    a group that agents can be offered."""
    if data.operation.startswith("group:"):
        group = data.operation.removeprefix("group:")
        members = group_members(group) if group in GROUPS else []
        if not members:
            raise OakenError.not_found("operation")
        return members
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
    if isinstance(ctx.targets, list):  # a group: on or off when all of it is, else "some"
        levels = {level_for(op, settings) for op in ctx.targets}
        return levels.pop() if len(levels) == 1 else "some"
    op: Operation | None = ctx.targets
    # a whole plugin starts off, like each of its operations
    return level_for(op, settings) if op is not None else settings.get(data.operation, "off")


def _exposure_words(ctx: Context, data: ExposureIn) -> str:
    """What the switch does, in a sentence."""
    offer = data.level == "on"
    if isinstance(ctx.targets, list):
        title, _ = group_words(data.operation.removeprefix("group:"))
        n = words.count(len(ctx.targets), "operation")
        return (
            f"Offer “{title}” to this tenant's agents: {n}. Each agent still needs the permission for it."
            if offer
            else f"Stop offering “{title}” to this tenant's agents: {n}. Their next call of any of them is refused."
        )
    if ctx.targets is None:
        name = words.named(data.operation.removeprefix("plugin:"))
        return (
            f"Offer the plugin {name} to this tenant's agents: each of its operations you have not switched off "
            "yourself."
            if offer
            else f"Stop offering the plugin {name} to this tenant's agents: all of its operations at once."
        )
    name = words.named(data.operation)
    return (
        f"Offer the operation {name} to this tenant's agents."
        if offer
        else f"Stop offering the operation {name} to this tenant's agents. Their next call of it is refused."
    )


def _exposure_preview(ctx: Context, data: ExposureIn) -> Preview:
    return Preview(
        (Change(data.operation, {"level": _current(ctx, data)}, {"level": data.level}),),
        summary=_exposure_words(ctx, data),
        title="Offer this to agents?" if data.level == "on" else "Stop offering this to agents?",
        verb="Offer" if data.level == "on" else "Stop offering",
    )


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
    if isinstance(ctx.targets, list):  # a group: each of its operations, as if switched one at a time
        settings = tenant_settings(ctx.tenant)
        for op in ctx.targets:
            before = level_for(op, settings)
            set_exposure(tenant=ctx.tenant, target=op.name, level=data.level, now=ctx.now)
            if before != data.level:
                ctx.touch(op.name, {"level": before}, {"level": data.level})
        return ExposureOut(target=data.operation, level=data.level, previous=previous)
    set_exposure(tenant=ctx.tenant, target=data.operation, level=data.level, now=ctx.now)
    ctx.touch(data.operation, {"level": previous}, {"level": data.level})
    return ExposureOut(target=data.operation, level=data.level, previous=previous)


class ExposureRow(Closed):
    name: str
    summary: str = Field(description="what the operation does, in a sentence")
    op_class: str
    ceiling: str
    plugin: str | None
    setting: str | None
    offered_to_agents: bool
    group: str = Field(description="the key of the group (in `groups`) it is offered in")


class ExposureGroup(Closed):
    key: str = Field(description="read, organize, draft, send, people, or plugin:<name>")
    title: str
    explanation: str = Field(description="what the group allows, in one line")
    switch: str | None = Field(
        description="the set_operation_exposure target that switches the whole group; null: never offered"
    )
    operations: int
    offered: int = Field(description="how many of its operations agents are offered now")


class ExposureListOut(Closed):
    operations: list[ExposureRow]
    groups: list[ExposureGroup]


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
    for op in (op for op in registry if op.callers not in (Callers.INTERNAL, Callers.STANDING)):
        rows.append(
            ExposureRow(
                name=op.name,
                summary=op.summary,
                op_class=op.op_class.value,
                ceiling=op.ceiling.value,
                plugin=op.plugin,
                setting=settings.get(op.name) or (settings.get(plugin_target(op.plugin)) if op.plugin else None),
                offered_to_agents=level_for(op, settings) == "on",
                group=group_of(op),
            )
        )
    return ExposureListOut(operations=rows, groups=_groups(rows))


def _groups(rows: list[ExposureRow]) -> list[ExposureGroup]:
    """The groups in the order a person reads them: what agents do most first, plugins, then people's own."""
    keys = [k for k in GROUPS if k != "people"] + sorted({r.group for r in rows if r.group.startswith("plugin:")})
    groups = []
    for key in [*keys, "people"]:
        members = [r for r in rows if r.group == key]
        if not members:
            continue
        title, explanation = group_words(key)
        switch = None if key == "people" else key if key.startswith("plugin:") else f"group:{key}"
        offered = sum(r.offered_to_agents for r in members)
        groups.append(
            ExposureGroup(
                key=key, title=title, explanation=explanation, switch=switch, operations=len(members), offered=offered
            )
        )
    return groups
