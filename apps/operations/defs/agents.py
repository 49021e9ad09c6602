"""API keys (SPEC §7): created, listed and revoked by persons only (ceiling never)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from urllib.parse import urlsplit

from django.conf import settings
from oauth2_provider.models import Application
from pydantic import ConfigDict, Field

from apps.agents.connections import revoke_connection, revoked_reason_words
from apps.agents.keys import issue_key
from apps.agents.models import ApiKey, Connection
from apps.agents.selectors import (
    access_api_key_by_id,
    access_application_by_client_id,
    access_connection_by_id,
    visible_api_keys,
    visible_connections,
)
from apps.agents.services import grant_connection as grant
from apps.agents.services import revoke_api_key as revoke_key
from apps.agents.services import set_lockdown
from apps.core import words
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.core.kinds import recorded_scopes
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Empty, Id
from apps.operations.defs.tool_sets import tool_set_named, tool_set_words
from apps.operations.registry import ALWAYS, Callers, Ceiling, OpClass, Preview, operation, registry
from apps.workspaces.models import DEFAULT_WORKSPACE, Membership
from apps.workspaces.selectors import membership_of


class ApiKeyOut(Closed):
    id: str
    prefix: str
    name: str
    scopes: list[str]
    workspaces: list[str]
    operations: list[str] | None
    tool_set: str | None = Field(description="the named set of tools it is limited to (list_tool_sets); null: none")
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked: bool
    lockdown: bool = Field(
        description="in lockdown: once it has read mail from someone nobody here has written to, every request of it "
        "that acts outside the mailbox waits for a person, whatever the send policies say"
    )


def key_out(row: ApiKey) -> ApiKeyOut:
    return ApiKeyOut(
        id=str(row.pk),
        prefix=row.prefix,
        name=row.name,
        scopes=list(row.scopes),
        workspaces=list(row.workspaces),
        operations=list(row.allow_list) if row.allow_list is not None else None,
        tool_set=row.tool_set or None,
        created_at=row.created_at,
        expires_at=row.expires_at,
        last_used_at=row.last_used_at,
        revoked=row.revoked_at is not None,
        lockdown=row.lockdown,
    )


def _workspace_names(schema: dict[str, Any]) -> None:
    """Each of the key's workspaces a workspace name, as _allow_list checks it (naming the field)."""
    schema["items"].update(minLength=1, maxLength=100)


def _operation_names(schema: dict[str, Any]) -> None:
    """Each name on the allow-list an operation of the registry, as _allow_list checks it (read when a schema is
    made, after every operation is defined)."""
    schema["anyOf"][0]["items"].update(enum=[op.name for op in registry])


class CreateKeyIn(Closed):
    # an allow-list or a tool set, never both (_allow_list refuses the pair): published with the input
    model_config = ConfigDict(
        json_schema_extra={
            "not": {
                "required": ["operations", "tool_set"],
                "properties": {"operations": {"type": "array"}, "tool_set": {"type": "string", "minLength": 1}},
            }
        }
    )
    name: str = Field(default="", max_length=200)
    scopes: list[Literal["read", "write", "send"]] = Field(min_length=1, max_length=3)
    workspaces: list[str] = Field(
        default=[DEFAULT_WORKSPACE],
        max_length=50,
        description="empty: every workspace",
        # each a workspace name, checked by _allow_list (which names the field): published here
        json_schema_extra=_workspace_names,
    )
    operations: list[str] | None = Field(
        default=None,
        max_length=200,
        description="allow-list; null: all in scope",
        # each an operation of the registry, checked by _allow_list: published here, read when a schema is made
        json_schema_extra=_operation_names,
    )
    tool_set: str | None = Field(
        default=None,
        max_length=64,
        description="limit the key to a named set of tools: a built-in set or one of yours (list_tool_sets); "
        "null: none. Not together with an allow-list",
    )
    expires_in_days: int | None = Field(default=None, ge=1, le=3650)
    lockdown: bool = Field(
        default=False,
        description="once the key has read mail from someone nobody here has written to, every request of it that "
        "acts outside the mailbox waits for a person, whatever the send policies say",
    )


class CreatedKeyOut(Closed):
    api_key: ApiKeyOut
    key: str = Field(description="the key itself: shown this once, never stored")


@dataclass(frozen=True)
class KeyReach:
    """What a new key may call: an allow-list (None: every operation its scopes allow), or a tool set ('': none)."""

    allow_list: list[str] | None
    tool_set: str


