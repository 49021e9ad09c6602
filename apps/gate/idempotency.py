"""Idempotency keys, the gate's own store (docs/gate.md): a key that completed answers its repeat with the response
it kept; only a call that completed binds its key (a refused or failed one changed nothing and kept nothing), and a
concurrent duplicate waits on the first's claim, so the two never both run."""

from __future__ import annotations

import re
from typing import Any

from django.db import connection

from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.ids import IDEMPOTENCY_KEY_MAX_CHARS, IDEMPOTENCY_KEY_PATTERN, new_id
from apps.gate.models import IdempotencyRecord
from apps.operations.registry import Operation

_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)


def check_key(op: Operation, key: object) -> None:
    """A key the gate can keep for `op`: the bound and the pattern the OpenAPI document and the tool list publish
    (apps.core.ids); the key itself is never repeated."""
    if op.returns_secret:
        # a replay would need the secret stored beside the key
        raise OakenError.invalid("idempotency_key", "is not accepted by an operation that returns a secret")
    if op.commits_in_batches:
        # a failure keeps the batches it finished: there is no one answer to replay, nor one transaction to bind
        # the key in
        raise OakenError.invalid("idempotency_key", "is not accepted by an operation that commits in batches")
    if not isinstance(key, str) or not 1 <= len(key) <= IDEMPOTENCY_KEY_MAX_CHARS:
        raise OakenError.invalid("idempotency_key", f"must be 1 to {IDEMPOTENCY_KEY_MAX_CHARS} characters")
    if not _KEY.fullmatch(key):
        raise OakenError.invalid(
            "idempotency_key", "must be printable ASCII characters, not starting or ending with a space"
        )


def stored_response(caller: Caller, operation: str, key: str, digest: str) -> dict[str, Any] | None:
    """The first run's response for this key, if it completed; a different input is refused."""
    first = (
        IdempotencyRecord.objects.for_tenant(caller.tenant)
        .filter(caller_key=caller.key, operation=operation, key=key)
        .values_list("input_digest", "response", "reach")
        .first()
    )
    if first is None:
        return None
    if first[0] != digest:
        raise OakenError(
            "IDEMPOTENCY_MISMATCH", "idempotency_key was already used with a different input", field="idempotency_key"
        )
    if not _covers(caller.workspace_filter, first[2]):
        # a MEMBER narrowed since (or their key's person): the answer may hold mail they no longer reach
        raise OakenError(
            "OUT_OF_SCOPE",
            "idempotency_key: its first call reached workspaces you no longer reach; nothing was replayed",
            field="idempotency_key",
        )
    return dict(first[1])


def _covers(now: tuple[str, ...] | None, then: list[str] | None) -> bool:
    """Whether a caller reaching `now` (None: every workspace) reaches all that a call reaching `then` did."""
    if now is None:
        return True
    return then is not None and set(then) <= set(now)


def claim(caller: Caller, operation: str, key: str, digest: str) -> dict[str, Any] | None:
    """Own the key for this run, or return the first run's response.

    The insert waits while another transaction holds the same key, so a concurrent duplicate
    either replays the first response or, if the first failed, runs in its place: never both.
    """
    reach = list(caller.workspace_filter) if caller.workspace_filter is not None else None
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO gate_idempotencyrecord (id, tenant_id, caller_key, operation, key, input_digest,"
            " response, reach, created_at) VALUES (%s, %s, %s, %s, %s, %s, 'null'::jsonb, %s::text[], now())"
            " ON CONFLICT (tenant_id, caller_key, operation, key) DO NOTHING RETURNING id",
            [new_id(), caller.tenant.pk, caller.key, operation, key, digest, reach],
        )
        if cursor.fetchone() is not None:
            return None
    return stored_response(caller, operation, key, digest)


def keep(caller: Caller, operation: str, key: str, response: dict[str, Any]) -> None:
    """Keep the response of the run that claimed `key`, in that run's transaction: it commits, or rolls back,
    with the change."""
    IdempotencyRecord.objects.for_tenant(caller.tenant).filter(
        caller_key=caller.key, operation=operation, key=key
    ).update(response=response)
