"""The MCP door: Streamable HTTP at /mcp, both protocol eras on one endpoint, every tool call through `dispatch`.

Stateless by design (SPEC §19): no session id, nothing kept in the web process between requests; each POST
carries its bearer credential and, in the 2026 era, its own protocol envelope. Answers are JSON; GET offers
no stream (405). Anything a repeated call needs comes back signed in the 2026 era's `requestState`
(`apps.mcp.elicitation`).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from apps.agents.bearer import caller_for_bearer, presented, rate_limited
from apps.core.callers import Caller
from apps.core.errors import OakenError, error_response, wrong_method_response
from apps.core.kinds import Door
from apps.core.links import mcp_resource, public_origin
from apps.gate import payload, waiting
from apps.gate.dispatch import Result, audit_refusal, dispatch
from apps.mcp import elicitation, tools
from apps.mcp import protocol as p
from apps.operations.defs.reference import SECURITY_RULES
from apps.operations.exposure import offered_operations
from apps.operations.registry import Operation, registry

SERVER_INFO = {"name": "oaken", "title": "Oaken mail workspace", "version": "0.1.0"}
INSTRUCTIONS = (
    "Oaken gives you tools to work in the user's mail. You can never do more than the user allowed: tools you "
    "may not use are not listed, changes that need it come back as a proposal with a confirmation token, and "
    "sending needs a person's approval. Call get_reference with topic 'security' for the full rules.\n\n"
    + SECURITY_RULES
)
CHALLENGE_SCOPE = "read write send"
# listChanged is false, honestly: the door is stateless (no session, no GET stream, nothing kept between POSTs), so
# it has no channel on which to send notifications/tools/list_changed when exposure, a tool set or a revocation
# changes what a credential may call. What stands in for it: a client never keeps a list (the 2026 era's answer says
# ttlMs 0, cacheScope private), and a tool no longer offered answers NOT_AVAILABLE, so the next tools/list is right.
CAPABILITIES = {"tools": {"listChanged": False}}


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> HttpResponse:
    response = HttpResponse(tools.dump_bytes(body), status=status, content_type="application/json")
    for name, value in (headers or {}).items():
        response[name] = value
    response["Cache-Control"] = "no-store"
    return response


def _refused(error: OakenError, status: int | None = None, headers: dict[str, str] | None = None) -> HttpResponse:
    """A refusal before any JSON-RPC message was read, in the one error shape; like every answer here, not kept."""
    return error_response(error, status, {**(headers or {}), "Cache-Control": "no-store"})


def _challenge(
    request: HttpRequest, *, error: str | None, status: int = 401, scope: str = CHALLENGE_SCOPE, description: str = ""
) -> HttpResponse:
    metadata = public_origin(request) + "/.well-known/oauth-protected-resource/mcp"
    parts = [f'resource_metadata="{metadata}"', f'scope="{scope}"']
    if error:
        parts.insert(0, f'error="{error}"')
    if description:
        parts.append(f'error_description="{description}"')
    code = "UNAUTHENTICATED" if status == 401 else "INSUFFICIENT_SCOPE"
    refusal = OakenError(code, description or "a bearer credential is required")
    return _refused(refusal, status, {"WWW-Authenticate": "Bearer " + ", ".join(parts)})


def _caller(request: HttpRequest) -> Caller | None:
    """The agent a bearer credential stands for here: an API key, or an OAuth token issued for /mcp."""
    credential = presented(request.headers.get("Authorization"))
    return None if credential is None else caller_for_bearer(credential, mcp_resource(request))


def _origin_refused(request: HttpRequest) -> bool:
    """A browser's Origin that cannot be right (DNS rebinding defence): malformed, opaque, or not allowed."""
    origin = request.headers.get("Origin")
    if origin is None:
        return False
    parts = urlsplit(origin)
    if parts.scheme not in {"http", "https"} or not parts.netloc or parts.path not in {"", "/"}:
        return True
    allowed = settings.MCP_ALLOWED_ORIGINS
    return "*" not in allowed and origin.rstrip("/") not in allowed and origin.rstrip("/") != public_origin(request)


