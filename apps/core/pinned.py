"""An HTTPS connection to a host someone else named (a list's unsubscribe URL, a webhook's endpoint), pinned to
an address that was checked.

- The host is resolved once and every address it resolves to must be public (not loopback, private, link-local,
  multicast or reserved, nor an IPv6 address carrying one: NAT64, 6to4, Teredo, v4-mapped) unless the caller's
  allowance is on; the connection goes to an address that was checked, never to a name resolved again, so DNS
  rebinding between the check and the use reaches nothing new.
- TLS is verified against the system's trust store, or only the caller's CA file when one is set (tests), at
  TLS 1.2 or newer, for the host's name.
- Connecting and the handshake are each bounded by the timeout; once a request begins, `answer_within` bounds the
  whole exchange (a server dripping its answer a byte at a time is given up all the same).
Failures are `Unreachable` with a fixed reason word: the host, the URL and the server's words are never in it.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import time
from typing import Any

# IPv6 prefixes that carry an IPv4 address a gateway may forward to (NAT64, RFC 6052; 6to4, RFC 3056)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class Unreachable(Exception):
    """No connection was made, so nothing was sent. `reason`: "unresolved" (the name has no address now),
    "private" (an address is not public and the allowance is off), "unreachable" (no address answered, or the
    connection broke before TLS was up), "tls" (the certificate or the handshake was refused)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _embedded(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)


def is_public(address: str) -> bool:
    """A global unicast address, and not one that carries a non-public IPv4 address (64:ff9b::7f00:1 is
    127.0.0.1 behind a NAT64 gateway)."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and (inner := _embedded(ip)) is not None and not is_public(str(inner)):
        return False
    return ip.is_global and not ip.is_multicast


def literal_private(host: str) -> bool:
    """The host is written as an address (or is localhost) that is not public: known without resolving it, so a
    form can refuse it at once. A name is only checked when it is resolved (`resolve`)."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return not is_public(host)
    except ValueError:
        return False


def resolve(host: str, port: int, *, allow_private: bool) -> list[tuple[int, tuple[Any, ...]]]:
    """(family, socket address) of each address of the host, every one of them checked."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        raise Unreachable("unresolved") from None
    if not infos:
        raise Unreachable("unresolved")
    if not allow_private and not all(is_public(str(info[4][0])) for info in infos):
        raise Unreachable("private")
    return [(family, sockaddr) for family, _, _, _, sockaddr in infos]


def _connect(addresses: list[tuple[int, tuple[Any, ...]]], timeout: float) -> socket.socket:
    for family, sockaddr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(sockaddr)
        except OSError:
            sock.close()
            continue
        return sock
    raise Unreachable("unreachable")


class _AnswerBy(ssl.SSLSocket):
    """A TLS socket whose reads end by one deadline for the whole answer (`answer_by`, monotonic), not each read
    by its own timeout."""

    answer_by: float | None = None

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        if self.answer_by is not None:
            left = self.answer_by - time.monotonic()
            if left <= 0:
                raise TimeoutError("the answer took too long")
            self.settimeout(left)
        return super().recv_into(buffer, nbytes, flags)


def tls_context(ca_file: str = "") -> ssl.SSLContext:
    """Verification against the system's trust store, or only `ca_file` when given; TLS 1.2 at least."""
    context = ssl.create_default_context(cafile=ca_file or None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.sslsocket_class = _AnswerBy
    return context


class PinnedConnection(http.client.HTTPSConnection):
    """An HTTPSConnection already connected, with TLS up, to a checked address: http.client never resolves the
    name again (its `connect` is never called while `sock` is set, and a closed one is never reopened)."""

    def connect(self) -> None:
        raise http.client.NotConnected("a pinned connection is never opened again")

    def answer_within(self, seconds: float) -> None:
        """From now to the last byte read: `seconds` in all."""
        if isinstance(self.sock, _AnswerBy):
            self.sock.answer_by = time.monotonic() + seconds


def open_https(host: str, port: int, *, timeout: float, allow_private: bool, ca_file: str = "") -> PinnedConnection:
    """A connection to the host's checked address with TLS verified for its name; Unreachable otherwise."""
    raw = _connect(resolve(host, port, allow_private=allow_private), timeout)
    context = tls_context(ca_file)
    try:
        tls = context.wrap_socket(raw, server_hostname=host)
    except ssl.SSLError:
        raw.close()
        raise Unreachable("tls") from None
    except OSError:
        raw.close()
        raise Unreachable("unreachable") from None
    connection = PinnedConnection(host, port, timeout=timeout, context=context)
    connection.sock = tls
    return connection
