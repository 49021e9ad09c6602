"""The web server's one application (config.wsgi) serves /mcp through the MCP door's own middleware and every
other path through all of it: an MCP answer still carries every header an answer carries, and CORS, and never a
cookie; a browser page still gets its session and CSRF cookie; the door's list cannot add or reorder middleware."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from apps.audit.models import AuditEvent
from config.wsgi import DoorHandler, application
from tests.conftest import Person
from tests.test_mcp_door import _fresh_counters, _mailbox_with, key_for, rpc  # noqa: F401 (fixture)
from tests.wsgicall import serve


def _serve(method: str, path: str, body: bytes = b"", **headers: str) -> tuple[str, dict[str, list[str]], bytes]:
    return serve(application, method, path, body, **headers)


def _call(key: str, path: str, name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, list[str]], Any]:
    body = json.dumps(rpc("tools/call", {"name": name, "arguments": arguments})).encode()
    status, headers, answer = _serve(
        "POST",
        path,
        body,
        authorization=f"Bearer {key}",
        accept="application/json, text/event-stream",
        mcp_protocol_version="2025-11-25",
    )
    return status, headers, json.loads(answer)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/mcp", "/mcp/"])
def test_an_mcp_answer_carries_every_header_and_no_cookie(
    path: str, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    message_id = _mailbox_with(alice, tmp_path, "Totals attached.")
    key = key_for(alice, ["read"])
    status, headers, answer = _call(key, path, "get_message", {"message_id": message_id})
    assert status.startswith("200")
    content = answer["result"]["structuredContent"]
    assert content["message"]["id"] == message_id and "Totals attached." in content["message"]["text"]
    # the headers every answer carries, as the browser pages' middleware gives them
    assert "default-src 'none'" in headers["content-security-policy"][0]
    assert headers["x-frame-options"] == ["DENY"] and headers["x-content-type-options"] == ["nosniff"]
    assert headers["cache-control"] == ["no-store"]
    # nothing of a browser session: no cookie set, no answer varying by one
    assert "set-cookie" not in headers
    assert not any("cookie" in value.lower() for value in headers.get("vary", []))
    # the second tenant's key, through the same handler, cannot reach the message
    _, _, other = _call(key_for(mallory, ["read"]), path, "get_message", {"message_id": message_id})
    assert other["result"]["isError"] is True and "NOT_FOUND" in other["result"]["content"][0]["text"]
    assert "Totals" not in json.dumps(other)


@pytest.mark.django_db(transaction=True)
def test_a_host_not_allowed_is_refused_before_the_door_reads_anything(alice: Person) -> None:
    # a DNS rebinding page reaches the server under its own name: refused before the credential is even looked up
    body = json.dumps(rpc("tools/call", {"name": "list_accounts", "arguments": {}})).encode()
    key = key_for(alice, ["read"])
    for host in ("rebound.example", "rebound.example:8000"):
        status, _, answer = _serve("POST", "/mcp", body, host=host, authorization=f"Bearer {key}")
        assert status.startswith("400") and b"accounts" not in answer
    assert AuditEvent.objects.for_tenant(alice.tenant).count() == 0  # no call reached the gate
    status, _, _ = _serve("POST", "/mcp", body, authorization=f"Bearer {key}", accept="application/json")
    assert status.startswith("200")


@pytest.mark.django_db(transaction=True)
def test_a_browser_client_of_the_mcp_door_gets_its_cors_answers(alice: Person) -> None:
    origin = "https://assistant.example"
    status, headers, _ = _serve(
        "OPTIONS",
        "/mcp",
        origin=origin,
        access_control_request_method="POST",
        access_control_request_headers="authorization, content-type, mcp-protocol-version",
    )
    assert status.startswith(("200", "204"))
    assert headers["access-control-allow-origin"] == ["*"]
    assert "authorization" in headers["access-control-allow-headers"][0].lower()
    status, headers, _ = _serve("POST", "/mcp", json.dumps(rpc("ping")).encode(), origin=origin)
    assert status.startswith("401") and headers["access-control-allow-origin"] == ["*"]
    assert "WWW-Authenticate" in headers["access-control-expose-headers"][0]


@pytest.mark.django_db(transaction=True)
def test_browser_pages_still_pass_through_every_middleware(alice: Person) -> None:
    status, headers, page = _serve("GET", "/accounts/sign-in")
    assert status.startswith("200") and b"<form" in page
    cookies = " ".join(headers.get("set-cookie", []))
    assert settings.CSRF_COOKIE_NAME + "=" in cookies  # CSRF's middleware ran
    assert "default-src 'none'" in headers["content-security-policy"][0]
    # a path that only starts like the door's is a page like any other
    status, headers, _ = _serve("GET", "/mcpx")
    assert status.startswith("404") and "default-src 'none'" in headers["content-security-policy"][0]


def test_a_doors_middleware_is_some_of_the_whole_in_its_order() -> None:
    whole = settings.MIDDLEWARE
    for path in ("/mcp", "/mcp/"):
        handler = application.handler_for(path)
        assert isinstance(handler, DoorHandler) and handler.middleware == settings.MCP_MIDDLEWARE
    assert application.handler_for("/mcpx") is application.handler_for("/") is application.everything
    assert not isinstance(application.everything, DoorHandler)
    # what only a browser page needs is left out
    assert not [name for name in settings.MCP_MIDDLEWARE if any(k in name for k in ("session", "csrf", "auth"))]
    with pytest.raises(ImproperlyConfigured):
        DoorHandler([whole[1], whole[0]])
    with pytest.raises(ImproperlyConfigured):
        DoorHandler([*whole[:2], "tests.no.such.Middleware"])
    assert DoorHandler(whole[:1]).middleware == whole[:1]
