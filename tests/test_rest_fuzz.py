"""Schemathesis against the REST door's own OpenAPI document: every operation, signed in as a person (alice, the
OWNER of her tenant, who may call every operation the door serves), and every operation the document offers a
bearer credential, called with alice's API key (every scope and workspace, in a tenant offering every operation
up to its ceiling); seeded (hypothesis derandomized), positive and negative cases. No answer is a server error or
anything but JSON; every answer's status, content type and body are what the document says; a request the
document calls valid is never refused as invalid (every bound the gate holds a call to is in the document); and
nothing of another tenant's (mallory's ids, names, subjects) appears in any answer, whatever alice sends."""

from __future__ import annotations

import itertools
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from django.conf import settings
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.middleware.csrf import CSRF_ALLOWED_CHARS, CSRF_SECRET_LENGTH
from django.test import Client
from django.utils import timezone
from django.utils.crypto import get_random_string
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, Phase
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from apps.agents.keys import issue_key
from apps.audit.models import AuditEvent
from apps.mail import imap as mail_imap
from apps.mail.importing import import_mail
from apps.mail.models import Label, MailAccount, Message
from apps.mail.reasons import MailServerError
from apps.operations.exposure import set_exposure
from apps.operations.registry import Ceiling, registry
from apps.outbound.models import Draft
from apps.workspaces.models import Membership
from tests.conftest import Person
from tests.mailfactory import raw_message, write_mbox

_document = SchemaGenerator().get_schema(request=None, public=True)
schema = schemathesis.openapi.from_dict(_document)
schema.app = get_wsgi_application()

# cases per operation: with about 80 operations, a few hundred requests a run (OAKEN_FUZZ_EXAMPLES for a deeper
# run by hand)
EXAMPLES_PER_OPERATION = int(os.environ.get("OAKEN_FUZZ_EXAMPLES", "5"))
_sent = itertools.count()


def answers_json(ctx: Any, response: Any, case: Any) -> bool | None:
    """A JSON door answers JSON, whatever it was sent: never an HTML page, never an empty 5xx."""
    kind = response.headers.get("content-type", [""])[0] if response.headers.get("content-type") else ""
    assert kind.startswith("application/json"), f"{case.path} answered {response.status_code} with {kind!r}"
    return None


# What no document can say: whether a field's value is right depends on what the server gave out, on the clock
# or on the world, never on its shape. A request the document calls valid may be refused for these fields only,
# as INVALID_INPUT naming the field; each is described so in the document.
BEYOND_THE_DOCUMENT = {
    "cursor": "a page's cursor is one the service gave out",
    "send_at": "a time in the future",
    "ends_at": "a time after now (and after starts_at)",
    "imap.host": "a mail server that answers, at a name the resolver takes (IDNA)",
    "smtp.host": "a mail server that answers, at a name the resolver takes (IDNA)",
    "upload": "a file the upload door stored a moment ago",
    "tz": "a time zone in the server's own tz database (which its updates change)",
    "settings": "a plugin's settings, held to the plugin's own schema (list_plugins gives it)",
    "url": "a webhook's endpoint at a port that exists and an address that is not loopback or private",
}


def valid_requests_accepted(ctx: Any, response: Any, case: Any) -> bool | None:
    """schemathesis's positive_data_acceptance, but for the fields whose validity no document can hold."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except AssertionError:
        error = (response.json() or {}).get("error") or {}
        field = str(error.get("field") or "")
        named = {field, field.split(".")[0]}  # a field, or one inside a free-form one (a plugin's settings.x)
        if error.get("code") == "INVALID_INPUT" and named & set(BEYOND_THE_DOCUMENT):
            return None
        raise


CHECKS = [
    not_a_server_error,
    answers_json,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    valid_requests_accepted,
]


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Requests served in this process share the test's transaction: as Django's test client does, the
    handler must not close the connection when a request ends. And no generated mail server is ever connected to:
    the tests allow loopback and private hosts, so a generated "0.1.0" reached whatever answers on this machine's
    network (a TLS alert was answered as the security setting's fault); a mail server's name is the world's, not
    the document's (BEYOND_THE_DOCUMENT), and every one of them is unreachable here."""

    def unreachable(host: str, port: int, field: str) -> str:
        raise MailServerError("connection_failed", field)

    monkeypatch.setattr(mail_imap, "pinned_address", unreachable)
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def _give_mail(person: Person, tmp_path: Path, secret: str) -> None:
    mbox = write_mbox(
        tmp_path / f"{person.user.pk}.mbox",
        [raw_message(subject=f"Hello {secret}"), raw_message(subject=f"Second {secret}")],
    )
    import_mail(tenant=person.tenant, workspace=person.workspace, account_name="local", path=mbox)
    account = MailAccount.objects.for_tenant(person.tenant).get()
    Label.objects.create(tenant=person.tenant, account=account, name=f"Label {secret}")
    Draft.objects.create(tenant=person.tenant, account=account, subject=f"Draft {secret}", body=f"Body {secret}")


