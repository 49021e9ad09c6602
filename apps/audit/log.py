"""Appending to a tenant's audit chain, and walking chains to find the first broken link.

Each event stores the hash of the one before it (`prev_hash`) and a sha256 over its own
canonical content (`hash`), so editing, removing, inserting or reordering events shows up
when the chain is walked. Appends are made linear by locking the tenant's `ChainHead` row:
the next event's seq and prev_hash come from the head, never from "the newest event".
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from apps.audit.models import ZERO_HASH, AuditEvent, CredentialKind, Door, Principal
from apps.workspaces.models import Tenant

_HEX64 = re.compile(r"[0-9a-f]{64}")
_WALK_CHUNK = 2000


@dataclass(frozen=True)
class Target:
    """An id the call touched, with its value before and after where that is useful (never mail text)."""

    id: str
    before: object = None
    after: object = None


@dataclass(frozen=True)
class Break:
    """The first event at which a chain does not hold."""

    tenant_id: uuid.UUID
    seq: int
    event_id: int | None  # None when the event that should be there is missing
    reason: str  # 'hash mismatch', 'previous hash mismatch', 'sequence gap' or 'head mismatch'


class UnknownTenantError(LookupError):
    """No tenant has this id."""


def canonical_json(value: object) -> str:
    """The one JSON spelling of a value: sorted keys, no whitespace, non-JSON types as str()."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _sha256(text: str) -> str:
    # surrogatepass: a lone surrogate (legal in JSON input) must digest, not crash the caller
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def input_digest(payload: object) -> str:
    """sha256 hex over canonical JSON (sorted keys, no whitespace, ensure_ascii=False, default=str)."""
    return _sha256(canonical_json(payload))


def _timestamp(value: datetime) -> str:
    """ISO-8601 UTC at microseconds, the precision PostgreSQL keeps."""
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _chain_hash(
    *,
    tenant_id: uuid.UUID,
    seq: int,
    created_at: datetime,
    principal: str,
    person_id: uuid.UUID | None,
    credential_id: str,
    credential_kind: str,
    door: str,
    operation: str,
    outcome: str,
    targets: Any,
    input_digest: str,
    prev_hash: str,
) -> str:
    content = {
        "tenant_id": str(tenant_id),
        "seq": seq,
        "created_at": _timestamp(created_at),
        "principal": principal,
        "person_id": None if person_id is None else str(person_id),
        "credential_id": credential_id,
        "credential_kind": credential_kind,
        "door": door,
        "operation": operation,
        "outcome": outcome,
        "targets": targets,
        "input_digest": input_digest,
        "prev_hash": prev_hash,
    }
    return _sha256(canonical_json(content))


def event_hash(event: AuditEvent) -> str:
    """The hash `event` ought to carry, recomputed from its other stored fields."""
    return _chain_hash(
        tenant_id=event.tenant_id,
        seq=event.seq,
        created_at=event.created_at,
        principal=event.principal,
        person_id=event.person_id,
        credential_id=event.credential_id,
        credential_kind=event.credential_kind,
        door=event.door,
        operation=event.operation,
        outcome=event.outcome,
        targets=event.targets,
        input_digest=event.input_digest,
        prev_hash=event.prev_hash,
    )


# Locks the head and, in the same round trip, lets PostgreSQL parse the targets: what is hashed
# is exactly what jsonb will give back (its own number spelling, its key order is sorted away).
_LOCK_HEAD = "SELECT seq, hash, %s::jsonb FROM audit_chainhead WHERE tenant_id = %s FOR UPDATE"
_CREATE_HEAD = "INSERT INTO audit_chainhead (tenant_id, seq, hash) VALUES (%s, 0, %s) ON CONFLICT DO NOTHING"
_APPEND = """
WITH event AS (
    INSERT INTO audit_auditevent (tenant_id, seq, created_at, principal, person_id, credential_id,
                                  credential_kind, door, operation, outcome, targets, input_digest,
                                  prev_hash, hash)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s)
    RETURNING id
)
UPDATE audit_chainhead AS head SET seq = %s, hash = %s FROM event WHERE head.tenant_id = %s RETURNING event.id
"""


