"""Tool sets (issue 41 item 5): named sets of tools an API key or an OAuth connection may be limited to.

The built-in sets (mail-read, mail-organize, drafting, sending) come from the operations' own definitions
(apps.operations.exposure.TOOL_SETS); a person may also define sets of their own, as lists of operation names. A
credential names its set, and the gate checks it where it checks an allow-list: a tool outside the set is not listed
and answers NOT_AVAILABLE. A set only narrows: scopes, role and exposure are checked as ever. Creating, listing and
deleting sets is for persons only (ceiling never), so no assistant can choose what it may call.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import Field

from apps.agents.selectors import access_tool_set_by_name, live_credentials_naming, own_tool_sets
from apps.agents.services import create_tool_set as create_set
from apps.agents.services import delete_tool_set as delete_set
from apps.agents.services import tool_set_name_taken
from apps.core import words
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Empty
from apps.operations.exposure import TOOL_SETS, built_in_set_members, may_be_in_a_set
from apps.operations.registry import ALWAYS, Callers, Ceiling, OpClass, Preview, operation, registry

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
NAME_RULE = "lowercase letters, digits and hyphens, starting with a letter or digit"

ToolSetName = Annotated[
    str, Field(min_length=1, max_length=64, pattern=_NAME.pattern, description=f"the set's name: {NAME_RULE}")
]


def _offerable_names(schema: dict[str, Any]) -> None:
    """Each name an operation agents could ever be offered, as _checked_set checks it (read when a schema is made,
    after every operation is defined)."""
    schema["items"].update(enum=[op.name for op in registry if may_be_in_a_set(op)])


def tool_set_named(ctx: Context, name: str | None, *, field: str = "tool_set") -> str:
    """The tool set a new credential of the caller's is limited to: '' for none, a built-in set, or one of the
    caller's own sets (another person's set, or none by that name, is refused alike, naming the field)."""
    if name is None or name == "":
        return ""
    if name in TOOL_SETS or own_tool_sets(tenant=ctx.tenant, actor=ctx.caller).filter(name=name).exists():
        return name
    # as absent as any id of another's: NOT_FOUND, as delete_tool_set answers
    raise OakenError.not_found(field)


def tool_set_words(name: str) -> str:
    """A credential's reach, for its confirmation: 'only the tools of the set “mail-read”'."""
    return f"only the tools of the set {words.named(name)}"


class ToolSetOut(Closed):
    name: str
    built_in: bool = Field(description="true: made by Oaken from the operations' definitions; it cannot be deleted")
    description: str
    operations: list[str]
    in_use: int = Field(description="how many of your keys and connections, not revoked, are limited to it")
    created_at: datetime | None


class ToolSetsOut(Closed):
    tool_sets: list[ToolSetOut]


@operation(
    name="list_tool_sets",
    summary="The tool sets a key or connection of yours may be limited to: the built-in ones and your own.",
    input=Empty,
    output=ToolSetsOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
)
def list_tool_sets(ctx: Context, data: Empty) -> ToolSetsOut:
    built_in = [
        ToolSetOut(
            name=name,
            built_in=True,
            description=description,
            operations=[op.name for op in built_in_set_members(name)],
            in_use=live_credentials_naming(tenant=ctx.tenant, actor=ctx.caller, tool_set=name),
            created_at=None,
        )
        for name, (description, _groups) in TOOL_SETS.items()
    ]
    own = [
        ToolSetOut(
            name=row.name,
            built_in=False,
            description=f"Your own set of {words.count(len(row.operations), 'tool')}.",
            operations=list(row.operations),
            in_use=live_credentials_naming(tenant=ctx.tenant, actor=ctx.caller, tool_set=row.name),
            created_at=row.created_at,
        )
        for row in own_tool_sets(tenant=ctx.tenant, actor=ctx.caller)
    ]
    return ToolSetsOut(tool_sets=built_in + own)


class CreateToolSetIn(Closed):
    name: ToolSetName
    operations: list[str] = Field(
        min_length=1,
        max_length=200,
        description="the operations the set holds, each one agents could be offered",
        json_schema_extra=_offerable_names,
    )


