"""Tenant administration by persons only (ceiling never): workspaces, members, roles and invitations (SPEC §2).

The membership rules (who may give which role, who may remove whom, that the last OWNER stays)
live in apps.workspaces.services: the handlers here call them, the data-scope checks call them
before a proposal is made, and the lists report what they allow (`assignable_roles`, `can_remove`,
`renamable`), so the console repeats none of them. What removing someone ends (their keys and
connections) is the agents app's: remove_member calls it in the same transaction, so they end with the
membership. Accepting an invitation is the one operation here for a person who is not a member yet
(callers: invitees).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Annotated, Literal, cast

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from pydantic import Field, StringConstraints

from apps.accounts.models import User, normalize_email
from apps.agents.selectors import live_credentials, unrevoked_keys_naming
from apps.agents.services import revoke_credentials_of
from apps.core import words
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.core.kinds import Role
from apps.mail.selectors import account_count, account_counts_by_workspace, reached_in_words
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Empty, Id
from apps.operations.registry import ALWAYS, NEVER, Callers, Ceiling, OpClass, Preview, operation
from apps.outbound.selectors import waiting_sends_outside
from apps.workspaces import services as workspace_services
from apps.workspaces.models import Invitation, Membership, Workspace
from apps.workspaces.selectors import (
    InvitationRefusedError,
    access_membership_by_id,
    access_open_invitation_by_id,
    access_workspace_by_id,
    access_workspaces_by_ids,
    invitation_with_inviter,
    is_member_by_email,
    members_in_order,
    owner_count,
    workspace_count,
    workspace_name_in_use,
    workspaces_by_name,
)
from apps.workspaces.services import (
    assignable_roles,
    can_remove,
    cancel_invitation,
    change_role,
    check_an_owner_stays,
    check_invitation,
    check_removal,
    check_renamable,
    check_role_change,
    check_workspaces_change,
    invite,
    is_renamable,
    may_change_workspaces,
    open_invitations,
    remove_membership,
    set_member_workspaces,
    workspace_name_taken,
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


def _actor(ctx: Context) -> Membership:
    """The caller as the membership rules see them (role and person); the services check it again under a lock."""
    return Membership(tenant=ctx.tenant, user=_user(ctx), role=_role(ctx))


# ---------------------------------------------------------------- workspaces


class WorkspaceOut(Closed):
    id: str
    name: str
    created_at: datetime
    mail_accounts: int
    renamable: bool = Field(description="whether you may rename it: you are an ADMIN or OWNER and it is not `default`")


class WorkspacesOut(Closed):
    workspaces: list[WorkspaceOut]


def _workspace_out(ctx: Context, row: Workspace, accounts: int) -> WorkspaceOut:
    # the role rename_workspace declares, and the rule its handler holds to
    renamable = ctx.caller.has_role(Role(rename_workspace.role)) and is_renamable(workspace=row)
    return WorkspaceOut(
        id=str(row.pk), name=row.name, created_at=row.created_at, mail_accounts=accounts, renamable=renamable
    )


def _accounts_in(ctx: Context, row: Workspace) -> int:
    return account_count(tenant=ctx.tenant, workspace=row)


@operation(
    name="list_workspaces",
    summary="The tenant's workspaces you reach (a MEMBER: those given to them), with how many mail accounts each "
    "holds and whether you may rename it.",
    input=Empty,
    output=WorkspacesOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
)
def list_workspaces(ctx: Context, data: Empty) -> WorkspacesOut:
    counts = account_counts_by_workspace(tenant=ctx.tenant)
    rows = workspaces_by_name(tenant=ctx.tenant)
    given = ctx.caller.member_workspaces  # a MEMBER given some sees only those
    shown = [row for row in rows if given is None or row.name in given]
    return WorkspacesOut(workspaces=[_workspace_out(ctx, row, counts.get(row.pk, 0)) for row in shown])


def _taken(ctx: Context, name: str) -> bool:
    return workspace_name_in_use(tenant=ctx.tenant, name=name)


def _check_room(ctx: Context) -> None:
    most = ctx.bounds.WORKSPACES_MAX
    if workspace_count(tenant=ctx.tenant) >= most:
        raise OakenError("LIMIT_EXCEEDED", f"a tenant has at most {most} workspaces", field="name")


class CreateWorkspaceIn(Closed):
    name: WorkspaceName


def _create_workspace_scope(ctx: Context, data: CreateWorkspaceIn) -> None:
    if _taken(ctx, data.name):
        raise workspace_name_taken()
    _check_room(ctx)


def _create_workspace_preview(ctx: Context, data: CreateWorkspaceIn) -> Preview:
    return Preview(
        (Change("new workspace", None, {"name": data.name}),),
        summary=f"Create the workspace {words.named(data.name)}. It holds no mailbox yet.",
        title="Create this workspace?",
        verb="Create workspace",
    )


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
    targets=_create_workspace_scope,
    callers=Callers.PERSONS,
)
def create_workspace(ctx: Context, data: CreateWorkspaceIn) -> WorkspaceOut:
    _check_room(ctx)
    row = workspace_services.create_workspace(tenant=ctx.tenant, name=data.name, now=ctx.now)
    ctx.touch(row.pk, None, {"name": row.name})
    return _workspace_out(ctx, row, 0)


class RenameWorkspaceIn(Closed):
    workspace_id: Id
    name: WorkspaceName


def _workspace(ctx: Context, workspace_id: str, *, lock: bool = False) -> Workspace:
    row = access_workspace_by_id(workspace_id, tenant=ctx.tenant, lock=lock)
    check_renamable(workspace=row)
    return row


def _rename_scope(ctx: Context, data: RenameWorkspaceIn) -> None:
    row = _workspace(ctx, data.workspace_id)
    if data.name != row.name and _taken(ctx, data.name):
        raise workspace_name_taken()


def _keys_naming(ctx: Context, name: str) -> int:
    return unrevoked_keys_naming(tenant=ctx.tenant, workspace=name)


def _rename_preview(ctx: Context, data: RenameWorkspaceIn) -> Preview:
    row = _workspace(ctx, data.workspace_id)
    losing, gaining = _keys_naming(ctx, row.name), _keys_naming(ctx, data.name)
    summary = f"Rename the workspace {words.named(row.name)} to {words.named(data.name)}."
    # keys and connections name workspaces by name: those naming the old one lose it, the new one's gain it
    lines = (
        f"{words.count(losing, 'API key')} listing the old name {'stops' if losing == 1 else 'stop'} reaching it."
        if losing
        else "",
        f"{words.count(gaining, 'API key')} listing the new name {'starts' if gaining == 1 else 'start'} to reach it."
        if gaining
        else "",
    )
    return Preview(
        (Change(str(row.pk), {"name": row.name}, {"name": data.name}),),
        summary,
        title="Rename this workspace?",
        verb="Rename",
        lines=tuple(line for line in lines if line),
    )


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
    targets=_rename_scope,
    callers=Callers.PERSONS,
)
def rename_workspace(ctx: Context, data: RenameWorkspaceIn) -> WorkspaceOut:
    row = _workspace(ctx, data.workspace_id, lock=True)
    before = workspace_services.rename_workspace(workspace=row, name=data.name)
    if before is not None:
        ctx.touch(row.pk, {"name": before}, {"name": row.name})
    return _workspace_out(ctx, row, _accounts_in(ctx, row))


# ---------------------------------------------------------------- members and invitations


_GIVEN = (
    "the workspaces given to this person, by name; null: every workspace. Only a MEMBER is held to them: OWNERs "
    "and ADMINs reach every workspace"
)
Reaches = Literal["every", "given", "hidden"]


class MemberOut(Closed):
    membership_id: str
    email: str
    role: str
    joined: datetime
    you: bool
    reaches: Reaches = Field(
        description="which mailboxes they read and send as: every workspace's (an OWNER or ADMIN, or a MEMBER "
        "given every one), the given `workspaces`' only, or hidden (another member's, to a MEMBER)"
    )
    workspaces: list[str] = Field(description="when `reaches` is given: their workspaces by name (ids alike)")
    workspace_ids: list[str]


class InvitationOut(Closed):
    id: str
    email: str
    role: str
    workspaces: list[str] | None = Field(description="what the membership will be given: " + _GIVEN)
    invited_by: str | None
    created_at: datetime
    expires_at: datetime
    expired: bool


class MemberRow(MemberOut):
    assignable_roles: list[RoleName] = Field(
        description="the roles you may give this member (change_member_role), lowest first; empty when none"
    )
    can_choose_workspaces: bool = Field(
        description="whether you may choose this MEMBER's workspaces (set_member_workspaces)"
    )
    can_remove: bool = Field(
        description="whether you may remove this member (remove_member; yourself: leave); the last OWNER's "
        "removal is still refused with LAST_OWNER"
    )


class MembersOut(Closed):
    members: list[MemberRow]
    invitations: list[InvitationOut] | None = Field(
        description="open invitations (expired ones included); null unless you are an ADMIN or OWNER"
    )


def _names(ctx: Context, ids: list[uuid.UUID] | None) -> list[str] | None:
    """The names of these workspaces of the tenant (those since gone left out), or None for every workspace."""
    if ids is None:
        return None
    return [row.name for row in workspaces_by_name(tenant=ctx.tenant) if row.pk in set(ids)]


def _member_out(ctx: Context, row: Membership, names: dict[uuid.UUID, str] | None = None) -> MemberOut:
    """A member as the caller may see them: an ADMIN sees everyone's workspaces, a MEMBER only their own (the
    names of workspaces not given to them are not theirs to learn)."""
    you = row.user_id == _user(ctx).pk
    reaches: Reaches = "every" if not row.limited else "given"
    if not you and not _role(ctx).covers(Role.ADMIN):
        reaches = "hidden"
    ids = sorted(row.workspace_ids or []) if reaches == "given" else []
    if names is None:
        names = {w.pk: w.name for w in workspaces_by_name(tenant=ctx.tenant)}
    return MemberOut(
        membership_id=str(row.pk),
        email=row.user.email,
        role=row.role,
        joined=row.created_at,
        you=you,
        reaches=reaches,
        workspaces=sorted(names[pk] for pk in ids if pk in names),
        workspace_ids=[str(pk) for pk in ids if pk in names],
    )


def _member_row(ctx: Context, actor: Membership, row: Membership, names: dict[uuid.UUID, str]) -> MemberRow:
    return MemberRow(
        **_member_out(ctx, row, names).model_dump(),
        can_choose_workspaces=row.role == Role.MEMBER and may_change_workspaces(actor=actor, target=row),
        assignable_roles=[cast(RoleName, role.value) for role in assignable_roles(actor=actor, target=row)],
        can_remove=can_remove(actor=actor, target=row),
    )


def _invitation_out(ctx: Context, row: Invitation) -> InvitationOut:
    return InvitationOut(
        id=str(row.pk),
        email=row.email,
        role=row.role,
        workspaces=_names(ctx, row.workspace_ids),
        invited_by=row.invited_by.email if row.invited_by is not None else None,
        created_at=row.created_at,
        expires_at=row.expires_at,
        expired=row.expires_at <= ctx.now,
    )


@operation(
    name="list_members",
    summary="The tenant's members with their roles, the roles you may give each and whether you may remove them; "
    "ADMINs also see the open invitations.",
    input=Empty,
    output=MembersOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
)
def list_members(ctx: Context, data: Empty) -> MembersOut:
    members = members_in_order(tenant=ctx.tenant)
    invitations = None
    if _role(ctx).covers(Role.ADMIN):
        invitations = [_invitation_out(ctx, row) for row in open_invitations(tenant=ctx.tenant)]
    actor = _actor(ctx)
    names = {row.pk: row.name for row in workspaces_by_name(tenant=ctx.tenant)}
    rows = [_member_row(ctx, actor, row, names) for row in members]
    return MembersOut(members=rows, invitations=invitations)


_ROLE_WORDS = {"OWNER": "an owner", "ADMIN": "an admin", "MEMBER": "a member"}


def _role_words(role: str) -> str:
    return _ROLE_WORDS.get(role, role.lower())


_GIVE = (
    "for a MEMBER: the workspaces (ids, see list_workspaces) whose mailboxes they may read and send as; null: every "
    "workspace. OWNERs and ADMINs reach every workspace whatever this holds (it applies should they become a MEMBER)"
)


class InviteIn(Closed):
    email: str = Field(min_length=3, max_length=254, json_schema_extra={"format": "email"})
    role: RoleName = "MEMBER"
    workspace_ids: list[Id] | None = Field(default=None, max_length=50, description=_GIVE)


def _given(ctx: Context, ids: list[str] | None) -> list[uuid.UUID] | None:
    """The tenant's workspaces these ids name (NOT_FOUND on workspace_ids otherwise); None: every workspace."""
    if ids is None:
        return None
    return [row.pk for row in access_workspaces_by_ids(ids, tenant=ctx.tenant)]