def _allow_list(ctx: Context, data: CreateKeyIn) -> KeyReach:
    """The operations the key may call, each one that exists, or the tool set it is limited to, one of the person's
    (one or the other: a set and a list together would leave a person guessing which one holds)."""
    for name in data.operations or ():
        if name not in registry:
            raise OakenError.invalid("operations", "names an operation that does not exist")
    if any(not w or len(w) > 100 for w in data.workspaces):
        raise OakenError.invalid("workspaces", "workspace names are 1 to 100 characters")
    if data.operations is not None and data.tool_set:
        raise OakenError.invalid("tool_set", "a key is limited by an operation allow-list or a tool set, not both")
    return KeyReach(
        allow_list=sorted(set(data.operations)) if data.operations is not None else None,
        tool_set=tool_set_named(ctx, data.tool_set),
    )


def _create_preview(ctx: Context, data: CreateKeyIn) -> Preview:
    name = f" {words.named(data.name)}" if data.name else ""
    expiry = f"expires in {words.count(data.expires_in_days, 'day')}" if data.expires_in_days else "never expires"
    if data.tool_set:
        reach = tool_set_words(data.tool_set)
    else:
        reach = "every operation its permissions allow" if data.operations is None else "only the operations you chose"
    return Preview(
        (Change("new api key", None, {"scopes": recorded_scopes(data.scopes), "workspaces": data.workspaces}),),
        summary=f"Create the API key{name}: it may {words.scopes(recorded_scopes(data.scopes))} "
        f"in {words.workspaces(data.workspaces)}. It is shown once.",
        title="Create this key?",
        verb="Create key",
        lines=(f"It may call {reach}.", f"It {expiry}.")
        + (
            ("Locked down: after it reads mail from a stranger, a person decides every e-mail it asks to send.",)
            if data.lockdown
            else ()
        ),
    )


def _membership(ctx: Context) -> Membership:
    assert ctx.caller.user is not None
    return membership_of(tenant=ctx.tenant, user=ctx.caller.user)


@operation(
    name="create_api_key",
    summary="Create an API key for yourself: scopes, workspaces, optional operation allow-list, expiry. Shown once.",
    input=CreateKeyIn,
    output=CreatedKeyOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_create_preview,
    confirm=ALWAYS,
    targets=_allow_list,
    returns_secret=True,
    callers=Callers.PERSONS,
)
def create_api_key(ctx: Context, data: CreateKeyIn) -> CreatedKeyOut:
    expires = ctx.now + timedelta(days=data.expires_in_days) if data.expires_in_days else None
    row, key = issue_key(
        membership=_membership(ctx),
        scopes=list(data.scopes),
        workspaces=list(dict.fromkeys(data.workspaces)),
        allow_list=ctx.targets.allow_list,
        expires_at=expires,
        name=data.name,
        created_via=ctx.door,
        tool_set=ctx.targets.tool_set,
        lockdown=data.lockdown,
    )
    made = {"prefix": row.prefix, "scopes": row.scopes, "workspaces": row.workspaces, "lockdown": row.lockdown}
    ctx.touch(row.pk, None, {**made, "tool_set": row.tool_set} if row.tool_set else made)
    return CreatedKeyOut(api_key=key_out(row), key=key)


class KeysOut(Closed):
    api_keys: list[ApiKeyOut]


@operation(
    name="list_api_keys",
    summary="Your API keys (an ADMIN sees the tenant's), with prefix and last use; never the keys themselves.",
    input=Empty,
    output=KeysOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
)
def list_api_keys(ctx: Context, data: Empty) -> KeysOut:
    keys = visible_api_keys(tenant=ctx.tenant, actor=ctx.caller).order_by("-created_at")
    return KeysOut(api_keys=[key_out(row) for row in keys])


class RevokeKeyIn(Closed):
    api_key_id: Id


def _the_key(ctx: Context, data: RevokeKeyIn) -> ApiKey:
    return access_api_key_by_id(data.api_key_id, tenant=ctx.tenant, actor=ctx.caller)


def _revoke_preview(ctx: Context, data: RevokeKeyIn | RevokeConnectionIn) -> Preview:
    row: ApiKey | Connection = ctx.targets
    change = (Change(str(row.pk), {"revoked": row.revoked_at is not None}, {"revoked": True}),)
    if isinstance(row, ApiKey):
        name = f"{words.named(row.name)} (prefix {row.prefix})" if row.name else f"with prefix {row.prefix}"
        return Preview(
            change,
            summary=f"Revoke the API key {name}. It stops working at once.",
            title="Revoke this key?",
            verb="Revoke key",
        )
    return Preview(
        change,
        summary=f"Revoke the connection of {words.named(row.client_name)}. It and every token it issued stop "
        "working at once.",
        title="Revoke this connection?",
        verb="Revoke connection",
    )


