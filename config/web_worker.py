"""The web server's worker (gunicorn's threaded one), whose own refusals are in the error shape.

gunicorn answers some requests before Django sees them: a request it cannot parse (a NUL in a header, a bad
Content-Length, a malformed request line) is its 400, headers over its limits (8 KB a field) its 431, an address
too long its 414. Its answer was an HTML page quoting the offending part of the request. Here it is JSON in the one
error shape, with a fixed message by status (config.errors.refusal): such a request is refused before its path can
be trusted, so it cannot be told whether a JSON door or a page was meant, and no browser sends one of them.

gunicorn decides the status, logs and counts the refusal as it does for any worker, and writes the answer with
util.write_error, its only writer of such pages: that function is what is replaced, in the process running this
module (gunicorn's master and its workers).

What gunicorn logs is kept from quoting what may be a secret (WebLogger): its warning about a refused request
quoted the offending header or line, which may be a credential; its access log wrote each request's address,
query and referrer, and some addresses carry a single-use token (config.log_filters)."""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlsplit

from gunicorn import glogging, util
from gunicorn.workers import gthread

from config.log_filters import unquoted


def write_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's util.write_error, answering the error shape (`mesg`, which quotes the request, is left out)."""
    # Django is set up in a worker by the time it answers a request
    from apps.core.errors import error_body
    from config.errors import refusal

    body = json.dumps(error_body(refusal(status_int))).encode()
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nX-Content-Type-Options: nosniff\r\n\r\n"
    )
    util.write_nonblock(sock, head.encode("latin-1") + body)


util.write_error = write_error


class ThreadWorker(gthread.ThreadWorker):
    """gunicorn's gthread worker (see the module's docstring for what differs)."""


_REFUSED = "Invalid request from ip="


def _referrer(value: str) -> str:
    if value in ("", "-"):
        return value
    parts = urlsplit(value)
    return f"{parts.scheme}://{parts.netloc}{unquoted(parts.path + ('?' + parts.query if parts.query else ''))}"


class WebLogger(glogging.Logger):
    """gunicorn's logger, quoting nothing of a request that may be a secret (see the module's docstring)."""

    def warning(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(msg, str) and msg.startswith(_REFUSED):
            # gunicorn formats the message itself: "…ip=<address>: <the refused part of the request>"
            msg = msg.split(": ", 1)[0] + ": refused before the application (the request is not quoted)"
        super().warning(msg, *args, **kwargs)

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> dict[str, Any]:
        atoms = super().atoms(resp, req, environ, request_time)
        atoms["r"] = f"{environ['REQUEST_METHOD']} {unquoted(environ['RAW_URI'])} {environ['SERVER_PROTOCOL']}"
        atoms["U"] = unquoted(environ.get("PATH_INFO") or "")
        atoms["q"] = "…" if environ.get("QUERY_STRING") else ""
        atoms["f"] = _referrer(environ.get("HTTP_REFERER", "-"))
        return atoms
