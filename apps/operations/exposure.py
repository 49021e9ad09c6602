"""Exposure (SPEC §6): which operations a tenant offers its agents, within ceilings fixed in code; the gate's first
two checks (offered, permitted) read it, and so do the tool list and the console."""

from __future__ import annotations

from datetime import datetime

from django.db import connection

from apps.core.callers import Caller, ToolSetGrant
from apps.core.errors import OakenError
from apps.core.kinds import Door, Principal, Role, Scope
from apps.operations.models import ExposureSetting
from apps.operations.plugin_runtime import plugin_health
from apps.operations.registry import Callers, Ceiling, Operation, registry
from apps.workspaces.models import Tenant


def tenant_settings(tenant: Tenant) -> dict[str, str]:
    """target -> level ('on' / 'off') for this tenant (read on every agent call, so in plain SQL; an API key's
    caller brings them along, read with the key in one statement: apps.agents.keys)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT target, level FROM gate_exposuresetting WHERE tenant_id = %s", [tenant.pk])
        return dict(cursor.fetchall())


def set_exposure(*, tenant: Tenant, target: str, level: str, now: datetime) -> None:
    """Set the tenant's level ('on' / 'off') for one target: an operation's name, or plugin:<name> (within the
    ceiling: the operation set_operation_exposure checks it)."""
    ExposureSetting.objects.for_tenant(tenant).update_or_create(
        tenant=tenant, target=target, defaults={"level": level, "updated_at": now}
    )


def plugin_target(plugin: str) -> str:
    return f"plugin:{plugin}"


def level_for(op: Operation, settings: dict[str, str]) -> str:
    """'never', 'off' or 'on': what an agent of this tenant meets for `op`."""
    if op.ceiling == Ceiling.NEVER:
        return "never"
    if op.plugin is not None:
        # a whole plugin switched off stays off; switched on, each of its operations is on unless set apart
        whole = settings.get(plugin_target(op.plugin))
        return "off" if whole == "off" else settings.get(op.name, whole or op.default_level)
    return settings.get(op.name, op.default_level)


def is_offered(
    caller: Caller, op: Operation, settings: dict[str, str] | None = None, *, door: Door | None = None
) -> bool:
    """The operation is offered to this caller through `door` (None: a door over the network): who may call it
    at all; for agents also exposure, plugin health, allow-list and the person-bound rule."""
    if op.callers == Callers.INTERNAL:
        return caller.principal == Principal.INTERNAL
    if op.callers == Callers.STANDING:
        return caller.is_standing and door == Door.INTERNAL
    if op.callers == Callers.SERVER:
        return caller.principal == Principal.INTERNAL or (caller.principal == Principal.PERSON and door == Door.CLI)
    if op.callers == Callers.PERSONS:
        return caller.principal == Principal.PERSON
    if op.callers == Callers.INVITEES:
        return caller.principal == Principal.PERSON and door == Door.UI
    if caller.principal != Principal.AGENT:
        return True
    if settings is None:
        settings = dict(caller.exposure) if caller.exposure is not None else tenant_settings(caller.tenant)
    if level_for(op, settings) != "on":
        return False
    if op.plugin is not None and not plugin_health(op.plugin, caller.tenant):
        return False
    if caller.allow_list is not None and op.name not in caller.allow_list:
        return False
    if caller.tool_set is not None and not in_tool_set(op, caller.tool_set):
        return False
    return not (op.person_bound and caller.credential_kind != "oauth")


def is_permitted(caller: Caller, op: Operation) -> bool:
    """Role and scopes cover the operation (the authority check, SPEC §4.2)."""
    if caller.principal == Principal.INTERNAL:
        return True
    if op.callers == Callers.INVITEES:  # no role: the person is joining the tenant (is_offered keeps it to persons)
        return caller.principal == Principal.PERSON
    if caller.role is None or not Role(caller.role).covers(Role(op.role)):
        return False
    return caller.principal != Principal.AGENT or op.scope.value in caller.scopes


def refusal(caller: Caller, op: Operation, *, because: str = "") -> OakenError:
    """Why `caller` may not call `op` (is_permitted said no): INSUFFICIENT_SCOPE naming the missing permission and
    how it is granted, for an agent; else FORBIDDEN naming the role. `because`: why this call needs it."""
    why = f"; {because}" if because else ""
    if caller.principal == Principal.AGENT and caller.role is not None and op.scope.value not in caller.scopes:
        how = (
            "an API key cannot be widened: a person creates a new key with it in the console"
            if caller.credential_kind == "apikey"
            else "a person reconnects the assistant and ticks it on the consent screen"
        )
        return OakenError(
            "INSUFFICIENT_SCOPE",
            f"this needs the '{Scope(op.scope).label}' permission ({op.scope.value}), which was not granted{why}; to "
            f"grant it, {how}",
            missing_scope=op.scope.value,
        )
    return OakenError("FORBIDDEN", f"this needs the {op.role} role in this tenant{why}")


def offered_operations(caller: Caller, *, door: Door | None = None) -> list[Operation]:
    """Every operation this caller may call through `door` (None: over the network), in a stable order (what a
    tool list or console shows)."""
    settings = dict(caller.exposure) if caller.exposure is not None else tenant_settings(caller.tenant)
    return [op for op in registry if is_offered(caller, op, settings, door=door) and is_permitted(caller, op)]


# ---------------------------------------------------------------- groups of operations, by what they allow
#
# The console offers operations to agents a group at a time. A group comes from the operation's own definition:
# its plugin, its ceiling, its scope and its domain (the module that defines it), never from a list kept elsewhere.

GROUPS: dict[str, tuple[str, str]] = {
    "read": ("Read mail", "Search, list and open messages, conversations, folders, labels and drafts."),
    "organize": ("Organize", "Move, trash, restore, label, pin and mark messages read; sync a mailbox; summarize."),
    "draft": ("Draft", "Write, change and delete drafts, replies and forwards. Nothing is sent."),
    "send": (
        "Send requests",
        "Ask to send an e-mail or a draft. A person approves each one first, unless a send policy allows it.",
    ),
    "people": (
        "Only for people",
        "Keys, members, mailboxes, policies and this tenant's settings: never offered to agents.",
    ),
}
_DRAFTING = {"drafts", "signatures"}


def group_of(op: Operation) -> str:
    """The group an operation is offered in: 'plugin:<name>', or one of GROUPS."""
    if op.plugin is not None:
        return plugin_target(op.plugin)
    if op.ceiling == Ceiling.NEVER:
        return "people"
    if op.scope.value == "send":
        return "send"
    if op.handler.__module__.rsplit(".", 1)[-1] in _DRAFTING:
        return "draft"
    return "organize" if op.scope.value == "write" else "read"


def group_words(group: str) -> tuple[str, str]:
    """A group's title and its one line of explanation."""
    if group.startswith("plugin:"):
        name = group.removeprefix("plugin:")
        return (f"Plugin: {name}", f"What the plugin “{name}” adds. A plugin starts off until it is offered here.")
    return GROUPS[group]


