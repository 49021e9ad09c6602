"""OAuth connections: resolving an access token to the gate's agent caller, and revoking a connection."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone
from oauth2_provider.models import AccessToken, RefreshToken

from apps.agents.keys import tool_set_grant
from apps.agents.models import Connection, ConnectionToken, ToolSet
from apps.core.callers import Caller
from apps.workspaces.models import Membership, current_role, current_workspace_ids

# last-use times are kept to the minute, as for API keys
_LAST_USED_GRANULARITY = timedelta(minutes=1)


def _own_tool_set() -> Subquery:
    """The operations of the person's own tool set the connection names, read with the token (NULL: none)."""
    rows = ToolSet.objects.unscoped().filter(
        tenant_id=OuterRef("connection__tenant_id"),
        user_id=OuterRef("connection__user_id"),
        name=OuterRef("connection__tool_set"),
    )
    return Subquery(rows.values("operations")[:1])


def caller_for_token(token: str, resource: str) -> Caller | None:
    """The agent caller an OAuth access token stands for at `resource` (the canonical /mcp URL), or None:
    unknown or expired token, a token for another audience or none, a revoked or expired connection, a person
    who is inactive or no longer a member."""
    if not token or len(token) > 500:
        return None
    checksum = hashlib.sha256(token.encode()).hexdigest()
    # Authentication itself: the token's hash is what finds the tenant, so this lookup cannot be scoped.
    # One statement: the token, its connection, tenant and person, and the person's role and workspaces there now.
    link = (
        ConnectionToken.objects.filter(access_token__token_checksum=checksum)
        .select_related("access_token", "connection", "connection__tenant", "connection__user")
        .annotate(
            role=current_role(via="connection__"),
            given=current_workspace_ids(via="connection__"),
            own_set=_own_tool_set(),
        )
        .first()
    )
    now = timezone.now()
    if link is None or link.access_token.expires <= now or link.role is None:
        return None
    if list(link.access_token.resource or []) != [resource]:
        return None
    connection = link.connection
    if not connection.is_live(now) or not connection.user.is_active:
        return None
    membership = Membership(tenant=connection.tenant, user=connection.user, role=link.role, workspace_ids=link.given)
    if connection.last_used_at is None or now - connection.last_used_at > _LAST_USED_GRANULARITY:
        Connection.objects.for_tenant(connection.tenant).filter(pk=connection.pk).update(last_used_at=now)
    granted = set(connection.scopes) & set(link.access_token.scope.split())
    return Caller.agent(
        membership,
        scopes=granted,
        workspaces=tuple(connection.workspaces),
        tool_set=tool_set_grant(connection.tool_set, link.own_set),
        credential_id=str(connection.pk),
        credential_kind="oauth",
    )


# why a connection was revoked (Connection.revoked_reason), in the words the console and the audit log show
REVOKED_REASONS = {
    "revoked_by_person": "revoked by a person",
    "revoked_by_client": "given up by its client",
    "code_reused": "authorization code replayed",
    "refresh_reused": "refresh token replayed",
}


def revoked_reason_words(reason: str) -> str:
    return REVOKED_REASONS.get(reason, reason.replace("_", " "))


def revoke_connection(connection: Connection, reason: str) -> bool:
    """End a connection and every token it issued, at once; whether this call ended it (False: it was already).
    Call it inside the transaction that records why (the gate's call, or the caller's audit event)."""
    revoked = False
    with transaction.atomic():
        locked = Connection.objects.for_tenant(connection.tenant).select_for_update().get(pk=connection.pk)
        if locked.revoked_at is None:
            locked.revoked_at = timezone.now()
            locked.revoked_reason = reason
            locked.save(update_fields=["revoked_at", "revoked_reason"])
            revoked = True
        connection.revoked_at, connection.revoked_reason = locked.revoked_at, locked.revoked_reason
        if locked.token_family is not None:
            RefreshToken.objects.filter(token_family=locked.token_family, revoked__isnull=True).update(
                revoked=timezone.now()
            )
        AccessToken.objects.filter(oaken_link__connection=locked).delete()
    return revoked
