"""Reads for tenants and workspaces, always starting from a person or a tenant."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Collection
from datetime import datetime
from functools import cache

from django.core import signing
from django.db import connection
from django.db.models import QuerySet

from apps.accounts.models import Preferences, User, normalize_email
from apps.core.bounds import bounds
from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.core.kinds import Role
from apps.core.rows import binary_rows, fields_of
from apps.workspaces.models import Invitation, Membership, Tenant, Workspace

# The tenant a person chose in the console's switcher, kept in their session; the REST door
# acts in it when a request names no tenant (it is checked against the memberships each time).
SESSION_TENANT_KEY = "tenant_id"
# An invitation link opened by someone not signed in: the console keeps a signed, short-lived reference to it in
# their session (invitation_reference: the invitation's id, never the link's token) for the sign-up or sign-in
# that follows; accept_invitation takes it in place of the token.
SESSION_INVITATION_KEY = "pending_invitation"
_REFERENCE_SALT = "oaken.workspaces.invitation-reference"


class NotAMemberError(Exception):
    """The person does not belong to that tenant (or it does not exist: the two look the same)."""


@cache
def _membership_sql() -> tuple[str, list[str], list[str]]:
    """The membership lookup in plain SQL, built once from the models (its columns and its tenant's): every console
    request and REST call makes it, and compiling the same ORM query each time cost more than running it."""
    members, tenants = fields_of(Membership), fields_of(Tenant)
    select = [f"m.{f.column}" for f in members] + [f"t.{f.column}" for f in tenants]
    last = Preferences._meta.get_field("last_tenant_id").column
    sql = f"""
SELECT {", ".join(select)}
  FROM {Membership._meta.db_table} m JOIN {Tenant._meta.db_table} t ON t.id = m.tenant_id
  LEFT JOIN {Preferences._meta.db_table} p ON p.user_id = m.user_id
 WHERE m.user_id = %(user)s AND (%(tenant)s::uuid IS NULL OR m.tenant_id = %(tenant)s::uuid)
 ORDER BY (m.tenant_id = p.{last}) IS TRUE DESC, m.created_at, m.id LIMIT 1
"""  # noqa: S608 (every name is the models' own; every value is a parameter)
    return sql, [f.attname for f in members], [f.attname for f in tenants]


def access_membership(*, user: User, tenant_id: str | None = None) -> Membership:
    """The person's membership in tenant_id, or when none is named in the tenant they used last (Preferences.
    last_tenant_id) while they still belong to it, else in their only/first one (with its tenant, and this person
    as its user). Every door that falls back to it (the console, the REST door, OAuth consent) so agrees."""
    tenant: uuid.UUID | None = None
    if tenant_id is not None:
        try:
            tenant = uuid.UUID(str(tenant_id))
        except ValueError:
            raise NotAMemberError from None
    sql, member_fields, tenant_fields = _membership_sql()
    with binary_rows() as cursor:
        cursor.execute(sql, {"user": user.pk, "tenant": tenant})
        row = cursor.fetchone()
    if row is None:
        raise NotAMemberError
    membership = Membership.from_db(connection.alias, member_fields, row[: len(member_fields)])
    membership.tenant = Tenant.from_db(connection.alias, tenant_fields, row[len(member_fields) :])
    membership.user = user
    return membership


def access_workspace_by_name(*, tenant: Tenant, name: str, field: str = "workspace") -> Workspace:
    """The tenant's workspace with this name; NOT_FOUND (on `field`) when it has none."""
    found = Workspace.objects.for_tenant(tenant).filter(name=name).first()
    if found is None:
        raise OakenError.not_found(field)
    return found


def access_workspace_by_id(
    workspace_id: str, *, tenant: Tenant, field: str = "workspace_id", lock: bool = False
) -> Workspace:
    """The tenant's workspace with this id (locked until the transaction ends when `lock`): another tenant's, or
    a malformed id, is NOT_FOUND (on `field`) like a missing one."""
    rows = Workspace.objects.for_tenant(tenant).filter(pk=parse_id(workspace_id, field))
    row = (rows.select_for_update() if lock else rows).first()
    if row is None:
        raise OakenError.not_found(field)
    return row


