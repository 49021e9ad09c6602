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
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from apps.core.errors import OakenError


def _ask_database(answer: list[bool]) -> None:
    connection = connections["default"]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            answer.append(cursor.fetchone() == (1,))
    except DatabaseError:
        answer.append(False)
    finally:
        connection.close()  # the thread's own connection ends with it


def _checks() -> dict[str, bool]:
    """The database is asked on a thread of its own, waited for at most HEALTH_DATABASE_SECONDS (opening the
    connection included: the thread goes on until the watchdog or connect_timeout ends it, then closes its
    connection); Redis meanwhile, within its socket timeout."""
    started = time.monotonic()
    answer: list[bool] = []
    asking = threading.Thread(target=_ask_database, args=(answer,), name="oaken-health-database", daemon=True)
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
