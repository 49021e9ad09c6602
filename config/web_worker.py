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
query and referrer, and some addresses carry a single-use token (config.log_filters).

The worker also parks requests (apps.gate.waiting): a waiting operation that found nothing yet answers a
ParkedResponse, which is never sent. The worker gives the thread back, keeps the connection and the body the
request had, and when apps.events.wake calls back (new mail of an account the call waits for, its deadline, or
this worker stopping) runs the request again on a thread of its pool, marked RESUMED, and sends that answer."""

from __future__ import annotations

import errno
import io
import json
import socket
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from gunicorn import glogging, util
from gunicorn.http import wsgi
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

    def handle_request(self, req: Any, conn: Any) -> Any:
        return self._serve(req, conn, None)

    def _keepalive_after(self, conn: Any, keepalive: Any) -> Any:
        return _PARKED if keepalive is _PARKED else super()._keepalive_after(conn, keepalive)

    def finish_request(self, conn: Any, fs: Any) -> None:
        if not fs.cancelled() and fs.exception() is None and fs.result() is _PARKED:
            return  # the connection stays with its parked request (neither kept alive nor closed)
        super().finish_request(conn, fs)

    def handle_exit(self, sig: Any, frame: Any) -> None:
        super().handle_exit(sig, frame)
        # parked requests get their last answer now, not a closed connection at the end of the grace period
        self.method_queue.defer(_wake_all)

    def _serve(self, req: Any, conn: Any, resumed: _Resumed | None) -> Any:
        """gunicorn's handle_request, which also parks a request its application asks to park, and runs a
        resumed one with the body it had."""
        environ: dict[str, Any] = {}
        resp = None
        try:
            self.cfg.pre_request(self, req)
            request_start = datetime.now()
            resp, environ = wsgi.create(req, conn.sock, conn.client, conn.server, self.cfg)
            environ["wsgi.multithread"] = True
            if resumed is None:
                self.nr += 1
                if self.nr >= self.max_requests:
                    if self.alive:  # type: ignore[has-type]
                        self.log.info("Autorestarting worker after current request.")
                        self.alive = False
                    resp.force_close()
            if not self.alive or not self.cfg.keepalive or len(self.keepalived_conns) >= self.max_keepalived:
                resp.force_close()
            recorded = None
            if _may_wait(environ.get("PATH_INFO", "")):
                if resumed is not None:
                    environ["wsgi.input"] = io.BytesIO(resumed.body)
                    environ["CONTENT_LENGTH"] = str(len(resumed.body))
                    environ[_RESUMED] = resumed.began
                else:
                    recorded = environ["wsgi.input"] = _Recorded(environ["wsgi.input"])
                if self.alive:
                    environ[_PARK] = True
            respiter = self.wsgi(environ, resp.start_response)
            park = getattr(respiter, "oaken_park", None)
            if park is not None:
                if hasattr(respiter, "close"):
                    respiter.close()  # the request's end: its database connection goes back
                body = resumed.body if resumed is not None else bytes(recorded.data if recorded else b"")
                self._park(req, conn, park, body)
                return _PARKED
            try:
                if isinstance(respiter, environ["wsgi.file_wrapper"]):
                    resp.write_file(respiter)
                else:
                    for item in respiter:
                        resp.write(item)
                resp.close()
            finally:
                request_time = datetime.now() - request_start
                self.log.access(resp, req, environ, request_time)
                if hasattr(respiter, "close"):
                    respiter.close()
            if resp.should_close():
                return False
        except OSError:
            raise
        except (Exception, SystemExit):
            if resp and resp.headers_sent:
                self.log.exception("Error handling request")
                util.close_graceful(conn.sock)
                raise StopIteration() from None
            raise
        finally:
            try:
                self.cfg.post_request(self, req, environ, resp)
            except Exception:
                self.log.exception("Exception in post_request hook")
        return True

    def _park(self, req: Any, conn: Any, park: Any, body: bytes) -> None:
        from apps.events.wake import hub

        resumed = _Resumed(park.began, body)
        hub.subscribe(park.keys, park.deadline, lambda: self.method_queue.defer(self._resume, req, conn, resumed))

    def _resume(self, req: Any, conn: Any, resumed: _Resumed) -> None:
        """On the worker's own thread: the parked request runs again on one of the pool's."""
        fs = self.tpool.submit(self._handle_resumed, req, conn, resumed)
        fs.add_done_callback(lambda fut: self.method_queue.defer(self.finish_request, conn, fut))

    def _handle_resumed(self, req: Any, conn: Any, resumed: _Resumed) -> Any:
        try:
            return self._keepalive_after(conn, self._serve(req, conn, resumed))
        except StopIteration:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                self.log.exception("Socket error processing a resumed request.")
            return False
        except Exception as exc:
            self.handle_error(req, conn.sock, conn.client, exc)
            return False


# what a handled request answers when it was parked (gthread's handle returns it; finish_request leaves it be)
_PARKED = object()
# the environ keys of apps.gate.waiting (PARK, RESUMED): named here, since this module is loaded before Django
_PARK, _RESUMED = "oaken.park", "oaken.resumed"


class _Resumed:
    def __init__(self, began: datetime, body: bytes) -> None:
        self.began, self.body = began, body


def _may_wait(path: str) -> bool:
    """A request to a door that calls operations (the ones that may park)."""
    return path in ("/mcp", "/mcp/") or path.startswith("/api/v1/ops/")


def _wake_all() -> None:
    from apps.events.wake import hub

    hub.wake_all()


class _Recorded:
    """A request's body as the application reads it, kept to run the request again if it is parked (a door's
    body is bounded by OPERATION_BODY_MAX_BYTES before it is read)."""

    def __init__(self, body: Any) -> None:
        self._body, self.data = body, bytearray()

    def read(self, size: int | None = None) -> bytes:
        chunk: bytes = self._body.read(size)
        self.data += chunk
        return chunk

    def readline(self, size: int | None = None) -> bytes:
        line: bytes = self._body.readline(size)
        self.data += line
        return line

    def readlines(self, hint: int | None = None) -> list[bytes]:
        lines: list[bytes] = self._body.readlines(hint)
        for line in lines:
            self.data += line
        return lines

    def __iter__(self) -> Any:
        return iter(self.readline, b"")


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
