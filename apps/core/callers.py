"""Who is calling: a principal in a tenant, with what it was granted. Doors build one; the gate checks it;
handlers and domain services read it as the actor."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from apps.core.kinds import CredentialKind, Principal, Role, granted_scopes

# what a person set up to act by itself (Caller.standing)
STANDING_KINDS = frozenset((CredentialKind.RULE, CredentialKind.AILABEL, CredentialKind.AUTOREPLY))

if TYPE_CHECKING:
    from apps.accounts.models import User
    from apps.workspaces.models import Membership, Tenant


@dataclass(frozen=True)
class ToolSetGrant:
    """The named set of tools a credential is limited to. A built-in set (operations None): the registry's own
    definitions decide its members (apps.operations.exposure), so it follows the operations as they are defined. A
    person's own set: its operations, read with the credential on every call, so a change reaches the credential at
    once; a set deleted since holds nothing, and the credential then reaches nothing rather than everything."""

    name: str
    operations: frozenset[str] | None = None


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
    # persons and their agents: the workspaces the person is given (a limited MEMBER); None: every workspace
    member_workspaces: tuple[str, ...] | None = None
    allow_list: frozenset[str] | None = None
    # agents only: the named set of tools the credential is limited to, checked where the allow-list is (None: none)
    tool_set: ToolSetGrant | None = None
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
        """The person of `membership`, reaching the workspaces it gives them now (its workspace_ids, read with
        it: a door that builds the membership itself copies them, or the person would reach every workspace)."""
        return cls(
            Principal.PERSON,
            membership.tenant,
            user=membership.user,
            role=Role(membership.role),
            member_workspaces=membership.workspace_names(),
        )

    @classmethod
    def agent(
        cls,
        membership: Membership,
        *,
        scopes: set[str] | frozenset[str],
        workspaces: tuple[str, ...] = ("default",),
        allow_list: set[str] | frozenset[str] | None = None,
        tool_set: ToolSetGrant | None = None,
        credential_id: str,
        credential_kind: str,
        exposure: Mapping[str, str] | None = None,
    ) -> Caller:
        return cls(
            Principal.AGENT,
            membership.tenant,
            user=membership.user,
            role=Role(membership.role),
            member_workspaces=membership.workspace_names(),
            scopes=granted_scopes(scopes),
            workspaces=tuple(workspaces),
            allow_list=frozenset(allow_list) if allow_list is not None else None,
            tool_set=tool_set,
            credential_id=credential_id,
            credential_kind=credential_kind,
            exposure=exposure,
        )

    @classmethod
    def standing(cls, membership: Membership, *, kind: str, source_id: str) -> Caller:
        """What a person set up to act by itself (a rule, an AI label: `kind` and its id), acting as that person
        through the internal door: never more than the person may do now (their role and workspaces, read with
        `membership`), and audited as theirs with the rule or label as its credential."""
        person = cls.person(membership)
        return cls(
            Principal.PERSON,
            person.tenant,
            user=person.user,
            role=person.role,
            member_workspaces=person.member_workspaces,
            credential_id=source_id,
            credential_kind=kind,
        )

    @classmethod
    def internal(cls, tenant: Tenant) -> Caller:
        return cls(Principal.INTERNAL, tenant)

    @property
    def is_standing(self) -> bool:
        """A person's standing authority acting by itself (Caller.standing), not the person at a door."""
        return self.principal == Principal.PERSON and self.credential_kind in STANDING_KINDS

    @property
    def key(self) -> str:
        """Stable identity for binding tokens and idempotency keys to this caller."""
        user = self.user.pk if self.user is not None else "-"
        return f"{self.principal}:{self.tenant.pk}:{user}:{self.credential_id or '-'}"

    @property
    def workspace_filter(self) -> tuple[str, ...] | None:
        """Workspace names this caller's mail is limited to; None: every workspace (SPEC §8). A person: the
        workspaces they are given. An agent: those its credential lists (empty: every one) that its person is
        given now, so it never reaches further than its person; an empty tuple reaches nothing."""
        granted = self.workspaces if self.principal == Principal.AGENT and self.workspaces else None
        given = self.member_workspaces if self.principal in (Principal.PERSON, Principal.AGENT) else None
        if given is None:
            return granted
        if granted is None:
            return given
        return tuple(name for name in granted if name in given)

    @property
    def names_an_account(self) -> bool:
        """Whether a read across every account is refused when some lie outside its reach, asking to name one
        (SPEC §8: agents); a person's reads across accounts are narrowed to their workspaces instead."""
        return self.principal == Principal.AGENT
