"""Reads for tenants and workspaces, always starting from a person or a tenant."""

from __future__ import annotations

import uuid

from apps.accounts.models import User
from apps.workspaces.models import Membership, Tenant, Workspace


class NotAMemberError(Exception):
    """The person does not belong to that tenant (or it does not exist: the two look the same)."""


def access_membership(*, user: User, tenant_id: str | None = None) -> Membership:
    """The person's membership in tenant_id, or in their only/first tenant when none is named."""
    memberships = Membership.objects.for_user(user).select_related("tenant").order_by("created_at")
    if tenant_id is not None:
        try:
            memberships = memberships.filter(tenant_id=uuid.UUID(str(tenant_id)))
        except ValueError:
            raise NotAMemberError from None
    membership = memberships.first()
    if membership is None:
        raise NotAMemberError
    return membership


def access_workspace_by_name(*, tenant: Tenant, name: str) -> Workspace | None:
    """The tenant's workspace with this name, or None."""
    return Workspace.objects.for_tenant(tenant).filter(name=name).first()