@operation(
    name="revoke_api_key",
    summary="Revoke an API key at once; its next call is refused.",
    input=RevokeKeyIn,
    output=ApiKeyOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_revoke_preview,
    confirm=ALWAYS,
    targets=_the_key,
    callers=Callers.PERSONS,
)
def revoke_api_key(ctx: Context, data: RevokeKeyIn) -> ApiKeyOut:
    row: ApiKey = ctx.targets
    if revoke_key(key=row, now=ctx.now):
        ctx.touch(row.pk, {"revoked": False}, {"revoked": True})
    return key_out(row)


# --- OAuth connections (SPEC §7) ---------------------------------------------------------------------------


class ConnectionOut(Closed):
    id: str
    client_name: str
    redirect_host: str
    scopes: list[str]
    workspaces: list[str]
    tool_set: str | None = Field(description="the named set of tools it is limited to (list_tool_sets); null: none")
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked: bool
    revoked_reason: str = Field(description="why it was revoked, in words ('' while it is not)")
    lockdown: bool = Field(
        description="in lockdown: once it has read mail from someone nobody here has written to, every request of it "
        "that acts outside the mailbox waits for a person, whatever the send policies say"
    )


def connection_out(row: Connection) -> ConnectionOut:
    return ConnectionOut(
        id=str(row.pk),
        client_name=row.client_name,
        redirect_host=urlsplit(row.redirect_uri).netloc,
        scopes=list(row.scopes),
        workspaces=list(row.workspaces),
        tool_set=row.tool_set or None,
        created_at=row.created_at,
        expires_at=row.expires_at,
        last_used_at=row.last_used_at,
        revoked=row.revoked_at is not None,
        revoked_reason=revoked_reason_words(row.revoked_reason) if row.revoked_at is not None else "",
        lockdown=row.lockdown,
    )


class GrantConnectionIn(Closed):
    client_id: str = Field(min_length=1, max_length=255)
    redirect_uri: str = Field(min_length=1, max_length=2000)
    scopes: list[Literal["read", "write", "send"]] = Field(min_length=1, max_length=3)
    workspaces: list[str] = Field(default=[DEFAULT_WORKSPACE], max_length=50, description="empty: every workspace")
    lifetime: Literal["24h", "until_revoked"] = "24h"
    tool_set: str | None = Field(
        default=None,
        max_length=64,
        description="limit the connection to a named set of tools: a built-in set or one of yours (list_tool_sets); "
        "null: none",
    )


def _grantee(ctx: Context, data: GrantConnectionIn) -> Application:
    """The client asking, at a redirect address it registered (and the tool set, if any, one of the person's)."""
    app = access_application_by_client_id(data.client_id, redirect_uri=data.redirect_uri)
    if any(not w or len(w) > 100 for w in data.workspaces):
        raise OakenError.invalid("workspaces", "workspace names are 1 to 100 characters")
    tool_set_named(ctx, data.tool_set)
    return app


def _grant_preview(ctx: Context, data: GrantConnectionIn) -> Preview:
    return Preview(
        (
            Change(
                "new connection",
                None,
                {
                    "client": ctx.targets.name,
                    "lifetime": data.lifetime,
                    "scopes": recorded_scopes(data.scopes),
                    "workspaces": data.workspaces,
                },
            ),
        ),
        summary=f"Let {words.named(ctx.targets.name)} {words.scopes(recorded_scopes(data.scopes))} for you in "
        f"{words.workspaces(data.workspaces)}.",
        title="Connect this app?",
        verb="Allow",
        lines=(
            "It may act for you for 24 hours." if data.lifetime == "24h" else "It may act for you until you revoke it.",
            *((f"It may call {tool_set_words(data.tool_set)}.",) if data.tool_set else ()),
        ),
    )


@operation(
    name="grant_connection",
    summary="Let an OAuth client act for you here (the consent page): scopes, workspaces and a lifetime.",
    input=GrantConnectionIn,
    output=ConnectionOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_grant_preview,
    confirm=ALWAYS,
    targets=_grantee,
    callers=Callers.PERSONS,
)
def grant_connection(ctx: Context, data: GrantConnectionIn) -> ConnectionOut:
    assert ctx.caller.user is not None
    app: Application = ctx.targets
    hours = settings.OAUTH_CONNECTION_DEFAULT_HOURS
    row = grant(
        tenant=ctx.tenant,
        user=ctx.caller.user,
        application=app,
        redirect_uri=data.redirect_uri,
        scopes=recorded_scopes(data.scopes),
        workspaces=list(dict.fromkeys(data.workspaces)),
        now=ctx.now,
        expires_at=ctx.now + timedelta(hours=hours) if data.lifetime == "24h" else None,
        tool_set=data.tool_set or "",
    )
    granted = {"client_id": app.client_id, "scopes": row.scopes, "workspaces": row.workspaces}
    ctx.touch(
        row.pk,
        None,
        {**granted, "lifetime": data.lifetime, **({"tool_set": row.tool_set} if row.tool_set else {})},
    )
    return connection_out(row)


