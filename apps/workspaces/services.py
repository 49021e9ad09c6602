"""Writes for tenants, memberships and workspaces, and the membership rules they hold to (SPEC §2).

Roles: MEMBER uses mail; ADMIN manages workspaces, members and invitations; only an OWNER makes or
unmakes OWNERs, and the tenant's last OWNER can never be demoted or removed. Each rule is written
once here: the operations enforce it, and their lists tell the console what it allows (which roles
a person may give, who they may remove, which workspace may be renamed), so no page repeats it.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.urls import reverse

from apps.accounts import services as account_services
from apps.accounts.models import User, normalize_email
from apps.core.errors import OakenError
from apps.core.kinds import Role
from apps.core.links import absolute_url
from apps.workspaces.models import DEFAULT_WORKSPACE, Invitation, Membership, Tenant, Workspace
from apps.workspaces.selectors import (
    InvitationRefusedError,
    access_invitation_by_reference,
    access_invitation_by_token,
    invitation_token_hash,
)

# what each role may do, in one sentence, for a person deciding whether to join (the invitation page)
ROLE_IN_A_SENTENCE = {
    Role.MEMBER: "A member reads, sorts and writes the tenant's mail, and manages their own API keys and connections.",
    Role.ADMIN: "An admin does what a member does, and also manages the tenant's workspaces, mailboxes, members "
    "and invitations.",
    Role.OWNER: "An owner does what an admin does, and also makes or removes the tenant's other owners.",
}


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


@transaction.atomic
def create_invitee(*, email: str, password: str | None, tenant_name: str | None = None) -> User:
    """A person signing up from an invitation: no tenant of their own unless they ask for one (`tenant_name`);
    they join the inviting tenant once their address is confirmed (accept_invitation)."""
    if tenant_name is not None:
        return create_person(email=email, password=password, tenant_name=tenant_name).user
    email = normalize_email(email)
    if User.objects.for_email(email).exists():
        raise PersonExistsError
    return User.objects.create_user(email=email, password=password)


# ---------------------------------------------------------------- workspaces


def is_renamable(*, workspace: Workspace) -> bool:
    """Whether the workspace may be renamed at all (by an ADMIN): every one but `default`."""
    return workspace.name != DEFAULT_WORKSPACE


def check_renamable(*, workspace: Workspace) -> None:
    """Refuse renaming the default workspace: new keys and connections reach it by its name."""
    if not is_renamable(workspace=workspace):
        raise OakenError.invalid(
            "workspace_id", "the default workspace keeps its name: new keys and connections reach it by it"
        )


def workspace_name_taken() -> OakenError:
    return OakenError("CONFLICT", "name: this tenant already has a workspace with this name", field="name")


def create_workspace(*, tenant: Tenant, name: str, now: datetime) -> Workspace:
    """A new workspace; CONFLICT when the tenant has one by this name (a concurrent call may take it first)."""
    try:
        with transaction.atomic():
            return Workspace.objects.create(tenant=tenant, name=name, created_at=now)
    except IntegrityError:
        raise workspace_name_taken() from None


def rename_workspace(*, workspace: Workspace, name: str) -> str | None:
    """Give the workspace a new name (not `default`'s); its name before, or None when it already had this one."""
    check_renamable(workspace=workspace)
    if workspace.name == name:
        return None
    before, workspace.name = workspace.name, name
    try:
        with transaction.atomic():
            workspace.save(update_fields=["name"])
    except IntegrityError:
        raise workspace_name_taken() from None
    return before


# ---------------------------------------------------------------- membership rules
#
# Two kinds of rule: what the actor's role allows (check_role_change, check_removal,
# check_invitation), decided from the two memberships alone, and that an OWNER stays
# (check_an_owner_stays), which holds only under the lock on the tenant's OWNERs. The lists
# report the first kind only: the last OWNER is offered "Leave" and told why it is refused.


def _needs_admin(why: str = "") -> OakenError:
    return OakenError("FORBIDDEN", f"this needs the ADMIN role in this tenant{why}")


def _only_owners(field: str, what: str) -> OakenError:
    return OakenError("FORBIDDEN", f"{field}: only an OWNER can {what}", field=field)


def check_role_change(*, actor: Membership, target: Membership, role: str) -> None:
    """Refuse (FORBIDDEN) giving `target` this role unless `actor`'s role allows it."""
    mine = Role(actor.role)
    if not mine.covers(Role.ADMIN):
        raise _needs_admin()
    if role == Role.OWNER and mine != Role.OWNER:
        raise _only_owners("role", "make someone an OWNER")
    if target.role == Role.OWNER and mine != Role.OWNER:
        raise _only_owners("membership_id", "change an OWNER's role")


def check_removal(*, actor: Membership, target: Membership) -> None:
    """Refuse (FORBIDDEN) removing `target` unless `actor`'s role allows it; anyone may remove themselves."""
    if target.user_id == actor.user_id:
        return
    mine = Role(actor.role)
    if not mine.covers(Role.ADMIN):
        raise _needs_admin(" (anyone may remove themselves)")
    if target.role == Role.OWNER and mine != Role.OWNER:
        raise _only_owners("membership_id", "remove an OWNER")


def check_invitation(*, actor: Membership, role: str) -> None:
    """Refuse (FORBIDDEN) inviting someone as `role` unless `actor`'s role allows it."""
    mine = Role(actor.role)
    if not mine.covers(Role.ADMIN):
        raise _needs_admin()
    if role == Role.OWNER and mine != Role.OWNER:
        raise _only_owners("role", "invite an OWNER")


def check_workspaces_change(*, actor: Membership, target: Membership) -> None:
    """Only an ADMIN or OWNER gives members their workspaces (an ADMIN not an OWNER's: OWNERs are beyond them)."""
    if not Role(actor.role).covers(Role.ADMIN):
        raise _needs_admin(" to choose a member's workspaces")
    if target.role == Role.OWNER and actor.role != Role.OWNER:
        raise _only_owners("membership_id", "choose an OWNER's workspaces")


def _allows(check: Callable[..., None], *, actor: Membership, target: Membership) -> bool:
    """Whether the rule `check` lets `actor` act on `target` (it raises OakenError when it does not)."""
    try:
        check(actor=actor, target=target)
    except OakenError:
        return False
    return True


def may_change_workspaces(*, actor: Membership, target: Membership) -> bool:
    """Whether check_workspaces_change lets `actor` choose `target`'s workspaces."""
    return _allows(check_workspaces_change, actor=actor, target=target)


def check_an_owner_stays(*, target: Membership, role: str | None, owners: int) -> None:
    """Refuse (LAST_OWNER) leaving the tenant without an OWNER: `role` is target's new role, None when removed."""
    if target.role == Role.OWNER and role != Role.OWNER and owners <= 1:
        raise OakenError(
            "LAST_OWNER",
            "membership_id: the tenant's last OWNER cannot be demoted or removed; make someone else an OWNER first",
            field="membership_id",
        )


def assignable_roles(*, actor: Membership, target: Membership) -> list[Role]:
    """The roles `actor` may give `target` (check_role_change), lowest first; empty when none."""
    allowed = []
    for role in Role:
        try:
            check_role_change(actor=actor, target=target, role=role)
        except OakenError:
            continue
        allowed.append(role)
    return allowed


def can_remove(*, actor: Membership, target: Membership) -> bool:
    """Whether `actor` may remove `target` (check_removal)."""
    return _allows(check_removal, actor=actor, target=target)


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
        members.filter(Q(pk__in=ids) | Q(user=person))
        .select_related("user")
        .order_by("pk")
        .select_for_update(of=("self",))
    )
    return LockedMemberships(
        owners=owners,
        named={m.pk: m for m in rows if m.pk in ids},
        person=next((m for m in rows if m.user_id == person.pk), None),
    )


