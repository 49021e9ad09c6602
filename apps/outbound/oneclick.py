"""The one-click unsubscribe POST (RFC 8058): one request, made at most once, to a list's https URL.

- The connection is apps.core.pinned's: the host resolved once, every address public unless
  UNSUBSCRIBE_ALLOW_PRIVATE_HOSTS is on, the connection to a checked address (no DNS rebinding between check and
  use), TLS verified against the system's trust store or only UNSUBSCRIBE_CA_FILE when that is set (tests).
- The request is `POST` with exactly the body `List-Unsubscribe=One-Click`, Content-Type
  application/x-www-form-urlencoded: no cookies, no credentials, no Referer. A redirect is never followed: its
  status is the list's answer. Every step is bounded by UNSUBSCRIBE_TIMEOUT_SECONDS,
  and so is the whole exchange once the POST began (a list dripping its answer is given up all the same).
- `begin()` is called after the connection and TLS are up and before one byte of the request is written: it
  records that the POST began (the SMTP DATA mark's twin). When it cannot be recorded nothing is sent; once
  it is, the outcome is sent, failed or unknown, never a retry.
The URL is never logged (its query string is the list's token); the answers are fixed reason codes.
"""

from __future__ import annotations

import http.client
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from apps.core import pinned
from apps.outbound.unsubscribe import ONE_CLICK_BODY, ONE_CLICK_CONTENT_TYPE


@dataclass(frozen=True)
class PostOutcome:
    kind: str  # "sent" | "refused" | "temporary" | "unknown", as record_outbound_outcome takes them
    error: str = ""
    http_status: int | None = None


# why no connection was made (apps.core.pinned), as the outcome record_outbound_outcome takes
_NOT_CONNECTED = {
    "unresolved": PostOutcome("temporary", "unsubscribe_host_unresolved"),
    "private": PostOutcome("refused", "unsubscribe_host_private"),
    "unreachable": PostOutcome("temporary", "unsubscribe_unreachable"),
    "tls": PostOutcome("refused", "unsubscribe_tls_failed"),
}


def post_one_click(url: str, *, timeout: int, begin: Callable[[], bool]) -> PostOutcome | None:
    """POST the one-click body to `url`; None when `begin()` said no (nothing was sent)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 443
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection = pinned.open_https(
            host,
            port,
            timeout=timeout,
            allow_private=settings.UNSUBSCRIBE_ALLOW_PRIVATE_HOSTS,
            ca_file=getattr(settings, "UNSUBSCRIBE_CA_FILE", ""),
        )
    except pinned.Unreachable as exc:
        return _NOT_CONNECTED[exc.reason]
    try:
        if not begin():
            return None
        connection.answer_within(timeout)  # from the first byte written to the last one read: one timeout in all
        try:
            connection.request(
                "POST",
                target,
                body=ONE_CLICK_BODY,
                headers={
                    "Content-Type": ONE_CLICK_CONTENT_TYPE,
                    "User-Agent": "Oaken one-click unsubscribe (RFC 8058)",
                    "Connection": "close",
                },
            )
            response = connection.getresponse()
            status = response.status
            response.read(4096)  # the list's page is never kept
        except (OSError, http.client.HTTPException):
            # the list may have taken the POST: never sent again
            return PostOutcome("unknown", "unsubscribe_answer_lost")
    finally:
        connection.close()
    if 200 <= status < 400:
        return PostOutcome("sent", "", status)  # a redirect is the list's answer, never followed
    return PostOutcome("refused", "unsubscribe_refused_by_list", status)
