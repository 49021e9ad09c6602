"""The MCP door over real HTTP (gunicorn on loopback), as a hostile client meets it: a body must be strict JSON
(UTF-8, no repeated key) sent as application/json, a refusal carries the error shape as structured content, and
nothing the caller made up (an argument's name, a tool's name, a protocol version) comes back or lands in the
audit log."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx2
import pytest
from django.conf import settings
from django.middleware.csrf import CSRF_ALLOWED_CHARS, CSRF_SECRET_LENGTH
from django.test import Client
from django.utils.crypto import get_random_string
from jsonschema import Draft202012Validator

from apps.audit.models import AuditEvent
from apps.mail.importing import import_mail
from apps.mail.models import Message
from tests.conftest import Person
from tests.mailfactory import raw_message, write_mbox
from tests.test_mcp_door import _fresh_counters, key_for, rpc  # noqa: F401 (fixture)

pytestmark = [pytest.mark.django_db(transaction=True)]

LEGACY = "2025-11-25"
CHOSEN = "zq-chosen-text"  # what an attacker wants repeated: it must appear in no answer and no audit event


def _mail(person: Person, tmp: Path, subject: str) -> str:
    path = write_mbox(tmp / f"{person.user.pk}.mbox", [raw_message(subject=subject)])
    counts = import_mail(tenant=person.tenant, workspace=person.workspace, account_name="Personal", path=path)
    return str(Message.objects.for_tenant(person.tenant).get(account_id=counts.account_id).pk)


def _post(url: str, key: str, body: bytes, content_type: str | None = "application/json", **headers: str) -> Any:
    sent = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LEGACY,
        **headers,
    }
    if content_type is not None:
        sent["Content-Type"] = content_type
    return httpx2.post(url + "/mcp", content=body, headers=sent, timeout=30)


def _call(url: str, key: str, name: str, arguments: dict[str, Any]) -> Any:
    return _post(url, key, json.dumps(rpc("tools/call", {"name": name, "arguments": arguments})).encode())


def _audited(person: Person) -> list[str]:
    return [json.dumps([e.operation, e.outcome, e.targets]) for e in AuditEvent.objects.for_tenant(person.tenant)]


def test_a_body_that_is_not_strict_json_is_a_parse_error(live_url: str, alice: Person, mallory: Person) -> None:
    key = key_for(alice, ["read"])
    ping = json.dumps(rpc("ping"))
    bodies = {
        # the last "method" would win: a check could read one and the call use another
        "a repeated key": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "method": "ping"}',
        "a repeated key inside the arguments": json.dumps(rpc("tools/call", {"name": "status"}))
        .replace('"name": "status"', '"name": "status", "arguments": {"a": 1, "a": 2}')
        .encode(),
        "UTF-16 with its byte order mark": ping.encode("utf-16"),
        "UTF-16 without one": ping.encode("utf-16-le"),
        "UTF-32": ping.encode("utf-32"),
        "a UTF-8 byte order mark": b"\xef\xbb\xbf" + ping.encode(),
        "Latin-1": json.dumps(rpc("tools/call", {"name": "caf\u00e9"}), ensure_ascii=False).encode("latin-1"),
        "a surrogate encoded in UTF-8": ping.encode().replace(b'"ping"', b'"ping\xed\xa0\x80"'),
    }
    for what, body in bodies.items():
        response = _post(live_url, key, body)
        assert response.status_code == 400, what
        assert response.headers["Content-Type"] == "application/json", what
        answer = response.json()
        assert answer["jsonrpc"] == "2.0" and answer["id"] is None and answer["error"]["code"] == -32700, what
    # the same message in strict JSON is served
    assert _post(live_url, key, ping.encode()).json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert AuditEvent.objects.for_tenant(mallory.tenant).count() == 0


def test_a_post_that_is_not_application_json_is_unsupported_media_type(
    live_url: str, alice: Person, mallory: Person
) -> None:
    key = key_for(alice, ["read"])
    ping = json.dumps(rpc("ping")).encode()
    for content_type in (
        None,
        "",
        "text/plain",
        "text/plain; charset=utf-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonx",
        "application/json; charset=utf-16",
    ):
        response = _post(live_url, key, ping, content_type=content_type)
        assert response.status_code == 415, content_type
        assert response.json() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32600, "message": "Unsupported Media Type: Content-Type must be application/json"},
        }, content_type
    for content_type in ("application/json", "application/json; charset=utf-8", "Application/JSON;charset=UTF-8"):
        assert _post(live_url, key, ping, content_type=content_type).status_code == 200, content_type
    # an Accept that leaves JSON out is refused in JSON-RPC's shape as well
    refused = _post(live_url, key, ping, Accept="text/html")
    assert refused.status_code == 406 and refused.json()["error"]["code"] == -32600


def test_a_tool_refusal_carries_the_error_shape_as_structured_content(
    live_url: str, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    theirs = _mail(mallory, tmp_path, "Mallory's ledger")
    ours = _mail(alice, tmp_path, "Alice's ledger")
    key = key_for(alice, ["read"])
    listed = _post(live_url, key, json.dumps(rpc("tools/list")).encode()).json()["result"]["tools"]
    # some clients check structured content against the output schema even when isError is set
    schema = Draft202012Validator({t["name"]: t for t in listed}["get_message"]["outputSchema"])
    for arguments, code in (({"message_id": theirs}, "NOT_FOUND"), ({"message_id": []}, "INVALID_INPUT")):
        result = _call(live_url, key, "get_message", arguments).json()["result"]
        assert result["isError"] is True and result["structuredContent"]["error"]["code"] == code
        # the same object as the text block holds, as a success's structured content is its text
        assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
        assert "ledger" not in json.dumps(result) and schema.is_valid(result["structuredContent"])
    served = _call(live_url, key, "get_message", {"message_id": ours}).json()["result"]
    assert served["isError"] is False and schema.is_valid(served["structuredContent"])
    assert not schema.is_valid({}) and not schema.is_valid({"error": "a string is no refusal"})
    written = _call(live_url, key, "mark_read", {"message_ids": [theirs]}).json()["result"]
    assert written["isError"] is True and written["structuredContent"]["error"]["missing_scope"] == "write"


def test_what_the_caller_made_up_is_never_repeated_or_audited(
    live_url: str, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    _mail(alice, tmp_path, "Alice's invoice")
    key = key_for(alice, ["read"])
    answers = [
        # an argument the operation does not take: not named in the message, nor as the field
        _call(live_url, key, "status", {CHOSEN: 1}),
        _call(live_url, key, "list_messages", {"limit": 5, CHOSEN: {"deep": [CHOSEN]}}),
        # a value of the wrong kind under an unknown argument, nested deeper than any operation takes
        _call(live_url, key, "status", {CHOSEN: json.loads("[" * 40 + "1" + "]" * 40)}),
        # a tool that does not exist: the same answer as any tool not offered
        _call(live_url, key, CHOSEN, {}),
        _call(live_url, key, f"{CHOSEN}\u202e<script>", {}),
        # protocol versions of the caller's choosing, in both eras
        _post(live_url, key, json.dumps(rpc("tools/list")).encode(), **{"MCP-Protocol-Version": CHOSEN}),
        _post(
            live_url,
            key,
            json.dumps(
                rpc(
                    "server/discover",
                    {
                        "_meta": {
                            "io.modelcontextprotocol/protocolVersion": CHOSEN,
                            "io.modelcontextprotocol/clientCapabilities": {},
                        }
                    },
                )
            ).encode(),
            **{"MCP-Protocol-Version": CHOSEN, "Mcp-Method": "server/discover"},
        ),
    ]
    for response in answers:
        assert response.status_code in {200, 400}, response.text[:300]
        assert "zq" not in response.text, response.text[:300]
    unknown = answers[0].json()["result"]["structuredContent"]["error"]
    message = "an unknown argument was sent, not a field of this operation"
    assert unknown == {"code": "INVALID_INPUT", "message": message}
    assert answers[3].json()["result"]["structuredContent"]["error"]["code"] == "NOT_AVAILABLE"
    assert answers[3].json() == answers[4].json()
    version = answers[5].json()["error"]
    assert version["code"] == -32022 and LEGACY in version["data"]["supported"] and "requested" not in version["data"]
    assert answers[6].json()["error"]["code"] == -32022
    # inside an argument the schema knows, the refusal names that argument, and only it
    writer = key_for(alice, ["read", "write"])
    nested = _call(
        live_url,
        writer,
        "create_draft",
        {"account_id": str(uuid.uuid4()), "attachments": [{"filename": "a.txt", CHOSEN: "1"}]},
    )
    assert nested.json()["result"]["structuredContent"]["error"] == {
        "code": "INVALID_INPUT",
        "message": "attachments.0: holds an unknown argument, not a field of this operation",
        "field": "attachments.0",
    }
    # the audit records the refusals, by the operation's name or as an unknown one: never the caller's text
    events = _audited(alice)
    assert events and not [e for e in events if "zq" in e]
    assert AuditEvent.objects.for_tenant(alice.tenant).filter(operation="(unknown operation)").count() == 2
    assert AuditEvent.objects.for_tenant(mallory.tenant).count() == 0


def test_at_the_rest_door_a_repeated_key_or_an_unknown_argument_is_refused_without_a_word_of_it(
    live_url: str, alice: Person, mallory: Person
) -> None:
    browser = Client()
    browser.force_login(alice.user)
    token = get_random_string(CSRF_SECRET_LENGTH, CSRF_ALLOWED_CHARS)
    cookies = {
        settings.SESSION_COOKIE_NAME: browser.cookies[settings.SESSION_COOKIE_NAME].value,
        settings.CSRF_COOKIE_NAME: token,
    }
    headers = {"X-CSRFToken": token, "Content-Type": "application/json"}
    with httpx2.Client(base_url=live_url, cookies=cookies, headers=headers, timeout=30) as http:
        served = http.post("/api/v1/ops/list_messages", content=b'{"limit": 1}')
        assert served.status_code == 200, served.text[:300]
        for body in (b'{"limit": 1, "limit": 2}', '{"limit": 1}'.encode("utf-16"), b'{"zq_chosen": 1}'):
            refused = http.post("/api/v1/ops/list_messages", content=body)
            assert refused.status_code == 400 and refused.json()["error"]["code"] == "INVALID_INPUT", body
            assert "zq" not in refused.text and "field" not in refused.json()["error"]