@csrf_exempt
def endpoint(request: HttpRequest) -> HttpResponse:
    if request.method == "OPTIONS":  # CORS preflight: answered by the CORS middleware
        return HttpResponse(status=204)
    if request.method != "POST":
        # no stream is offered: POST JSON-RPC messages
        return wrong_method_response({"Cache-Control": "no-store"})
    if _origin_refused(request):
        return _refused(OakenError("FORBIDDEN", "this Origin may not call the endpoint"))
    if "token=" in request.META.get("QUERY_STRING", "") or "access_token" in request.GET:
        return _refused(OakenError.invalid("", "credentials go in the Authorization header, never in the URL"))
    caller = _caller(request)
    if caller is None:
        presented = bool(request.headers.get("Authorization"))
        return _challenge(
            request,
            error="invalid_token" if presented else None,
            description="the credential is unknown, expired or revoked" if presented else "",
        )
    wait = rate_limited(caller)  # one budget per credential, over /mcp and the REST API together
    if wait is not None:
        return _refused(OakenError("RATE_LIMITED", "too many requests for this credential", retry_after=wait))
    accept = request.headers.get("Accept", "*/*")
    if not any(kind in accept for kind in ("application/json", "*/*", "application/*")):
        wrong = p.RpcError(p.INVALID_REQUEST, "Not Acceptable: the Accept header must allow application/json")
        return _rpc_error(None, wrong, status=406)
    if not _json_content_type(request.META.get("CONTENT_TYPE")):
        # a POST carries one JSON-RPC message as application/json (Streamable HTTP transport), in UTF-8
        wrong = p.RpcError(p.INVALID_REQUEST, "Unsupported Media Type: Content-Type must be application/json")
        return _rpc_error(None, wrong, status=415)
    try:
        body = payload.loads(payload.read_body(request, request.META))
    except payload.BodyTooLargeError as refused:
        return _refused(refused, 413)
    except payload.TooManyItemsError as refused:
        return _too_many_items(refused)
    except OakenError as refused:  # more objects and arrays than any call holds: refused before parsing
        return _rpc_error(None, p.RpcError(p.PARSE_ERROR, refused.message))
    except payload.NotStrictJsonError as refused:  # not UTF-8, or a key repeated in one object
        return _rpc_error(None, p.RpcError(p.PARSE_ERROR, f"the body is not strict JSON: {refused}"))
    except (ValueError, RecursionError):  # not JSON, NaN/Infinity, numbers too long, nesting too deep
        return _rpc_error(None, p.RpcError(p.PARSE_ERROR, "the body is not JSON"))
    request_id = body.get("id") if isinstance(body, dict) else None
    if not _valid_id(request_id):
        request_id = None
    if (
        not isinstance(body, dict)
        or body.get("jsonrpc") != "2.0"
        or not isinstance(body.get("method"), str)
        or not _valid_id(body.get("id"))
    ):
        return _rpc_error(request_id, p.RpcError(p.INVALID_REQUEST, "send one JSON-RPC 2.0 request or notification"))
    try:
        modern = p.is_modern(body)
        version = p.modern_envelope(body, request.headers) if modern else _handshake_version(request, body)
        if "id" not in body:  # a notification: accepted, nothing to answer
            return HttpResponse(status=202)
        result = _answer(request, caller, body, version, modern)
    except p.RpcError as error:
        return _rpc_error(request_id, error)
    if isinstance(result, HttpResponse):
        return result
    if modern:
        result.setdefault("resultType", "complete")
    return _json({"jsonrpc": "2.0", "id": request_id, "result": result})


_ARGUMENTS = ("params", "arguments")


def _too_many_items(refused: payload.TooManyItemsError) -> HttpResponse:
    """An array of more items than any call takes (or a body of more in all), refused before the body was
    parsed in full: a JSON-RPC error carrying the one error shape, naming a tool's argument as the gate would
    (`message_ids`), under the request's id when the part read holds one."""
    document = refused.document
    request_id = document.get("id") if isinstance(document, dict) else None
    in_params = refused.path[:1] == _ARGUMENTS[:1]
    named = refused.within(_ARGUMENTS)
    error = p.RpcError(p.INVALID_PARAMS if in_params else p.INVALID_REQUEST, named.message, {"error": named.as_dict()})
    return _rpc_error(request_id if _valid_id(request_id) else None, error)


def _valid_id(value: Any) -> bool:
    """JSON-RPC ids are strings, integers or null (a float's equality is unreliable; objects are no ids)."""
    return value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _rpc_error(request_id: Any, error: p.RpcError, status: int | None = None) -> HttpResponse:
    return _json(error.body(request_id), status or p.HTTP_STATUS_OF.get(error.code, 200))


def _json_content_type(header: str | None) -> bool:
    """Whether a Content-Type is application/json, in UTF-8 if it names a charset at all (JSON has no other)."""
    kind, *parameters = (header or "").split(";")
    if kind.strip().lower() != "application/json":
        return False
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in {"utf-8", "utf8"}:
            return False
    return True


