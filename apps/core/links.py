"""Absolute URLs of this service, all by one rule (public_origin).

Handlers never see a request, yet the links they hand out (an approval page, an invitation) must point
where the person reached this service. RequestOriginMiddleware remembers the request being served for the
length of its response, so public_origin() can use it without anyone passing it along.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

from django.conf import settings
from django.http import HttpRequest, HttpResponse

_serving: ContextVar[HttpRequest | None] = ContextVar("oaken_serving_request", default=None)

# a server listening on every address is reached on loopback from the same machine
_WILDCARD_BINDS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104


def public_origin(request: HttpRequest | None = None) -> str:
    """scheme://host[:port] of this service: OAKEN_PUBLIC_URL when set, else the origin of `request` (or of
    the request being served), else (no request, e.g. a Celery task) http://<OAKEN_BIND>:<OAKEN_PORT>."""
    if settings.PUBLIC_URL:
        return str(settings.PUBLIC_URL)
    request = request if request is not None else _serving.get()
    if request is not None:
        # the host already passed ALLOWED_HOSTS (CommonMiddleware asked for it first)
        return f"{request.scheme}://{request.get_host()}"
    host = _WILDCARD_BINDS.get(settings.SERVE_BIND, settings.SERVE_BIND)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{settings.SERVE_PORT}"


# the protected resources Oaken's tokens are for, each named by its canonical URL: the MCP endpoint (mcp_resource)
# and the REST API (api_resource); a token is bound to one of them and accepted only there
MCP_PATH = "/mcp"
API_PATH = "/api/v1"


def mcp_resource(request: HttpRequest | None = None) -> str:
    """The canonical /mcp URL (RFC 8707 resource indicator, RFC 9728 `resource`): no trailing slash."""
    return public_origin(request) + MCP_PATH


def api_resource(request: HttpRequest | None = None) -> str:
    """The canonical REST API URL, /api/v1 (RFC 8707 resource indicator, RFC 9728 `resource`): no trailing slash."""
    return public_origin(request) + API_PATH


def absolute_url(path: str, request: HttpRequest | None = None) -> str:
    """`path` (starting with /) on this service's public origin."""
    if not path.startswith("/"):
        raise ValueError("an absolute URL is built from a path that starts with /")
    return public_origin(request) + path


class RequestOriginMiddleware:
    """Makes the request being served the origin public_origin() falls back to, until its response is made."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = _serving.set(request)
        try:
            return self.get_response(request)
        finally:
            _serving.reset(token)