def _checked_set(ctx: Context, data: CreateToolSetIn) -> list[str]:
    """The set's operations, each once, in the registry's order; a name of a built-in set, one the person already
    uses, or past the number of sets a person may have, is refused."""
    if data.name in TOOL_SETS:
        raise OakenError.invalid("name", "is the name of a built-in tool set")
    for name in data.operations:
        op = registry.get(name)
        if op is None or not may_be_in_a_set(op):
            raise OakenError.invalid("operations", "names an operation that assistants can never be offered")
    mine = own_tool_sets(tenant=ctx.tenant, actor=ctx.caller)
    if mine.filter(name=data.name).exists():
        raise tool_set_name_taken()
    most = ctx.bounds.TOOL_SETS_MAX
    if mine.count() >= most:
        raise OakenError("LIMIT_EXCEEDED", f"a person has at most {most} tool sets", field="name")
    wanted = set(data.operations)
    return [op.name for op in registry if op.name in wanted]


def _tool_titles(names: list[str]) -> str:
    return words.listed(name.replace("_", " ").replace(".", ": ") for name in names)


def _create_preview(ctx: Context, data: CreateToolSetIn) -> Preview:
    names: list[str] = ctx.targets
    return Preview(
        (Change("new tool set", None, {"name": data.name, "operations": names}),),
        summary=f"Create the tool set {words.named(data.name)} of {words.count(len(names), 'tool')}: a key or "
        "connection limited to it may call only these, and never more than its permissions allow.",
        title="Create this tool set?",
        verb="Create tool set",
        lines=(f"Its tools: {_tool_titles(names)}.",),
    )


@operation(
    name="create_tool_set",
    summary="Define a named set of tools of your own, that a new key or connection can be limited to.",
    input=CreateToolSetIn,
    output=ToolSetOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_create_preview,
    confirm=ALWAYS,
    targets=_checked_set,
    callers=Callers.PERSONS,
)
def create_tool_set(ctx: Context, data: CreateToolSetIn) -> ToolSetOut:
    assert ctx.caller.user is not None
    names: list[str] = ctx.targets
    row = create_set(tenant=ctx.tenant, user=ctx.caller.user, name=data.name, operations=names, now=ctx.now)
    ctx.touch(row.pk, None, {"name": row.name, "operations": names})
    return ToolSetOut(
        name=row.name,
        built_in=False,
        description=f"Your own set of {words.count(len(names), 'tool')}.",
        operations=names,
        in_use=0,
        created_at=row.created_at,
    )


class DeleteToolSetIn(Closed):
    name: ToolSetName


def _the_set(ctx: Context, data: DeleteToolSetIn) -> Any:
    if data.name in TOOL_SETS:
        raise OakenError.invalid("name", "a built-in tool set cannot be deleted")
    return access_tool_set_by_name(data.name, tenant=ctx.tenant, actor=ctx.caller)


def _delete_preview(ctx: Context, data: DeleteToolSetIn) -> Preview:
    row = ctx.targets
    using = live_credentials_naming(tenant=ctx.tenant, actor=ctx.caller, tool_set=row.name)
    then = (
        f"{words.count(using, 'key or connection', 'keys and connections')} limited to it will then reach no tool "
        "at all, until revoked."
        if using
        else "No key or connection is limited to it."
    )
    return Preview(
        (Change(str(row.pk), {"name": row.name, "operations": list(row.operations)}, None),),
        summary=f"Delete the tool set {words.named(row.name)}.",
        title="Delete this tool set?",
        verb="Delete tool set",
        lines=(then,),
    )


@operation(
    name="delete_tool_set",
    summary="Delete a tool set of your own; keys and connections limited to it then reach no tool at all.",
    input=DeleteToolSetIn,
    output=ToolSetOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_delete_preview,
    confirm=ALWAYS,
    targets=_the_set,
    callers=Callers.PERSONS,
)
def delete_tool_set(ctx: Context, data: DeleteToolSetIn) -> ToolSetOut:
    row = ctx.targets
    out = ToolSetOut(
        name=row.name,
        built_in=False,
        description=f"Your own set of {words.count(len(row.operations), 'tool')}.",
        operations=list(row.operations),
        in_use=live_credentials_naming(tenant=ctx.tenant, actor=ctx.caller, tool_set=row.name),
        created_at=row.created_at,
    )
    ctx.touch(row.pk, {"name": row.name, "operations": list(row.operations)}, None)
    delete_set(row)
    return out