def _theirs(person: Person, secret: str) -> set[str]:
    """What of another tenant's must never reach alice: its ids, its person, its mail's words."""
    tenant = person.tenant
    ids = [
        tenant.pk,
        person.workspace.pk,
        person.user.pk,
        *MailAccount.objects.for_tenant(tenant).values_list("pk", flat=True),
        *Message.objects.for_tenant(tenant).values_list("pk", flat=True),
        *Label.objects.for_tenant(tenant).values_list("pk", flat=True),
        *Draft.objects.for_tenant(tenant).values_list("pk", flat=True),
    ]
    return {str(i) for i in ids} | {secret, person.user.email, tenant.name}


@pytest.fixture
def signed_in(alice: Person, mallory: Person, tmp_path: Path, in_process: None) -> dict[str, Any]:
    """Alice's browser (her session and CSRF cookies and header), both tenants holding mail, labels and drafts,
    and what of mallory's must stay out of every answer."""
    mallorys = f"mallory-{uuid.uuid4().hex}"
    _give_mail(alice, tmp_path, "alice-mail")
    _give_mail(mallory, tmp_path, mallorys)
    client = Client()
    client.force_login(alice.user)
    token = get_random_string(CSRF_SECRET_LENGTH, CSRF_ALLOWED_CHARS)
    return {
        "cookies": {
            settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value,
            settings.CSRF_COOKIE_NAME: token,
        },
        "headers": {"X-CSRFToken": token},
        "theirs": _theirs(mallory, mallorys),
    }


def _own_key_and_tenant(case: Any, alice: Person, mallory: Person) -> bool:
    """A generated Idempotency-Key made unique to this case (the cases share the test's database, and a key
    reused with another input is rightly IDEMPOTENCY_MISMATCH); a generated Oaken-Tenant made a real one, alice's
    or (every other case) mallory's, which must be NOT_FOUND. Whether the case names mallory's tenant."""
    n = next(_sent)
    headers = case.headers or {}
    if "Idempotency-Key" in headers:
        headers["Idempotency-Key"] = f"{headers['Idempotency-Key'][:240]}-{n:06d}"
    foreign = False
    if "Oaken-Tenant" in headers:
        foreign = n % 2 == 1
        headers["Oaken-Tenant"] = str((mallory if foreign else alice).tenant.pk)
    return foreign


def _fuzz(operation: Any, signed_in: dict[str, Any], alice: Person, mallory: Person) -> int:
    """EXAMPLES_PER_OPERATION generated cases of one operation, each answered as the document says; the count."""
    sent = 0

    @hypothesis.given(case=operation.as_strategy())
    @hypothesis.settings(
        max_examples=EXAMPLES_PER_OPERATION,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        # generated cases only: schemathesis's coverage phase (every boundary and method of every operation, some
        # thirty requests each) would take ten minutes; hypothesis's shrinking of a failure, longer still
        phases=[Phase.generate],
    )
    def one(case: Any) -> None:
        nonlocal sent
        sent += 1
        theirs = AuditEvent.objects.for_tenant(mallory.tenant).count()
        foreign = _own_key_and_tenant(case, alice, mallory)
        if "Authorization" not in signed_in["headers"] and case.headers:
            # a session's case carries the session alone: a bearer credential generated from the document's other
            # security scheme beside it is two credentials, refused as such (tests/test_rest_bearer.py)
            case.headers.pop("Authorization", None)
        response = case.call(headers=signed_in["headers"], cookies=signed_in["cookies"])
        case.validate_response(response, checks=CHECKS, headers=signed_in["headers"])
        if foreign and case.meta.generation.mode.is_positive:
            assert response.status_code == 404, response.text[:300]
            assert response.json()["error"]["code"] == "NOT_FOUND"
        # whatever alice sent, nothing of mallory's comes back, and nothing of it lands in mallory's tenant
        leaked = [value for value in signed_in["theirs"] if value in response.text]
        assert not leaked, (case.path, leaked)
        assert AuditEvent.objects.for_tenant(mallory.tenant).count() == theirs

    one()
    return sent


