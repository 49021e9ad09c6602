"""Issuing, revoking and resolving API keys."""

from __future__ import annotations

import hashlib
import json
import secrets
from datetime import timedelta
from functools import cache

from django.db import connection
from django.db.models import Model
from django.utils import timezone

from apps.accounts.models import User
from apps.agents.models import ApiKey, ToolSet
from apps.core.callers import Caller, ToolSetGrant
from apps.core.kinds import recorded_scopes
from apps.core.rows import binary_rows, fields_of
from apps.workspaces.models import Membership, Tenant

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
    tool_set: str = "",
    lockdown: bool = False,
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
        tool_set=tool_set,
        created_by=membership.user,
        created_via=created_via,
        expires_at=expires_at,
        lockdown=lockdown,
    )
    return row, key


# the tenant's exposure settings (apps.operations.models.ExposureSetting, a layer above: named, not imported; a
# test holds the name to the model's)
EXPOSURE_TABLE = "gate_exposuresetting"

# what a call needs of the key (the rest stays deferred)
_KEY_NEEDS = {"id", "tenant_id", "user_id", "scopes", "workspaces", "allow_list", "expires_at", "revoked_at"}
_KEY_NEEDS |= {"last_used_at", "tool_set"}


def _columns(model: type[Model], only: set[str] | None = None) -> list[str]:
    return [f.attname for f in fields_of(model, only)]


@cache
def _lookup() -> tuple[str, list[str], list[str], list[str]]:
    """The key lookup in plain SQL, built once from the models: the key's columns, its tenant's and person's, the
    person's role in that tenant now (NULL when no longer a member) and the workspaces they are given, and the
    tenant's exposure settings (what the gate checks first, so one round trip fewer per call), and the operations of
    the person's own tool set the key names (NULL for none, or a built-in set). Compiling the same ORM query on every
    agent call cost more than running it."""
    key, tenant, user = _columns(ApiKey, _KEY_NEEDS), _columns(Tenant), _columns(User)
    select = [f"k.{c}" for c in key] + [f"t.{c}" for c in tenant] + [f"u.{c}" for c in user]
    members, keys, tenants, users, sets = (m._meta.db_table for m in (Membership, ApiKey, Tenant, User, ToolSet))
    sql = f"""
SELECT {", ".join(select)},
       m.role, m.workspace_ids,
       (SELECT json_object_agg(e.target, e.level)::text FROM {EXPOSURE_TABLE} e WHERE e.tenant_id = k.tenant_id),
       (SELECT s.operations FROM {sets} s WHERE s.tenant_id = k.tenant_id AND s.user_id = k.user_id
           AND s.name = k.tool_set)
  FROM {keys} k JOIN {tenants} t ON t.id = k.tenant_id JOIN {users} u ON u.id = k.user_id
  LEFT JOIN {members} m ON m.tenant_id = k.tenant_id AND m.user_id = k.user_id
 WHERE k.key_hash = %s
"""  # noqa: S608 (every name is the models' own; the one value is a parameter)
    return sql, key, tenant, user


def tool_set_grant(name: str, own: list[str] | None) -> ToolSetGrant | None:
    """What a credential naming the tool set `name` is limited to: none ('' names none); the person's own set, by
    the operations read with the credential (`own`); else the built-in set of that name, whose members the registry
    decides (and a name that is no built-in set, such as a person's set deleted since, holds nothing)."""
    if not name:
        return None
    return ToolSetGrant(name, frozenset(own) if own is not None else None)


def caller_for_key(key: str) -> Caller | None:
    """The agent caller a bearer API key stands for, or None (unknown, revoked, expired, person gone)."""
    if not key.startswith(KEY_PREFIX) or len(key) > 200:
        return None
    # Authentication itself: the secret's hash is what finds the tenant, so this lookup cannot be scoped.
    # One statement: the key, its tenant and person, and the person's role and workspaces there now.
    sql, key_columns, tenant_columns, user_columns = _lookup()
    with binary_rows() as cursor:
        cursor.execute(sql, [_hash(key)])
        row = cursor.fetchone()
    if row is None:
        return None
    found = ApiKey.from_db(connection.alias, key_columns, row[: len(key_columns)])
    rest = row[len(key_columns) :]
    tenant = Tenant.from_db(connection.alias, tenant_columns, rest[: len(tenant_columns)])
    user = User.from_db(connection.alias, user_columns, rest[len(tenant_columns) : -4])
    role, workspace_ids, exposure, own_set = rest[-4:]
    now = timezone.now()
    if not found.is_live(now) or not user.is_active or role is None:
        return None
    membership = Membership(tenant=tenant, user=user, role=role, workspace_ids=workspace_ids)
    if found.last_used_at is None or now - found.last_used_at > _LAST_USED_GRANULARITY:
        ApiKey.objects.for_tenant(tenant).filter(pk=found.pk).update(last_used_at=now)
    return Caller.agent(
        membership,
        scopes=set(found.scopes),
        workspaces=tuple(found.workspaces),
        allow_list=set(found.allow_list) if found.allow_list is not None else None,
        tool_set=tool_set_grant(found.tool_set, own_set),
        credential_id=str(found.pk),
        credential_kind="apikey",
        exposure=json.loads(exposure) if exposure is not None else {},
    )
