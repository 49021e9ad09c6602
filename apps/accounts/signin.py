"""Throttled sign-in: repeated failures for one address lock it for a while (counted in Redis)."""

from __future__ import annotations

import contextlib
import hashlib

import redis
from django.conf import settings

from config.redis_client import count_hit, redis_client

_client = redis_client


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
    try:
        count_hit(_key(email), settings.SIGN_IN_WINDOW_SECONDS)
    except redis.RedisError:
        return  # locked() already refuses while Redis is away


def clear(email: str) -> None:
    with contextlib.suppress(redis.RedisError):
        _client().delete(_key(email))
