"""Malformed MCP, generated: hypothesis posts to the MCP door of the real server (gunicorn on loopback) what a
careless or hostile client sends: wrong JSON-RPC versions, missing and extra members, ids of every JSON type,
params of the wrong type, huge numbers, deep nesting, repeated keys, bytes that are not UTF-8, batches,
notifications, unknown methods and tools, random arguments for the real tools, and wrong or odd headers
(Content-Type, Accept, MCP-Protocol-Version, Mcp-Session-Id, the 2026 era's Mcp-Method and Mcp-Name).

Every answer is JSON-RPC in JSON (or the empty 202 of a notification), none is an internal error, none is a
server error, and nothing of another tenant's mail ever appears. Derandomized and bounded: the same few hundred
requests on every run, in well under a minute."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.audit.models import AuditEvent
from apps.mcp import protocol as p
from apps.operations.registry import registry
from tests.conftest import Person
from tests.test_mcp_door import _fresh_counters, key_for  # noqa: F401 (fixture)
from tests.test_mcp_strict import _mail

pytestmark = [pytest.mark.django_db(transaction=True)]

EXAMPLES = 300
THEIR_SUBJECT = "Mallory-only ledger 7f3c9e"  # in the other tenant's mail: it must never come back
TOOL_NAMES = sorted(op.name for op in registry if op.plugin is None)  # the same whatever plugins a run loaded
# hypothesis leans to the first of a list and to 0: the common case comes first, or at 0
METHODS = ["tools/call", "tools/list", "ping", "initialize", "server/discover", "notifications/initialized"]
INTERNAL_ERROR = -32603

_printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=24)
_header_text = _printable.map(str.strip)  # what a header can carry at all (HTTP trims the ends)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=24)
)
_json = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
)
_ids = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=16),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
_MISSING = object()


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(_MISSING), strategy)


def _mostly(draw: st.DrawFn, right: st.SearchStrategy[Any], wrong: st.SearchStrategy[Any]) -> Any:
    """Right four times in five: a request must get past the first check often enough to reach the later ones."""
    return draw(right) if draw(st.integers(0, 4)) < 4 else draw(wrong)  # hypothesis leans to 0: right


@st.composite
def _arguments(draw: st.DrawFn, ids: list[str], name: Any) -> Any:
    """Arguments for a tool: keys of its own schema (when it is a real one) with values of any type (real ids of
    both tenants among them), or an unknown key, or not an object at all."""
    op = registry.get(name) if isinstance(name, str) else None
    if op is None or draw(st.integers(0, 5)) == 5:
        return draw(_json)
    known = sorted(op.input_model.model_json_schema().get("properties", {}))
    keys = draw(st.lists(st.sampled_from(known or ["x"]) | st.text(max_size=12), max_size=4))
    values = st.one_of(_json, st.sampled_from(ids), st.lists(st.sampled_from(ids), max_size=3))
    return {key: draw(values) for key in keys}


@st.composite
def _message(draw: st.DrawFn, ids: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """One JSON-RPC-like message and the MCP headers that go with it (often right, sometimes not)."""
    message: dict[str, Any] = {}
    version = _mostly(draw, st.just("2.0"), _maybe(st.sampled_from(["1.0", "2", 2.0, None, ""])))
    if version is not _MISSING:
        message["jsonrpc"] = version
    # a missing id makes a notification
    request_id = _mostly(draw, st.one_of(st.integers(0, 2**31), st.text(max_size=8), st.just(_MISSING)), _ids)
    if request_id is not _MISSING:
        message["id"] = request_id
    method = _mostly(
        draw, st.sampled_from(METHODS), st.one_of(st.sampled_from(["resources/list", "tools/call "]), _printable)
    )
    message["method"] = method
    params: Any
    if method == "tools/call" and draw(st.integers(0, 3)) < 3:
        name = _mostly(draw, st.sampled_from(TOOL_NAMES), st.one_of(st.text(max_size=20), _json))
        params = {"name": name, "arguments": draw(_arguments(ids, name))}
    elif method == "initialize" and draw(st.integers(0, 3)) < 3:
        params = {
            "protocolVersion": draw(st.one_of(st.sampled_from(p.SUPPORTED_VERSIONS), _json)),
            "capabilities": draw(_json),
            "clientInfo": {"name": "fuzz", "version": "1"},
        }
    else:
        params = draw(_maybe(_json))
    modern = draw(st.integers(0, 3)) == 3
    if modern:
        params = params if isinstance(params, dict) else {}
        params["_meta"] = {
            p.PROTOCOL_VERSION_META: draw(st.sampled_from([*p.MODERN_VERSIONS, "2099-01-01"])),
            p.CLIENT_CAPABILITIES_META: draw(st.sampled_from([{}, {"elicitation": {"url": {}}}, "x"])),
        }
    if params is not _MISSING:
        message["params"] = params
    for extra in draw(st.lists(st.sampled_from(["result", "error", "extra", "Id", "METHOD"]), max_size=2)):
        message[extra] = draw(_json)
    headers: dict[str, str] = {}
    version_header = _mostly(
        draw,
        st.sampled_from([*p.HANDSHAKE_VERSIONS, None]),
        st.one_of(st.sampled_from([*p.MODERN_VERSIONS, "", "1999-01-01", "2025-11-25x"]), _header_text),
    )
    if modern and draw(st.integers(0, 3)) < 3:
        version_header = params["_meta"][p.PROTOCOL_VERSION_META]
        headers[p.METHOD_HEADER] = method.strip() if draw(st.integers(0, 3)) < 3 else draw(_header_text)
        name = params.get("name")
        if isinstance(name, str) and name.isascii() and name.isprintable() and name == name.strip():
            headers[p.NAME_HEADER] = name
    if version_header is not None:
        headers[p.VERSION_HEADER] = version_header
    if draw(st.integers(0, 4)) == 0:
        headers["Mcp-Session-Id"] = draw(_header_text)
    return message, headers


def _encode(draw: st.DrawFn, message: dict[str, Any]) -> bytes:
    """The message as bytes: usually plain JSON; sometimes not strict JSON, or not one message at all."""
    text = json.dumps(message)
    kind = draw(st.integers(0, 19)) - 12  # below 0 (hypothesis leans to it): plain JSON
    if kind == 0:  # a repeated key
        return ('{"method": "ping", ' + text[1:]).encode() if len(text) > 2 else b'{"a": 1, "a": 1}'
    if kind == 1:
        return text.encode(draw(st.sampled_from(["utf-16", "utf-16-be", "utf-32", "latin-1"])), errors="replace")
    if kind == 2:  # bytes that are not UTF-8, at the start, the end or in a string
        bad = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xef\xbb\xbf", b"\x00"]))
        return draw(st.sampled_from([bad + text.encode(), text.encode() + bad, text.encode().replace(b'"', bad, 1)]))
    if kind == 3:  # a batch
        return json.dumps(draw(st.sampled_from([[], [message], [message, message], [1, 2]]))).encode()
    if kind == 4:  # deep nesting, under and over every bound
        depth = draw(st.sampled_from([31, 33, 200, 2000, 25_000]))
        opening, closing = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        inner = opening * depth + "1" + closing * depth
        return (
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "status", "arguments": '
            '{"a": ' + inner + "}}}"
        ).encode()
    if kind == 5:  # numbers no parser agrees on
        number = draw(st.sampled_from(["1e999", "-1e999", "1" * 5000, "1" * 30, "-0", "1.0", "0x10", "NaN"]))
        return text.replace('"jsonrpc"', f'"n": {number}, "jsonrpc"', 1).encode()
    if kind == 6:  # not JSON, or JSON that is not an object
        return draw(st.sampled_from([b"", b"null", b"42", b'"ping"', b"{", b"{}", b"[]", text.encode()[:-1]]))
    if kind == 7:
        return draw(st.binary(max_size=64))
    return text.encode()


def _tool_call(draw: st.DrawFn, ids: list[str]) -> tuple[dict[str, str], bytes]:
    """A well-formed tools/call of a real tool (or now and then a made-up one) with generated arguments: what
    gets past the door's checks to the gate and the operations."""
    name = _mostly(draw, st.sampled_from(TOOL_NAMES), st.text(max_size=20))
    request_id = draw(st.one_of(st.integers(0, 2**31), st.text(max_size=8)))
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": draw(_arguments(ids, name))},
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        p.VERSION_HEADER: p.LATEST_HANDSHAKE,
    }
    return headers, json.dumps(message).encode()


