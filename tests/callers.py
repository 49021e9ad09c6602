"""Callers built from the test fixtures' people, and calls through their own doors."""

from __future__ import annotations

from typing import Any

import pytest

from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.kinds import Door, Principal
from apps.gate.dispatch import dispatch
from apps.workspaces.models import DEFAULT_WORKSPACE, Membership
from tests.conftest import Person


def membership(p: Person) -> Membership:
    return Membership.objects.for_user(p.user).select_related("tenant", "user").get(tenant=p.tenant)


def as_person(p: Person) -> Caller:
    return Caller.person(membership(p))


def as_agent(
    p: Person,
    *,
    scopes: set[str] | frozenset[str] = frozenset({"read", "write"}),
    workspaces: tuple[str, ...] = (DEFAULT_WORKSPACE,),
    allow_list: set[str] | None = None,
    credential_id: str = "key-1",
    credential_kind: str = "apikey",
) -> Caller:
    return Caller.agent(
        membership(p),
        scopes=scopes,
        workspaces=workspaces,
        allow_list=allow_list,
        credential_id=credential_id,
        credential_kind=credential_kind,
    )


def door_of(caller: Caller) -> Door:
    return {Principal.PERSON: Door.UI, Principal.AGENT: Door.MCP, Principal.INTERNAL: Door.INTERNAL}[caller.principal]


def call(caller: Caller, name: str, input: Any = None, **kw: Any) -> dict[str, Any]:
    """Dispatch through the caller's own door; the operation's output."""
    return dispatch(caller, door_of(caller), name, {} if input is None else input, **kw).output


def refusal(caller: Caller, name: str, input: Any = None, **kw: Any) -> OakenError:
    """Dispatch a call that must be refused; the refusal."""
    with pytest.raises(OakenError) as info:
        call(caller, name, input, **kw)
    return info.value


def joined(p: Person, email: str, role: str = "MEMBER") -> Person:
    """A new person (owner of a tenant of their own) who is also `role` in p's tenant, seen in p's tenant."""
    from tests.conftest import make_person

    them = make_person(email, f"{email}'s own tenant")
    Membership.objects.create(tenant=p.tenant, user=them.user, role=role)
    return Person(them.user, p.tenant, p.workspace)