def _no_longer_member() -> OakenError:
    return OakenError("FORBIDDEN", "you are no longer a member of this tenant")


@dataclass(frozen=True)
class _Locked:
    actor: Membership
    target: Membership
    owners: int


def _lock_target(*, tenant: Tenant, actor: User, membership_id: uuid.UUID) -> _Locked:
    """The actor's and the target's memberships, locked with the tenant's owners (lock_memberships)."""
    locked = lock_memberships(tenant=tenant, ids=[membership_id], person=actor)
    if locked.person is None:
        raise _no_longer_member()
    target = locked.named.get(membership_id)
    if target is None:
        raise OakenError.not_found("membership_id")
    return _Locked(actor=locked.person, target=target, owners=len(locked.owners))


@dataclass(frozen=True)
class RoleChange:
    membership: Membership
    before: str


@transaction.atomic
def change_role(*, tenant: Tenant, actor: User, membership_id: uuid.UUID, role: str) -> RoleChange:
    """Give a member a new role, if the actor's role allows it and the tenant keeps an OWNER (under the lock)."""
    locked = _lock_target(tenant=tenant, actor=actor, membership_id=membership_id)
    target = locked.target
    check_role_change(actor=locked.actor, target=target, role=role)
    check_an_owner_stays(target=target, role=role, owners=locked.owners)
    before = target.role
    if before != role:
        target.role = role
        target.save(update_fields=["role"])
    return RoleChange(membership=target, before=before)


