"""Tenant administration by persons only (ceiling never): workspaces, members, roles and invitations (SPEC §2).

Roles: MEMBER lists; ADMIN manages workspaces, members and invitations; only an OWNER makes or
unmakes OWNERs, and the tenant's last OWNER can never be demoted or removed. Changes that could
take away an OWNER lock the tenant's OWNER memberships first (services.lock_memberships), so
two of them running at once cannot both pass the last-owner check.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from functools import partial
from typing import Annotated, Any, Literal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.db.models import Count
from django.urls import reverse
from pydantic import Field, StringConstraints

from apps.accounts.models import User, normalize_email
from apps.agents.connections import revoke_connection
from apps.agents.models import ApiKey, Connection
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.core.kinds import Role
from apps.mail.models import MailAccount
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Empty, Id
from apps.operations.registry import ALWAYS, Callers, Ceiling, OpClass, Preview, operation
from apps.workspaces.models import DEFAULT_WORKSPACE, Invitation, Membership, Workspace
from apps.workspaces.services import (
    InvitationTakenError,
    LockedMemberships,
    issue_invitation,
    lock_memberships,
    open_invitations,
)

WorkspaceName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=100, pattern=r"^[a-z0-9_-]+$"),
    Field(description="1 to 100 lowercase letters, digits, '-' or '_'"),
]
RoleName = Literal["MEMBER", "ADMIN", "OWNER"]


def _role(ctx: Context) -> Role:
    return Role(ctx.caller.role) if ctx.caller.role is not None else Role.MEMBER


def _user(ctx: Context) -> User:
    assert ctx.caller.user is not None  # persons only: every operation here has ceiling never
    return ctx.caller.user


# ---------------------------------------------------------------- workspaces


class WorkspaceOut(Closed):
    id: str
    name: str
    created_at: datetime
    mail_accounts: int


class WorkspacesOut(Closed):
    workspaces: list[WorkspaceOut]


def _workspace_out(row: Workspace, accounts: int) -> WorkspaceOut:
    return WorkspaceOut(id=str(row.pk), name=row.name, created_at=row.created_at, mail_accounts=accounts)


def _accounts_in(ctx: Context, row: Workspace) -> int:
    return MailAccount.objects.for_tenant(ctx.tenant).filter(workspace=row).count()


@operation(
    name="list_workspaces",
    summary="The tenant's workspaces, with how many mail accounts each holds.",
    input=Empty,
    output=WorkspacesOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
)
def list_workspaces(ctx: Context, data: Empty) -> WorkspacesOut:
    accounts = MailAccount.objects.for_tenant(ctx.tenant).values_list("workspace_id").annotate(n=Count("pk"))
    counts: dict[uuid.UUID, int] = dict(accounts.order_by())
    rows = Workspace.objects.for_tenant(ctx.tenant).order_by("name")
    return WorkspacesOut(workspaces=[_workspace_out(row, counts.get(row.pk, 0)) for row in rows])


def _name_taken() -> OakenError:
    return OakenError("CONFLICT", "name: this tenant already has a workspace with this name", field="name")


def _taken(ctx: Context, name: str) -> bool:
    return Workspace.objects.for_tenant(ctx.tenant).filter(name=name).exists()


def _check_room(ctx: Context) -> None:
    most = ctx.bounds["WORKSPACES_MAX"]
    if Workspace.objects.for_tenant(ctx.tenant).count() >= most:
        raise OakenError("LIMIT_EXCEEDED", f"a tenant has at most {most} workspaces", field="name")


class CreateWorkspaceIn(Closed):
    name: WorkspaceName


def _create_workspace_scope(ctx: Context, data: CreateWorkspaceIn) -> None:
    if _taken(ctx, data.name):
        raise _name_taken()
    _check_room(ctx)


def _create_workspace_preview(ctx: Context, data: CreateWorkspaceIn) -> Preview:
    return Preview((Change("new workspace", None, {"name": data.name}),))


@operation(
    name="create_workspace",
    summary="Create a workspace: a named group of mail accounts that keys and connections can be limited to.",
    input=CreateWorkspaceIn,
    output=WorkspaceOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    preview=_create_workspace_preview,
    confirm=ALWAYS,
    data_scope=_create_workspace_scope,
    callers=Callers.PERSONS,
)
def create_workspace(ctx: Context, data: CreateWorkspaceIn) -> WorkspaceOut:
    _check_room(ctx)
    try:
        with transaction.atomic():
            row = Workspace.objects.create(tenant=ctx.tenant, name=data.name, created_at=ctx.now)
    except IntegrityError:  # a concurrent call took the name between the check and the insert
        raise _name_taken() from None
    ctx.touch(row.pk, None, {"name": row.name})
    return _workspace_out(row, 0)


class RenameWorkspaceIn(Closed):
    workspace_id: Id
    name: WorkspaceName


def _workspace(ctx: Context, workspace_id: str, *, lock: bool = False) -> Workspace:
    rows = Workspace.objects.for_tenant(ctx.tenant).filter(pk=parse_id(workspace_id, "workspace_id"))
    row = (rows.select_for_update() if lock else rows).first()
    if row is None:
        raise OakenError.not_found("workspace_id")
    if row.name == DEFAULT_WORKSPACE:
        raise OakenError.invalid(
            "workspace_id", "the default workspace keeps its name: new keys and connections reach it by it"
        )
    return row


def _rename_scope(ctx: Context, data: RenameWorkspaceIn) -> None:
    row = _workspace(ctx, data.workspace_id)
    if data.name != row.name and _taken(ctx, data.name):
        raise _name_taken()


def _keys_naming(ctx: Context, name: str) -> int:
    return ApiKey.objects.for_tenant(ctx.tenant).filter(revoked_at__isnull=True, workspaces__contains=[name]).count()


def _rename_preview(ctx: Context, data: RenameWorkspaceIn) -> Preview:
    row = _workspace(ctx, data.workspace_id)
    losing, gaining = _keys_naming(ctx, row.name), _keys_naming(ctx, data.name)
    summary = (
        "Rename a workspace. Keys and connections name workspaces by name: "
        f"{losing} API key(s) listing the old name stop reaching it, {gaining} listing the new name start to."
    )
    return Preview((Change(str(row.pk), {"name": row.name}, {"name": data.name}),), summary)


@operation(
    name="rename_workspace",
    summary="Rename a workspace (not `default`). Keys and connections that list it by name follow the name.",
    input=RenameWorkspaceIn,
    output=WorkspaceOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    preview=_rename_preview,
    confirm=ALWAYS,
    data_scope=_rename_scope,
    callers=Callers.PERSONS,
)
def rename_workspace(ctx: Context, data: RenameWorkspaceIn) -> WorkspaceOut:
    row = _workspace(ctx, data.workspace_id, lock=True)
    if row.name != data.name:
        before = row.name
        row.name = data.name
        try:
            with transaction.atomic():
                row.save(update_fields=["name"])
        except IntegrityError:
            raise _name_taken() from None
        ctx.touch(row.pk, {"name": before}, {"name": row.name})
    return _workspace_out(row, _accounts_in(ctx, row))


# ---------------------------------------------------------------- members and invitations


class MemberOut(Closed):
    membership_id: str
    email: str
    role: str
    joined: datetime
    you: bool


class InvitationOut(Closed):
    id: str
    email: str
    role: str
    invited_by: str | None
    created_at: datetime
    expires_at: datetime
    expired: bool


class MembersOut(Closed):
    members: list[MemberOut]
    invitations: list[InvitationOut] | None = Field(
        description="open invitations (expired ones included); null unless you are an ADMIN or OWNER"
    )


def _member_out(ctx: Context, row: Membership) -> MemberOut:
    return MemberOut(
        membership_id=str(row.pk), email=row.user.email, role=row.role, joined=row.created_at,
        you=row.user_id == _user(ctx).pk,
    )  # fmt: skip


def _invitation_out(ctx: Context, row: Invitation) -> InvitationOut:
    return InvitationOut(
        id=str(row.pk), email=row.email, role=row.role,
        invited_by=row.invited_by.email if row.invited_by is not None else None,
        created_at=row.created_at, expires_at=row.expires_at, expired=row.expires_at <= ctx.now,
    )  # fmt: skip


@operation(
    name="list_members",
    summary="The tenant's members with their roles; ADMINs also see the open invitations.",
    input=Empty,
    output=MembersOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
)
def list_members(ctx: Context, data: Empty) -> MembersOut:
    members = Membership.objects.for_tenant(ctx.tenant).select_related("user").order_by("created_at", "pk")
    invitations = None
    if _role(ctx).covers(Role.ADMIN):
        invitations = [_invitation_out(ctx, row) for row in open_invitations(tenant=ctx.tenant)]
    return MembersOut(members=[_member_out(ctx, row) for row in members], invitations=invitations)


def _only_owners(field: str, what: str) -> OakenError:
    return OakenError("FORBIDDEN", f"{field}: only an OWNER can {what}", field=field)


def _last_owner() -> OakenError:
    return OakenError(
        "LAST_OWNER",
        "membership_id: the tenant's last OWNER cannot be demoted or removed; make someone else an OWNER first",
        field="membership_id",
    )


class InviteIn(Closed):
    email: str = Field(min_length=3, max_length=254)
    role: RoleName = "MEMBER"


def _invite_scope(ctx: Context, data: InviteIn) -> None:
    try:
        validate_email(data.email)
    except ValidationError:
        raise OakenError.invalid("email", "is not an e-mail address") from None
    if data.role == Role.OWNER and _role(ctx) != Role.OWNER:
        raise _only_owners("role", "invite an OWNER")
    email = normalize_email(data.email)
    if Membership.objects.for_tenant(ctx.tenant).filter(user__email=email).exists():
        raise OakenError("CONFLICT", "email: this person is already a member of this tenant", field="email")
    most = ctx.bounds["INVITATIONS_OPEN_MAX"]
    others = [row for row in open_invitations(tenant=ctx.tenant) if row.email != email]
    if len(others) >= most:
        raise OakenError("LIMIT_EXCEEDED", f"a tenant has at most {most} open invitations", field="email")


def _invite_preview(ctx: Context, data: InviteIn) -> Preview:
    email = normalize_email(data.email)
    days = ctx.bounds["INVITATION_TTL_DAYS"]
    changes = [Change("new invitation", None, {"email": email, "role": data.role, "expires_in_days": days})]
    changes += [
        Change(str(row.pk), {"open": True}, {"open": False})
        for row in open_invitations(tenant=ctx.tenant)
        if row.email == email
    ]
    return Preview(tuple(changes), f"E-mail {email} a link to join this tenant as {data.role}, valid {days} days.")


def _send_invitation(*, email: str, token: str, inviter: str, tenant_name: str, role: str, days: int) -> None:
    link = settings.PUBLIC_URL + reverse("invitation", args=[token])
    tenant = " ".join(tenant_name.split())  # one line, whatever the name holds
    send_mail(
        f"Invitation to join {tenant} on Oaken",
        f"{inviter} invited you to join {tenant} on Oaken as {role}.\n\n"
        f"Sign in (or sign up) with this address, then follow this link to accept:\n\n{link}\n\n"
        f"It works once, for {days} days. If you did not expect this, ignore this message.",
        settings.DEFAULT_FROM_EMAIL,
        [email],
    )


@operation(
    name="invite_member",
    summary="Invite someone by e-mail as MEMBER, ADMIN or (by an OWNER) OWNER; the link works once, for 7 days.",
    input=InviteIn,
    output=InvitationOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    preview=_invite_preview,
    confirm=ALWAYS,
    data_scope=_invite_scope,
    callers=Callers.PERSONS,
)
def invite_member(ctx: Context, data: InviteIn) -> InvitationOut:
    locked = _lock(ctx)
    assert locked.person is not None
    if not Role(locked.person.role).covers(Role.ADMIN):
        raise OakenError("FORBIDDEN", "this needs the ADMIN role in this tenant")
    if data.role == Role.OWNER and locked.person.pk not in locked.owners:
        raise _only_owners("role", "invite an OWNER")
    days = ctx.bounds["INVITATION_TTL_DAYS"]
    try:
        issued = issue_invitation(
            tenant=ctx.tenant, email=data.email, role=data.role, invited_by=_user(ctx), now=ctx.now,
            ttl=timedelta(days=days),
        )  # fmt: skip
    except InvitationTakenError:
        raise OakenError(
            "CONFLICT", "email: this address was invited by a call running at the same time", field="email"
        ) from None
    for old in issued.replaced:
        ctx.touch(old.pk, {"open": True}, {"open": False})
    row = issued.invitation
    ctx.touch(row.pk, None, {"email": row.email, "role": row.role})
    # only once the invitation is committed; a mail server that fails is logged, and the
    # invitation stays listed, so it can be sent again
    transaction.on_commit(
        partial(_send_invitation, email=row.email, token=issued.token, inviter=_user(ctx).email,
                tenant_name=ctx.tenant.name, role=row.role, days=days),
        robust=True,
    )  # fmt: skip
    return _invitation_out(ctx, row)


class InvitationIdIn(Closed):
    invitation_id: Id


def _invitation(ctx: Context, invitation_id: str, *, lock: bool = False) -> Invitation:
    rows = Invitation.objects.for_tenant(ctx.tenant).filter(
        pk=parse_id(invitation_id, "invitation_id"), accepted_at__isnull=True, revoked_at__isnull=True
    )
    row = (rows.select_for_update() if lock else rows.select_related("invited_by")).first()
    if row is None:
        raise OakenError.not_found("invitation_id")
    return row


def _cancel_scope(ctx: Context, data: InvitationIdIn) -> None:
    _invitation(ctx, data.invitation_id)


def _cancel_preview(ctx: Context, data: InvitationIdIn) -> Preview:
    row = _invitation(ctx, data.invitation_id)
    return Preview((Change(str(row.pk), {"open": True, "email": row.email}, {"open": False}),))


@operation(
    name="cancel_invitation",
    summary="Cancel an open invitation: its link stops working.",
    input=InvitationIdIn,
    output=InvitationOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    preview=_cancel_preview,
    confirm=ALWAYS,
    data_scope=_cancel_scope,
    callers=Callers.PERSONS,
)
def cancel_invitation(ctx: Context, data: InvitationIdIn) -> InvitationOut:
    row = _invitation(ctx, data.invitation_id, lock=True)
    row.revoked_at = ctx.now
    row.save(update_fields=["revoked_at"])
    ctx.touch(row.pk, {"open": True}, {"open": False})
    return _invitation_out(ctx, Invitation.objects.for_tenant(ctx.tenant).select_related("invited_by").get(pk=row.pk))


def _member(ctx: Context, membership_id: str) -> Membership:
    row = (
        Membership.objects.for_tenant(ctx.tenant)
        .filter(pk=parse_id(membership_id, "membership_id"))
        .select_related("user")
        .first()
    )
    if row is None:
        raise OakenError.not_found("membership_id")
    return row


def _lock(ctx: Context, *ids: uuid.UUID) -> LockedMemberships:
    """The tenant's owners, the named memberships and the caller's, locked; the caller must still be a member."""
    locked = lock_memberships(tenant=ctx.tenant, ids=ids, person=_user(ctx))
    if locked.person is None:
        raise OakenError("FORBIDDEN", "you are no longer a member of this tenant")
    return locked


def _check_role_change(actor: Role, target: Membership, new: str, owners: int) -> None:
    """The rules of change_member_role, for the roles as they stand (checked again under the lock)."""
    if not actor.covers(Role.ADMIN):
        raise OakenError("FORBIDDEN", "this needs the ADMIN role in this tenant")
    if new == Role.OWNER and actor != Role.OWNER:
        raise _only_owners("role", "make someone an OWNER")
    if target.role == Role.OWNER and actor != Role.OWNER:
        raise _only_owners("membership_id", "change an OWNER's role")
    if target.role == Role.OWNER and new != Role.OWNER and owners <= 1:
        raise _last_owner()


def _owner_count(ctx: Context) -> int:
    return Membership.objects.for_tenant(ctx.tenant).filter(role=Role.OWNER).count()


class ChangeRoleIn(Closed):
    membership_id: Id
    role: RoleName


def _change_role_scope(ctx: Context, data: ChangeRoleIn) -> None:
    _check_role_change(_role(ctx), _member(ctx, data.membership_id), data.role, _owner_count(ctx))


def _change_role_preview(ctx: Context, data: ChangeRoleIn) -> Preview:
    row = _member(ctx, data.membership_id)
    change = Change(str(row.pk), {"person": row.user.email, "role": row.role}, {"role": data.role})
    return Preview((change,), f"{row.user.email}: {row.role} becomes {data.role}.")


@operation(
    name="change_member_role",
    summary="Change a member's role; only an OWNER makes or unmakes OWNERs, and the last OWNER stays.",
    input=ChangeRoleIn,
    output=MemberOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    preview=_change_role_preview,
    confirm=ALWAYS,
    data_scope=_change_role_scope,
    callers=Callers.PERSONS,
)
def change_member_role(ctx: Context, data: ChangeRoleIn) -> MemberOut:
    target_id = parse_id(data.membership_id, "membership_id")
    locked = _lock(ctx, target_id)
    target = locked.named.get(target_id)
    if target is None:
        raise OakenError.not_found("membership_id")
    assert locked.person is not None
    _check_role_change(Role(locked.person.role), target, data.role, len(locked.owners))
    if target.role != data.role:
        ctx.touch(target.pk, {"role": target.role}, {"role": data.role})
        target.role = data.role
        target.save(update_fields=["role"])
    return _member_out(ctx, target)


class RemoveMemberIn(Closed):
    membership_id: Id


def _check_removal(ctx: Context, actor: Role, target: Membership, owners: int) -> None:
    if target.user_id != _user(ctx).pk:
        if not actor.covers(Role.ADMIN):
            raise OakenError("FORBIDDEN", "this needs the ADMIN role in this tenant (anyone may remove themselves)")
        if target.role == Role.OWNER and actor != Role.OWNER:
            raise _only_owners("membership_id", "remove an OWNER")
    if target.role == Role.OWNER and owners <= 1:
        raise _last_owner()


def _remove_scope(ctx: Context, data: RemoveMemberIn) -> None:
    _check_removal(ctx, _role(ctx), _member(ctx, data.membership_id), _owner_count(ctx))


def _live_keys(ctx: Context, target: Membership) -> Any:
    return ApiKey.objects.for_tenant(ctx.tenant).filter(user_id=target.user_id, revoked_at__isnull=True)


def _live_connections(ctx: Context, target: Membership) -> Any:
    return Connection.objects.for_tenant(ctx.tenant).filter(user_id=target.user_id, revoked_at__isnull=True)


def _remove_preview(ctx: Context, data: RemoveMemberIn) -> Preview:
    row = _member(ctx, data.membership_id)
    changes = [Change(str(row.pk), {"person": row.user.email, "role": row.role}, None)]
    changes += [Change(str(key.pk), {"revoked": False}, {"revoked": True}) for key in _live_keys(ctx, row)]
    changes += [Change(str(c.pk), {"revoked": False}, {"revoked": True}) for c in _live_connections(ctx, row)]
    return Preview(
        tuple(changes), f"{row.user.email} leaves this tenant; their API keys and connections here are revoked."
    )


@operation(
    name="remove_member",
    summary="Remove a member (ADMIN; anyone may leave), revoking their keys and connections; never the last OWNER.",
    input=RemoveMemberIn,
    output=MemberOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="MEMBER",
    preview=_remove_preview,
    confirm=ALWAYS,
    data_scope=_remove_scope,
    callers=Callers.PERSONS,
)
def remove_member(ctx: Context, data: RemoveMemberIn) -> MemberOut:
    target_id = parse_id(data.membership_id, "membership_id")
    locked = _lock(ctx, target_id)
    target = locked.named.get(target_id)
    if target is None:
        raise OakenError.not_found("membership_id")
    assert locked.person is not None
    _check_removal(ctx, Role(locked.person.role), target, len(locked.owners))
    removed = _member_out(ctx, target)
    # keys and connections would come back to life if the person were ever invited again: end them for good
    for key in _live_keys(ctx, target).select_for_update():
        key.revoked_at = ctx.now
        key.save(update_fields=["revoked_at"])
        ctx.touch(key.pk, {"revoked": False}, {"revoked": True})
    for grant in _live_connections(ctx, target):
        revoke_connection(grant, "member_removed")
        ctx.touch(grant.pk, {"revoked": False}, {"revoked": True})
    ctx.touch(target.pk, {"person": target.user.email, "role": target.role}, None)
    target.delete()
    return removed
