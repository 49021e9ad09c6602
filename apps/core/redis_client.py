"""The one Redis connection of a process, and fixed-window counters on it (throttles, rate limits)."""

from __future__ import annotations

import math
import threading
import time
from functools import cache
from typing import Any

import redis
from django.conf import settings


@cache
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


# Redis failed a moment ago in this process: what can go on without it does so at once for a few seconds rather
# than wait out the socket timeout again (a call meets a stalled Redis's 2 s once, not once per use)
_AWAY_SECONDS = 5.0
_away_until = 0.0


def note_away() -> None:
    """Redis just failed (refused, or timed out)."""
    global _away_until
    _away_until = time.monotonic() + _AWAY_SECONDS


def away() -> bool:
    """Redis failed in this process within the last few seconds."""
    return time.monotonic() < _away_until


# The window starts at the first event (SET NX EX); later events only count (Redis 6.2 has no EXPIRE NX). One
# script, so one command per hit: a MULTI/EXEC pipeline of the two took twice as long (0.19 against 0.10 ms).
# It counts ARGV[2] events at once and answers the count and the milliseconds left of the window.
_COUNT = (
    "redis.call('SET', KEYS[1], 0, 'EX', ARGV[1], 'NX') "
    "return {redis.call('INCRBY', KEYS[1], ARGV[2]), redis.call('PTTL', KEYS[1])}"
)


@cache
def _count_script() -> Any:
    # run on whichever client redis_client() gives at the time (a test, or a new REDIS_URL, may replace it)
    return redis_client().register_script(_COUNT)


def _count(key: str, window_seconds: int, events: int) -> tuple[int, int]:
    count, left_ms = _count_script()(keys=[key], args=[window_seconds, events], client=redis_client())
    return int(count), int(left_ms)


def count_hit(key: str, window_seconds: int) -> int:
    """Count one event under `key` in a window that starts at its first event; the count so far.
    Raises redis.RedisError when Redis is away: callers decide whether that fails open or closed."""
    return _count(key, window_seconds, 1)[0]


class SharedWindowLimit:
    """At most `limit` events per key in a fixed window, counted in Redis for every process, where a busy key costs
    a round trip only every few events: a process takes a share of the window's remaining events at once (at most
    1/`share` of what it last saw remaining, at most `most` events, one when near the limit) and spends it here.

    The count in Redis is of events handed out, so a key never gets more than `limit` in a window however many
    processes serve it; a share a process took and did not spend (its caller moved to another process) is lost
    with the window, so a key spread over P processes may be refused up to P * `most` events before its limit.
    A share never outlives the window it was taken in (its end is reckoned from before the round trip)."""

    def __init__(self, *, most: int = 16, share: int = 64, max_keys: int = 10_000) -> None:
        self._lock = threading.Lock()
        # key -> (the window's end on this process's clock, events of the share left, the count last seen)
        self._shares: dict[str, tuple[float, int, int]] = {}
        self._most, self._share, self._max_keys = most, share, max_keys

    def wait(self, key: str, limit: int, window_seconds: int) -> int | None:
        """Count one event under `key`: None while within the limit, else the seconds until its window ends.
        Raises redis.RedisError when Redis is away (callers fall back to a LocalWindowCounter)."""
        asked = time.monotonic()
        with self._lock:
            ends, left, seen = self._shares.get(key, (asked, 0, 0))
            if asked < ends:
                if left > 0:
                    self._shares[key] = (ends, left - 1, seen)
                    return None
                if seen >= limit:  # counts only grow in a window: refused until it ends, no need to ask
                    return max(1, math.ceil(ends - asked))
            else:
                seen = 0
        take = min(self._most, max(1, (limit - seen) // self._share))
        count, left_ms = _count(key, window_seconds, take)
        granted = max(0, min(take, limit - (count - take)))
        ends = asked + max(left_ms, 0) / 1000
        with self._lock:
            if key not in self._shares and len(self._shares) >= self._max_keys:
                self._forget(asked)
            self._shares[key] = (ends, max(granted - 1, 0), count)
        return None if granted else max(1, math.ceil(left_ms / 1000))

    def _forget(self, now: float) -> None:
        """Drop the shares whose window ended; if none has, the one ending first (the memory stays bounded)."""
        ended = [k for k, (ends, _, _) in self._shares.items() if ends <= now]
        for k in ended or [min(self._shares, key=lambda k: self._shares[k][0])]:
            del self._shares[k]


class LocalWindowCounter:
    """Fixed-window counts kept in this process: the fallback of a limit that must hold while Redis is away.

    Each process counts on its own, so with N web processes a credential gets at most N times the limit: looser
    than the shared count, but a bound all the same, where refusing would black the door out for everyone."""

    def __init__(self, max_keys: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._windows: dict[str, tuple[float, int]] = {}
        self._max_keys = max_keys

    def hit(self, key: str, window_seconds: int, now: float | None = None) -> int:
        """Count one event under `key`; the count in its current window."""
        now = time.monotonic() if now is None else now
        with self._lock:
            started, count = self._windows.get(key, (now, 0))
            if now - started >= window_seconds:
                started, count = now, 0
            if key not in self._windows and len(self._windows) >= self._max_keys:
                # forget the windows that ended; if none has, the oldest (the memory stays bounded)
                ended = [k for k, (t, _) in self._windows.items() if now - t >= window_seconds]
                for k in ended or [min(self._windows, key=lambda k: self._windows[k][0])]:
                    del self._windows[k]
            self._windows[key] = (started, count + 1)
            return count + 1
