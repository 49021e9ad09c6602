"""Where search gets its embeddings: the local model (default) or any OpenAI-compatible /v1/embeddings."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from apps.core.httpclient import usable_http_url
from config.env import env_int, env_str

_PROVIDER = env_str("OAKEN_EMBEDDINGS", "local")
if _PROVIDER not in {"local", "openai"}:
    raise ImproperlyConfigured("OAKEN_EMBEDDINGS must be local or openai")


if _PROVIDER == "openai" and not usable_http_url(env_str("OAKEN_EMBEDDINGS_BASE_URL")):
    # never the value: a URL may hold a password
    raise ImproperlyConfigured(
        "OAKEN_EMBEDDINGS=openai needs OAKEN_EMBEDDINGS_BASE_URL, an http(s) URL up to /v1 "
        "(https://host[:port]/v1, no user, password, query or fragment)"
    )

SEARCH_EMBEDDINGS: dict[str, object] = {
    "PROVIDER": _PROVIDER,
    # openai: the server's base URL (up to /v1), its key (never logged), the model and its dimensions
    "BASE_URL": env_str("OAKEN_EMBEDDINGS_BASE_URL").strip().rstrip("/"),
    "API_KEY": env_str("OAKEN_EMBEDDINGS_API_KEY"),
    "MODEL": env_str("OAKEN_EMBEDDINGS_MODEL", "text-embedding-3-small" if _PROVIDER == "openai" else ""),
    # local: 64, 128 or 256 (the model's vectors cut to their first N; smaller is faster, coarser)
    "DIMENSIONS": env_int(
        "OAKEN_EMBEDDINGS_DIMENSIONS", 256 if _PROVIDER == "local" else 512, minimum=16, maximum=4000
    ),
    "TIMEOUT_SECONDS": env_int("OAKEN_EMBEDDINGS_TIMEOUT_SECONDS", 30, minimum=1, maximum=600),
    # a search waits this long at most for its query's embedding, then answers by words (index_complete false)
    "QUERY_TIMEOUT_SECONDS": env_int("OAKEN_EMBEDDINGS_QUERY_TIMEOUT_SECONDS", 5, minimum=1, maximum=600),
}

if _PROVIDER == "local" and SEARCH_EMBEDDINGS["DIMENSIONS"] not in (64, 128, 256):
    raise ImproperlyConfigured("the local embeddings model has 64, 128 or 256 dimensions")
