"""Reads of API keys and OAuth connections, always within a tenant and as one person sees them: their own, or
the tenant's for an ADMIN. Another tenant's id, or one hidden from the actor, is NOT_FOUND like a missing one."""

from __future__ import annotations

from apps.agents.models import ApiKey, Connection, CredentialQuerySet
from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.workspaces.models import Tenant


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