def group_members(group: str) -> list[Operation]:
    """The operations of a group that agents could be offered (within their ceiling)."""
    return [
        op
        for op in registry
        if op.callers not in (Callers.INTERNAL, Callers.STANDING)
        and op.ceiling != Ceiling.NEVER
        and group_of(op) == group
    ]


# ---------------------------------------------------------------- tool sets: what a credential may be limited to
#
# A credential (an API key, an OAuth connection) may be limited to a named set of tools. The built-in sets are made of
# the groups above, so they too come from each operation's own definition: every set holds every tool that only
# reads (scope read: an assistant that cannot find mail can do nothing with it), and the groups named here besides.
# Plugins' operations are in no built-in set (a person names them in a set of their own). A set only ever narrows: the
# gate checks it where it checks the allow-list (is_offered), and scopes, role and exposure are checked as ever, so a
# set naming a send request offers nothing to a key without the send permission.

TOOL_SETS: dict[str, tuple[str, tuple[str, ...]]] = {
    "mail-read": ("Search, list and open mail, drafts and automations. Changes nothing.", ()),
    "mail-organize": ("Read mail, and organize it: labels, folders, read state, pins, snoozes, rules.", ("organize",)),
    "drafting": ("Read mail, and write drafts, replies and forwards. Nothing is sent.", ("draft",)),
    "sending": ("Read mail, write drafts, and ask to send them (a person approves each send).", ("draft", "send")),
}


def in_built_in_set(op: Operation, name: str) -> bool:
    """Whether the built-in set `name` holds `op` (an unknown name holds nothing)."""
    if name not in TOOL_SETS or op.plugin is not None or op.ceiling == Ceiling.NEVER or op.callers != Callers.ANY:
        return False
    return op.scope == Scope.READ or group_of(op) in TOOL_SETS[name][1]


def in_tool_set(op: Operation, granted: ToolSetGrant) -> bool:
    """Whether a credential limited to `granted` may be offered `op`: a person's set by its operations, a built-in
    one by the registry's definitions (a name that is neither, such as a person's set deleted since: nothing)."""
    if granted.operations is not None:
        return op.name in granted.operations
    return in_built_in_set(op, granted.name)


def built_in_set_members(name: str) -> list[Operation]:
    """The operations of a built-in set, in the registry's order."""
    return [op for op in registry if in_built_in_set(op, name)]


def may_be_in_a_set(op: Operation) -> bool:
    """Whether a person's own set may name `op`: an operation that agents could ever be offered."""
    return op.ceiling != Ceiling.NEVER and op.callers == Callers.ANY
