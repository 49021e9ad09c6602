"""Tenants, the people in them and their roles, and the workspaces that group mail accounts."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from apps.core.ids import new_id
from apps.core.kinds import Role
from apps.core.tenancy import PersonalQuerySet, TenantOwned

if TYPE_CHECKING:
    from apps.accounts.models import User


DEFAULT_WORKSPACE = "default"


class Tenant(models.Model):
    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.name


class MembershipQuerySet(PersonalQuerySet["Membership"]):
    def for_user(self, user: User) -> MembershipQuerySet:
        """The tenants this person belongs to."""
        return self.filter(user=user)

    def for_tenant(self, tenant: Tenant) -> MembershipQuerySet:
        return self.filter(tenant=tenant)


class Membership(models.Model):
    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    # the workspaces (ids) a MEMBER is given; NULL: every workspace. OWNERs and ADMINs reach every one whatever
    # it holds (it is kept, and applies again should they become a MEMBER)
    workspace_ids = ArrayField(models.UUIDField(), null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    owner_field: ClassVar[str] = "user"
    objects = MembershipQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "user"], name="membership_once_per_tenant")]

    def __str__(self) -> str:
        return f"{self.role} of {self.tenant_id}"

    @property
    def limited(self) -> bool:
        """Whether this person reaches only the workspaces given to them (a MEMBER who was given some)."""
        return self.workspace_ids is not None and not Role(self.role).covers(Role.ADMIN)

    def workspace_names(self) -> tuple[str, ...] | None:
        """The names of the workspaces this person reaches now, by name order; None: every workspace. One query,
        only for a limited MEMBER (a workspace renamed since keeps being reached: it is given by id)."""
        if not self.limited:
            return None
        if not self.workspace_ids:
            return ()
        given = Workspace.objects.for_tenant(self.tenant).filter(pk__in=self.workspace_ids)
        return tuple(given.order_by("name").values_list("name", flat=True))


class Workspace(TenantOwned):
    name = models.CharField(max_length=100)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="workspace_name_unique_in_tenant")]

    def __str__(self) -> str:
        return self.name


class Invitation(TenantOwned):
    """An invitation to join a tenant, sent by e-mail: its link's token is stored only as a hash and works once."""

    email = models.EmailField()
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    # what the membership it makes will be given (Membership.workspace_ids); NULL: every workspace
    workspace_ids = ArrayField(models.UUIDField(), null=True, blank=True)
    token_hash = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # inviting an address again replaces its open invitation (see services.issue_invitation)
            models.UniqueConstraint(
                fields=["tenant", "email"],
                condition=models.Q(accepted_at__isnull=True, revoked_at__isnull=True),
                name="invitation_open_once_per_address",
            )
        ]

    def __str__(self) -> str:
        return f"invitation {self.pk}"

    @property
    def is_open(self) -> bool:
        """Neither accepted nor cancelled (it may still have expired)."""
        return self.accepted_at is None and self.revoked_at is None


def _current(via: str, column: str) -> Subquery:
    members = Membership.objects.filter(tenant=OuterRef(f"{via}tenant"), user=OuterRef(f"{via}user"))
    return Subquery(members.values(column)[:1])


def current_role(via: str = "") -> Subquery:
    """For a row with `tenant` and `user` (a credential; `via` "connection__" reaches them through a relation):
    the person's role in that tenant now, or NULL when they are no longer a member."""
    return _current(via, "role")


def current_workspace_ids(via: str = "") -> Subquery:
    """As current_role: the workspaces the person is given there now (Membership.workspace_ids)."""
    return _current(via, "workspace_ids")