def _reach_words(ctx: Context, who: str, role: str, ids: list[uuid.UUID] | None) -> str:
    return reached_in_words(tenant=ctx.tenant, who=who, role=role, workspace_ids=ids)


def _invite_scope(ctx: Context, data: InviteIn) -> None:
    try:
        validate_email(data.email)
    except ValidationError:
        raise OakenError.invalid("email", "is not an e-mail address") from None
    check_invitation(actor=_actor(ctx), role=data.role)
    _given(ctx, data.workspace_ids)
    email = normalize_email(data.email)
    if is_member_by_email(tenant=ctx.tenant, email=email):
        raise OakenError("CONFLICT", "email: this person is already a member of this tenant", field="email")
    most = ctx.bounds.INVITATIONS_OPEN_MAX
    others = [row for row in open_invitations(tenant=ctx.tenant) if row.email != email]
    if len(others) >= most:
        raise OakenError("LIMIT_EXCEEDED", f"a tenant has at most {most} open invitations", field="email")


def _invite_preview(ctx: Context, data: InviteIn) -> Preview:
    email = normalize_email(data.email)
    days = ctx.bounds.INVITATION_TTL_DAYS
    given = _given(ctx, data.workspace_ids)
    new = {"email": email, "role": data.role, "workspaces": _names(ctx, given), "expires_in_days": days}
    changes = [Change("new invitation", None, new)]
    changes += [
        Change(str(row.pk), {"open": True}, {"open": False})
        for row in open_invitations(tenant=ctx.tenant)
        if row.email == email
    ]
    replaced = " It replaces the invitation already sent there." if len(changes) > 1 else ""
    return Preview(
        tuple(changes),
        f"E-mail {email} a link to join this tenant as {_role_words(data.role)}, valid for "
        f"{words.count(days, 'day')}.{replaced}",
        title="Send this invitation?",
        verb="Send invitation",
        lines=(_reach_words(ctx, "They", data.role, given),),
    )


