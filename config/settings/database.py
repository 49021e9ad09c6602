"""PostgreSQL from DATABASE_URL (exported by the embedded server when none is configured)."""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

from config.env import env_int, env_str


def database_from_url(url: str) -> dict[str, object]:
    """Django DATABASES entry for a postgres:// URL; a unix socket goes in ?host=/path."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured("DATABASE_URL must be a postgres:// or postgresql:// URL")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    host = query.pop("host", None) or unquote(parts.hostname or "")
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise ImproperlyConfigured("DATABASE_URL must name a database")
    return {
        "ENGINE": "config.postgresql",  # Django's, with a health check that trusts a recent answer
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": str(parts.port or ""),
        "CONN_MAX_AGE": env_int("OAKEN_DB_CONN_MAX_AGE", 60, minimum=0),
        "CONN_HEALTH_CHECKS": True,
        # Server-side binding, so that psycopg prepares a statement the connection has run a few times: planning
        # the hot reads (the key lookup, get_message's one statement, the audit append) cost more than running
        # them (0.3-1.5 ms each, against 0.01 ms for a prepared one). 0 turns preparing off, for a connection
        # pooler in transaction mode that does not keep prepared statements.
        "OPTIONS": {
            "server_side_binding": True,
            "prepare_threshold": env_int("OAKEN_DB_PREPARE_THRESHOLD", 5, minimum=0) or None,
            **query,
        },
        # OAKEN_TEST_DATABASE lets test sessions share one server without sharing a database
        "TEST": {"NAME": env_str("OAKEN_TEST_DATABASE") or "test_" + name},
    }


# Unset only where nothing ran ensure_environment() (e.g. type checking); nothing connects then.
DATABASES = {"default": database_from_url(env_str("DATABASE_URL", "postgresql:///oaken"))}