def access_workspaces_by_ids(ids: Collection[str], *, tenant: Tenant, field: str = "workspace_ids") -> list[Workspace]:
    """The tenant's workspaces with these ids, by name; NOT_FOUND (on `field`) when any is not one of them."""
    wanted = {parse_id(value, field) for value in ids}
    rows = list(Workspace.objects.for_tenant(tenant).filter(pk__in=wanted).order_by("name"))
    if len(rows) != len(wanted):
        raise OakenError.not_found(field)
    return rows


def access_membership_by_id(membership_id: str, *, tenant: Tenant) -> Membership:
    """The tenant's membership with this id, with its person; NOT_FOUND otherwise."""
    row = (
        Membership.objects.for_tenant(tenant)
        .filter(pk=parse_id(membership_id, "membership_id"))
        .select_related("user")
        .first()
    )
    if row is None:
        raise OakenError.not_found("membership_id")
    return row


class InvitationRefusedError(Exception):
    """An invitation link this person cannot use now; `reason` says why in one word."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason  # unknown | wrong_person | unverified | cancelled | used | expired


def invitation_token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _check_invitation_for(row: Invitation | None, *, user: User, now: datetime) -> Invitation:
    """`row` if `user` may accept it now; else InvitationRefusedError. The address is checked before anything
    else, so a person it was not sent to learns nothing about it (not even whether it was used or has expired)."""
    if row is None:
        raise InvitationRefusedError("unknown")
    if normalize_email(user.email) != row.email:
        raise InvitationRefusedError("wrong_person")
    if user.email_verified_at is None:
        raise InvitationRefusedError("unverified")
    if row.revoked_at is not None:
        raise InvitationRefusedError("cancelled")
    if row.accepted_at is not None:
        raise InvitationRefusedError("used")
    if row.expires_at <= now:
        raise InvitationRefusedError("expired")
    return row


def _by_token(token: str) -> QuerySet[Invitation]:
    """The invitation behind a link's token (none for a token no link could hold). The token's hash is what finds
    the tenant, so this lookup cannot be scoped to one."""
    if not 0 < len(token) <= 200:
        return Invitation.objects.none()
    return Invitation.objects.unscoped().filter(token_hash=invitation_token_hash(token))


def _by_reference(reference: str) -> QuerySet[Invitation]:
    """The invitation a reference names, while the reference is good (signed here, younger than
    INVITATION_REFERENCE_TTL_SECONDS); none otherwise. Cannot be scoped to a tenant either."""
    try:
        claim = signing.TimestampSigner(salt=_REFERENCE_SALT).unsign_object(
            reference[:500], max_age=bounds.INVITATION_REFERENCE_TTL_SECONDS
        )
        invitation_id = uuid.UUID(str(claim["invitation"]))
    except (signing.BadSignature, KeyError, ValueError, TypeError):
        return Invitation.objects.none()
    return Invitation.objects.unscoped().filter(pk=invitation_id)


def _one(rows: QuerySet[Invitation], *, lock: bool) -> Invitation | None:
    if lock:
        return rows.select_related("tenant").select_for_update(of=("self",)).first()
    return rows.select_related("tenant", "invited_by").first()


def access_invitation_by_token(*, user: User, token: str, now: datetime, lock: bool = False) -> Invitation:
    """The invitation behind a link, if `user` may accept it now; else InvitationRefusedError."""
    return _check_invitation_for(_one(_by_token(token), lock=lock), user=user, now=now)


def access_invitation_by_reference(*, user: User, reference: str, now: datetime, lock: bool = False) -> Invitation:
    """The invitation a reference (invitation_reference) names, if `user` may accept it now; else
    InvitationRefusedError ("unknown" for a reference forged, altered or too old)."""
    return _check_invitation_for(_one(_by_reference(reference), lock=lock), user=user, now=now)


def invitation_reference(invitation_id: uuid.UUID) -> str:
    """A signed, short-lived reference to an invitation, for a person who showed its link's token: it names the
    invitation by id and holds no secret, so it may travel where the token must not (a session, a mailed link)."""
    return signing.TimestampSigner(salt=_REFERENCE_SALT).sign_object({"invitation": str(invitation_id)})


def _shown(row: Invitation | None, now: datetime) -> Invitation | None:
    if row is None or not row.is_open or row.expires_at <= now:
        return None
    return row


def open_invitation_by_token(*, token: str, now: datetime) -> Invitation | None:
    """For anyone holding the link, signed in or not: the invitation while it can be accepted (open, not expired),
    with its tenant and who sent it; None for a token wrong, used, cancelled or expired alike (never which)."""
    return _shown(_by_token(token).select_related("tenant", "invited_by").first(), now)


def open_invitation_by_reference(*, reference: str, now: datetime) -> Invitation | None:
    """The same, for a reference (invitation_reference) kept while the person signs up or signs in."""
    return _shown(_by_reference(reference).select_related("tenant", "invited_by").first(), now)


def access_open_invitation_by_id(invitation_id: str, *, tenant: Tenant, lock: bool = False) -> Invitation:
    """The tenant's invitation with this id while it is open (neither accepted nor cancelled), with who sent it;
    NOT_FOUND otherwise. `lock`: the row locked until the transaction ends (without who sent it)."""
    rows = Invitation.objects.for_tenant(tenant).filter(
        pk=parse_id(invitation_id, "invitation_id"), accepted_at__isnull=True, revoked_at__isnull=True
    )
    row = (rows.select_for_update() if lock else rows.select_related("invited_by")).first()
    if row is None:
        raise OakenError.not_found("invitation_id")
    return row


def workspaces_by_name(*, tenant: Tenant) -> QuerySet[Workspace]:
    return Workspace.objects.for_tenant(tenant).order_by("name")


def workspace_name_in_use(*, tenant: Tenant, name: str) -> bool:
    return Workspace.objects.for_tenant(tenant).filter(name=name).exists()


def workspace_count(*, tenant: Tenant) -> int:
    return Workspace.objects.for_tenant(tenant).count()


def members_in_order(*, tenant: Tenant) -> QuerySet[Membership]:
    """The tenant's memberships with their people, oldest first."""
    return Membership.objects.for_tenant(tenant).select_related("user").order_by("created_at", "pk")


