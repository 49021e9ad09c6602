"""API keys (SPEC §7): created, listed and revoked by persons only (ceiling never)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import Field

from apps.agents.keys import issue_key
from apps.agents.models import ApiKey
from apps.gate.errors import GateError
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Empty, Id
from apps.operations.registry import ALWAYS, Ceiling, Change, OpClass, Preview, operation, registry
from apps.workspaces.models import DEFAULT_WORKSPACE, Membership, Role


class ApiKeyOut(Closed):
    id: str
    prefix: str
    name: str
    scopes: list[str]
    workspaces: list[str]
    operations: list[str] | None
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked: bool


def key_out(row: ApiKey) -> ApiKeyOut:
    return ApiKeyOut(
        id=str(row.pk), prefix=row.prefix, name=row.name, scopes=list(row.scopes), workspaces=list(row.workspaces),
        operations=list(row.allow_list) if row.allow_list is not None else None, created_at=row.created_at,
        expires_at=row.expires_at, last_used_at=row.last_used_at, revoked=row.revoked_at is not None,
    )  # fmt: skip


class CreateKeyIn(Closed):
    name: str = Field(default="", max_length=200)
    scopes: list[Literal["read", "write", "send"]] = Field(min_length=1, max_length=3)
    workspaces: list[str] = Field(default=[DEFAULT_WORKSPACE], max_length=50, description="empty: every workspace")
    operations: list[str] | None = Field(default=None, max_length=200, description="allow-list; null: all in scope")
    expires_in_days: int | None = Field(default=None, ge=1, le=3650)


class CreatedKeyOut(Closed):
    api_key: ApiKeyOut
    key: str = Field(description="the key itself: shown this once, never stored")


def _create_scope(ctx: Context, data: CreateKeyIn) -> None:
    for name in data.operations or ():
        if name not in registry:
            raise GateError.invalid("operations", "names an operation that does not exist")
    if any(not w or len(w) > 100 for w in data.workspaces):
        raise GateError.invalid("workspaces", "workspace names are 1 to 100 characters")


def _create_preview(ctx: Context, data: CreateKeyIn) -> Preview:
    return Preview((Change("new api key", None, {"scopes": sorted(set(data.scopes) | {"read"}),
                                                 "workspaces": data.workspaces}),))  # fmt: skip


def _membership(ctx: Context) -> Membership:
    assert ctx.caller.user is not None
    return Membership.objects.for_user(ctx.caller.user).select_related("tenant", "user").get(tenant=ctx.tenant)


@operation(
    name="create_api_key",
    summary="Create an API key for yourself: scopes, workspaces, optional operation allow-list, expiry. Shown once.",
    input=CreateKeyIn,
    output=CreatedKeyOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_create_preview,
    confirm=ALWAYS,
    data_scope=_create_scope,
    returns_secret=True,
)
def create_api_key(ctx: Context, data: CreateKeyIn) -> CreatedKeyOut:
    expires = ctx.now + timedelta(days=data.expires_in_days) if data.expires_in_days else None
    row, key = issue_key(
        membership=_membership(ctx),
        scopes=list(data.scopes),
        workspaces=list(dict.fromkeys(data.workspaces)),
        allow_list=sorted(set(data.operations)) if data.operations is not None else None,
        expires_at=expires,
        name=data.name,
        created_via=ctx.door,
    )
    ctx.touch(row.pk, None, {"prefix": row.prefix, "scopes": row.scopes, "workspaces": row.workspaces})
    return CreatedKeyOut(api_key=key_out(row), key=key)


class KeysOut(Closed):
    api_keys: list[ApiKeyOut]


def _visible(ctx: Context) -> object:
    keys = ApiKey.objects.for_tenant(ctx.tenant)
    if ctx.caller.role is None or not Role(ctx.caller.role).covers(Role.ADMIN):
        keys = keys.filter(user=ctx.caller.user)
    return keys


@operation(
    name="list_api_keys",
    summary="Your API keys (an ADMIN sees the tenant's), with prefix and last use; never the keys themselves.",
    input=Empty,
    output=KeysOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
)
def list_api_keys(ctx: Context, data: Empty) -> KeysOut:
    return KeysOut(api_keys=[key_out(row) for row in _visible(ctx).order_by("-created_at")])  # type: ignore[attr-defined]


class RevokeKeyIn(Closed):
    api_key_id: Id


def _key(ctx: Context, key_id: str) -> ApiKey:
    from apps.mail.selectors import parse_id

    row = _visible(ctx).filter(pk=parse_id(key_id, "api_key_id")).first()  # type: ignore[attr-defined]
    if row is None:
        raise GateError.not_found("api_key_id")
    return row


def _revoke_scope(ctx: Context, data: RevokeKeyIn) -> None:
    _key(ctx, data.api_key_id)


def _revoke_preview(ctx: Context, data: RevokeKeyIn) -> Preview:
    row = _key(ctx, data.api_key_id)
    return Preview((Change(str(row.pk), {"revoked": row.revoked_at is not None}, {"revoked": True}),))


@operation(
    name="revoke_api_key",
    summary="Revoke an API key at once; its next call is refused.",
    input=RevokeKeyIn,
    output=ApiKeyOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_revoke_preview,
    confirm=ALWAYS,
    data_scope=_revoke_scope,
)
def revoke_api_key(ctx: Context, data: RevokeKeyIn) -> ApiKeyOut:
    row = _key(ctx, data.api_key_id)
    if row.revoked_at is None:
        ctx.touch(row.pk, {"revoked": False}, {"revoked": True})
        row.revoked_at = ctx.now
        row.save(update_fields=["revoked_at"])
    return key_out(row)
