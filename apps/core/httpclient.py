"""One careful HTTP client for the OpenAI-compatible APIs Oaken calls (embeddings, chat completions).

A POST of JSON to a base URL checked by usable_http_url: no redirects (following one would carry the
key and the mail text wherever it points), one deadline for the whole call (a server that answers a byte at a
time cannot hold it longer), an answer of bounded size, and failures that say what went wrong in a fixed word,
never the key, the URL, the request or the answer.
"""

from __future__ import annotations

import contextlib
import email.utils
import http.client
import ipaddress
import logging
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any


def usable_http_url(url: str) -> bool:
    """http(s)://host[:port][/path]: no user or password (a key has a setting of its own), no query, no fragment."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        return False
    return (
        parts.scheme in {"http", "https"}
        and bool(parts.hostname)
        and parts.username is None
        and parts.password is None
        and not parts.query
        and not parts.fragment
    )


# the longest Retry-After honoured (a server asking for more is answered as a failure by the caller's budget)
RETRY_AFTER_MAX_SECONDS = 60.0


class HttpFailure(Exception):
    """A call that gave no usable answer. `reason`: "timeout" (the deadline passed), "unreachable" (no connection,
    or an answer that is not HTTP or was cut short), "status" (an HTTP status that is not 2xx: `status`, and
    `retry_after` in seconds when the server said), "too_large" (the answer is longer than allowed)."""

    def __init__(self, reason: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(reason if status is None else f"{reason} {status}")
        self.reason = reason
        self.status = status
        self.retry_after = retry_after


def is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def checked_base_url(base_url: str, what: str) -> str:
    """The base URL (up to /v1) without its trailing slash; ValueError, never quoting it (it may hold a
    password), unless it is http(s)://host[:port][/path] with no user, password, query or fragment."""
    if not usable_http_url(base_url):
        raise ValueError(
            f"the {what} base URL must be http(s)://host[:port]/path, without a user, password, query or fragment"
        )
    return base_url.strip().rstrip("/")


def travels_in_clear(base_url: str) -> bool:
    """Plain http to another machine: what is sent (mail text, the key) crosses the network unencrypted."""
    parts = urllib.parse.urlsplit(base_url)
    return parts.scheme == "http" and not is_loopback(parts.hostname or "")


@dataclass(frozen=True, repr=False)  # no repr: it would show the key
class Endpoint:
    """One endpoint of an OpenAI-compatible server ({base}/embeddings, {base}/chat/completions) and its key, set up
    by `endpoint`: what embeddings and summaries both post to."""

    url: str
    api_key: str

    def post(self, body: bytes, *, timeout: float, most: int) -> bytes:
        """post_json to this endpoint with its key."""
        return post_json(self.url, body, api_key=self.api_key, timeout=timeout, most=most)


def endpoint(base_url: str, path: str, *, api_key: str, what: str, sent: str, log: logging.Logger) -> Endpoint:
    """`path` under a checked base URL (ValueError naming the `what` base URL, never quoting it), warned about in
    `log` when `sent` (what travels: the mail text, say) and the key would cross the network unencrypted."""
    base = checked_base_url(base_url, what)
    if travels_in_clear(base):
        log.warning(
            "the %s server is reached by plain http on another machine: %s, and the key, travel unencrypted "
            "(use https)",
            what,
            sent,
        )
    return Endpoint(base + path, api_key)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is answered as a failure: following it would send the key (urllib keeps the Authorization header)
    and the mail text to wherever it points."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Deadline:
    """One deadline for a whole call: when it passes, the call's sockets are shut, so a server that sends
    its answer (or its headers) a byte at a time cannot hold it longer. A socket timeout bounds each wait
    for bytes, not the call."""

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def watch(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)
        return sock

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    # the plain socket's shutdown, also for a TLS socket: a blocked read in another thread returns at once
    with contextlib.suppress(OSError):  # already closed
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _opener(deadline: Deadline) -> urllib.request.OpenerDirector:
    """urllib with no redirects, its debug output off (it would print the key) and the deadline on every socket;
    proxies from the environment are kept (a deployment may reach its provider through one)."""

    class Plain(http.client.HTTPConnection):
        def connect(self) -> None:
            super().connect()
            deadline.watch(self.sock)

    class Secure(http.client.HTTPSConnection):
        def connect(self) -> None:
            # HTTPSConnection.connect, with the TLS socket watched before its handshake
            http.client.HTTPConnection.connect(self)
            deadline.watch(self.sock)
            context: ssl.SSLContext = self._context  # type: ignore[attr-defined]
            secure = context.wrap_socket(
                self.sock,
                server_hostname=getattr(self, "_tunnel_host", None) or self.host,
                do_handshake_on_connect=False,
            )
            self.sock = deadline.watch(secure)
            secure.do_handshake()

    class PlainHandler(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(Plain, req)

    class SecureHandler(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(Secure, req, context=ssl.create_default_context())

    return urllib.request.build_opener(PlainHandler(debuglevel=0), SecureHandler(debuglevel=0), _NoRedirects())


def retry_after_seconds(value: str | None) -> float | None:
    """Retry-After as seconds (a number of seconds or an HTTP date), at most RETRY_AFTER_MAX_SECONDS; None when
    absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - time.time()
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_MAX_SECONDS)


def post_json(url: str, body: bytes, *, api_key: str, timeout: float, most: int) -> bytes:
    """POST `body` (JSON) to `url` (from checked_base_url) with the key as a bearer token; the answer's body, at
    most `most` bytes, within `timeout` seconds in all. Any failure is HttpFailure."""
    with Deadline(timeout) as deadline:
        try:
            raw = _post(url, body, api_key, timeout, most, deadline)
        except urllib.error.HTTPError as exc:
            retry_after = retry_after_seconds(exc.headers.get("Retry-After") if exc.headers else None)
            exc.close()
            raise HttpFailure("status", status=exc.code, retry_after=retry_after) from None
        except (OSError, ValueError, http.client.HTTPException):
            raise HttpFailure("timeout" if deadline.expired else "unreachable") from None
        if deadline.expired:  # a read cut short by the deadline returns what had come, without an error
            raise HttpFailure("timeout")
    if len(raw) > most:
        raise HttpFailure("too_large")
    return raw


def _post(url: str, body: bytes, api_key: str, timeout: float, most: int, deadline: Deadline) -> bytes:
    """The answer's body, at most `most` + 1 bytes of it."""
    # the key goes straight into the request (no local holding it, for tracebacks that show locals)
    request = urllib.request.Request(  # noqa: S310 (the URL is http(s): checked_base_url)
        url,
        data=body,
        headers={"Content-Type": "application/json"} | ({"Authorization": f"Bearer {api_key}"} if api_key else {}),
        method="POST",
    )
    with _opener(deadline).open(request, timeout=timeout) as response:
        raw = bytes(response.read(most + 1))
        if len(raw) <= most and response.length:  # the connection ended before the promised length
            raise http.client.IncompleteRead(b"", response.length)
        return raw
