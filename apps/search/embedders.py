"""Models that turn text into vectors: the local one a package installs, or an OpenAI-compatible server.

Each has a `key` naming provider, model, version and dimensions: chunks record the model that made them, so a
change of any is seen (status, rebuild_search_index) and vectors of two models are never compared.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from django.conf import settings

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


class OpenAIEmbedder:
    """Any server that speaks OpenAI's POST {base}/embeddings (OpenAI itself, vLLM, Ollama, LiteLLM...)."""

    def __init__(self, *, base_url: str, api_key: str, model: str, dimensions: int, timeout: float) -> None:
        self._url = base_url.rstrip("/") + "/embeddings"
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
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self._url, data=body, headers=headers, method="POST")  # noqa: S310
        try:
            # the URL is http(s) (config/settings/search.py refuses anything else)
            with urllib.request.urlopen(request, timeout=self._timeout) as response:  # noqa: S310
                answer: Any = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            log.warning("embeddings server answered HTTP %s", exc.code)
            raise EmbeddingsUnavailable(f"the embeddings server answered HTTP {exc.code}") from None
        except (OSError, ValueError) as exc:
            log.warning("embeddings server unreachable or unreadable (%s)", type(exc).__name__)
            raise EmbeddingsUnavailable("the embeddings server could not be reached or read") from None
        try:
            rows = sorted(answer["data"], key=lambda item: item["index"])
            vectors = np.array([row["embedding"] for row in rows], dtype=np.float32)
        except (KeyError, TypeError, ValueError):
            raise EmbeddingsUnavailable("the embeddings server's answer is not a list of embeddings") from None
        if vectors.shape != (len(texts), self.dimensions):
            raise EmbeddingsUnavailable("the embeddings server's answer has the wrong shape")
        return _normalized(vectors)


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
