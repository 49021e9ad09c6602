"""Writes for tenants, memberships and workspaces."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Q

from apps.accounts.models import User, normalize_email
from apps.audit.log import append_event
from apps.core.changes import Change
from apps.core.kinds import Role
from apps.workspaces.models import DEFAULT_WORKSPACE, Invitation, Membership, Tenant, Workspace
from apps.workspaces.selectors import access_invitation_by_token, invitation_token_hash


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


# ---------------------------------------------------------------- memberships


@dataclass(frozen=True)
class LockedMemberships:
    """The tenant's OWNER memberships, the named ones and `person`'s, locked until the transaction ends."""

    owners: dict[uuid.UUID, Membership]
    named: dict[uuid.UUID, Membership]
    person: Membership | None


def lock_memberships(*, tenant: Tenant, ids: Iterable[uuid.UUID], person: User) -> LockedMemberships:
    """Lock the tenant's owners first, then the named memberships and `person`'s own, in that order and by id.

    Every change that could remove or demote an OWNER takes this lock, so two of them serialize:
    the second one counts the owners the first one left (in READ COMMITTED, a row demoted by
    the first no longer matches `role = OWNER` when the second gets it), and the last OWNER
    cannot be lost to a race. Must run inside a transaction.
    """
    members = Membership.objects.for_tenant(tenant)
    owners = {m.pk: m for m in members.filter(role=Role.OWNER).order_by("pk").select_for_update()}
    ids = list(ids)
    rows = list(
        members.filter(Q(pk__in=ids) | Q(user=person)).select_related("user").order_by("pk")
        .select_for_update(of=("self",))
    )  # fmt: skip
    return LockedMemberships(
        owners=owners,
        named={m.pk: m for m in rows if m.pk in ids},
        person=next((m for m in rows if m.user_id == person.pk), None),
    )


# ---------------------------------------------------------------- invitations


class InvitationTakenError(Exception):
    """A concurrent call opened an invitation for the same address first."""


@dataclass(frozen=True)
class IssuedInvitation:
    invitation: Invitation
    token: str  # for the e-mail only: never stored, never returned
    replaced: list[Invitation]


@dataclass(frozen=True)
class AcceptedInvitation:
    membership: Membership
    already_member: bool


def open_invitations(*, tenant: Tenant) -> list[Invitation]:
    """The tenant's invitations neither accepted nor cancelled (expired ones included), oldest first."""
    return list(
        Invitation.objects.for_tenant(tenant)
        .filter(accepted_at__isnull=True, revoked_at__isnull=True)
        .select_related("invited_by")
        .order_by("created_at")
    )


@transaction.atomic
def issue_invitation(
    *, tenant: Tenant, email: str, role: str, invited_by: User, now: datetime, ttl: timedelta
) -> IssuedInvitation:
    """A new invitation for `email`, replacing (cancelling) any open one for the same address."""
    email = normalize_email(email)
    replaced = list(
        Invitation.objects.for_tenant(tenant)
        .filter(email=email, accepted_at__isnull=True, revoked_at__isnull=True)
        .select_for_update()
    )
    for old in replaced:
        old.revoked_at = now
        old.save(update_fields=["revoked_at"])
    token = secrets.token_urlsafe(32)
    try:
        with transaction.atomic():
            invitation = Invitation.objects.create(
                tenant=tenant, email=email, role=role, token_hash=invitation_token_hash(token),
                invited_by=invited_by, created_at=now, expires_at=now + ttl,
            )  # fmt: skip
    except IntegrityError:
        raise InvitationTakenError from None
    return IssuedInvitation(invitation=invitation, token=token, replaced=replaced)


@transaction.atomic
def accept_invitation(*, user: User, token: str, now: datetime) -> AcceptedInvitation:
    """Make `user` a member as the invitation says, once, if it was sent to their verified address."""
    row = access_invitation_by_token(user=user, token=token, now=now, lock=True)
    membership, created = Membership.objects.get_or_create(
        tenant=row.tenant, user=user, defaults={"role": row.role, "created_at": now}
    )
    row.accepted_at, row.accepted_by = now, user
    row.save(update_fields=["accepted_at", "accepted_by"])
    targets = [Change(str(row.pk), {"accepted": False}, {"accepted": True})]
    if created:
        targets.append(Change(str(membership.pk), None, {"person": user.email, "role": membership.role}))
    append_event(
        tenant=row.tenant, principal="person", door="ui", operation="accept_invitation", outcome="ok",
        person_id=user.pk, targets=targets,
    )  # fmt: skip
    return AcceptedInvitation(membership=membership, already_member=not created)
