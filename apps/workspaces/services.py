"""Writes for tenants, memberships and workspaces."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from apps.accounts.models import User, normalize_email
from apps.workspaces.models import DEFAULT_WORKSPACE, Membership, Role, Tenant, Workspace


class PersonExistsError(Exception):
    """A person with this e-mail address has already signed up."""


@dataclass(frozen=True)
class NewPerson:
    user: User
    tenant: Tenant
    workspace: Workspace
    membership: Membership


@transaction.atomic
def create_tenant(*, owner: User, name: str) -> tuple[Tenant, Workspace, Membership]:
    """A tenant owned by `owner`, with its `default` workspace."""
    tenant = Tenant.objects.create(name=name.strip() or owner.email)
    workspace = Workspace.objects.create(tenant=tenant, name=DEFAULT_WORKSPACE)
    membership = Membership.objects.create(tenant=tenant, user=owner, role=Role.OWNER)
    return tenant, workspace, membership


@transaction.atomic
def create_person(*, email: str, password: str | None, tenant_name: str | None = None) -> NewPerson:
    """A person with their own tenant (named after them unless told) and its default workspace."""
    email = normalize_email(email)
    if User.objects.for_email(email).exists():
        raise PersonExistsError
    user = User.objects.create_user(email=email, password=password)
    tenant, workspace, membership = create_tenant(owner=user, name=tenant_name or email)
    return NewPerson(user=user, tenant=tenant, workspace=workspace, membership=membership)
