"""Shared fixtures. Every test that touches data has a second tenant whose data must stay invisible."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hypothesis
import pytest
from django.db import connections

from apps.accounts.models import User
from apps.core import redis_client as redis_module
from apps.events.wake import hub
from apps.mail.importing import import_mail
from apps.mail.models import Message
from apps.workspaces.models import Tenant, Workspace
from apps.workspaces.services import create_person
from tests.liveserver import live_url  # noqa: F401 (a fixture for every module)
from tests.mail_oauth import oauth, oauth_world  # noqa: F401 (fixtures)
from tests.mailfactory import raw_message, write_mbox
from tests.mailservers import imap_server, smtp_server  # noqa: F401 (fixtures)

# The property tests explore new inputs on every run at a desk; CI runs the same ones each time (derandomized),
# so what lands is what was seen to pass, and a new finding turns up at a desk rather than blocking a landing.
hypothesis.settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    hypothesis.settings.load_profile("ci")

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


# the longest a test that spends sending budgets and then looks at them runs (a browser test, say)
_BUDGET_TEST_SECONDS = 120


@pytest.fixture
def one_budget_hour() -> None:
    """The test runs within one clock hour of the hourly sending budgets: one that starts in the hour's last
    minutes waits for the next hour, else what it spent could land in two hours and its figures split."""
    from apps.outbound.budget import seconds_left

    left = seconds_left(time.time())
    if left < _BUDGET_TEST_SECONDS:
        time.sleep(left + 1)


@pytest.fixture
def account_mail_queued() -> None:
    """Account mail goes to the broker for a real worker, as in production (see account_mail_here)."""


@pytest.fixture(autouse=True)
def account_mail_here(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Account mail (sign-up, password reset) is handed to a Celery worker; tests read it from this process's
    outbox, so each such task runs here, at once, when the page hands it over. A test that asks for
    account_mail_queued has it go through the broker instead (tests/test_account_mail.py)."""
    if "account_mail_queued" in request.fixturenames:
        return
    from apps.accounts.tasks import ACCOUNT_MAIL_TASKS
    from config.celery import app

    for named in ACCOUNT_MAIL_TASKS:
        task = app.tasks[named.name]  # the task itself, not a proxy to whichever app is current when undone

        def here(args: Any = None, kwargs: Any = None, *, _task: Any = task, **options: Any) -> Any:
            return _task.apply(args, kwargs, throw=True)

        monkeypatch.setattr(task, "apply_async", here)


@pytest.fixture(scope="session", autouse=True)
def wake_stops_before_the_database_goes(django_db_setup: None) -> Iterator[None]:
    """A wait's listening connection (apps.events.wake) is closed before the test database is dropped."""
    yield
    hub.stop()


@pytest.fixture(autouse=True)
def redis_not_away() -> None:
    """A test that stopped Redis leaves no "it failed a moment ago" behind for the next (apps.core.redis_client)."""
    redis_module._away_until = 0.0


@pytest.fixture(autouse=True)
def routes_follow_the_registry() -> None:
    """A served process makes its REST paths (and so the OpenAPI document) once, from the registry as it stands
    at start-up, plugins included. Tests load and unload plugins later, so before each test the paths are made
    again if the registry changed since: a plugin unloaded by one module must not leave its paths in the
    document another module checks, whatever order the modules run in."""
    import sys

    from django.conf import settings
    from django.urls import clear_url_caches

    from apps.operations.registry import registry

    urls = sys.modules.get(settings.ROOT_URLCONF)
    if urls is None:  # not made yet: it will be made from the registry as it is then
        return
    routed = {
        p.name.removeprefix("op-") for p in urls.urlpatterns if getattr(p, "name", None) and p.name.startswith("op-")
    }
    routed.discard("unknown")
    names = {op.name for op in registry}
    plugin_ops = {op.name for op in registry if op.plugin}
    if routed <= names and plugin_ops <= routed:
        return
    import importlib

    from apps.api import schema

    clear_url_caches()
    importlib.reload(urls)
    schema._documents.clear()


@pytest.fixture
def summaries_on_workers() -> None:
    """Summaries go to the broker for real workers, as in production (see summaries_here)."""


@pytest.fixture(autouse=True)
def summaries_here(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Summaries are a Celery group handed to the workers; in tests that start none, the group runs here, at once,
    in the test's own transaction. A test that asks for summaries_on_workers has real workers write them
    (tests/test_summaries.py)."""
    if "summaries_on_workers" in request.fixturenames:
        return
    from celery import group

    from apps.summaries import services

    monkeypatch.setattr(services, "publish", lambda signatures: group(signatures).apply())


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


@dataclass
class Mailbox:
    account_id: str
    message_ids: list[str]
    subjects: list[str]


def give_mail(person: Person, tmp_path: Path, tag: str, n: int = 3) -> Mailbox:
    """n messages in a local account of the person's default workspace."""
    subjects = [f"{tag} note {i}" for i in range(n)]
    messages = [
        raw_message(subject=s, body=f"{tag} body {i}.\n", message_id=f"<{tag}-{i}@example.test>")
        for i, s in enumerate(subjects)
    ]
    counts = import_mail(
        tenant=person.tenant,
        workspace=person.workspace,
        account_name=f"{tag} mail",
        path=write_mbox(tmp_path / f"{tag}.mbox", messages),
    )
    assert counts.imported == n
    ids = Message.objects.for_tenant(person.tenant).filter(account_id=counts.account_id).values_list("pk", flat=True)
    return Mailbox(str(counts.account_id), [str(pk) for pk in ids], subjects)


@pytest.fixture
def alice_mail(alice: Person, tmp_path: Path) -> Mailbox:
    return give_mail(alice, tmp_path, "alice")


@pytest.fixture
def mallory_mail(mallory: Person, tmp_path: Path) -> Mailbox:
    return give_mail(mallory, tmp_path, "mallory")
