"""PostgreSQL from DATABASE_URL (exported by the embedded server when none is configured)."""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

from config.env import env_int, env_str

# How long a process waits on PostgreSQL, in seconds (0: no bound). CONNECT bounds opening a connection (libpq's
# connect_timeout, at least 2). STALL: a statement (or commit) not answered after this long has the server probed
# with a new connection, bounded by CONNECT; if that does not open either, the server is stalled (stopped, frozen,
# its host gone) and the statement's connection is cut, so the call answers SERVICE_UNAVAILABLE instead of waiting
# for it (config.postgresql.watchdog): over a unix socket, or a TCP connection that still looks open, nothing else
# would end the wait. So a request waits at most about STALL + CONNECT on a database that does not answer. A server
# that answers is never cut short of STATEMENT + CONNECT (past which it ought to have cancelled the statement).
#
# STATEMENT, LOCK and IDLE_IN_TRANSACTION are the server's statement_timeout, lock_timeout and
# idle_in_transaction_session_timeout, set on every connection the process opens: the web's requests are short,
# so their bounds are too; Celery's tasks, `oaken` commands and migrations legitimately run long (an import, a
# search backfill, an ALTER TABLE on a big table) and are unbounded unless OAKEN_DB_BACKGROUND_* says otherwise.
# The web is the process config.wsgi serves (it sets OAKEN_ROLE=web).
DATABASE_WAITS = {
    "CONNECT": env_int("OAKEN_DB_CONNECT_TIMEOUT", 4, minimum=2),
    "STALL": env_int("OAKEN_DB_STALL_SECONDS", 2, minimum=1),
}
DATABASE_SERVER_TIMEOUTS = {
    "web": {
        "STATEMENT": env_int("OAKEN_DB_STATEMENT_TIMEOUT", 30, minimum=0),
        "LOCK": env_int("OAKEN_DB_LOCK_TIMEOUT", 10, minimum=0),
        "IDLE_IN_TRANSACTION": env_int("OAKEN_DB_IDLE_IN_TRANSACTION_TIMEOUT", 60, minimum=0),
    },
    "background": {
        "STATEMENT": env_int("OAKEN_DB_BACKGROUND_STATEMENT_TIMEOUT", 0, minimum=0),
        "LOCK": env_int("OAKEN_DB_BACKGROUND_LOCK_TIMEOUT", 0, minimum=0),
        "IDLE_IN_TRANSACTION": env_int("OAKEN_DB_BACKGROUND_IDLE_IN_TRANSACTION_TIMEOUT", 0, minimum=0),
    },
}
DATABASE_ROLE = "web" if env_str("OAKEN_ROLE") == "web" else "background"
# /health's own bound on its question to the database (seconds): a load balancer asks often and must hear soon
HEALTH_DATABASE_SECONDS = env_int("OAKEN_HEALTH_DATABASE_SECONDS", 2, minimum=1)


def _server_bounds(role: str) -> str:
    """libpq's `options`: the server-side bounds of `role`'s connections (milliseconds; 0 is none)."""
    bounds = DATABASE_SERVER_TIMEOUTS[role]
    names = {
        "STATEMENT": "statement_timeout",
        "LOCK": "lock_timeout",
        "IDLE_IN_TRANSACTION": "idle_in_transaction_session_timeout",
    }
    return " ".join(f"-c {names[key]}={seconds * 1000}" for key, seconds in bounds.items())


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
            "connect_timeout": DATABASE_WAITS["CONNECT"],
            "options": _server_bounds(DATABASE_ROLE),
            **query,
        },
        # OAKEN_TEST_DATABASE lets test sessions share one server without sharing a database
        "TEST": {"NAME": env_str("OAKEN_TEST_DATABASE") or "test_" + name},
    }


# Unset only where nothing ran ensure_environment() (e.g. type checking); nothing connects then.
DATABASES = {"default": database_from_url(env_str("DATABASE_URL", "postgresql:///oaken"))}
