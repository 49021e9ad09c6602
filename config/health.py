"""GET /health: 200 when the database and Redis answer, 503 otherwise."""

from __future__ import annotations

from functools import cache

import redis
from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET


def _database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            return cursor.fetchone() == (1,)
    except DatabaseError:
        return False


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
    checks = {"database": _database_ok(), "redis": _redis_ok()}
    if all(checks.values()):
        return JsonResponse({"status": "ok"})
    failing = sorted(name for name, ok in checks.items() if not ok)
    return JsonResponse({"status": "unavailable", "failing": failing}, status=503)
