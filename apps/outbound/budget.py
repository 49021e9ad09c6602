"""Hourly recipient budgets in Redis, counted atomically so concurrent requests can never exceed them.

One Lua script checks and adds in a single step: a request either takes all its recipients from the
budget or none. When Redis cannot be reached the budget cannot be checked, and the request is refused
(SERVICE_UNAVAILABLE) rather than run unchecked (SPEC §4.7, §10).
"""

from __future__ import annotations

import contextlib

import redis

from apps.gate.errors import GateError
from config.redis_client import redis_client

WINDOW_SECONDS = 3600
KEY_PREFIX = "oaken:send-budget:"
# what a budget is named after (requests.budget_name, the policies' own): <tenant>:<kind>:<id>
KINDS = ("apikey", "oauth", "person", "policy")
# a window's counter outlives its hour this long, so the roll-up (apps.outbound.rollup) reads its final figure
KEEP_AFTER_WINDOW_SECONDS = 900

# KEYS[1] the window's counter; ARGV: amount, limit, ttl. Returns the new total, or -(current total) - 1
# when the amount does not fit (nothing is added then).
_TAKE = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local amount = tonumber(ARGV[1])
if current + amount > tonumber(ARGV[2]) then
  return -current - 1
end
local total = redis.call('INCRBY', KEYS[1], amount)
if total == amount then
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
end
return total
"""


def window_key(name: str, now: float) -> tuple[str, int]:
    """The counter of the current clock hour for `name`, and the seconds until that hour ends."""
    window = int(now) // WINDOW_SECONDS
    return f"{KEY_PREFIX}{name}:{window}", WINDOW_SECONDS - int(now) % WINDOW_SECONDS


def take(name: str, amount: int, limit: int, now: float) -> int | None:
    """Take `amount` from the hourly budget `name`; the new total, or None when it does not fit.
    Raises GateError(SERVICE_UNAVAILABLE) when Redis is away."""
    key, left = window_key(name, now)
    try:
        total = int(redis_client().eval(_TAKE, 1, key, amount, limit, left + KEEP_AFTER_WINDOW_SECONDS))
    except redis.RedisError:
        raise GateError(
            "SERVICE_UNAVAILABLE", "sending budgets cannot be checked right now; nothing was sent, try again later"
        ) from None
    return None if total < 0 else total


def give_back(name: str, amount: int, now: float) -> None:
    """Return what take() took when the request it was taken for did not happen (best effort)."""
    key, _ = window_key(name, now)
    with contextlib.suppress(redis.RedisError):  # a budget that stays spent errs on the side of sending less
        redis_client().decrby(key, amount)


def used(name: str, now: float) -> int:
    key, _ = window_key(name, now)
    return int(redis_client().get(key) or 0)


def used_now(names: list[str], now: float) -> list[int]:
    """What each budget has used in the current hour, in one round trip. Raises redis.RedisError."""
    if not names:
        return []
    return [max(0, int(v or 0)) for v in redis_client().mget([window_key(n, now)[0] for n in names])]


def parse_key(key: str) -> tuple[str, str, str, int] | None:
    """(tenant id, kind, budget id, window) of a counter's key, or None for a key of another shape."""
    if not key.startswith(KEY_PREFIX):
        return None
    tenant, _, rest = key.removeprefix(KEY_PREFIX).partition(":")
    kind, _, rest = rest.partition(":")
    budget_id, _, window = rest.rpartition(":")
    if kind not in KINDS or not tenant or not budget_id or not window.isdigit():
        return None
    return tenant, kind, budget_id, int(window)


def seconds_left(now: float) -> int:
    return WINDOW_SECONDS - int(now) % WINDOW_SECONDS
