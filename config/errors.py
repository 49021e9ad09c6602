"""What escaped every view, answered by its kind: the database away (a restart, a failover) is 503
SERVICE_UNAVAILABLE, as the gate answers it, and the next request connects again; anything else is the 500. What
Django refuses before or instead of a view (a Host not in ALLOWED_HOSTS, a path no view serves, a denied request, a
method a view does not take) is its 400, 404, 403 or 405.

One rule says who gets what, for every status: a path under a JSON door (JSON_DOORS: REST and the OpenAPI
document under /api/, MCP, the OAuth endpoints, the discovery documents) is answered in the one error shape, as
JSON; every other path (the console, the sign-in pages, the consent page) gets the console's page. Nothing of the
exception or of the request is shown."""

from __future__ import annotations

import sys
from typing import Any
from urllib.parse import urlsplit

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.views import defaults
from django.views.debug import SafeExceptionReporterFilter

from apps.core.errors import OakenError, error_response

_DATABASE_AWAY = (OperationalError, InterfaceError)
# the paths of the doors that speak JSON (and /mcp itself, the MCP endpoint)
JSON_DOORS = ("/api/", "/mcp/", "/oauth/", "/.well-known/")
_PAGES = ("/oauth/authorize/",)  # the consent page is a page
RETRY_AFTER_SECONDS = 5

# the error-shape code of each status a refusal made outside the gate may have (anything else is INTERNAL_ERROR)
_CODES = {
    400: "INVALID_INPUT", 401: "UNAUTHENTICATED", 403: "FORBIDDEN", 404: "NOT_FOUND", 405: "INVALID_INPUT",
    413: "LIMIT_EXCEEDED", 414: "LIMIT_EXCEEDED", 417: "INVALID_INPUT", 429: "RATE_LIMITED", 431: "LIMIT_EXCEEDED",
    501: "INVALID_INPUT", 503: "SERVICE_UNAVAILABLE",
}  # fmt: skip
_MESSAGES = {
    400: "the request could not be understood",
    401: "sign in first",
    403: "this request is not allowed",
    404: "nothing is served at this path",
    405: "method not allowed: the Allow header names the ones taken",
    413: "the request is too large",
    414: "the request's address is too long",
    417: "the request's expectation cannot be met",
    429: "too many requests; try again later",
    431: "the request's headers are too large",
    501: "the request's transfer coding is not supported",
    503: "the service cannot answer right now; try again shortly",
}


def speaks_json(path: str) -> bool:
    """Whether `path` is under a door that answers in JSON (the one rule, for every status)."""
    return (path == "/mcp" or path.startswith(JSON_DOORS)) and not path.startswith(_PAGES)


def _speaks_json(request: HttpRequest) -> bool:
    return speaks_json(request.path)


def refusal(status: int) -> OakenError:
    """The error shape of a refusal made outside the gate (by Django, DRF or the web server), from its status
    alone: a fixed message, nothing of the request."""
    code = _CODES.get(status, "INTERNAL_ERROR")
    return OakenError(code, _MESSAGES.get(status, "the request failed"))


def _shaped(status: int) -> HttpResponse:
    return error_response(refusal(status), status)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler400: a request Django will not serve (a Host not in ALLOWED_HOSTS, a malformed one)."""
    return _shaped(400) if _speaks_json(request) else defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler403."""
    return _shaped(403) if _speaks_json(request) else defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404: a path no view serves."""
    return _shaped(404) if _speaks_json(request) else defaults.page_not_found(request, exception)


class JsonDoorAnswers:
    """Middleware: an error answered on a JSON door's path that is not JSON (Django's bare 405 from a view that does
    not take the method, its HTML 400 for a Host refused by CommonMiddleware, DRF's or a library's plain pages)
    is replaced by the error shape for its status; its other headers (Allow, Retry-After, Vary) are kept."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response: HttpResponse = self.get_response(request)
        if response.status_code < 400 or not _speaks_json(request):
            return response
        kind = response.get("Content-Type", "").split(";")[0].strip().lower()
        if kind == "application/json" or kind.endswith("+json"):
            return response
        shaped = _shaped(response.status_code)
        for header, value in response.items():
            if header.lower() not in {"content-type", "content-length"}:
                shaped[header] = value
        shaped.cookies = response.cookies
        return shaped


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: 503 in the error shape (or a page) while the database is away; else INTERNAL_ERROR."""
    away = isinstance(sys.exc_info()[1], _DATABASE_AWAY)
    if away:
        error = OakenError("SERVICE_UNAVAILABLE", "the database cannot be reached right now; try again shortly")
    else:
        error = OakenError("INTERNAL_ERROR", "the request failed")
    response: HttpResponse
    if _speaks_json(request):
        response = error_response(error)
    elif away:
        # rendered without the request: its context would ask the database who is signed in, again
        response = HttpResponse(render_to_string("503.html"), status=503)
    else:
        return defaults.server_error(request)
    if away:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class ReporterFilter(SafeExceptionReporterFilter):
    """Django's filter of what an error report (OAKEN_DEBUG's page) shows, which also masks a password written in a
    URL: REDIS_URL and Celery's broker are settings Django's names do not hide, DATABASE_URL an environment
    variable that runserver puts in the request's META; both carry the embedded servers' passwords."""

    def cleanse_setting(self, key: Any, value: Any) -> Any:
        value = super().cleanse_setting(key, value)
        if isinstance(value, str) and "://" in value:
            try:
                password = urlsplit(value).password
            except ValueError:  # not a URL after all
                return value
            if password:
                return value.replace(f":{password}@", f":{self.cleansed_substitute}@")
        return value