def _check_arguments(
    *, principal: str, door: str, operation: str, outcome: str, credential_id: str, credential_kind: str,
    input_digest: str,
) -> None:  # fmt: skip
    if principal not in Principal.values:
        raise ValueError(f"principal must be one of {Principal.values}")
    if door not in Door.values:
        raise ValueError(f"door must be one of {Door.values}")
    if credential_kind not in CredentialKind.values:
        raise ValueError(f"credential_kind must be one of {CredentialKind.values}")
    if not 0 < len(operation) <= 200:
        raise ValueError("operation must be 1 to 200 characters")
    if not 0 < len(outcome) <= 50:
        raise ValueError("outcome must be 1 to 50 characters")
    if len(credential_id) > 100:
        raise ValueError("credential_id must be at most 100 characters")
    if input_digest and not _HEX64.fullmatch(input_digest):
        raise ValueError("input_digest must be '' or 64 lowercase hex digits (see input_digest())")


def append_event(
    *,
    tenant: Tenant,
    principal: str,
    door: str,
    operation: str,
    outcome: str,
    person_id: uuid.UUID | None = None,
    credential_id: str = "",
    credential_kind: str = "",
    targets: Sequence[Target] = (),
    input_digest: str = "",
) -> AuditEvent:
    """Append one event to the tenant's chain. Must be called inside the caller's transaction
    (transaction.atomic), so the event commits or rolls back together with the change it records.

    The tenant's chain head stays locked until that transaction ends, so every other append for
    the tenant waits: call this last, just before the transaction commits.
    """
    if not connection.in_atomic_block:
        raise TransactionManagementError(
            "append_event() must run inside the transaction of the change it records (transaction.atomic)"
        )
    _check_arguments(
        principal=principal, door=door, operation=operation, outcome=outcome,
        credential_id=credential_id, credential_kind=credential_kind, input_digest=input_digest,
    )  # fmt: skip
    tenant_id = tenant.pk
    if tenant_id is None:
        raise ValueError("append_event() needs a saved tenant")
    if person_id is not None and not isinstance(person_id, uuid.UUID):
        person_id = uuid.UUID(str(person_id))
    targets_json = canonical_json([{"id": str(t.id), "before": t.before, "after": t.after} for t in targets])
    with connection.cursor() as cursor:
        cursor.execute(_LOCK_HEAD, [targets_json, tenant_id])
        row = cursor.fetchone()
        if row is None:  # the tenant's first event: make its head, then take the same lock
            cursor.execute(_CREATE_HEAD, [tenant_id, ZERO_HASH])
            cursor.execute(_LOCK_HEAD, [targets_json, tenant_id])
            row = cursor.fetchone()
        head_seq, prev_hash, stored_targets = row
        seq = head_seq + 1
        # taken under the lock, so time never runs backwards along a chain
        created_at = timezone.now()
        stored = json.loads(stored_targets)
        fields = {
            "principal": principal,
            "person_id": person_id,
            "credential_id": credential_id,
            "credential_kind": credential_kind,
            "door": door,
            "operation": operation,
            "outcome": outcome,
            "input_digest": input_digest,
            "prev_hash": prev_hash,
        }
        digest = _chain_hash(tenant_id=tenant_id, seq=seq, created_at=created_at, targets=stored, **fields)
        cursor.execute(
            _APPEND,
            [
                tenant_id, seq, created_at, principal, person_id, credential_id, credential_kind, door,
                operation, outcome, targets_json, input_digest, prev_hash, digest,
                seq, digest, tenant_id,
            ],
        )  # fmt: skip
        (event_id,) = cursor.fetchone()
    event = AuditEvent(
        id=event_id, tenant=tenant, seq=seq, created_at=created_at, targets=stored, hash=digest, **fields
    )
    event._state.adding = False
    event._state.db = connection.alias
    return event