def members_by_user_ids(*, tenant: Tenant, user_ids: Collection[uuid.UUID]) -> QuerySet[Membership]:
    """The tenant's memberships of these people, with each person."""
    return Membership.objects.for_tenant(tenant).filter(user_id__in=user_ids).select_related("user")


def is_member_by_email(*, tenant: Tenant, email: str) -> bool:
    """Whether a person with this (normalized) address already belongs to the tenant."""
    return Membership.objects.for_tenant(tenant).filter(user__email=email).exists()


def owner_count(*, tenant: Tenant) -> int:
    return Membership.objects.for_tenant(tenant).filter(role=Role.OWNER).count()


def invitation_with_inviter(*, tenant: Tenant, invitation_id: uuid.UUID) -> Invitation:
    """The tenant's invitation by an id already resolved, with who sent it."""
    return Invitation.objects.for_tenant(tenant).select_related("invited_by").get(pk=invitation_id)


def names_by_ids(*, tenant: Tenant, ids: Collection[uuid.UUID]) -> dict[uuid.UUID, tuple[str, str]]:
    """What each of these ids is among the tenant's workspaces and invitations: (kind, name or address)."""
    found: dict[uuid.UUID, tuple[str, str]] = {}
    for pk, name in Workspace.objects.for_tenant(tenant).filter(pk__in=ids).values_list("pk", "name"):
        found[pk] = ("workspace", name)
    for pk, email in Invitation.objects.for_tenant(tenant).filter(pk__in=ids).values_list("pk", "email"):
        found[pk] = ("invitation", email)
    return found


def visible_members(*, tenant: Tenant, actor: Caller) -> QuerySet[Membership]:
    """The tenant's memberships as the actor sees them: their own, or every one for an ADMIN."""
    return Membership.objects.for_tenant(tenant).visible_to(actor)


def membership_of(*, tenant: Tenant, user: User) -> Membership:
    """The person's membership in the tenant, with the tenant and the person."""
    return Membership.objects.for_user(user).select_related("tenant", "user").get(tenant=tenant)
