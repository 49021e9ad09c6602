"""The Content-Security-Policy header: django-csp's middleware, with the policy it would build for a response
that brings nothing of its own built once per process instead of for every response.

django-csp builds the header from the settings on every response, report-only part included: 0.3 ms, about a
twentieth of an MCP call. Most answers (every API and MCP answer, most pages) use neither a nonce nor a view's
csp_update / csp_replace / csp_exempt, so their header is the same string every time. Those that do are
left to django-csp itself; a test holds both paths to the same header.
"""

from __future__ import annotations

import http.client
from functools import cache

from csp.constants import HEADER, HEADER_REPORT_ONLY
from csp.middleware import CheckableLazyObject
from csp.middleware import CSPMiddleware as BaseCSPMiddleware
from csp.utils import build_policy
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpRequest
from django.http.response import HttpResponseBase

# what a view sets on its response to change its own policy (django-csp's decorators)
_PER_RESPONSE = (
    "_csp_exempt",
    "_csp_exempt_ro",
    "_csp_config",
    "_csp_update",
    "_csp_replace",
    "_csp_config_ro",
    "_csp_update_ro",
    "_csp_replace_ro",
)
_DEBUG_PAGES = (http.client.INTERNAL_SERVER_ERROR, http.client.NOT_FOUND)


@cache
def _headers() -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(header, policy, excluded path prefixes) of the settings' own policies, report-only included."""
    made = []
    for header, name, report_only in (
        (HEADER, "CONTENT_SECURITY_POLICY", False),
        (HEADER_REPORT_ONLY, "CONTENT_SECURITY_POLICY_REPORT_ONLY", True),
    ):
        policy = build_policy(report_only=report_only)
        if policy:
            prefixes = tuple((getattr(settings, name, None) or {}).get("EXCLUDE_URL_PREFIXES") or ())
            made.append((header, policy, prefixes))
    return tuple(made)


@receiver(setting_changed)
def _forget(setting: str, **kwargs: object) -> None:
    if setting.startswith("CONTENT_SECURITY_POLICY"):
        _headers.cache_clear()


class CSPMiddleware(BaseCSPMiddleware):
    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if getattr(request, "_csp_nonce", None) is not None or any(
            getattr(response, name, None) is not None for name in _PER_RESPONSE
        ):
            return super().process_response(request, response)
        if response.status_code in _DEBUG_PAGES and settings.DEBUG:
            return response
        for header, policy, prefixes in _headers():
            if header not in response and not request.path_info.startswith(prefixes):
                response[header] = policy
        # as django-csp does: a nonce asked for after the header is written is an error, not a silent gap
        request.csp_nonce = CheckableLazyObject(self._csp_nonce_post_response)  # type: ignore[attr-defined]
        return response
