"""A stand-in for an OpenAI-compatible chat-completions server, on loopback, for the summarizer's tests.

A real HTTP server (the standard library's, one thread per request) on 127.0.0.1 and a free port, answering
POST /v1/chat/completions as OpenAI does. Its summary of a mail is `Summary of: <the mail's Subject line>`, so a
test can tell which answer belongs to which message. It records every request (headers, body, when it came and
when it was answered), counts the most it held at once, takes `latency` seconds per answer, and misbehaves on
request: the next N requests answer an HTTP status (429 with a Retry-After, 500...), or every answer is a text
the test chose (a "summary" that tries to give orders).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_SUBJECT = re.compile(r"^Subject: (.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes
    at: float  # time.monotonic() when it came
    answered_at: float

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def mail(self) -> str:
        """The user message: the mail between its markers."""
        return str(self.json["messages"][-1]["content"])


class ChatServer:
    def __init__(self, *, key: str = "") -> None:
        self.key = key  # the bearer key it accepts ("": any or none)
        self.latency = 0.0
        self.answer: str | None = None  # every answer's text, instead of its summary
        self._failures: list[tuple[int, str | None]] = []  # (status, Retry-After) of the next requests
        self._received: list[Received] = []
        self._in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="chat-stand-in", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def fail_next(self, count: int, status: int, retry_after: str | None = None) -> None:
        with self._lock:
            self._failures.extend([(status, retry_after)] * count)

    def reset(self) -> None:
        with self._lock:
            self._received.clear()
            self._failures.clear()
            self.most_in_flight = 0
        self.latency = 0.0
        self.answer = None

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def _enter(self) -> tuple[int, str | None] | None:
        with self._lock:
            self._in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self._in_flight)
            return self._failures.pop(0) if self._failures else None

    def _leave(self, received: Received) -> None:
        with self._lock:
            self._in_flight -= 1
            self._received.append(received)


def summary_of(mail: str) -> str:
    found = _SUBJECT.search(mail)
    return f"Summary of: {found.group(1).strip() if found else '(no subject)'}"


def _handler(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            at = time.monotonic()
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {name.lower(): value for name, value in self.headers.items()}
            failure = server._enter()
            try:
                self._respond(body, failure)
            finally:
                server._leave(Received(self.path, headers, body, at, time.monotonic()))

        def _respond(self, body: bytes, failure: tuple[int, str | None] | None) -> None:
            if self.path != "/v1/chat/completions":
                self._answer(404, {"error": {"message": "not found"}})
                return
            given = self.headers.get("Authorization", "")
            if server.key and given != f"Bearer {server.key}":
                shown = given.removeprefix("Bearer ")
                self._answer(401, {"error": {"message": f"Incorrect API key provided: {shown}"}})
                return
            if server._stopping.wait(server.latency):
                return
            if failure is not None:
                status, retry_after = failure
                self._answer(status, {"error": {"message": "try again later"}}, retry_after)
                return
            try:
                asked = json.loads(body)
                mail = str(asked["messages"][-1]["content"])
                model = str(asked["model"])
            except (ValueError, KeyError, TypeError, IndexError):
                self._answer(400, {"error": {"message": "bad request"}})
                return
            text = server.answer if server.answer is not None else summary_of(mail)
            self._answer(
                200,
                {
                    "id": "chatcmpl-stand-in",
                    "object": "chat.completion",
                    "model": model,
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                    ],
                    "usage": {"prompt_tokens": len(mail.split()), "completion_tokens": len(text.split())},
                },
            )

        def _answer(self, status: int, payload: object, retry_after: str | None = None) -> None:
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            if retry_after is not None:
                self.send_header("Retry-After", retry_after)
            self.end_headers()
            with contextlib.suppress(OSError):  # the client gave up (its deadline)
                self.wfile.write(raw)

    return Handler


@contextmanager
def chat_server(*, key: str = "") -> Iterator[ChatServer]:
    server = ChatServer(key=key)
    try:
        yield server
    finally:
        server.stop()
