"""Throttled sign-in: repeated failures for one address lock it for a while (counted in Redis)."""

from __future__ import annotations

import contextlib
import hashlib
from functools import cache

import redis
from django.conf import settings


@cache
def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def _key(email: str) -> str:
    return "signin-failures:" + hashlib.sha256(email.strip().lower().encode()).hexdigest()


def locked(email: str) -> bool:
    """Too many recent failures for this address; also True when they cannot be counted (fail closed)."""
    try:
        count = _client().get(_key(email))
    except redis.RedisError:
        return True
    return count is not None and int(count) >= settings.SIGN_IN_MAX_FAILURES


def record_failure(email: str) -> None:
    key = _key(email)
    try:
        pipe = _client().pipeline()
        # the window starts at the first failure (SET NX EX), later failures only count
        pipe.set(key, 0, ex=settings.SIGN_IN_WINDOW_SECONDS, nx=True)
        pipe.incr(key)
        pipe.execute()
    except redis.RedisError:
        return  # locked() already refuses while Redis is away


def clear(email: str) -> None:
    with contextlib.suppress(redis.RedisError):
        _client().delete(_key(email))
