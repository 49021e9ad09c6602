"""What escaped every view, answered by its kind: the database away (a restart, a failover) is 503
SERVICE_UNAVAILABLE, as the gate answers it, and the next request connects again; anything else is the 500. What
Django refuses before or instead of a view (a Host not allowed, a path no view serves, a denied request) is its
400, 404 or 403. The doors that speak JSON (REST, MCP, the OAuth endpoints) answer in the one error shape, people
get a page. Nothing of the exception or the request is shown."""

from __future__ import annotations

import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.views import defaults

from apps.core.errors import OakenError

_DATABASE_AWAY = (OperationalError, InterfaceError)
_JSON_PATHS = ("/api/", "/mcp", "/oauth/", "/.well-known/")
_PAGES = ("/oauth/authorize/",)  # the consent page is a page
RETRY_AFTER_SECONDS = 5


def _speaks_json(request: HttpRequest) -> bool:
    return request.path.startswith(_JSON_PATHS) and not request.path.startswith(_PAGES)


def _shaped(error: OakenError) -> HttpResponse:
    return JsonResponse({"error": error.as_dict()}, status=error.http_status)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler400: a request Django will not serve (a Host not in ALLOWED_HOSTS, a malformed one)."""
    if _speaks_json(request):
        return _shaped(
            OakenError.invalid(
                "", "the request could not be understood: a Host this service does not answer to, or malformed"
            )
        )
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler403."""
    if _speaks_json(request):
        return _shaped(OakenError("FORBIDDEN", "this request is not allowed"))
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404: a path no view serves."""
    if _speaks_json(request):
        return _shaped(OakenError("NOT_FOUND", "nothing is served at this path"))
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: 503 in the error shape (or a page) while the database is away; else INTERNAL_ERROR."""
    away = isinstance(sys.exc_info()[1], _DATABASE_AWAY)
    if away:
        error = OakenError("SERVICE_UNAVAILABLE", "the database cannot be reached right now; try again shortly")
    else:
        error = OakenError("INTERNAL_ERROR", "the request failed")
    response: HttpResponse
    if _speaks_json(request):
        response = _shaped(error)
    elif away:
        # rendered without the request: its context would ask the database who is signed in, again
        response = HttpResponse(render_to_string("503.html"), status=503)
    else:
        return defaults.server_error(request)
    if away:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response