@st.composite
def _request(draw: st.DrawFn, ids: list[str]) -> tuple[dict[str, str], bytes]:
    if draw(st.integers(0, 2)) == 0:
        return _tool_call(draw, ids)
    message, headers = draw(_message(ids))
    body = _encode(draw, message)
    content_type = _mostly(
        draw,
        st.sampled_from(["application/json", "application/json; charset=utf-8"]),
        st.sampled_from(["application/json; charset=utf-16", "text/plain", "application/x-www-form-urlencoded", None]),
    )
    if content_type is not None:
        headers["Content-Type"] = content_type
    accept = _mostly(
        draw,
        st.sampled_from(["application/json, text/event-stream", "application/json", "*/*", None]),
        st.sampled_from(["text/event-stream", "text/html", ""]),
    )
    if accept is not None:
        headers["Accept"] = accept
    return headers, body


def _json_rpc(answer: Any) -> bool:
    if not isinstance(answer, dict) or answer.get("jsonrpc") != "2.0" or "id" not in answer:
        return False
    if ("result" in answer) == ("error" in answer):
        return False
    if "error" in answer:
        error = answer["error"]
        return isinstance(error.get("code"), int) and isinstance(error.get("message"), str)
    return isinstance(answer["result"], dict)


@pytest.fixture
def fuzz_world(alice: Person, mallory: Person, tmp_path: Path) -> dict[str, Any]:
    ours = _mail(alice, tmp_path, "Alice's quarterly figures")
    theirs = _mail(mallory, tmp_path, THEIR_SUBJECT)
    keys = [key_for(alice, scopes) for scopes in (["read"], ["read", "write"], ["read", "write", "send"])]
    return {"ids": [ours, theirs, "not-an-id", "00000000-0000-0000-0000-000000000000"], "keys": keys}


