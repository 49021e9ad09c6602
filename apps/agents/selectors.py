"""Reads of API keys and OAuth connections, always within a tenant and as one person sees them: their own, or
the tenant's for an ADMIN. Another tenant's id, or one hidden from the actor, is NOT_FOUND like a missing one."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass

from django.db.models import QuerySet
from oauth2_provider.models import Application

from apps.agents.models import ApiKey, Connection, CredentialQuerySet, ToolSet
from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.workspaces.models import Tenant


def credential_row(*, tenant_id: object, kind: str, credential_id: str) -> QuerySet[ApiKey] | QuerySet[Connection]:
    """The API key or OAuth connection a caller's credential names, in its tenant: one row at most, none for another
    kind of credential or an id that is no key's or connection's."""
    try:
        pk = uuid.UUID(str(credential_id))
    except ValueError:
        return ApiKey.objects.none()
    if kind == "apikey":
        return ApiKey.objects.unscoped().filter(tenant_id=tenant_id, pk=pk)
    if kind == "oauth":
        return Connection.objects.unscoped().filter(tenant_id=tenant_id, pk=pk)
    return ApiKey.objects.none()


def visible_api_keys(*, tenant: Tenant, actor: Caller) -> CredentialQuerySet[ApiKey]:
    return ApiKey.objects.for_tenant(tenant).visible_to(actor)


def access_api_key_by_id(key_id: str, *, tenant: Tenant, actor: Caller) -> ApiKey:
    row = visible_api_keys(tenant=tenant, actor=actor).filter(pk=parse_id(key_id, "api_key_id")).first()
    if row is None:
        raise OakenError.not_found("api_key_id")
    return row


def visible_connections(*, tenant: Tenant, actor: Caller) -> CredentialQuerySet[Connection]:
    """Connections that were granted (their code redeemed), as the actor sees them."""
    return Connection.objects.for_tenant(tenant).filter(activated_at__isnull=False).visible_to(actor)


def access_connection_by_id(connection_id: str, *, tenant: Tenant, actor: Caller) -> Connection:
    row = visible_connections(tenant=tenant, actor=actor).filter(pk=parse_id(connection_id, "connection_id")).first()
    if row is None:
        raise OakenError.not_found("connection_id")
    return row


@dataclass(frozen=True)
class LiveCredentials:
    api_keys: QuerySet[ApiKey]
    connections: QuerySet[Connection]


def live_credentials(*, tenant: Tenant, user_id: uuid.UUID) -> LiveCredentials:
    """The person's API keys and connections in this tenant not yet revoked: what removing them ends."""
    return LiveCredentials(
        api_keys=ApiKey.objects.for_tenant(tenant).filter(user_id=user_id, revoked_at__isnull=True),
        connections=Connection.objects.for_tenant(tenant).filter(user_id=user_id, revoked_at__isnull=True),
    )


def access_application_by_client_id(client_id: str, *, redirect_uri: str) -> Application:
    """The OAuth client with this id, asking at a redirect address it registered; NOT_FOUND otherwise (the two
    look the same). Clients belong to no tenant: they register once for the whole service."""
    app = Application.objects.filter(client_id=client_id).first()
    if app is None or not app.redirect_uri_allowed(redirect_uri):
        raise OakenError.not_found("client_id")
    return app


def api_keys_by_ids(*, tenant: Tenant, ids: Collection[uuid.UUID], with_user: bool = False) -> QuerySet[ApiKey]:
    """The tenant's API keys with these ids, revoked ones too (with each one's person when `with_user`)."""
    rows = ApiKey.objects.for_tenant(tenant).filter(pk__in=ids)
    return rows.select_related("user") if with_user else rows


def connections_by_ids(*, tenant: Tenant, ids: Collection[uuid.UUID], with_user: bool = False) -> QuerySet[Connection]:
    """The tenant's connections with these ids, revoked ones too (with each one's person when `with_user`)."""
    rows = Connection.objects.for_tenant(tenant).filter(pk__in=ids)
    return rows.select_related("user") if with_user else rows


def unrevoked_keys_naming(*, tenant: Tenant, workspace: str) -> int:
    """How many of the tenant's API keys not revoked list this workspace name."""
    return ApiKey.objects.for_tenant(tenant).filter(revoked_at__isnull=True, workspaces__contains=[workspace]).count()


def own_tool_sets(*, tenant: Tenant, actor: Caller) -> QuerySet[ToolSet]:
    """The actor's own tool sets in this tenant, by name. A set is personal even to an ADMIN: only its person's
    credentials are limited by it, so no one else's list shows it."""
    return ToolSet.objects.for_tenant(tenant).filter(user=actor.user).order_by("name")


def access_tool_set_by_name(name: str, *, tenant: Tenant, actor: Caller) -> ToolSet:
    row = own_tool_sets(tenant=tenant, actor=actor).filter(name=name).first()
    if row is None:
        raise OakenError.not_found("name")
    return row


def live_credentials_naming(*, tenant: Tenant, actor: Caller, tool_set: str) -> int:
    """How many of the actor's keys and connections, not revoked, are limited to the tool set of this name."""
    live = live_credentials(tenant=tenant, user_id=actor.user.pk) if actor.user is not None else None
    if live is None:
        return 0
    return live.api_keys.filter(tool_set=tool_set).count() + live.connections.filter(tool_set=tool_set).count()
