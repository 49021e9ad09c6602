"""GET /health: 200 when the database and Redis answer, 503 (in the error shape too) otherwise.

Each is asked within a deadline of its own (HEALTH_DATABASE_SECONDS; Redis' socket timeout, 2 s), so a server that
stalls rather than refuses makes the answer 503 within seconds, never a wait as long as the server's."""

from __future__ import annotations

import threading
import time
from functools import cache

import redis
from django.conf import settings
from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from apps.core.errors import OakenError


def _ask_database(connection: BaseDatabaseWrapper, answer: list[bool]) -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            answer.append(cursor.fetchone() == (1,))
    except DatabaseError:
        answer.append(False)
    finally:
        connection.dec_thread_sharing()


def _checks() -> dict[str, bool]:
    """The database is asked on a thread of its own, on the request's own connection (a connection opened for each
    /health, a public page, would spend a server process and the password's key stretching per request: slow on a
    loaded machine, and a way to use up connection slots), waited for at most HEALTH_DATABASE_SECONDS; Redis
    meanwhile, within its socket timeout. A thread still waiting on a stalled server holds the connection until
    the watchdog cuts it (config/postgresql/watchdog.py): the next query on it fails then, as any would."""
    started = time.monotonic()
    answer: list[bool] = []
    connection = connections["default"]
    connection.inc_thread_sharing()
    asking = threading.Thread(target=_ask_database, args=(connection, answer), name="oaken-health", daemon=True)
    asking.start()
    redis_ok = _redis_ok()
    asking.join(max(0.0, settings.HEALTH_DATABASE_SECONDS - (time.monotonic() - started)))
    return {"database": bool(answer and answer[0]), "redis": redis_ok}


@cache
def _redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def _redis_ok() -> bool:
    try:
        return bool(_redis_client().ping())
    except (redis.RedisError, OSError):
        return False


@require_GET
def health(request: HttpRequest) -> JsonResponse:
    """Liveness of the service and the servers it depends on, without versions."""
    checks = _checks()
    if all(checks.values()):
        return JsonResponse({"status": "ok"})
    failing = sorted(name for name, ok in checks.items() if not ok)
    error = OakenError("SERVICE_UNAVAILABLE", f"not answering: {', '.join(failing)}; try again shortly")
    response = JsonResponse({"status": "unavailable", "failing": failing, "error": error.as_dict()}, status=503)
    response["Retry-After"] = "5"
    return response
