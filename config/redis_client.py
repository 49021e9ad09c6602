"""The one Redis connection of a process, and fixed-window counters on it (throttles, rate limits)."""

from __future__ import annotations

from functools import cache

import redis
from django.conf import settings


@cache
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def count_hit(key: str, window_seconds: int) -> int:
    """Count one event under `key` in a window that starts at its first event; the count so far.
    Raises redis.RedisError when Redis is away: callers decide whether that fails open or closed."""
    pipe = redis_client().pipeline()
    # the window starts at the first event (SET NX EX), later events only count (Redis 6.2 has no EXPIRE NX)
    pipe.set(key, 0, ex=window_seconds, nx=True)
    pipe.incr(key)
    return int(pipe.execute()[1])