def _handshake_version(request: HttpRequest, body: dict[str, Any]) -> str:
    if body.get("method") == "initialize":
        return p.LATEST_HANDSHAKE
    version = request.headers.get(p.VERSION_HEADER) or p.ASSUMED_VERSION
    if version not in p.HANDSHAKE_VERSIONS:
        raise p.unsupported()
    return version


def _params(body: dict[str, Any]) -> dict[str, Any]:
    params = body.get("params", {})
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise p.RpcError(p.INVALID_PARAMS, "params must be an object")
    return params


def _answer(
    request: HttpRequest, caller: Caller, body: dict[str, Any], version: str, modern: bool
) -> dict[str, Any] | HttpResponse:
    method, params = body["method"], _params(body)
    capabilities = CAPABILITIES
    if method == "initialize" and not modern:
        offered = params.get("protocolVersion")
        chosen = offered if offered in p.HANDSHAKE_VERSIONS else p.LATEST_HANDSHAKE
        return {
            "protocolVersion": chosen,
            "capabilities": capabilities,
            "serverInfo": SERVER_INFO,
            "instructions": INSTRUCTIONS,
        }
    if method == "server/discover":
        return {
            "supportedVersions": list(p.SUPPORTED_VERSIONS),
            "capabilities": capabilities,
            "instructions": INSTRUCTIONS,
            "cacheScope": "private",
            "ttlMs": 0,
            "_meta": {p.SERVER_INFO_META: SERVER_INFO},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        listed = {"tools": [tools.tool(op) for op in sorted(offered_operations(caller), key=lambda op: op.name)]}
        # what a credential may use changes with exposure settings and revocation: never reuse a list
        return {**listed, "cacheScope": "private", "ttlMs": 0} if modern else listed
    if method == "tools/call":
        return _call_tool(request, caller, params, modern)
    raise p.RpcError(p.METHOD_NOT_FOUND, "method not found")


def _call_tool(
    request: HttpRequest, caller: Caller, params: dict[str, Any], modern: bool
) -> dict[str, Any] | HttpResponse:
    name, arguments = params.get("name"), params.get("arguments", {})
    if arguments is None:
        arguments = {}
    if not isinstance(name, str) or not isinstance(arguments, dict):
        raise p.RpcError(p.INVALID_PARAMS, "tools/call needs a tool name and an arguments object")
    as_sent, arguments = arguments, dict(arguments)
    op = registry.get(name)
    if modern and params.get("requestState") is not None:
        # the repeat of a call answered with input_required: read the request it made, never make another
        try:
            request_id = elicitation.resumed_request(caller, name, as_sent, params)
        except p.RpcError:
            audit_refusal(caller, Door.MCP, name, "INVALID_INPUT")
            raise
        answer = _through_gate(request, caller, op, elicitation.READ_BACK, {"request_id": request_id})
    else:
        token, key = arguments.pop("confirmation_token", None), None
        if op is not None and not op.idempotent_input:
            key = arguments.pop("idempotency_key", None)
        for field, value in (("confirmation_token", token), ("idempotency_key", key)):
            if value is not None and not isinstance(value, str):
                return tools.refusal(OakenError.invalid(field, "must be a string"))
        start, since = waiting.began(request.META), time.monotonic()

        def call() -> Result | dict[str, Any] | HttpResponse:
            return _through_gate(request, caller, op, name, arguments, token, key, began=start)

        answer = waiting.settle(request.META, op, call(), call, since=since, start=start)
        if isinstance(answer, HttpResponse):
            return answer
        if modern and isinstance(answer, Result) and op is not None:
            url = elicitation.waiting_approval_url(op, answer.output)
            if url is not None and elicitation.url_supported(params):
                return elicitation.input_required(caller, name, as_sent, answer.output, url)
    if not isinstance(answer, Result):
        return answer
    assert op is not None
    return tools.success(op, answer.output)


def _through_gate(
    request: HttpRequest,
    caller: Caller,
    op: Operation | None,
    name: str,
    arguments: dict[str, Any],
    token: str | None = None,
    key: str | None = None,
    began: datetime | None = None,
) -> Result | dict[str, Any] | HttpResponse:
    """One dispatch: its result, or the refusal as a tool result of `op`, or an OAuth step-up challenge."""
    try:
        return dispatch(caller, Door.MCP, name, arguments, confirmation_token=token, idempotency_key=key, began=began)
    except OakenError as error:
        if error.code == "INSUFFICIENT_SCOPE" and caller.credential_kind == "oauth" and error.missing_scope:
            wanted = " ".join(sorted(caller.scopes | {error.missing_scope}))
            return _challenge(
                request,
                error="insufficient_scope",
                status=403,
                scope=wanted,
                description=f"this needs the {error.missing_scope} scope",
            )
        return tools.refusal(error, op)