_WALK = """
SELECT id, seq, created_at, principal, person_id, credential_id, credential_kind, door, operation,
       outcome, targets, input_digest, prev_hash, hash
FROM audit_auditevent WHERE tenant_id = %s AND seq > %s AND seq <= %s ORDER BY seq LIMIT %s
"""
_HEAD = "SELECT seq, hash FROM audit_chainhead WHERE tenant_id = %s"
_NO_END = 2**63 - 1


class _Walker:
    """Checks one tenant's events in seq order, a chunk at a time (constant memory, no long transaction)."""

    def __init__(self, tenant_id: uuid.UUID) -> None:
        self.tenant_id = tenant_id
        self.checked = 0
        self.seq = 0
        self.hash = ZERO_HASH
        self.event_id: int | None = None

    def walk(self, upto: int = _NO_END) -> Break | None:
        """Check the events after the last one checked, up to seq `upto`."""
        while True:
            with connection.cursor() as cursor:
                cursor.execute(_WALK, [self.tenant_id, self.seq, upto, _WALK_CHUNK])
                rows = cursor.fetchall()
            for row in rows:
                if broken := self._check(row):
                    return broken
            if len(rows) < _WALK_CHUNK:
                return None

    def _check(self, row: tuple[Any, ...]) -> Break | None:
        (event_id, seq, created_at, principal, person_id, credential_id, credential_kind, door, operation,
         outcome, targets, digest, prev_hash, stored_hash) = row  # fmt: skip
        self.checked += 1
        if seq != self.seq + 1:
            return Break(self.tenant_id, seq, event_id, "sequence gap")
        if prev_hash != self.hash:
            return Break(self.tenant_id, seq, event_id, "previous hash mismatch")
        recomputed = _chain_hash(
            tenant_id=self.tenant_id, seq=seq, created_at=created_at, principal=principal,
            person_id=person_id, credential_id=credential_id, credential_kind=credential_kind, door=door,
            operation=operation, outcome=outcome, targets=json.loads(targets), input_digest=digest,
            prev_hash=prev_hash,
        )  # fmt: skip
        if recomputed != stored_hash:
            return Break(self.tenant_id, seq, event_id, "hash mismatch")
        self.seq, self.hash, self.event_id = seq, stored_hash, event_id
        return None


def verify_chain(tenant_id: uuid.UUID) -> tuple[int, Break | None]:
    """Walk one tenant's chain in seq order (streaming, constant memory).

    Returns (events checked, the first break or None).

    Safe while others append: the head is read after the walk, and an event and its head move
    commit together, so any head seen later is covered by walking on up to its seq.
    """
    walker = _Walker(tenant_id)
    if broken := walker.walk():
        return walker.checked, broken
    with connection.cursor() as cursor:
        cursor.execute(_HEAD, [tenant_id])
        head_seq, head_hash = cursor.fetchone() or (0, ZERO_HASH)
    # appended meanwhile, or the chain's tail is gone
    if head_seq > walker.seq and (broken := walker.walk(upto=head_seq)):
        return walker.checked, broken
    if head_seq < walker.seq:
        # events the head never saw were put in beside it: the first of them is the break
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id FROM audit_auditevent WHERE tenant_id = %s AND seq = %s", [tenant_id, head_seq + 1]
            )
            extra = cursor.fetchone()
        return walker.checked, Break(tenant_id, head_seq + 1, extra[0] if extra else None, "head mismatch")
    if head_seq > walker.seq:
        return walker.checked, Break(tenant_id, walker.seq + 1, None, "head mismatch")
    if head_hash != walker.hash:
        return walker.checked, Break(tenant_id, walker.seq, walker.event_id, "head mismatch")
    return walker.checked, None


def verify_all(tenant_id: uuid.UUID | None = None) -> list[tuple[uuid.UUID, int, Break | None]]:
    """verify_chain for one tenant, or for every tenant; raises UnknownTenantError for an unknown id."""
    if tenant_id is not None:
        if not Tenant.objects.filter(pk=tenant_id).exists():
            raise UnknownTenantError(str(tenant_id))
        tenant_ids = [tenant_id]
    else:
        tenant_ids = list(Tenant.objects.order_by("created_at", "id").values_list("id", flat=True))
    return [(tid, *verify_chain(tid)) for tid in tenant_ids]
