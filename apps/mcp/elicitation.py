"""URL elicitation for outbound approvals (SPEC §10): a client that supports it is asked to open the console page
where a person approves or rejects the request its agent just made.

Only the 2026-07-28 era can be served by this stateless door. There a client declares `elicitation.url` in every
request's `_meta`, and a server asks for input by *returning* an `InputRequiredResult` (multi round-trip
requests): the client shows the URL, then repeats the call with `inputResponses` and the `requestState` echoed.
The 2025 era declares capabilities only in `initialize`, which a server without sessions does not keep, and asks
either with a server-to-client request (no back channel here) or with the -32042 error, which says the call
failed; this one succeeded. Those clients keep getting the result with `approval_url` and `next`.

The outbound request exists (committed, idempotent) before the client is asked. The echoed state names it; the
repeat reads its current state through the gate (`get_outbound_request`) and never makes a second request. What
the client answers (accept, decline, cancel) changes nothing: only a signed-in person in the console decides.
"""

from __future__ import annotations

from typing import Any

from django.core import signing

from apps.audit.log import input_digest
from apps.core.bounds import bounds
from apps.core.callers import Caller
from apps.mcp import protocol as p
from apps.operations.registry import Operation

INPUT_KEY = "approve_outbound_request"  # the one inputRequests entry this door asks for
READ_BACK = "get_outbound_request"  # how the repeated call reads the request it names
_SALT = "oaken.mcp.request-state"
_VERSION = 1
_ACTIONS = {"accept", "decline", "cancel"}
_INVALID_STATE = "requestState is invalid or expired: repeat the call without it"


def url_supported(params: dict[str, Any]) -> bool:
    """Whether this 2026-era request's client declared URL-mode elicitation (`elicitation: {}` is form only)."""
    meta = params.get("_meta")
    capabilities = meta.get(p.CLIENT_CAPABILITIES_META) if isinstance(meta, dict) else None
    elicitation = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
    return isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict)


def waiting_approval_url(op: Operation, output: dict[str, Any]) -> str | None:
    """The console URL of an outbound request this call made, while it waits for a person (the operation
    declares that its result may name one)."""
    if not op.awaits_approval:
        return None
    url = output.get("approval_url")  # set exactly while the request waits for a person
    return url if isinstance(url, str) and url else None


def _digest(value: Any) -> str:
    return input_digest(value)[:32]


def _principal(caller: Caller) -> str:
    return _digest([caller.key, caller.credential_kind])


def _message(output: dict[str, Any]) -> str:
    count = output.get("recipients")
    to = f" to {count} recipient{'s' if count != 1 else ''}" if isinstance(count, int) else ""
    when = " at a later time" if output.get("send_at") else ""
    return (
        f"Your assistant asked Oaken to send an e-mail{to}{when}. Nothing is sent until you approve it: open "
        "the Oaken console, signed in as yourself, to approve or reject it."
    )


def input_required(
    caller: Caller, name: str, arguments: dict[str, Any], output: dict[str, Any], url: str
) -> dict[str, Any]:
    """An InputRequiredResult asking the client to open `url`; its state names the request for the repeat."""
    state = {
        "v": _VERSION,
        "tool": name,
        "args": _digest(arguments),
        "who": _principal(caller),
        "request": output["request_id"],
    }
    ask = {"method": "elicitation/create", "params": {"mode": "url", "message": _message(output), "url": url}}
    return {
        "resultType": "input_required",
        "inputRequests": {INPUT_KEY: ask},
        "requestState": signing.TimestampSigner(salt=_SALT).sign_object(state, compress=True),
    }


def resumed_request(caller: Caller, name: str, arguments: dict[str, Any], params: dict[str, Any]) -> str:
    """The request id a repeated call's `requestState` names, once it is proven this caller's, for this very call
    and recent; otherwise a JSON-RPC invalid-params error that never quotes what was sent."""
    responses = params.get("inputResponses")
    if responses is not None:
        answer = responses.get(INPUT_KEY) if isinstance(responses, dict) else None
        if not isinstance(responses, dict) or (
            answer is not None and not (isinstance(answer, dict) and answer.get("action") in _ACTIONS)
        ):
            raise p.RpcError(
                p.INVALID_PARAMS,
                f"inputResponses must map {INPUT_KEY} to an elicitation result (action accept, decline or cancel)",
            )
    token = params.get("requestState")
    if not isinstance(token, str):
        raise p.RpcError(p.INVALID_PARAMS, "requestState must be a string")
    try:
        state = signing.TimestampSigner(salt=_SALT).unsign_object(token, max_age=bounds.MCP_REQUEST_STATE_TTL_SECONDS)
    except (signing.BadSignature, ValueError, TypeError):  # tampered, expired, not ours, not JSON
        raise p.RpcError(p.INVALID_PARAMS, _INVALID_STATE) from None
    expected = {"v": _VERSION, "tool": name, "args": _digest(arguments), "who": _principal(caller)}
    if not isinstance(state, dict) or any(state.get(k) != v for k, v in expected.items()):
        raise p.RpcError(p.INVALID_PARAMS, _INVALID_STATE)
    request_id = state.get("request")
    if not isinstance(request_id, str):
        raise p.RpcError(p.INVALID_PARAMS, _INVALID_STATE)
    return request_id
