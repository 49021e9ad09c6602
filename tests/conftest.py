"""Shared fixtures. Every test that touches data has a second tenant whose data must stay invisible."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from apps.accounts.models import User
from apps.workspaces.models import Tenant, Workspace
from apps.workspaces.services import create_person
from tests.liveserver import live_url  # noqa: F401 (a fixture for every module)

PASSWORD = "correct horse battery staple"


@dataclass
class Person:
    user: User
    tenant: Tenant
    workspace: Workspace


def make_person(email: str, tenant_name: str | None = None) -> Person:
    person = create_person(email=email, password=PASSWORD, tenant_name=tenant_name)
    return Person(person.user, person.tenant, person.workspace)


@pytest.fixture
def alice(db: None) -> Person:
    """The person whose data a test works on."""
    return make_person("alice@example.test", "Alice's tenant")


@pytest.fixture
def mallory(db: None) -> Person:
    """A person in another tenant: nothing of alice's may ever reach her."""
    return make_person("mallory@example.test", "Mallory's tenant")
