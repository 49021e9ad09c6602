"""The one protected resource Oaken's tokens are for: the MCP endpoint, named by its canonical URL."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest

MCP_PATH = "/mcp"


def public_origin(request: HttpRequest) -> str:
    """scheme://host[:port] of this service: OAKEN_PUBLIC_URL when set, else the request's own host."""
    return settings.OAUTH_ORIGIN or f"{request.scheme}://{request.get_host()}"


def mcp_resource(request: HttpRequest) -> str:
    """The canonical /mcp URL (RFC 8707 resource indicator, RFC 9728 `resource`): no trailing slash."""
    return public_origin(request) + MCP_PATH


def origin_of(uri: str) -> str:
    """This service's origin as seen in a request URI (the token endpoint's), or OAKEN_PUBLIC_URL."""
    parts = urlsplit(uri)
    return settings.OAUTH_ORIGIN or f"{parts.scheme}://{parts.netloc}"


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
