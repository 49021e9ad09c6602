"""What an agent credential read (SPEC §23): the messages whose content the gate returned to it, kept for a window.

One sorted set in Redis per tenant and credential (`oaken:reads:<tenant>:<kind>:<credential>`): a member per
message read ("<message id> <sender address>", the sender '' where the answer did not name it), scored by when it
was last read. Recording a read is one round trip (a pipeline of ZADD, trims and EXPIRE), made from the read's own
call at the gate; it keeps no mail text, only ids and addresses. A tenant's key is never built from another
tenant's id, so no tenant's reads ever reach another's requests.

Redis, not a table: a read at the gate otherwise commits nothing but its one audit statement, and a table row
would turn it into a transaction of its own (three round trips more on every read); Redis's one round trip costs
a read a few per cent (bench/mcp_latency.py). When Redis is away the read is answered all the same (reads keep
working in an outage) and the credential is marked in the database (`unrecorded`): until the window has passed,
its every request that acts outside the mailbox waits for a person, since a read the record missed could otherwise
lend a stranger's address to a request unflagged.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from apps.agents.selectors import credential_row
from apps.core.bounds import bounds
from apps.core.errors import OakenError
from apps.core.redis_client import away, note_away, redis_client


@dataclass(frozen=True)
class Read:
    """One message an agent read: its id, its sender's address as the answer named it ('' when it did not), when."""

    message_id: str
    sender: str
    at: datetime


def _key(tenant_id: object, credential_kind: str, credential_id: str) -> str:
    return f"oaken:reads:{tenant_id}:{credential_kind}:{credential_id}"


def record(tenant_id: object, credential_kind: str, credential_id: str, seen: Iterable[tuple[str, str]]) -> None:
    """Remember that this credential was given these messages ((id, sender address) pairs) now; refused with
    SERVICE_UNAVAILABLE when Redis cannot take it."""
    members = {f"{message_id} {sender.casefold()}": 0.0 for message_id, sender in seen if message_id}
    if not members:
        return
    now = time.time()
    window = bounds.PROVENANCE_WINDOW_HOURS * 3600
    key = _key(tenant_id, credential_kind, credential_id)
    if away():  # it failed a moment ago: the read does not wait out its timeout again
        unrecorded(tenant_id, credential_kind, credential_id, until=now + window)
        return
    pipe = redis_client().pipeline(transaction=False)
    pipe.zadd(key, dict.fromkeys(members, now))
    pipe.zremrangebyscore(key, "-inf", now - window)
    # the newest PROVENANCE_READS_MAX reads are kept; older ones are forgotten first
    pipe.zremrangebyrank(key, 0, -bounds.PROVENANCE_READS_MAX - 1)
    pipe.expire(key, window)
    try:
        pipe.execute()
    except redis.RedisError:
        note_away()
        unrecorded(tenant_id, credential_kind, credential_id, until=now + window)


def unrecorded(tenant_id: object, credential_kind: str, credential_id: str, *, until: float) -> None:
    """Redis could not take a read: the read is answered all the same (reads keep working while Redis is away), and
    the credential is marked in the database, in the read's own transaction: until the window has passed, every
    request of it that acts outside the mailbox waits for a person (what it read is not known; the credential's
    `reads_unrecorded_until`, which apps.outbound.provenance reads)."""
    stamp = datetime.fromtimestamp(until, UTC)
    credential_row(tenant_id=tenant_id, kind=credential_kind, credential_id=credential_id).update(
        reads_unrecorded_until=stamp
    )


def reads_of(tenant_id: object, credential_kind: str, credential_id: str) -> list[Read]:
    """The messages this credential read in the window, newest first, one per message (the sender the answers
    named, when one did). Raises OakenError (SERVICE_UNAVAILABLE) when Redis cannot answer."""
    since = time.time() - bounds.PROVENANCE_WINDOW_HOURS * 3600
    try:
        rows: list[tuple[bytes | str, float]] = redis_client().zrevrangebyscore(  # type: ignore[assignment]
            _key(tenant_id, credential_kind, credential_id), "+inf", since, withscores=True
        )
    except redis.RedisError:
        note_away()
        raise OakenError(
            "SERVICE_UNAVAILABLE", "what this assistant read cannot be checked right now; nothing was requested"
        ) from None
    found: dict[str, Read] = {}
    for member, score in rows:
        text = member.decode() if isinstance(member, bytes) else str(member)
        cut = text.find(" ")
        message_id, sender = (text, "") if cut < 0 else (text[:cut], text[cut + 1 :])
        earlier = found.get(message_id)
        if earlier is None:
            found[message_id] = Read(message_id, sender, datetime.fromtimestamp(float(score), UTC))
        elif not earlier.sender and sender:
            found[message_id] = Read(message_id, sender, earlier.at)
    return list(found.values())


def forget(tenant_id: object, credential_kind: str, credential_id: str) -> None:
    """Drop the record of one credential (tests; a revoked credential's record simply expires)."""
    redis_client().delete(_key(tenant_id, credential_kind, credential_id))