@operation(
    name="invite_member",
    summary="Invite someone by e-mail as MEMBER (given every workspace, or those named), ADMIN or (by an OWNER) "
    "OWNER; the link works once, for 7 days, and says which mailboxes they will read and send as.",
    input=InviteIn,
    output=InvitationOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    preview=_invite_preview,
    confirm=ALWAYS,
    targets=_invite_scope,
    callers=Callers.PERSONS,
)
def invite_member(ctx: Context, data: InviteIn) -> InvitationOut:
    days = ctx.bounds.INVITATION_TTL_DAYS
    given = _given(ctx, data.workspace_ids)
    issued = invite(
        tenant=ctx.tenant,
        actor=_user(ctx),
        email=data.email,
        role=data.role,
        now=ctx.now,
        ttl=timedelta(days=days),
        workspace_ids=given,
        reach=_reach_words(ctx, "You", data.role, given),
    )
    for old in issued.replaced:
        ctx.touch(old.pk, {"open": True}, {"open": False})
    row = issued.invitation
    ctx.touch(row.pk, None, {"email": row.email, "role": row.role, "workspaces": _names(ctx, given)})
    return _invitation_out(ctx, row)


class InvitationIdIn(Closed):
    invitation_id: Id


def _invitation(ctx: Context, invitation_id: str, *, lock: bool = False) -> Invitation:
    return access_open_invitation_by_id(invitation_id, tenant=ctx.tenant, lock=lock)


