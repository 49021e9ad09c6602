"""The one-click unsubscribe POST (RFC 8058): one request, made at most once, to a list's https URL.

- The host is resolved once and every address it resolves to must be public (not loopback, private,
  link-local, multicast or reserved) unless UNSUBSCRIBE_ALLOW_PRIVATE_HOSTS is on; the connection goes to an
  address that was checked, never to a name resolved again (no DNS rebinding between check and use).
- TLS is verified against the system's trust store, or only UNSUBSCRIBE_CA_FILE when that is set (tests).
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
import ipaddress
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from apps.outbound.unsubscribe import ONE_CLICK_BODY, ONE_CLICK_CONTENT_TYPE


@dataclass(frozen=True)
class PostOutcome:
    kind: str  # "sent" | "refused" | "temporary" | "unknown", as record_outbound_outcome takes them
    error: str = ""
    http_status: int | None = None


# IPv6 prefixes that carry an IPv4 address a gateway may forward to (NAT64, RFC 6052; 6to4, RFC 3056)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _embedded(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and (inner := _embedded(ip)) is not None and not _public(str(inner)):
        return False  # 64:ff9b::7f00:1 is 127.0.0.1 behind a NAT64 gateway
    return ip.is_global and not ip.is_multicast


class _AnswerBy(ssl.SSLSocket):
    """A TLS socket whose reads end by one deadline for the whole answer (`answer_by`, monotonic), not each read
    by its own timeout: a list that drips its answer a byte at a time is given up all the same."""

    answer_by: float | None = None

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        if self.answer_by is not None:
            left = self.answer_by - time.monotonic()
            if left <= 0:
                raise TimeoutError("the list's answer took too long")
            self.settimeout(left)
        return super().recv_into(buffer, nbytes, flags)


def _addresses(host: str, port: int) -> list[tuple[int, tuple[object, ...]]] | PostOutcome:
    """(family, socket address) for each address of the host, all of them checked; or why not."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return PostOutcome("temporary", "unsubscribe_host_unresolved")
    if not infos:
        return PostOutcome("temporary", "unsubscribe_host_unresolved")
    if not settings.UNSUBSCRIBE_ALLOW_PRIVATE_HOSTS and not all(_public(str(i[4][0])) for i in infos):
        return PostOutcome("refused", "unsubscribe_host_private")
    return [(family, sockaddr) for family, _, _, _, sockaddr in infos]


def _connect(addresses: list[tuple[int, tuple[object, ...]]], timeout: int) -> socket.socket | None:
    for family, sockaddr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(sockaddr)
        except OSError:
            sock.close()
            continue
        return sock
    return None


def tls_context() -> ssl.SSLContext:
    ca_file = getattr(settings, "UNSUBSCRIBE_CA_FILE", "") or None
    context = ssl.create_default_context(cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.sslsocket_class = _AnswerBy
    return context


def post_one_click(url: str, *, timeout: int, begin: Callable[[], bool]) -> PostOutcome | None:
    """POST the one-click body to `url`; None when `begin()` said no (nothing was sent)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 443
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    found = _addresses(host, port)
    if isinstance(found, PostOutcome):
        return found
    raw = _connect(found, timeout)
    if raw is None:
        return PostOutcome("temporary", "unsubscribe_unreachable")
    context = tls_context()
    try:
        tls = context.wrap_socket(raw, server_hostname=host)
    except ssl.SSLError:
        raw.close()
        return PostOutcome("refused", "unsubscribe_tls_failed")
    except OSError:
        raw.close()
        return PostOutcome("temporary", "unsubscribe_unreachable")
    connection = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    connection.sock = tls  # the checked address's connection: http.client never resolves the name again
    try:
        if not begin():
            return None
        if isinstance(tls, _AnswerBy):  # from the first byte written to the last one read: one timeout in all
            tls.answer_by = time.monotonic() + timeout
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