@dataclass(frozen=True)
class WorkspacesChange:
    membership: Membership
    before: list[uuid.UUID] | None


@transaction.atomic
def set_member_workspaces(
    *, tenant: Tenant, actor: User, membership_id: uuid.UUID, workspace_ids: list[uuid.UUID] | None
) -> WorkspacesChange:
    """Give a member these workspaces (None: every one), the actor an ADMIN still (under the lock). The ids are
    the tenant's (the caller resolved them); their agents reach no further from their next call on."""
    locked = _lock_target(tenant=tenant, actor=actor, membership_id=membership_id)
    check_workspaces_change(actor=locked.actor, target=locked.target)
    target = locked.target
    before = target.workspace_ids
    wanted = sorted(set(workspace_ids)) if workspace_ids is not None else None
    if before != wanted:
        target.workspace_ids = wanted
        target.save(update_fields=["workspace_ids"])
    return WorkspacesChange(membership=target, before=before)


@dataclass(frozen=True)
class RemovedMember:
    """A membership that was removed (its row is gone)."""

    membership_id: uuid.UUID
    user: User
    role: str
    joined: datetime
    workspace_ids: list[uuid.UUID] | None


@transaction.atomic
def remove_membership(*, tenant: Tenant, actor: User, membership_id: uuid.UUID) -> RemovedMember:
    """Remove a member (the actor's role allows it; never the last OWNER). Their keys and connections here are
    not this app's to end: the caller ends them in the same transaction (apps.agents.services)."""
    locked = _lock_target(tenant=tenant, actor=actor, membership_id=membership_id)
    target = locked.target
    check_removal(actor=locked.actor, target=target)
    check_an_owner_stays(target=target, role=None, owners=locked.owners)
    removed = RemovedMember(
        membership_id=target.pk,
        user=target.user,
        role=target.role,
        joined=target.created_at,
        workspace_ids=target.workspace_ids,
    )
    target.delete()
    return removed


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
    invitation: Invitation
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


def cancel_invitation(*, invitation: Invitation, now: datetime) -> None:
    """Cancel an open invitation from `now` on: its link stops working."""
    invitation.revoked_at = now
    invitation.save(update_fields=["revoked_at"])


@transaction.atomic
def issue_invitation(
    *,
    tenant: Tenant,
    email: str,
    role: str,
    invited_by: User,
    now: datetime,
    ttl: timedelta,
    workspace_ids: list[uuid.UUID] | None = None,
) -> IssuedInvitation:
    """A new invitation for `email`, replacing (cancelling) any open one for the same address."""
    email = normalize_email(email)
    replaced = list(
        Invitation.objects.for_tenant(tenant)
        .filter(email=email, accepted_at__isnull=True, revoked_at__isnull=True)
        .select_for_update()
    )
    for old in replaced:
        cancel_invitation(invitation=old, now=now)
    token = secrets.token_urlsafe(32)
    try:
        with transaction.atomic():
            invitation = Invitation.objects.create(
                tenant=tenant,
                email=email,
                role=role,
                workspace_ids=workspace_ids,
                token_hash=invitation_token_hash(token),
                invited_by=invited_by,
                created_at=now,
                expires_at=now + ttl,
            )
    except IntegrityError:
        raise InvitationTakenError from None
    return IssuedInvitation(invitation=invitation, token=token, replaced=replaced)


