"""Schemathesis against the REST door's own OpenAPI document: every operation, a few generated requests each,
signed in as a person. No answer is a server error, and every answer matches what the document says."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.conf import settings
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.middleware.csrf import CSRF_ALLOWED_CHARS, CSRF_SECRET_LENGTH
from django.test import Client
from django.utils.crypto import get_random_string
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from apps.audit.models import AuditEvent
from apps.mail.importing import import_mail
from tests.conftest import Person
from tests.mailfactory import raw_message, write_mbox

_document = SchemaGenerator().get_schema(request=None, public=True)
schema = schemathesis.openapi.from_dict(_document)
schema.app = get_wsgi_application()


@pytest.fixture
def in_process() -> Iterator[None]:
    """Requests served in this process share the test's transaction: as Django's test client does, the
    handler must not close the connection when a request ends."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def signed_in(alice: Person, mallory: Person, tmp_path: Path, in_process: None) -> dict[str, Any]:
    """Alice's browser: her session and CSRF cookies and header; both tenants hold a little mail."""
    for person in (alice, mallory):
        mbox = write_mbox(tmp_path / f"{person.user.pk}.mbox", [raw_message(subject=f"Hello {person.user.email}")])
        import_mail(tenant=person.tenant, workspace=person.workspace, account_name="local", path=mbox)
    client = Client()
    client.force_login(alice.user)
    token = get_random_string(CSRF_SECRET_LENGTH, CSRF_ALLOWED_CHARS)
    return {
        "cookies": {
            settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value,
            settings.CSRF_COOKIE_NAME: token,
        },
        "headers": {"X-CSRFToken": token},
    }


@schema.parametrize()
@hypothesis_settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_gets_a_server_error_or_an_answer_the_document_does_not_describe(
    case: Any, signed_in: dict[str, Any], mallory: Person
) -> None:
    theirs = AuditEvent.objects.for_tenant(mallory.tenant).count()
    response = case.call(headers=signed_in["headers"], cookies=signed_in["cookies"])
    assert response.status_code < 500, (case.path, response.status_code, response.text[:500])
    kind = next((v[0] for k, v in response.headers.items() if k.lower() == "content-type" and v), "")
    assert kind.startswith("application/json"), (case.path, kind, response.text[:200])
    case.validate_response(response, checks=[content_type_conformance, response_schema_conformance])
    # whatever alice sent, nothing of it lands in another tenant
    assert AuditEvent.objects.for_tenant(mallory.tenant).count() == theirs
