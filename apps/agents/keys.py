"""Issuing, revoking and resolving API keys."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import cast

from django.utils import timezone

from apps.agents.models import ApiKey
from apps.core.callers import Caller
from apps.core.kinds import recorded_scopes
from apps.workspaces.models import Membership, current_role

KEY_PREFIX = "oak_"
# last-use times are kept to the minute: a write per call would cost every agent call a row lock
_LAST_USED_GRANULARITY = timedelta(minutes=1)


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def issue_key(
    *,
    membership: Membership,
    scopes: list[str],
    workspaces: list[str],
    allow_list: list[str] | None,
    expires_at: object,
    name: str = "",
    created_via: str = "console",
) -> tuple[ApiKey, str]:
    """A new key for this person in this tenant; returns the row and the key, which is never shown again."""
    public = secrets.token_hex(4)
    key = f"{KEY_PREFIX}{public}_{secrets.token_urlsafe(32)}"
    row = ApiKey.objects.create(
        tenant=membership.tenant,
        user=membership.user,
        name=name,
        prefix=f"{KEY_PREFIX}{public}",
        key_hash=_hash(key),
        scopes=recorded_scopes(scopes),
        workspaces=workspaces,
        allow_list=allow_list,
        created_by=membership.user,
        created_via=created_via,
        expires_at=expires_at,
    )
    return row, key


def caller_for_key(key: str) -> Caller | None:
    """The agent caller a bearer API key stands for, or None (unknown, revoked, expired, person gone)."""
    if not key.startswith(KEY_PREFIX) or len(key) > 200:
        return None
    # Authentication itself: the secret's hash is what finds the tenant, so this lookup cannot be scoped.
    # One statement: the key, its tenant and person, and the person's role there now.
    row = cast(
        "ApiKey | None",
        ApiKey.objects.unscoped()
        .filter(key_hash=_hash(key))
        .select_related("tenant", "user")
        .annotate(role=current_role())
        .first(),
    )
    now = timezone.now()
    role = getattr(row, "role", None)
    if row is None or not row.is_live(now) or not row.user.is_active or role is None:
        return None
    membership = Membership(tenant=row.tenant, user=row.user, role=role)
    if row.last_used_at is None or now - row.last_used_at > _LAST_USED_GRANULARITY:
        ApiKey.objects.for_tenant(row.tenant).filter(pk=row.pk).update(last_used_at=now)
    return Caller.agent(
        membership,
        scopes=set(row.scopes),
        workspaces=tuple(row.workspaces),
        allow_list=set(row.allow_list) if row.allow_list is not None else None,
        credential_id=str(row.pk),
        credential_kind="apikey",
    )
