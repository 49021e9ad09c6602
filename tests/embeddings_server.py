"""A stand-in for an OpenAI-compatible embeddings server, on loopback, for the provider's tests.

A real HTTP server (the standard library's, one thread per request; HTTPS with a certificate of its own on
request) on 127.0.0.1 and a free port, answering
POST /v1/embeddings as OpenAI does. Its vectors carry meaning: the local wordllama model's, turned by a fixed
rotation (so they are not comparable with the local model's own: vectors of two models must never be mixed)
and cut or zero-padded to the dimensions asked for. It checks the bearer key it was given, records every
request (headers and body) for the tests to look at, and misbehaves on request (see MODES).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from apps.search.embedders import LocalEmbedder

# what the server can be told to do instead of answering well
MODES = (
    "500",  # HTTP 500, its body quoting the texts it was sent
    "401",  # HTTP 401, its body quoting the key it was sent (as some servers do)
    "hang",  # reads the request, then answers nothing for `hang_seconds`
    "trickle",  # answers 200, then a byte of its body every `trickle_interval` s for at most `trickle_seconds`
    "cut",  # 200, half its body, and the connection closed
    "nothttp",  # not HTTP at all
    "junk",  # 200 with a body that is not JSON
    "shape",  # 200 with JSON that is not a list of embeddings
    "count",  # one vector fewer than texts
    "width",  # vectors one dimension short
    "nan",  # a vector holding NaN (JSON's NaN, which Python's json reads)
    "indexes",  # the right number of vectors, but two with index 0 and none with the last (one: index 1)
    "huge",  # a body of many megabytes
    "redirect",  # 302 to `redirect_to` (another server, standing for another host)
)

_ROTATION_SEED = 15


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class EmbeddingsServer:
    """A running stand-in: its base URL (up to /v1), what it received, and switches for how it answers."""

    def __init__(self, *, key: str = "", host: str = "127.0.0.1", tls: bool = False) -> None:
        self.key = key  # the bearer key it accepts ("": any or none)
        self.mode: str | None = None
        self.hang_seconds = 30.0
        self.trickle_interval = 0.25
        self.trickle_seconds = 15.0
        self.redirect_to = ""
        self._received: list[Received] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._local = LocalEmbedder(256)
        rotation, _ = np.linalg.qr(np.random.default_rng(_ROTATION_SEED).standard_normal((256, 256)))
        self._rotation = rotation.astype(np.float32)
        self._httpd = ThreadingHTTPServer((host, 0), _handler(self))
        self._httpd.daemon_threads = True
        self.host = host
        self.scheme = "https" if tls else "http"
        self._folder = tempfile.TemporaryDirectory(prefix="oaken-embeddings-")
        # the certificate a client must trust to reach it (SSL_CERT_FILE), when it speaks TLS
        self.ca_file = Path(self._folder.name) / "cert.pem"
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self_signed(host, Path(self._folder.name)))
            # the handshake happens in the request's thread, not in the one accepting connections
            self._httpd.socket = context.wrap_socket(
                self._httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="embeddings-stand-in", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}/v1"

    @property
    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def texts_received(self) -> list[str]:
        """Every text of every embeddings request, in order."""
        return [text for r in self.received if r.path == "/v1/embeddings" for text in r.json["input"]]

    def reset(self) -> None:
        """Answer well again and forget what was received."""
        self.mode = None
        with self._lock:
            self._received.clear()

    def misbehave(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"no such mode: {mode}")
        self.mode = mode

    def vectors(self, texts: list[str], dimensions: int) -> np.ndarray:
        """This server's embeddings of texts."""
        rows = self._local.embed(texts) @ self._rotation
        if dimensions <= rows.shape[1]:
            return rows[:, :dimensions]
        return np.hstack([rows, np.zeros((len(texts), dimensions - rows.shape[1]), dtype=np.float32)])

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)
        self._folder.cleanup()

    def _record(self, received: Received) -> None:
        with self._lock:
            self._received.append(received)

    def _pause(self, seconds: float) -> bool:
        """Wait (or less, if the server stops); whether it is stopping."""
        return self._stopping.wait(seconds)