def _cancel_scope(ctx: Context, data: InvitationIdIn) -> None:
    _invitation(ctx, data.invitation_id)


def _cancel_preview(ctx: Context, data: InvitationIdIn) -> Preview:
    row = _invitation(ctx, data.invitation_id)
    return Preview(
        (Change(str(row.pk), {"open": True, "email": row.email}, {"open": False}),),
        summary=f"Cancel the invitation sent to {row.email}. Its link stops working.",
        title="Cancel this invitation?",
        verb="Cancel invitation",
    )


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
    targets=_cancel_scope,
    callers=Callers.PERSONS,
)
def cancel_invitation_op(ctx: Context, data: InvitationIdIn) -> InvitationOut:
    row = _invitation(ctx, data.invitation_id, lock=True)
    cancel_invitation(invitation=row, now=ctx.now)
    ctx.touch(row.pk, {"open": True}, {"open": False})
    return _invitation_out(ctx, invitation_with_inviter(tenant=ctx.tenant, invitation_id=row.pk))


def _member(ctx: Context, membership_id: str) -> Membership:
    return access_membership_by_id(membership_id, tenant=ctx.tenant)


def _owner_count(ctx: Context) -> int:
    return owner_count(tenant=ctx.tenant)


class ChangeRoleIn(Closed):
    membership_id: Id
    role: RoleName


