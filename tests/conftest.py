"""Shared fixtures. Every test that touches data has a second tenant whose data must stay invisible."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from django.db import connections

from apps.accounts.models import User
from apps.workspaces.models import Tenant, Workspace
from apps.workspaces.services import create_person
from tests.liveserver import live_url  # noqa: F401 (a fixture for every module)
from tests.mailservers import imap_server, smtp_server  # noqa: F401 (fixtures)

if TYPE_CHECKING:
    from playwright.sync_api import Page

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


@pytest.fixture
def browser_page(live_server: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Page]:
    """A headless Chromium page on the live test server (transactional database; skips without Chromium)."""
    from tests.browser import chromium_page

    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls stay synchronous
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with chromium_page(live_server.url) as page:
        yield page
        # with Playwright's loop running, this thread's ORM calls got a connection of their own
        # (asgiref keeps one per async context): close it while still in that context
        connections.close_all()
