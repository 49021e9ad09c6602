"""A bearer credential (SPEC §1, §7): an API key or an OAuth access token sent as `Authorization: Bearer`, turned
into the gate's agent caller, and the requests a credential may make a minute.

One place for every door that takes a bearer credential (/mcp and the REST API): a credential is resolved by the
same rules and spends one budget of requests, whichever door it comes through, so using both doors neither
widens what it may do nor doubles its rate.
"""

from __future__ import annotations

import redis

from apps.agents.connections import caller_for_token
from apps.agents.keys import KEY_PREFIX, caller_for_key
from apps.core.bounds import bounds
from apps.core.callers import Caller
from apps.core.redis_client import LocalWindowCounter, SharedWindowLimit, note_away

SCHEME = "bearer"


def is_bearer(header: str | None) -> bool:
    """Whether an Authorization header uses the Bearer scheme (its credential may still be empty or wrong)."""
    return header is not None and header.partition(" ")[0].lower() == SCHEME


def presented(header: str | None) -> str | None:
    """The credential an Authorization header carries in the Bearer scheme; None for no header, another scheme
    or an empty credential (each of which is no bearer credential at all)."""
    scheme, _, credential = (header or "").partition(" ")
    if scheme.lower() != SCHEME or not credential.strip():
        return None
    return credential.strip()


def caller_for_bearer(credential: str, resource: str) -> Caller | None:
    """The agent caller a bearer credential stands for, or None (unknown, expired, revoked, its person gone): an
    API key by its prefix, else an OAuth access token, accepted only when it was issued for `resource` (the
    canonical URL of the door it was sent to: apps.core.links)."""
    if credential.startswith(KEY_PREFIX):
        return caller_for_key(credential)
    return caller_for_token(credential, resource)


_SHARED_COUNTS = SharedWindowLimit()
_LOCAL_COUNTS = LocalWindowCounter()
# one counter per credential, whichever door its requests come through
RATE_KEY = "agent-requests:{kind}:{id}"


def rate_limited(caller: Caller) -> int | None:
    """Seconds to wait when this credential used up its requests for the minute (MCP_REQUESTS_PER_MINUTE, over
    every door together), else None.

    Counted in Redis for every web process, a few requests at a time (apps.core.redis_client.SharedWindowLimit).
    While Redis is away the minute is counted in this process instead: reads keep working, still bounded, and
    whatever needs a send budget is refused by its own check (SERVICE_UNAVAILABLE)."""
    limit = bounds.MCP_REQUESTS_PER_MINUTE
    key = RATE_KEY.format(kind=caller.credential_kind, id=caller.credential_id)
    try:
        return _SHARED_COUNTS.wait(key, limit, 60)
    except redis.RedisError:
        note_away()
        return 60 if _LOCAL_COUNTS.hit(key, 60) > limit else None