class ConnectionsOut(Closed):
    connections: list[ConnectionOut]


@operation(
    name="list_connections",
    summary="Your OAuth connections (an ADMIN sees the tenant's): client, scopes, workspaces, deadline, last use.",
    input=Empty,
    output=ConnectionsOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
)
def list_connections(ctx: Context, data: Empty) -> ConnectionsOut:
    rows = visible_connections(tenant=ctx.tenant, actor=ctx.caller).order_by("-created_at")
    return ConnectionsOut(connections=[connection_out(r) for r in rows])


class RevokeConnectionIn(Closed):
    connection_id: Id


def _the_connection(ctx: Context, data: RevokeConnectionIn) -> Connection:
    return access_connection_by_id(data.connection_id, tenant=ctx.tenant, actor=ctx.caller)


@operation(
    name="revoke_connection",
    summary="Revoke an OAuth connection and every token it issued, at once.",
    input=RevokeConnectionIn,
    output=ConnectionOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_revoke_preview,
    confirm=ALWAYS,
    targets=_the_connection,
    callers=Callers.PERSONS,
)
def revoke_connection_op(ctx: Context, data: RevokeConnectionIn) -> ConnectionOut:
    row: Connection = ctx.targets
    if row.revoked_at is None:
        ctx.touch(row.pk, {"revoked": False}, {"revoked": True})
    revoke_connection(row, "revoked_by_person")
    return connection_out(row)


# --- lockdown (SPEC §23) ------------------------------------------------------------------------------------


class KeyLockdownIn(Closed):
    api_key_id: Id
    lockdown: bool = Field(description="true: after reading a stranger's mail, a person decides its every request")


class ConnectionLockdownIn(Closed):
    connection_id: Id
    lockdown: bool = Field(description="true: after reading a stranger's mail, a person decides its every request")


def _lockdown_preview(ctx: Context, data: KeyLockdownIn | ConnectionLockdownIn) -> Preview:
    row: ApiKey | Connection = ctx.targets
    what = "key" if isinstance(row, ApiKey) else "connection"
    if data.lockdown:
        summary = (
            f"Lock this {what} down: once it has read mail from someone nobody here has written to, every "
            "e-mail, unsubscribe or other request of it that acts outside the mailbox waits for you."
        )
    else:
        summary = (
            f"Stop locking this {what} down: your send policies decide its requests again (flagged ones still wait)."
        )
    return Preview(
        (Change(str(row.pk), {"lockdown": row.lockdown}, {"lockdown": data.lockdown}),),
        summary=summary,
        title=f"Lock this {what} down?" if data.lockdown else f"Stop locking this {what} down?",
        verb="Lock down" if data.lockdown else "Stop locking down",
    )


@operation(
    name="set_api_key_lockdown",
    summary="Put an API key in lockdown or end it: in lockdown, once it has read mail from an unknown sender, "
    "every request of it that acts outside the mailbox waits for a person.",
    input=KeyLockdownIn,
    output=ApiKeyOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_lockdown_preview,
    confirm=ALWAYS,
    targets=lambda ctx, data: access_api_key_by_id(data.api_key_id, tenant=ctx.tenant, actor=ctx.caller),
    callers=Callers.PERSONS,
)
def set_api_key_lockdown(ctx: Context, data: KeyLockdownIn) -> ApiKeyOut:
    set_lockdown(ctx.targets, data.lockdown, act=ctx)
    return key_out(ctx.targets)


@operation(
    name="set_connection_lockdown",
    summary="Put an OAuth connection in lockdown or end it: in lockdown, once it has read mail from an unknown "
    "sender, every request of it that acts outside the mailbox waits for a person.",
    input=ConnectionLockdownIn,
    output=ConnectionOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_lockdown_preview,
    confirm=ALWAYS,
    targets=lambda ctx, data: access_connection_by_id(data.connection_id, tenant=ctx.tenant, actor=ctx.caller),
    callers=Callers.PERSONS,
)
def set_connection_lockdown(ctx: Context, data: ConnectionLockdownIn) -> ConnectionOut:
    set_lockdown(ctx.targets, data.lockdown, act=ctx)
    return connection_out(ctx.targets)
