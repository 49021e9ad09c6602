"""Models that turn text into vectors: the local one a package installs, or an OpenAI-compatible server.

Each has a `key` naming provider, model, version and dimensions: chunks record the model that made them, so a
change of any is seen (status, rebuild_search_index) and vectors of two models are never compared.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from django.conf import settings

from apps.core import httpclient

log = logging.getLogger("oaken.search")

LOCAL_DIMENSIONS = (64, 128, 256)


class EmbeddingsUnavailable(Exception):
    """The model could not embed (a server down, refusing, or answering nonsense); the message never holds
    the key, the request or the texts."""


class Embedder(Protocol):
    key: str
    dimensions: int

    def embed(self, texts: Sequence[str], *, query: bool = False) -> np.ndarray:
        """One L2-normalized float32 row per text; `query`: a search waits for it (a shorter deadline)."""
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

    def embed(self, texts: Sequence[str], *, query: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        return _normalized(self._model.embed(list(texts), norm=True))


# an answer is at most this much JSON: a base, and a generous number of bytes per number asked for
_ANSWER_BASE_BYTES = 1 << 20
_BYTES_PER_NUMBER = 32


# what reaches the server, as a warning about plain http says it
_SENT = "the mail text sent to be embedded"


class OpenAIEmbedder:
    """Any server that speaks OpenAI's POST {base}/embeddings (OpenAI itself, vLLM, Ollama, LiteLLM...).

    `timeout` bounds a whole call. Any failure is EmbeddingsUnavailable with a fixed message."""

    def __init__(
        self, *, base_url: str, api_key: str, model: str, dimensions: int, timeout: float, query_timeout: float = 5
    ) -> None:
        self._endpoint = httpclient.endpoint(
            base_url, "/embeddings", api_key=api_key, what="embeddings", sent=_SENT, log=log
        )
        self._model = model
        self._timeout = timeout
        self._query_timeout = query_timeout
        self.dimensions = dimensions
        self.key = f"openai/{model}/{dimensions}"

    def __repr__(self) -> str:  # never the key
        return f"OpenAIEmbedder({self.key})"

    def embed(self, texts: Sequence[str], *, query: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        timeout = min(self._timeout, self._query_timeout) if query else self._timeout
        body = json.dumps(
            {"model": self._model, "input": list(texts), "dimensions": self.dimensions, "encoding_format": "float"}
        ).encode()
        most = _ANSWER_BASE_BYTES + len(texts) * self.dimensions * _BYTES_PER_NUMBER
        try:
            raw = self._endpoint.post(body, timeout=timeout, most=most)
        except httpclient.HttpFailure as failure:
            raise _unavailable(failure, timeout) from None
        return _vectors(raw, len(texts), self.dimensions)


def _unavailable(failure: httpclient.HttpFailure, timeout: float) -> EmbeddingsUnavailable:
    """The failure logged and told in fixed words (never the key, the request or the texts)."""
    if failure.reason == "status":
        log.warning("embeddings server answered HTTP %s", failure.status)
        if failure.status is not None and 300 <= failure.status < 400:
            return EmbeddingsUnavailable(
                f"the embeddings server answered HTTP {failure.status} (redirects are not followed)"
            )
        return EmbeddingsUnavailable(f"the embeddings server answered HTTP {failure.status}")
    if failure.reason == "timeout":
        log.warning("embeddings server did not answer within %s s", timeout)
        return EmbeddingsUnavailable("the embeddings server did not answer in time")
    if failure.reason == "too_large":
        log.warning("embeddings server's answer is larger than allowed")
        return EmbeddingsUnavailable("the embeddings server's answer is too large")
    log.warning("embeddings server unreachable or unreadable")
    return EmbeddingsUnavailable("the embeddings server could not be reached or read")


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
            query_timeout=float(str(options.get("QUERY_TIMEOUT_SECONDS", options["TIMEOUT_SECONDS"]))),
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