def _change_role_scope(ctx: Context, data: ChangeRoleIn) -> None:
    target = _member(ctx, data.membership_id)
    check_role_change(actor=_actor(ctx), target=target, role=data.role)
    check_an_owner_stays(target=target, role=data.role, owners=_owner_count(ctx))


def _change_role_preview(ctx: Context, data: ChangeRoleIn) -> Preview:
    row = _member(ctx, data.membership_id)
    change = Change(str(row.pk), {"person": row.user.email, "role": row.role}, {"role": data.role})
    return Preview(
        (change,),
        f"Make {row.user.email} {_role_words(data.role)} of this tenant instead of {_role_words(row.role)}.",
        title="Change this role?",
        verb="Change role",
    )


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
    targets=_change_role_scope,
    callers=Callers.PERSONS,
)
def change_member_role(ctx: Context, data: ChangeRoleIn) -> MemberOut:
    changed = change_role(
        tenant=ctx.tenant,
        actor=_user(ctx),
        membership_id=parse_id(data.membership_id, "membership_id"),
        role=data.role,
    )
    if changed.before != data.role:
        ctx.touch(changed.membership.pk, {"role": changed.before}, {"role": data.role})
    return _member_out(ctx, changed.membership)


class MemberWorkspacesIn(Closed):
    membership_id: Id
    workspace_ids: list[Id] | None = Field(max_length=50, description=_GIVE)


def _workspaces_scope(ctx: Context, data: MemberWorkspacesIn) -> None:
    check_workspaces_change(actor=_actor(ctx), target=_member(ctx, data.membership_id))
    _given(ctx, data.workspace_ids)


def _workspaces_preview(ctx: Context, data: MemberWorkspacesIn) -> Preview:
    row = _member(ctx, data.membership_id)
    given = _given(ctx, data.workspace_ids)
    change = Change(
        str(row.pk),
        {"person": row.user.email, "workspaces": _names(ctx, row.workspace_ids)},
        {"workspaces": _names(ctx, given)},
    )
    held = "" if row.role == Role.MEMBER else f" While {_role_words(row.role)}, they still reach every workspace."
    lines = [_reach_words(ctx, "They", Role.MEMBER, given)]
    waiting = 0 if given is None else waiting_sends_outside(tenant=ctx.tenant, user_id=row.user_id, workspace_ids=given)
    if waiting and row.role == Role.MEMBER:
        lines.append(f"{words.count(waiting, 'send')} of theirs still waiting from other mailboxes will not go out.")
    return Preview(
        (change,),
        f"Choose the workspaces of {row.user.email}.{held}",
        title="Change this member's workspaces?",
        verb="Change workspaces",
        lines=tuple(lines),
    )


@operation(
    name="set_member_workspaces",
    summary="Choose the workspaces a MEMBER reaches (null: every one): the mailboxes they and their agents may read "
    "and send as, from their next call on.",
    input=MemberWorkspacesIn,
    output=MemberOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    preview=_workspaces_preview,
    confirm=ALWAYS,
    targets=_workspaces_scope,
    callers=Callers.PERSONS,
)
def set_member_workspaces_op(ctx: Context, data: MemberWorkspacesIn) -> MemberOut:
    given = _given(ctx, data.workspace_ids)
    changed = set_member_workspaces(
        tenant=ctx.tenant,
        actor=_user(ctx),
        membership_id=parse_id(data.membership_id, "membership_id"),
        workspace_ids=given,
    )
    row = changed.membership
    if changed.before != row.workspace_ids:
        ctx.touch(row.pk, {"workspaces": _names(ctx, changed.before)}, {"workspaces": _names(ctx, row.workspace_ids)})
    return _member_out(ctx, row)


class RemoveMemberIn(Closed):
    membership_id: Id


