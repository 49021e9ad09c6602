"""The one protected resource Oaken's tokens are for: the MCP endpoint, named by its canonical URL."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.http import HttpRequest

MCP_PATH = "/mcp"


def public_origin(request: HttpRequest) -> str:
    """scheme://host[:port] of this service: OAKEN_PUBLIC_URL when set, else the request's own host."""
    return settings.OAUTH_ORIGIN or f"{request.scheme}://{request.get_host()}"


def mcp_resource(request: HttpRequest) -> str:
    """The canonical /mcp URL (RFC 8707 resource indicator, RFC 9728 `resource`): no trailing slash."""
    return public_origin(request) + MCP_PATH


def origin_of(headers: Mapping[str, Any]) -> str:
    """This service's origin from the toolkit's copy of a request's META (the token endpoint's), or
    OAKEN_PUBLIC_URL. The host already passed Django's ALLOWED_HOSTS check on its way in."""
    if settings.OAUTH_ORIGIN:
        return str(settings.OAUTH_ORIGIN)
    scheme = "https" if headers.get("X_DJANGO_OAUTH_TOOLKIT_SECURE") else "http"
    forwarded = headers.get("HTTP_X_FORWARDED_HOST") if settings.USE_X_FORWARDED_HOST else None
    host = (forwarded or headers.get("HTTP_HOST") or "").split(",")[0].strip()
    if not host:  # as Django's get_host(): the server's name, and its port unless it is the scheme's own
        port = str(headers.get("SERVER_PORT", ""))
        host = str(headers.get("SERVER_NAME", "")) + (f":{port}" if port not in {"", "80", "443"} else "")
    return f"{scheme}://{host}"


def canonical_resources(values: list[str], origin: str) -> list[str] | None:
    """The requested resource indicators mapped onto ours, or None when any names another resource.

    Clients differ in what they send for the one resource this server has: the /mcp URL with or without a
    trailing slash, or the bare origin (from the root metadata document); all mean /mcp. Nothing requested
    binds the token to /mcp all the same, so no token is ever unbound.
    """
    ours = {origin, origin + "/", origin + MCP_PATH, origin + MCP_PATH + "/"}
    if any(value not in ours for value in values):
        return None
    return [origin + MCP_PATH]