@transaction.atomic
def invite(
    *,
    tenant: Tenant,
    actor: User,
    email: str,
    role: str,
    now: datetime,
    ttl: timedelta,
    workspace_ids: list[uuid.UUID] | None = None,
    reach: str = "",
) -> IssuedInvitation:
    """Invite `email` as `role` (a MEMBER given `workspace_ids`; None: every workspace) if the actor's role allows
    it (checked again under the lock on the memberships), and mail the link once the invitation is committed;
    `reach` is the sentence the mail gives on what the invitee will be able to read and send as."""
    locked = lock_memberships(tenant=tenant, ids=[], person=actor)
    if locked.person is None:
        raise _no_longer_member()
    check_invitation(actor=locked.person, role=role)
    try:
        issued = issue_invitation(
            tenant=tenant, email=email, role=role, invited_by=actor, now=now, ttl=ttl, workspace_ids=workspace_ids
        )
    except InvitationTakenError:
        raise OakenError(
            "CONFLICT", "email: this address was invited by a call running at the same time", field="email"
        ) from None
    # only once the invitation is committed; a mail server that fails is logged, and the
    # invitation stays listed, so it can be sent again
    row = issued.invitation
    transaction.on_commit(
        partial(
            send_invitation,
            email=row.email,
            token=issued.token,
            inviter=actor.email,
            tenant_name=tenant.name,
            role=row.role,
            days=ttl.days,
            reach=reach,
        ),
        robust=True,
    )
    return issued


def send_invitation(
    *, email: str, token: str, inviter: str, tenant_name: str, role: str, days: int, reach: str = ""
) -> None:
    """E-mail the invitation's link to the address invited."""
    link = absolute_url(reverse("invitation", args=[token]))
    tenant = " ".join(tenant_name.split())  # one line, whatever the name holds
    said = f"{reach}\n\n" if reach else ""
    send_mail(
        f"Invitation to join {tenant} on Oaken",
        f"{inviter} invited you to join {tenant} on Oaken as {role}.\n\n{said}"
        f"Sign in (or sign up) with this address, then follow this link to accept:\n\n{link}\n\n"
        f"It works once, for {days} days. If you did not expect this, ignore this message.",
        settings.DEFAULT_FROM_EMAIL,
        [email],
    )


@transaction.atomic
def accept_invitation(
    *, tenant: Tenant, user: User, now: datetime, token: str | None = None, reference: str | None = None
) -> AcceptedInvitation:
    """Make `user` a member of `tenant` as its invitation says, once, if it was sent to their verified address
    (InvitationRefusedError otherwise; an invitation to another tenant is "unknown" here). The invitation is named
    by its link's token, or by a reference made from it (selectors.invitation_reference). The tenant becomes the
    one the person's console opens in next time."""
    if token is not None:
        row = access_invitation_by_token(user=user, token=token, now=now, lock=True)
    else:
        row = access_invitation_by_reference(user=user, reference=reference or "", now=now, lock=True)
    if row.tenant_id != tenant.pk:
        raise InvitationRefusedError("unknown")
    membership, created = Membership.objects.get_or_create(
        tenant=row.tenant,
        user=user,
        defaults={"role": row.role, "created_at": now, "workspace_ids": row.workspace_ids},
    )
    row.accepted_at, row.accepted_by = now, user
    row.save(update_fields=["accepted_at", "accepted_by"])
    account_services.remember_tenant(user=user, tenant_id=row.tenant_id, now=now)
    return AcceptedInvitation(invitation=row, membership=membership, already_member=not created)
