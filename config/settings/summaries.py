"""Who writes summaries: the local extractive summarizer (default) or any OpenAI-compatible chat model."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from apps.core.httpclient import usable_http_url
from config.env import env_bool, env_int, env_str

_SUMMARIZER = env_str("OAKEN_SUMMARIZER", "local")
if _SUMMARIZER not in {"local", "llm"}:
    raise ImproperlyConfigured("OAKEN_SUMMARIZER must be local or llm")

if _SUMMARIZER == "llm":
    # never the value: a URL may hold a password
    if not usable_http_url(env_str("OAKEN_LLM_BASE_URL")):
        raise ImproperlyConfigured(
            "OAKEN_SUMMARIZER=llm needs OAKEN_LLM_BASE_URL, an http(s) URL up to /v1 "
            "(https://host[:port]/v1, no user, password, query or fragment)"
        )
    if not env_str("OAKEN_LLM_MODEL").strip():
        raise ImproperlyConfigured("OAKEN_SUMMARIZER=llm needs OAKEN_LLM_MODEL, the model's name")

SUMMARIES: dict[str, object] = {
    "SUMMARIZER": _SUMMARIZER,
    # llm: the server's base URL (up to /v1), its key (never logged), the model, the seconds one request may take,
    # and how many requests all workers together have in flight at once
    "LLM_BASE_URL": env_str("OAKEN_LLM_BASE_URL").strip().rstrip("/"),
    "LLM_API_KEY": env_str("OAKEN_LLM_API_KEY"),
    "LLM_MODEL": env_str("OAKEN_LLM_MODEL").strip(),
    "LLM_TIMEOUT_SECONDS": env_int("OAKEN_LLM_TIMEOUT_SECONDS", 60, minimum=1, maximum=600),
    "LLM_MAX_CONCURRENCY": env_int("OAKEN_LLM_MAX_CONCURRENCY", 4, minimum=1, maximum=256),
    # attempts of one request in all: a timeout, a 429 (after its Retry-After) or a 5xx is tried again
    "LLM_ATTEMPTS": env_int("OAKEN_LLM_ATTEMPTS", 3, minimum=1, maximum=10),
    # background summaries of new mail, for the accounts a person opted in (off by default: a model costs)
    "NEW_MAIL": env_bool("OAKEN_SUMMARIZE_NEW_MAIL", False),
}
