"""Models that turn text into vectors: the local one a package installs, or an OpenAI-compatible server.

Each has a `key` naming provider, model, version and dimensions: chunks record the model that made them, so a
change of any is seen (status, rebuild_search_index) and vectors of two models are never compared.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import logging
import socket
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from django.conf import settings

from config.env import usable_http_url

log = logging.getLogger("oaken.search")

LOCAL_DIMENSIONS = (64, 128, 256)


class EmbeddingsUnavailable(Exception):
    """The model could not embed (a server down, refusing, or answering nonsense); the message never holds
    the key, the request or the texts."""


class Embedder(Protocol):
    key: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalized float32 row per text."""
        ...


def _normalized(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms == 0, 1, norms)


class LocalEmbedder:
    """WordLlama's l2_supercat model, from the weights inside the wordllama wheel (nothing is downloaded).

    Its own loader looks for the bundled tokenizer where it is not and then tries to download it, so the
    tokenizer and the weights are loaded by path here."""

    def __init__(self, dimensions: int = 256) -> None:
        if dimensions not in LOCAL_DIMENSIONS:
            raise ValueError(f"the local model has {LOCAL_DIMENSIONS} dimensions")
        import wordllama
        from safetensors import safe_open
        from tokenizers import Tokenizer
        from wordllama.inference import WordLlamaInference

        package = Path(wordllama.__file__).parent
        tokenizer = Tokenizer.from_file(str(package / "tokenizers" / "l2_supercat_tokenizer_config.json"))
        with safe_open(str(package / "weights" / "l2_supercat_256.safetensors"), framework="np", device="cpu") as f:
            weights = f.get_tensor("embedding.weight")[:, :dimensions]
        self._model = WordLlamaInference(weights, tokenizer, binary=False)
        self.dimensions = dimensions
        self.key = f"local/wordllama-l2_supercat@{metadata.version('wordllama')}/{dimensions}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        return _normalized(self._model.embed(list(texts), norm=True))


# an answer is at most this much JSON: a base, and a generous number of bytes per number asked for
_ANSWER_BASE_BYTES = 1 << 20
_BYTES_PER_NUMBER = 32


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def checked_base_url(base_url: str) -> str:
    """The base URL (up to /v1) without its trailing slash; ValueError, never quoting it (it may hold a
    password), unless it is http(s)://host[:port][/path] with no user, password, query or fragment."""
    if not usable_http_url(base_url):
        raise ValueError(
            "the embeddings base URL must be http(s)://host[:port]/path, without a user, password, query or fragment"
        )
    return base_url.strip().rstrip("/")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is answered as a failure: following it would send the key (urllib keeps the Authorization header)
    and the mail text to wherever it points."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class _Deadline:
    """One deadline for a whole call: when it passes, the call's sockets are shut, so a server that sends
    its answer (or its headers) a byte at a time cannot hold it longer. A socket timeout bounds each wait
    for bytes, not the call."""

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
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


def _opener(deadline: _Deadline) -> urllib.request.OpenerDirector:
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