def test_malformed_mcp_is_always_answered_in_json_rpc_and_never_as_a_server_error(
    live_url: str, fuzz_world: dict[str, Any], alice: Person, mallory: Person
) -> None:
    theirs_before = AuditEvent.objects.for_tenant(mallory.tenant).count()
    seen: dict[int | str, int] = {}
    sent_count = [0]
    began = time.monotonic()

    with httpx2.Client(base_url=live_url, timeout=60) as http:

        @settings(
            max_examples=EXAMPLES,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(request=_request(fuzz_world["ids"]))
        def probe(request: tuple[dict[str, str], bytes]) -> None:
            headers, body = request
            # three keys of the same tenant in turn: no key reaches its requests-per-minute bound
            key = fuzz_world["keys"][sent_count[0] % len(fuzz_world["keys"])]
            sent_count[0] += 1
            response = http.post("/mcp", content=body, headers={**headers, "Authorization": f"Bearer {key}"})
            seen[response.status_code] = seen.get(response.status_code, 0) + 1
            sent = body[:300]
            assert response.status_code < 500, (response.status_code, sent, response.text[:300])
            assert THEIR_SUBJECT not in response.text and "Mallory's tenant" not in response.text, sent
            if response.status_code == 202:  # a notification: accepted, nothing to answer
                assert response.content == b"", sent
                return
            assert response.headers["Content-Type"] == "application/json", (sent, response.headers)
            answer = response.json()
            assert _json_rpc(answer), (response.status_code, sent, answer)
            if "error" in answer:
                assert answer["error"]["code"] != INTERNAL_ERROR, (sent, answer)
                return
            result = answer["result"]
            if "isError" in result:
                seen["tool results"] = seen.get("tool results", 0) + 1
            if result.get("isError"):
                error = result["structuredContent"]["error"]
                assert error["code"] != "INTERNAL_ERROR", (sent, answer)
                assert json.loads(result["content"][0]["text"]) == result["structuredContent"]

        probe()

    took = time.monotonic() - began
    print(f"{sent_count[0]} malformed MCP requests in {took:.1f} s; answers: {seen}")
    assert sent_count[0] >= EXAMPLES
    # many kinds of answer were met, not one refusal over and over
    assert {200, 202, 400, 404, 406, 415, "tool results"} <= set(seen)
    assert AuditEvent.objects.for_tenant(mallory.tenant).count() == theirs_before
