"""MCP wire facts the door needs: versions of both eras, JSON-RPC codes, envelope keys and headers."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

# The initialize-handshake era and the per-request-envelope era, served on one endpoint.
HANDSHAKE_VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
SUPPORTED_VERSIONS = (*HANDSHAKE_VERSIONS, *MODERN_VERSIONS)
LATEST_HANDSHAKE = HANDSHAKE_VERSIONS[-1]
# a handshake-era request without the version header is 2025-03-26 (specification, "Protocol Version Header")
ASSUMED_VERSION = "2025-03-26"

PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"

VERSION_HEADER = "MCP-Protocol-Version"
METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
HEADER_MISMATCH = -32020
UNSUPPORTED_PROTOCOL_VERSION = -32022

# JSON-RPC errors that are the client's fault carry an HTTP status of their own
HTTP_STATUS_OF = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}

NAME_BEARING = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

_B64 = re.compile(r"=\?base64\?(?P<payload>[A-Za-z0-9+/]*={0,2})\?=")


class RpcError(Exception):
    """A JSON-RPC error answer: code, message, optional data (never quoting what was sent)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    def body(self, request_id: Any) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return {"jsonrpc": "2.0", "id": request_id, "error": error}


def unsupported() -> RpcError:
    """The version asked for is not served: the ones that are, never the one sent (it is the caller's own text)."""
    return RpcError(
        UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version", {"supported": list(SUPPORTED_VERSIONS)}
    )


def header_value(raw: str | None) -> str | None:
    """An Mcp-* header as sent: verbatim, or the UTF-8 inside a `=?base64?…?=` sentinel (None when malformed)."""
    if raw is None:
        return None
    match = _B64.fullmatch(raw)
    if match is None:
        return raw
    try:
        return base64.b64decode(match["payload"], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def modern_envelope(body: dict[str, Any], headers: Any) -> str:
    """Check a 2026-era request's `_meta` envelope against its headers; its protocol version."""
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict) or PROTOCOL_VERSION_META not in meta or CLIENT_CAPABILITIES_META not in meta:
        raise RpcError(INVALID_PARAMS, f"params._meta must carry {PROTOCOL_VERSION_META} and the capabilities")
    version = meta[PROTOCOL_VERSION_META]
    if headers.get(VERSION_HEADER) is None or headers.get(VERSION_HEADER) != version:
        raise RpcError(HEADER_MISMATCH, f"the {VERSION_HEADER} header does not match params._meta")
    method = body.get("method")
    if headers.get(METHOD_HEADER) != method:
        raise RpcError(HEADER_MISMATCH, f"the {METHOD_HEADER} header does not match the method")
    name_key = NAME_BEARING.get(str(method))
    named = params.get(name_key) if name_key is not None and isinstance(params, dict) else None
    if named is not None and header_value(headers.get(NAME_HEADER)) != named:
        raise RpcError(HEADER_MISMATCH, f"the {NAME_HEADER} header does not match params.{name_key}")
    if version not in MODERN_VERSIONS:
        raise unsupported()
    return str(version)


def is_modern(body: dict[str, Any]) -> bool:
    """A request of the per-request-envelope era: server/discover, or a `_meta` naming a protocol version."""
    if body.get("method") == "server/discover":
        return True
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_META in meta