class OpenAIEmbedder:
    """Any server that speaks OpenAI's POST {base}/embeddings (OpenAI itself, vLLM, Ollama, LiteLLM...).

    `timeout` bounds a whole call. Any failure is EmbeddingsUnavailable with a fixed message."""

    def __init__(self, *, base_url: str, api_key: str, model: str, dimensions: int, timeout: float) -> None:
        base = checked_base_url(base_url)
        parts = urllib.parse.urlsplit(base)
        if parts.scheme == "http" and not _is_loopback(parts.hostname or ""):
            log.warning(
                "the embeddings server is reached by plain http on another machine: the mail text sent to be "
                "embedded, and the key, travel unencrypted (use https)"
            )
        self._url = base + "/embeddings"
        self._api_key = api_key
        self._model = model
        self._timeout = timeout
        self.dimensions = dimensions
        self.key = f"openai/{model}/{dimensions}"

    def __repr__(self) -> str:  # never the key
        return f"OpenAIEmbedder({self.key})"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        body = json.dumps(
            {"model": self._model, "input": list(texts), "dimensions": self.dimensions, "encoding_format": "float"}
        ).encode()
        most = _ANSWER_BASE_BYTES + len(texts) * self.dimensions * _BYTES_PER_NUMBER
        with _Deadline(self._timeout) as deadline:
            try:
                raw = self._post(body, most, deadline)
            except urllib.error.HTTPError as exc:
                exc.close()
                log.warning("embeddings server answered HTTP %s", exc.code)
                if 300 <= exc.code < 400:
                    raise EmbeddingsUnavailable(
                        f"the embeddings server answered HTTP {exc.code} (redirects are not followed)"
                    ) from None
                raise EmbeddingsUnavailable(f"the embeddings server answered HTTP {exc.code}") from None
            except (OSError, ValueError, http.client.HTTPException) as exc:
                if deadline.expired:
                    log.warning("embeddings server did not answer within %s s", self._timeout)
                    raise EmbeddingsUnavailable("the embeddings server did not answer in time") from None
                log.warning("embeddings server unreachable or unreadable (%s)", type(exc).__name__)
                raise EmbeddingsUnavailable("the embeddings server could not be reached or read") from None
            if deadline.expired:  # a read cut short by the deadline returns what had come, without an error
                log.warning("embeddings server did not answer within %s s", self._timeout)
                raise EmbeddingsUnavailable("the embeddings server did not answer in time")
        if len(raw) > most:
            log.warning("embeddings server's answer is larger than %s bytes", most)
            raise EmbeddingsUnavailable("the embeddings server's answer is too large")
        return _vectors(raw, len(texts), self.dimensions)

    def _post(self, body: bytes, most: int, deadline: _Deadline) -> bytes:
        """The answer's body, at most `most` + 1 bytes of it."""
        # the key goes straight into the request (no local holding it, for tracebacks that show locals)
        request = urllib.request.Request(  # noqa: S310 (the URL is http(s): checked_base_url)
            self._url,
            data=body,
            headers={"Content-Type": "application/json"}
            | ({"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}),
            method="POST",
        )
        with _opener(deadline).open(request, timeout=self._timeout) as response:
            raw = bytes(response.read(most + 1))
            if len(raw) <= most and response.length:  # the connection ended before the promised length
                raise http.client.IncompleteRead(b"", response.length)
            return raw


def _vectors(raw: bytes, count: int, dimensions: int) -> np.ndarray:
    """The answer's embeddings in the order of the texts, or EmbeddingsUnavailable: each index once, each vector
    of the right width, finite and not zero (pgvector refuses NaN; a zero vector has no direction)."""
    try:
        answer: Any = json.loads(raw)
        data = answer["data"]
        if not isinstance(data, list):
            raise TypeError("data is not a list")
        indexes = [item["index"] for item in data]
        if any(type(i) is not int for i in indexes):
            raise TypeError("an index is not an integer")
        rows = sorted(data, key=lambda item: item["index"])
        vectors = np.array([row["embedding"] for row in rows], dtype=np.float64)
    except (KeyError, TypeError, ValueError):
        log.warning("embeddings server's answer is not a list of embeddings")
        raise EmbeddingsUnavailable("the embeddings server's answer is not a list of embeddings") from None
    if sorted(indexes) != list(range(count)) or vectors.shape != (count, dimensions):
        log.warning("embeddings server's answer has the wrong shape")
        raise EmbeddingsUnavailable("the embeddings server's answer has the wrong shape")
    norms = np.linalg.norm(vectors, axis=1)
    if not (np.isfinite(vectors).all() and np.isfinite(norms).all() and (norms > 0).all()):
        log.warning("embeddings server's answer holds vectors that are not finite or are zero")
        raise EmbeddingsUnavailable("the embeddings server's answer is not a list of embeddings")
    return _normalized((vectors / norms[:, None]).astype(np.float32))


_lock = threading.Lock()


def _settings_key() -> tuple[tuple[str, object], ...]:
    return tuple(sorted(settings.SEARCH_EMBEDDINGS.items()))


def current_embedder() -> Embedder:
    """The model the settings name, built once per process (and again when the settings change)."""
    with _lock:
        return _build(_settings_key())


@lru_cache(maxsize=4)
def _build(config: tuple[tuple[str, object], ...]) -> Embedder:
    options = dict(config)
    if options["PROVIDER"] == "openai":
        return OpenAIEmbedder(
            base_url=str(options["BASE_URL"]),
            api_key=str(options["API_KEY"]),
            model=str(options["MODEL"]),
            dimensions=int(str(options["DIMENSIONS"])),
            timeout=float(str(options["TIMEOUT_SECONDS"])),
        )
    return _local(int(str(options["DIMENSIONS"])))


@lru_cache(maxsize=len(LOCAL_DIMENSIONS))
def _local(dimensions: int) -> LocalEmbedder:
    return LocalEmbedder(dimensions)


def embedder_for(key: str) -> Embedder | None:
    """A model that can embed a query for chunks made by `key`: the current one, or a local one; else None."""
    current = current_embedder()
    if current.key == key:
        return current
    for dimensions in LOCAL_DIMENSIONS:
        if key == f"local/wordllama-l2_supercat@{metadata.version('wordllama')}/{dimensions}":
            with _lock:
                return _local(dimensions)
    return None
