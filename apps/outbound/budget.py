"""Hourly recipient budgets in Redis, counted atomically so concurrent requests can never exceed them.

One Lua script checks and adds in a single step: a request either takes all its recipients from the
budget or none. The same script puts the counter's key in its hour's index set, so the roll-up
(apps.outbound.rollup) finds an hour's counters there and never walks the keyspace. When Redis cannot
be reached the budget cannot be checked, and the request is refused (SERVICE_UNAVAILABLE) rather than
run unchecked (SPEC §4.7, §10).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from apps.core.errors import OakenError
from apps.core.redis_client import redis_client

WINDOW_SECONDS = 3600
KEY_PREFIX = "oaken:send-budget:"
# what a budget is named after: an agent's credential, a person, a send policy, or a mailbox (what it sends by
# itself, apps.outbound.automations)
KINDS = ("apikey", "oauth", "person", "policy", "account")
# a window's counter outlives its hour this long, so the roll-up (apps.outbound.rollup) reads its final figure
KEEP_AFTER_WINDOW_SECONDS = 900
# every counter of a window is a member of that window's index set (a set of counter keys), which outlives them
INDEX_PREFIX = "oaken:send-budget-index:"
INDEX_KEEP_AFTER_COUNTERS_SECONDS = 300

# KEYS[1] the window's counter, KEYS[2] the window's index; ARGV: amount, limit, the counter's ttl, how much longer
# the index is kept. Returns the new total, or -(current total) - 1 when the amount does not fit (nothing is added
# then). A counter that took something is in its index (SADD every time: a counter made before the index existed,
# or whose index went, is indexed again), and the index lives at least as long as each of its counters.
_TAKE = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local amount = tonumber(ARGV[1])
if current + amount > tonumber(ARGV[2]) then
  return -current - 1
end
local total = redis.call('INCRBY', KEYS[1], amount)
local ttl = tonumber(ARGV[3])
if total == amount then
  redis.call('EXPIRE', KEYS[1], ttl)
end
if redis.call('SADD', KEYS[2], KEYS[1]) == 1 then
  local keep = ttl + tonumber(ARGV[4])
  if redis.call('TTL', KEYS[2]) < keep then
    redis.call('EXPIRE', KEYS[2], keep)
  end
end
return total
"""


@dataclass(frozen=True)
class BudgetName:
    """Whose hourly budget: a tenant, a kind (KINDS) and that thing's id; spelled `<tenant>:<kind>:<id>`."""

    tenant_id: str
    kind: str
    budget_id: str

    def __str__(self) -> str:
        return f"{self.tenant_id}:{self.kind}:{self.budget_id}"


def window_key(name: BudgetName, now: float) -> tuple[str, int]:
    """The counter of the current clock hour for `name`, and the seconds until that hour ends."""
    window = int(now) // WINDOW_SECONDS
    return f"{KEY_PREFIX}{name}:{window}", WINDOW_SECONDS - int(now) % WINDOW_SECONDS


def hour_of(now: float) -> datetime:
    """The clock hour (its start) whose window counts what is taken at `now`."""
    return datetime.fromtimestamp(int(now) // WINDOW_SECONDS * WINDOW_SECONDS, UTC)


def index_key(window: int) -> str:
    """The set of the counter keys of a window (what the roll-up reads)."""
    return f"{INDEX_PREFIX}{window}"


def take(name: BudgetName, amount: int, limit: int, now: float) -> int | None:
    """Take `amount` from the hourly budget `name`; the new total, or None when it does not fit.
    Raises OakenError(SERVICE_UNAVAILABLE) when Redis is away."""
    key, left = window_key(name, now)
    index = index_key(int(now) // WINDOW_SECONDS)
    keep = (left + KEEP_AFTER_WINDOW_SECONDS, INDEX_KEEP_AFTER_COUNTERS_SECONDS)
    try:
        total = int(redis_client().eval(_TAKE, 2, key, index, amount, limit, *keep))
    except redis.RedisError:
        raise OakenError(
            "SERVICE_UNAVAILABLE", "sending budgets cannot be checked right now; nothing was sent, try again later"
        ) from None
    return None if total < 0 else total


def used_now(names: list[BudgetName], now: float) -> list[int]:
    """What each budget has used in the current hour, in one round trip. Raises redis.RedisError."""
    if not names:
        return []
    return [max(0, int(v or 0)) for v in redis_client().mget([window_key(n, now)[0] for n in names])]


def parse_key(key: str) -> tuple[BudgetName, int] | None:
    """The budget and the window of a counter's key, or None for a key of another shape."""
    if not key.startswith(KEY_PREFIX):
        return None
    tenant, _, rest = key.removeprefix(KEY_PREFIX).partition(":")
    kind, _, rest = rest.partition(":")
    budget_id, _, window = rest.rpartition(":")
    if kind not in KINDS or not tenant or not budget_id or not window.isdigit():
        return None
    return BudgetName(tenant, kind, budget_id), int(window)


def seconds_left(now: float) -> int:
    return WINDOW_SECONDS - int(now) % WINDOW_SECONDS
