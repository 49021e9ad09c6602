"""Callers built from the test fixtures' people, for tests that go through the gate."""

from __future__ import annotations

from apps.gate.callers import Caller
from apps.workspaces.models import Membership
from tests.conftest import Person


def as_person(p: Person) -> Caller:
    return Caller.person(Membership.objects.for_user(p.user).get(tenant=p.tenant))


def as_agent(
    p: Person,
    *,
    scopes: set[str] | None = None,
    workspaces: tuple[str, ...] = ("default",),
    allow_list: set[str] | None = None,
    kind: str = "apikey",
    credential_id: str = "key-1",
) -> Caller:
    return Caller.agent(
        Membership.objects.for_user(p.user).get(tenant=p.tenant),
        scopes=scopes if scopes is not None else {"read", "write"},
        workspaces=workspaces,
        allow_list=allow_list,
        credential_id=credential_id,
        credential_kind=kind,
    )