def _alternative_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def self_signed(host: str, folder: Path) -> tuple[Path, Path]:
    """A certificate for this loopback address (or name), and its key (the certificate is its own authority)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "embeddings stand-in")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([_alternative_name(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


def _handler(server: EmbeddingsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass  # the tests read what was received, not a log

        def do_GET(self) -> None:
            self._take(b"")
            self._answer(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._take(body)
            if self.path != "/v1/embeddings":
                self._answer(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
                return
            given = self.headers.get("Authorization", "")
            if server.mode == "401" or (server.key and given != f"Bearer {server.key}"):
                shown = given.removeprefix("Bearer ")
                self._answer(401, {"error": {"message": f"Incorrect API key provided: {shown}", "type": "auth"}})
                return
            try:
                asked = json.loads(body)
                texts, model, dimensions = asked["input"], asked["model"], int(asked.get("dimensions") or 256)
                texts = [texts] if isinstance(texts, str) else list(texts)
            except (ValueError, KeyError, TypeError):
                self._answer(400, {"error": {"message": "bad request", "type": "invalid_request_error"}})
                return
            self._embed(texts, model, dimensions)

        def _take(self, body: bytes) -> None:
            headers = {name.lower(): value for name, value in self.headers.items()}
            server._record(Received(self.command, self.path, headers, body))

        def _embed(self, texts: list[str], model: str, dimensions: int) -> None:
            mode = server.mode
            if mode == "500":
                self._answer(500, {"error": {"message": f"the model failed on {texts!r}", "type": "server_error"}})
                return
            if mode == "hang":
                if not server._pause(server.hang_seconds):
                    self._answer(500, {"error": {"message": "too late", "type": "server_error"}})
                return
            if mode == "redirect":
                self.send_response(302)
                self.send_header("Location", server.redirect_to)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if mode == "nothttp":
                self.close_connection = True
                self.wfile.write(b"SSH-2.0-OpenSSH_9.6\r\n")
                return
            if mode == "junk":
                self._raw(200, b"<html>502 Bad Gateway</html>{not json")
                return
            if mode == "shape":
                self._answer(200, {"object": "list", "data": {"embedding": "no"}})
                return
            if mode == "huge":
                self._raw(200, b'{"object": "list", "data": [' + b" " * (64 * 1024 * 1024) + b"]}")
                return
            vectors = server.vectors(texts, dimensions - 1 if mode == "width" else dimensions).tolist()
            if mode == "count":
                vectors = vectors[:-1]
            if mode == "nan":
                vectors[0][0] = float("nan")
            indexes = list(range(len(vectors)))
            if mode == "indexes":
                indexes[-1] = 0 if len(indexes) > 1 else 1
            answer: dict[str, Any] = {
                "object": "list",
                "data": [
                    {"object": "embedding", "index": i, "embedding": vector}
                    for i, vector in zip(indexes, vectors, strict=True)
                ],
                "model": model,
                "usage": {"prompt_tokens": sum(len(t.split()) for t in texts), "total_tokens": 0},
            }
            answer["usage"]["total_tokens"] = answer["usage"]["prompt_tokens"]
            if mode == "trickle":
                self._trickle(json.dumps(answer).encode())
                return
            if mode == "cut":
                whole = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(whole)))
                self.end_headers()
                self.wfile.write(whole[: len(whole) // 2])
                self.close_connection = True
                return
            self._answer(200, answer)

        def _answer(self, status: int, payload: object) -> None:
            self._raw(status, json.dumps(payload).encode())

        def _raw(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the client gave up (a bounded read, a deadline)
                self.wfile.write(body)

        def _trickle(self, body: bytes) -> None:
            """The whole answer, a byte at a time: each byte comes well within a read timeout."""
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            until = time.monotonic() + server.trickle_seconds
            try:
                for i in range(len(body)):
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                    if server._pause(server.trickle_interval) or time.monotonic() > until:
                        return  # the answer is cut short
            except OSError:
                return  # the client gave up

    return Handler


@contextmanager
def embeddings_server(*, key: str = "", host: str = "127.0.0.1", tls: bool = False) -> Iterator[EmbeddingsServer]:
    """A stand-in for the test's (or module's) length."""
    server = EmbeddingsServer(key=key, host=host, tls=tls)
    try:
        yield server
    finally:
        server.stop()
