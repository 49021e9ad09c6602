"""One request straight through a WSGI application, as gunicorn makes it: for tests and benchmarks that need the
application the server runs (config.wsgi) rather than Django's test client, which has every middleware."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.util import setup_testing_defaults


def serve(
    application: Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]],
    method: str,
    path: str,
    body: bytes = b"",
    **headers: str,
) -> tuple[str, dict[str, list[str]], bytes]:
    """The status, the headers (lower-case names, every value of each) and the body of one request; `headers` by
    their names with dashes as underscores (mcp_protocol_version="2025-11-25"); the body is sent as JSON."""
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "SERVER_NAME": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1:8000",
        "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json",
    }
    environ.update({"HTTP_" + name.upper(): value for name, value in headers.items()})
    setup_testing_defaults(environ)
    started: list[tuple[str, list[tuple[str, str]]]] = []
    answer = b"".join(application(environ, lambda status, sent, *_: started.append((status, sent))))
    status, sent = started[0]
    found: dict[str, list[str]] = {}
    for name, value in sent:
        found.setdefault(name.lower(), []).append(value)
    return status, found, answer
