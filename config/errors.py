"""What escaped every view, answered by its kind: the database away (a restart, a failover) is 503
SERVICE_UNAVAILABLE, as the gate answers it, and the next request connects again; anything else is the 500. The
doors that speak JSON (REST, MCP, the OAuth endpoints) answer in the one error shape, people get a page. Nothing
of the exception is shown."""

from __future__ import annotations

import sys
from typing import Any
from urllib.parse import urlsplit

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.views import defaults
from django.views.debug import SafeExceptionReporterFilter

from apps.core.errors import OakenError

_DATABASE_AWAY = (OperationalError, InterfaceError)
_JSON_PATHS = ("/api/", "/mcp", "/oauth/", "/.well-known/")
_PAGES = ("/oauth/authorize/",)  # the consent page is a page
RETRY_AFTER_SECONDS = 5


def _speaks_json(request: HttpRequest) -> bool:
    return request.path.startswith(_JSON_PATHS) and not request.path.startswith(_PAGES)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: 503 in the error shape (or a page) while the database is away; else INTERNAL_ERROR."""
    away = isinstance(sys.exc_info()[1], _DATABASE_AWAY)
    if away:
        error = OakenError("SERVICE_UNAVAILABLE", "the database cannot be reached right now; try again shortly")
    else:
        error = OakenError("INTERNAL_ERROR", "the request failed")
    response: HttpResponse
    if _speaks_json(request):
        response = JsonResponse({"error": error.as_dict()}, status=error.http_status)
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