def _remove_scope(ctx: Context, data: RemoveMemberIn) -> None:
    target = _member(ctx, data.membership_id)
    check_removal(actor=_actor(ctx), target=target)
    check_an_owner_stays(target=target, role=None, owners=_owner_count(ctx))


def _remove_preview(ctx: Context, data: RemoveMemberIn) -> Preview:
    row = _member(ctx, data.membership_id)
    changes = [Change(str(row.pk), {"person": row.user.email, "role": row.role}, None)]
    live = live_credentials(tenant=ctx.tenant, user_id=row.user_id)
    changes += [Change(str(key.pk), {"revoked": False}, {"revoked": True}) for key in live.api_keys]
    changes += [Change(str(c.pk), {"revoked": False}, {"revoked": True}) for c in live.connections]
    you = row.user_id == _user(ctx).pk
    who = "Leave" if you else f"Remove {row.user.email} from"
    held = [(len(live.api_keys), "API key"), (len(live.connections), "connection")]
    lost = words.listed(words.count(n, what) for n, what in held if n)
    revoked = f" {'Your' if you else 'Their'} {lost} here stop working at once." if lost != "none" else ""
    access = "You lose" if you else "They lose"
    return Preview(
        tuple(changes),
        f"{who} this tenant. {access} access to its mail at once.{revoked}",
        title="Leave this tenant?" if you else "Remove this member?",
        verb="Leave" if you else "Remove member",
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
    targets=_remove_scope,
    callers=Callers.PERSONS,
)
def remove_member(ctx: Context, data: RemoveMemberIn) -> MemberOut:
    removed = remove_membership(
        tenant=ctx.tenant, actor=_user(ctx), membership_id=parse_id(data.membership_id, "membership_id")
    )
    # in this same transaction, or a person invited again would find their keys and connections alive
    revoked = revoke_credentials_of(tenant=ctx.tenant, user_id=removed.user.pk, now=ctx.now)
    for key_id in revoked.api_keys:
        ctx.touch(key_id, {"revoked": False}, {"revoked": True})
    for connection_id in revoked.connections:
        ctx.touch(connection_id, {"revoked": False}, {"revoked": True})
    ctx.touch(removed.membership_id, {"person": removed.user.email, "role": removed.role}, None)
    gone = Membership(
        pk=removed.membership_id,
        tenant=ctx.tenant,
        user=removed.user,
        role=removed.role,
        created_at=removed.joined,
        workspace_ids=removed.workspace_ids,
    )
    return _member_out(ctx, gone)


class AcceptInvitationIn(Closed):
    token: str | None = Field(
        default=None, min_length=1, max_length=200, description="the token of the invitation's link"
    )
    reference: str | None = Field(
        default=None,
        min_length=1,
        max_length=500,
        description="instead of the token: the signed, short-lived reference the invitation page made from it "
        "for a person who signed up or signed in from there",
    )


class AcceptedInvitationOut(Closed):
    membership_id: str
    role: str
    already_member: bool


@operation(
    name="accept_invitation",
    summary="Accept an invitation sent to your verified address: you join its tenant with the role it names (once).",
    input=AcceptInvitationIn,
    output=AcceptedInvitationOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    confirm=NEVER,
    callers=Callers.INVITEES,
)
def accept_invitation_op(ctx: Context, data: AcceptInvitationIn) -> AcceptedInvitationOut:
    """The console calls it for a person who is not (yet) a member of the invitation's tenant; a refusal
    (InvitationRefusedError: a link used, cancelled or expired meanwhile) is NOT_FOUND, and the console reads
    the link again to say why."""
    user = _user(ctx)
    if (data.token is None) == (data.reference is None):
        raise OakenError.invalid("token", "give the link's token or the page's reference, one of the two")
    field = "token" if data.token is not None else "reference"
    try:
        accepted = workspace_services.accept_invitation(
            tenant=ctx.tenant, user=user, token=data.token, reference=data.reference, now=ctx.now
        )
    except InvitationRefusedError:
        raise OakenError.not_found(field) from None
    membership = accepted.membership
    ctx.touch(accepted.invitation.pk, {"accepted": False}, {"accepted": True})
    if not accepted.already_member:
        ctx.touch(membership.pk, None, {"person": user.email, "role": membership.role})
    return AcceptedInvitationOut(
        membership_id=str(membership.pk), role=membership.role, already_member=accepted.already_member
    )
