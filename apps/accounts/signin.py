"""Throttled sign-in, counted in Redis per address *and* client, as OWASP's authentication guidance has it.

- Failures are counted per (address, client) pair: SIGN_IN_MAX_FAILURES of them within SIGN_IN_WINDOW_SECONDS
  lock that pair for the rest of the window. Someone guessing from one client locks out only that client: the
  person signing in from their own client is not held back.
- Failures of an address from every client together are counted too: past SIGN_IN_ADDRESS_CEILING the address
  is slowed, never locked: one attempt per SIGN_IN_SLOW_SECONDS, from whichever client, until the window ends.
  A guesser spread over many clients gets a trickle; the person still gets in between.
- A sign-in that succeeds forgets its own client's failures only (succeeded()).
- Neither touches the password reset, which works all the while; a completed reset lifts both (clear()).
- When Redis is away nothing can be counted, so sign-in is refused (fail closed).

Keys hold a hash of the address, never the address; the client is as apps.core.clients counts it.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
from functools import cache
from typing import Any

import redis
from django.http import HttpRequest

from apps.core.bounds import bounds
from apps.core.clients import client_address
from apps.core.redis_client import redis_client

_client = redis_client

KEY_PREFIX = "signin-failures:"


class Verdict(enum.Enum):
    ALLOWED = "allowed"
    LOCKED = "locked"  # this address from this client: too many failures
    SLOWED = "slowed"  # this address from everywhere: past the ceiling, and its one attempt per interval is taken


def _address(email: str) -> str:
    return hashlib.sha256(email.strip().lower().encode()).hexdigest()


def _failures_key(email: str) -> str:
    # one hash per address: a field per client, and "*" for all of them; the window starts at its first failure
    return KEY_PREFIX + _address(email)


def _slow_key(email: str) -> str:
    return KEY_PREFIX + "slow:" + _address(email)


def client_of(request: HttpRequest) -> str:
    """The client a request counts for (its address, as apps.core.clients sees it)."""
    return client_address(request)


def _client_field(client: str) -> str:
    return "client:" + client


# one failure counted for the pair and for the address, in one round trip; the window is set at the first
_RECORD = (
    "local pair = redis.call('HINCRBY', KEYS[1], ARGV[1], 1) "
    "local all = redis.call('HINCRBY', KEYS[1], '*', 1) "
    "if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end "
    "return {pair, all}"
)


@cache
def _record_script() -> Any:
    return _client().register_script(_RECORD)


def check(email: str, client: str) -> Verdict:
    """Whether this attempt may be checked at all. Past the address's ceiling, an allowed attempt takes the
    address's one slot of the interval. Redis away: LOCKED (fail closed)."""
    try:
        pair, total = _client().hmget(_failures_key(email), [_client_field(client), "*"])
        if pair is not None and int(pair) >= bounds.SIGN_IN_MAX_FAILURES:
            return Verdict.LOCKED
        if total is not None and int(total) >= bounds.SIGN_IN_ADDRESS_CEILING:
            took = _client().set(_slow_key(email), 1, nx=True, ex=bounds.SIGN_IN_SLOW_SECONDS)
            return Verdict.ALLOWED if took else Verdict.SLOWED
    except redis.RedisError:
        return Verdict.LOCKED
    return Verdict.ALLOWED


def locked(email: str, client: str) -> bool:
    """Whether this address is locked for this client."""
    try:
        pair = _client().hget(_failures_key(email), _client_field(client))
    except redis.RedisError:
        return True
    return pair is not None and int(pair) >= bounds.SIGN_IN_MAX_FAILURES


def record_failure(email: str, client: str) -> None:
    with contextlib.suppress(redis.RedisError):  # check() already refuses while Redis is away
        _record_script()(
            keys=[_failures_key(email)],
            args=[_client_field(client), bounds.SIGN_IN_WINDOW_SECONDS],
            client=_client(),
        )


def succeeded(email: str, client: str) -> None:
    """A sign-in went through: this client's failures are forgotten. Not other clients' (a guesser elsewhere keeps
    their count) nor the address's total (the ceiling still counts every failure of the window)."""
    with contextlib.suppress(redis.RedisError):
        _client().hdel(_failures_key(email), _client_field(client))


def clear(email: str) -> None:
    """Forget every failure of the address, from every client (a successful sign-in, a completed reset)."""
    with contextlib.suppress(redis.RedisError):
        _client().delete(_failures_key(email), _slow_key(email))