def _operations() -> list[Any]:
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # the document itself is valid
        operations.append(result.ok())
    return operations


def _fuzz_all(operations: list[Any], credentials: dict[str, Any], alice: Person, mallory: Person) -> int:
    """Every one of `operations`, each answered as the document says; the cases sent. A failing operation does not
    hide the others': all are reported together."""
    failures: dict[str, str] = {}
    sent = 0
    began = time.monotonic()
    for operation in operations:
        try:
            sent += _fuzz(operation, credentials, alice, mallory)
        except (Exception, BaseExceptionGroup) as failure:  # every operation runs; all are reported together
            failures[operation.label] = str(failure)[:3000]
    took = time.monotonic() - began
    print(f"schemathesis: {sent} cases over {len(operations)} operations in {took:.1f} s")
    assert not failures, "\n\n".join(f"{label}:\n{text}" for label, text in failures.items())
    return sent


def test_no_request_gets_a_server_error_html_an_undocumented_answer_or_another_tenants_data(
    signed_in: dict[str, Any], alice: Person, mallory: Person
) -> None:
    """Every operation of the document in one session (one setup: the cases of all of them share alice's and
    mallory's data); a failing operation does not hide the others'."""
    operations = _operations()
    sent = _fuzz_all(operations, signed_in, alice, mallory)
    assert {operation.path for operation in operations} == set(_document["paths"])
    assert len(operations) > 50 and sent >= len(operations) * 2


@pytest.fixture
def with_a_key(alice: Person, mallory: Person, tmp_path: Path, in_process: None, settings: Any) -> dict[str, Any]:
    """Alice's API key with every scope and workspace, her tenant offering agents every operation up to its
    ceiling, both tenants holding mail, labels and drafts, and what of mallory's must stay out of every answer."""
    mallorys = f"mallory-{uuid.uuid4().hex}"
    _give_mail(alice, tmp_path, "alice-mail")
    _give_mail(mallory, tmp_path, mallorys)
    for op in registry:
        if op.ceiling == Ceiling.OFF:
            set_exposure(tenant=alice.tenant, target=op.name, level="on", now=timezone.now())
    # the cases come faster than any client's minute allows
    settings.OPERATIONS = {**settings.OPERATIONS, "MCP_REQUESTS_PER_MINUTE": 1_000_000}
    membership = Membership.objects.for_user(alice.user).select_related("tenant", "user").get(tenant=alice.tenant)
    key = issue_key(
        membership=membership, scopes=["read", "write", "send"], workspaces=[], allow_list=None, expires_at=None
    )[1]
    return {"cookies": {}, "headers": {"Authorization": f"Bearer {key}"}, "theirs": _theirs(mallory, mallorys)}


def test_a_key_gets_no_server_error_an_undocumented_answer_or_another_tenants_data(
    with_a_key: dict[str, Any], alice: Person, mallory: Person
) -> None:
    """Every operation the document offers a bearer credential (its security names `bearer`), called with an API
    key: answered as the document says, for an agent as for a person, and never with mallory's data."""
    operations = [op for op in _operations() if {"bearer": []} in op.definition.raw.get("security", [])]
    sent = _fuzz_all(operations, with_a_key, alice, mallory)
    assert len(operations) > 40 and sent >= len(operations) * 2
    # every call of the key was the agent's, on the REST API's door
    events = AuditEvent.objects.for_tenant(alice.tenant).filter(principal="agent")
    assert events.exists() and set(events.values_list("door", flat=True)) == {"api"}
