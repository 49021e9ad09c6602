"""Who is calling: a principal in a tenant, with what it was granted. Doors build one; the gate checks it;
handlers and domain services read it as the actor."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from apps.core.kinds import CredentialKind, Principal, Role, granted_scopes

if TYPE_CHECKING:
    from apps.accounts.models import User
    from apps.workspaces.models import Membership, Tenant


class DoorMismatchError(RuntimeError):
    """A caller arrived through a door that is not theirs: a programming error, refused outright."""


@dataclass(frozen=True)
class Caller:
    principal: Principal
    tenant: Tenant
    user: User | None = None
    role: Role | None = None
    # agents only: granted scopes, workspace names (empty: every workspace), operation allow-list
    scopes: frozenset[str] = frozenset()
    workspaces: tuple[str, ...] | None = None
    allow_list: frozenset[str] | None = None
    credential_id: str = ""
    credential_kind: str = CredentialKind.NONE
    # the tenant's exposure settings (target -> level), when the door read them with the credential in the same
    # statement; None: the gate reads them itself (apps.operations.exposure)
    exposure: Mapping[str, str] | None = field(default=None, compare=False, hash=False)

    def has_role(self, role: Role) -> bool:
        """Whether the caller's role in the tenant covers `role` (the system and strangers have none)."""
        return self.role is not None and Role(self.role).covers(role)

    @classmethod
    def person(cls, membership: Membership) -> Caller:
        return cls(Principal.PERSON, membership.tenant, user=membership.user, role=Role(membership.role))

    @classmethod
    def agent(
        cls,
        membership: Membership,
        *,
        scopes: set[str] | frozenset[str],
        workspaces: tuple[str, ...] = ("default",),
        allow_list: set[str] | frozenset[str] | None = None,
        credential_id: str,
        credential_kind: str,
        exposure: Mapping[str, str] | None = None,
    ) -> Caller:
        return cls(
            Principal.AGENT,
            membership.tenant,
            user=membership.user,
            role=Role(membership.role),
            scopes=granted_scopes(scopes),
            workspaces=tuple(workspaces),
            allow_list=frozenset(allow_list) if allow_list is not None else None,
            credential_id=credential_id,
            credential_kind=credential_kind,
            exposure=exposure,
        )

    @classmethod
    def internal(cls, tenant: Tenant) -> Caller:
        return cls(Principal.INTERNAL, tenant)

    @property
    def key(self) -> str:
        """Stable identity for binding tokens and idempotency keys to this caller."""
        user = self.user.pk if self.user is not None else "-"
        return f"{self.principal}:{self.tenant.pk}:{user}:{self.credential_id or '-'}"

    @property
    def workspace_filter(self) -> tuple[str, ...] | None:
        """Workspace names this caller's mail is limited to; None: every workspace (SPEC §8)."""
        if self.principal != Principal.AGENT or not self.workspaces:
            return None
        return self.workspaces
