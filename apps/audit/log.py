"""Appending to a tenant's audit chain, and walking chains to find the first broken link.

Each event stores the hash of the one before it (`prev_hash`) and a sha256 over its own
canonical content (`hash`), so editing, removing, inserting or reordering events shows up
when the chain is walked. Appends are made linear by locking the tenant's `ChainHead` row:
the next event's seq and prev_hash come from the head, never from "the newest event".
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict, Unpack

from django.db import connection, transaction
from django.db.transaction import TransactionManagementError

from apps.audit.chainfile import canonical_json, sha256_hex
from apps.audit.events import INTERNAL_EVENTS
from apps.audit.models import ZERO_HASH, AuditEvent
from apps.core.callers import Caller
from apps.core.changes import Change
from apps.core.kinds import CredentialKind, Door, Principal
from apps.workspaces.models import Tenant

log = logging.getLogger("oaken.audit")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_PRINCIPALS = frozenset(Principal.values)
_DOORS = frozenset(Door.values)
_CREDENTIAL_KINDS = frozenset(CredentialKind.values)
_WALK_CHUNK = 2000


@dataclass(frozen=True)
class Break:
    """The first event at which a chain does not hold."""

    tenant_id: uuid.UUID
    seq: int
    event_id: int | None  # None when the event that should be there is missing
    reason: str  # 'hash mismatch', 'previous hash mismatch', 'sequence gap' or 'head mismatch'


class UnknownTenantError(LookupError):
    """No tenant has this id."""


# canonical_json (the one JSON spelling) and the digest live in apps.audit.chainfile, which an exported chain is
# verified with offline: the chain and its verifier cannot spell an event two ways
_sha256 = sha256_hex


def input_digest(payload: object) -> str:
    """sha256 hex over canonical JSON (sorted keys, no whitespace, ensure_ascii=False, default=str)."""
    return _sha256(canonical_json(payload))


def _timestamp(value: datetime) -> str:
    """ISO-8601 UTC at microseconds, the precision PostgreSQL keeps."""
    return value.astimezone(UTC).isoformat(timespec="microseconds")


# Filled in by the database under the chain head's lock; every other hashed field is known before.
_FILLED_UNDER_LOCK = ("created_at", "prev_hash", "seq")

# The stored fields an event's hash covers besides its tenant, written once: the walk selects them in this order,
# and recomputing a stored event's hash and exporting it read the same list (_stored_fields).
HASHED_FIELDS = (
    "seq",
    "created_at",
    "principal",
    "person_id",
    "credential_id",
    "credential_kind",
    "door",
    "operation",
    "outcome",
    "targets",
    "input_digest",
    "prev_hash",
)


def _content(
    *,
    tenant_id: uuid.UUID,
    principal: str,
    person_id: uuid.UUID | None,
    credential_id: str,
    credential_kind: str,
    door: str,
    operation: str,
    outcome: str,
    targets: Any,
    input_digest: str,
) -> dict[str, Any]:
    """The hashed fields of an event, less those in _FILLED_UNDER_LOCK."""
    return {
        "tenant_id": str(tenant_id),
        "principal": principal,
        "person_id": None if person_id is None else str(person_id),
        "credential_id": credential_id,
        "credential_kind": credential_kind,
        "door": door,
        "operation": operation,
        "outcome": outcome,
        "targets": targets,
        "input_digest": input_digest,
    }


def _hashed(*, created_at: datetime, prev_hash: str, seq: int, **fields: Any) -> dict[str, Any]:
    content = _content(**fields)
    content.update(created_at=_timestamp(created_at), prev_hash=prev_hash, seq=seq)
    return content


def _chain_hash(**fields: Any) -> str:
    return _sha256(canonical_json(_hashed(**fields)))


def _hash_frame(content: dict[str, Any]) -> list[str]:
    """The event's canonical JSON cut where created_at, prev_hash and seq go, in that (sorted) order.

    The append statement joins these four pieces around the values it takes under the lock and
    hashes the result, so it is the very text _chain_hash() hashes (a test holds them together).
    """
    pieces: list[str] = []
    text = ""
    for i, key in enumerate(sorted([*content, *_FILLED_UNDER_LOCK])):
        text += ("{" if i == 0 else ",") + canonical_json(key) + ":"
        if key in content:
            text += canonical_json(content[key])
        else:
            quote = "" if key == "seq" else '"'
            pieces.append(text + quote)
            text = quote
    pieces.append(text + "}")
    return pieces


def _stored_fields(event: AuditEvent) -> dict[str, Any]:
    """The hashed fields of a stored event, as the database holds them."""
    return {"tenant_id": event.tenant_id, **{name: getattr(event, name) for name in HASHED_FIELDS}}


def event_hash(event: AuditEvent) -> str:
    """The hash `event` ought to carry, recomputed from its other stored fields."""
    return _chain_hash(**_stored_fields(event))


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_float(v) for v in value)
    return False


def _stored_form(targets: Sequence[Change]) -> Any:
    """The targets exactly as they will read back from the database, which is what gets hashed."""
    value = json.loads(canonical_json([{"id": str(t.id), "before": t.before, "after": t.after} for t in targets]))
    if _has_float(value):
        # jsonb spells some numbers its own way (1e16 comes back as an integer): ask it
        with connection.cursor() as cursor:
            cursor.execute("SELECT %s::jsonb", [canonical_json(value)])
            value = json.loads(cursor.fetchone()[0])
    return value


_CREATE_HEAD = "INSERT INTO audit_chainhead (tenant_id, seq, hash) VALUES (%s, 0, %s) ON CONFLICT DO NOTHING"

# One round trip from taking the head's lock to moving the head: lock, time, link, hash, insert,
# advance. The hash is sha256 over the frame's pieces joined around created_at, prev_hash and seq.
_APPEND = """
WITH locked AS (
    SELECT seq + 1 AS seq, hash AS prev_hash, clock_timestamp() AS created_at
    FROM audit_chainhead WHERE tenant_id = %(tenant_id)s FOR UPDATE
), sealed AS (
    SELECT seq, prev_hash, created_at, encode(sha256(convert_to(
               %(frame0)s || to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')
               || %(frame1)s || prev_hash || %(frame2)s || seq || %(frame3)s, 'UTF8')), 'hex') AS hash
    FROM locked
), event AS (
    INSERT INTO audit_auditevent (tenant_id, seq, created_at, principal, person_id, credential_id,
                                  credential_kind, door, operation, outcome, targets, input_digest,
                                  prev_hash, hash)
    SELECT %(tenant_id)s, seq, created_at, %(principal)s, %(person_id)s, %(credential_id)s,
           %(credential_kind)s, %(door)s, %(operation)s, %(outcome)s, %(targets)s::jsonb, %(input_digest)s,
           prev_hash, hash
    FROM sealed
    RETURNING id, seq, created_at, prev_hash, hash
)
UPDATE audit_chainhead AS head SET seq = event.seq, hash = event.hash
FROM event WHERE head.tenant_id = %(tenant_id)s
RETURNING event.id, event.seq, event.created_at, event.prev_hash, event.hash,
          set_config('synchronous_commit', 'off', true)
"""


def _make_durable() -> None:
    """Wait until the WAL holding the just-committed transaction is flushed (see append_record)."""
    with connection.cursor() as cursor:
        # a write of its own, committed at the session's synchronous_commit level: its flush
        # covers every earlier commit record, ours included
        cursor.execute("SELECT pg_logical_emit_message(true, 'oaken.audit', '')")


def _check_arguments(
    *,
    principal: str,
    door: str,
    operation: str,
    outcome: str,
    credential_id: str,
    credential_kind: str,
    input_digest: str,
) -> None:
    if principal not in _PRINCIPALS:
        raise ValueError(f"principal must be one of {sorted(_PRINCIPALS)}")
    if door not in _DOORS:
        raise ValueError(f"door must be one of {sorted(_DOORS)}")
    if credential_kind not in _CREDENTIAL_KINDS:
        raise ValueError(f"credential_kind must be one of {sorted(_CREDENTIAL_KINDS)}")
    if not 0 < len(operation) <= 200:
        raise ValueError("operation must be 1 to 200 characters")
    if not 0 < len(outcome) <= 50:
        raise ValueError("outcome must be 1 to 50 characters")
    if len(credential_id) > 100:
        raise ValueError("credential_id must be at most 100 characters")
    if input_digest and not _HEX64.fullmatch(input_digest):
        raise ValueError("input_digest must be '' or 64 lowercase hex digits (see input_digest())")


class _Recorded(TypedDict, total=False):
    """What append_event records of a call besides who made it (append_record's arguments of the same names)."""

    targets: Sequence[Change]
    input_digest: str
    durable: bool
    alone: bool


def append_event(
    caller: Caller, *, door: str, operation: str, outcome: str, **recorded: Unpack[_Recorded]
) -> AuditEvent:
    """Append one event of a call `caller` made through `door`, by the rules of append_record: what it records of
    who called (tenant, principal, person, credential) is the caller's own, read here and nowhere else."""
    user = caller.user
    who: dict[str, Any] = {
        "tenant": caller.tenant,
        "principal": Principal(caller.principal).value,
        "person_id": None if user is None else user.pk,
        "credential_id": caller.credential_id,
        "credential_kind": caller.credential_kind,
    }
    return append_record(**who, door=door, operation=operation, outcome=outcome, **recorded)


def append_record(
    *,
    tenant: Tenant,
    principal: str,
    door: str,
    operation: str,
    outcome: str,
    person_id: uuid.UUID | None = None,
    credential_id: str = "",
    credential_kind: str = "",
    targets: Sequence[Change] = (),
    input_digest: str = "",
    durable: bool = True,
    alone: bool = False,
) -> AuditEvent:
    """Append one event to the tenant's chain. Must be called inside the caller's transaction
    (transaction.atomic), so the event commits or rolls back together with the change it records.

    alone=True is for an event with nothing to share a transaction with: a call that ran no statement (a refusal,
    a replay, a read whose rows were read before its transaction began). Outside any transaction the append is
    then one statement that commits by itself, which is what BEGIN, the append and COMMIT would be, with two round
    trips fewer; inside one (a caller's own block) it joins it like any event.

    The tenant's chain head stays locked until that transaction ends, so every other append for
    the tenant waits: call this last, just before the transaction commits.

    Durability without holding the lock through the disk flush: a synchronous commit keeps its
    locks until the WAL is flushed (~1-2 ms on an ordinary disk), which would cap a tenant at a
    few hundred events/s. So the transaction commits asynchronously (locks go at once; still
    all-or-nothing), and a commit hook, run before any other, waits for the flush at the
    session's own synchronous_commit level before the caller's `atomic` block returns;
    concurrent appenders' waits share fsyncs. A crash can lose a transaction only together with
    its event, only one not yet answered (unless that wait failed, which is logged), and never a
    middle link, since WAL replays in order.

    durable=False skips that wait, for events that record no change (reads, refusals): they reach
    the disk with the WAL writer's next flush, a fraction of a second later.
    """
    standalone = not connection.in_atomic_block
    if standalone and not alone:
        raise TransactionManagementError(
            "append_event() must run inside the transaction of the change it records (transaction.atomic)"
        )
    _check_arguments(
        principal=principal,
        door=door,
        operation=operation,
        outcome=outcome,
        credential_id=credential_id,
        credential_kind=credential_kind,
        input_digest=input_digest,
    )
    tenant_id = tenant.pk
    if tenant_id is None:
        raise ValueError("append_event() needs a saved tenant")
    if person_id is not None and not isinstance(person_id, uuid.UUID):
        person_id = uuid.UUID(str(person_id))
    fields = {
        "principal": principal,
        "person_id": person_id,
        "credential_id": credential_id,
        "credential_kind": credential_kind,
        "door": door,
        "operation": operation,
        "outcome": outcome,
        "targets": _stored_form(targets),
        "input_digest": input_digest,
    }
    frame = _hash_frame(_content(tenant_id=tenant_id, **fields))
    params = {
        **fields,
        "tenant_id": tenant_id,
        "targets": canonical_json(fields["targets"]),
        **{f"frame{i}": piece for i, piece in enumerate(frame)},
    }
    with connection.cursor() as cursor:
        cursor.execute(_APPEND, params)
        row = cursor.fetchone()
    if row is None:  # the tenant's first event: make its head, then append under its lock, in one transaction
        with transaction.atomic(savepoint=False), connection.cursor() as cursor:
            cursor.execute(_CREATE_HEAD, [tenant_id, ZERO_HASH])
            cursor.execute(_APPEND, params)
            row = cursor.fetchone()
    event_id, seq, created_at, prev_hash, digest, _ = row
    if durable and standalone:
        try:  # committed already: as robust as the commit hook below
            _make_durable()
        except Exception as exc:
            log.error("an audit event was committed but waiting for its flush failed: %s", type(exc).__name__)
    elif durable:
        # robust: the commit has happened, so a failed wait is logged, not raised at the caller (the
        # WAL writer flushes within a few hundred ms on its own)
        transaction.on_commit(_make_durable, robust=True)
        # first of the commit hooks: nothing may act on this transaction's outcome before it is durable
        connection.run_on_commit.insert(0, connection.run_on_commit.pop())
    event = AuditEvent(
        id=event_id, tenant=tenant, seq=seq, created_at=created_at, prev_hash=prev_hash, hash=digest, **fields
    )
    event._state.adding = False
    event._state.db = connection.alias
    return event


def append_internal_event(kind: str, *, tenant: Tenant, targets: Sequence[Change]) -> AuditEvent:
    """Append an event of the system's own work outside the gate (apps.audit.events), inside the transaction of
    the change it records; a name not documented there is refused, so no unregistered name reaches a chain."""
    if kind not in INTERNAL_EVENTS:
        raise ValueError("not an internal event kind: add it to apps.audit.events.INTERNAL_EVENTS")
    internal = Caller.internal(tenant)
    return append_event(internal, door=Door.INTERNAL.value, operation=kind, outcome="ok", targets=targets)


_WALK = f"""
SELECT id, {", ".join(HASHED_FIELDS)}, hash
FROM audit_auditevent WHERE tenant_id = %s AND seq > %s AND seq <= %s ORDER BY seq LIMIT %s
"""  # noqa: S608 (every name is the model's own field; every value is a parameter)
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
        event_id, *values, stored_hash = row
        fields = dict(zip(HASHED_FIELDS, values, strict=True))
        seq, prev_hash = fields["seq"], fields["prev_hash"]
        self.checked += 1
        if seq != self.seq + 1:
            return Break(self.tenant_id, seq, event_id, "sequence gap")
        if prev_hash != self.hash:
            return Break(self.tenant_id, seq, event_id, "previous hash mismatch")
        fields["targets"] = json.loads(fields["targets"])
        recomputed = _chain_hash(tenant_id=self.tenant_id, **fields)
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
    status = chain_status(tenant_id)
    return status.checked, status.broken


@dataclass(frozen=True)
class ChainStatus:
    """A walk of one chain: events checked, the first break (None: intact) and the head hash it reached."""

    checked: int
    broken: Break | None
    head_hash: str
    head_seq: int = 0  # the sequence number of the last event the walk accepted


def chain_status(tenant_id: uuid.UUID) -> ChainStatus:
    """verify_chain, with the hash of the last event the walk accepted (the head's, when the chain is intact)."""
    walker = _Walker(tenant_id)
    broken = _walk_to_head(walker, tenant_id)
    return ChainStatus(walker.checked, broken, walker.hash, walker.seq)


def committed_chain_status(tenant_id: uuid.UUID) -> ChainStatus:
    """chain_status of the chain as committed before this call, walked in one transaction of its own (a savepoint
    inside the caller's): the event the caller is about to append comes after it."""
    with transaction.atomic():
        return chain_status(tenant_id)


def _walk_to_head(walker: _Walker, tenant_id: uuid.UUID) -> Break | None:
    if broken := walker.walk():
        return broken
    with connection.cursor() as cursor:
        cursor.execute(_HEAD, [tenant_id])
        head_seq, head_hash = cursor.fetchone() or (0, ZERO_HASH)
    # appended meanwhile, or the chain's tail is gone
    if head_seq > walker.seq and (broken := walker.walk(upto=head_seq)):
        return broken
    if head_seq < walker.seq:
        # events the head never saw were put in beside it: the first of them is the break
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id FROM audit_auditevent WHERE tenant_id = %s AND seq = %s", [tenant_id, head_seq + 1]
            )
            extra = cursor.fetchone()
        return Break(tenant_id, head_seq + 1, extra[0] if extra else None, "head mismatch")
    if head_seq > walker.seq:
        return Break(tenant_id, walker.seq + 1, None, "head mismatch")
    if head_hash != walker.hash:
        return Break(tenant_id, walker.seq, walker.event_id, "head mismatch")
    return None


def exported_line(event: AuditEvent) -> str:
    """One event as a line of an export: its hashed fields and its stored hash, in canonical JSON (the form
    apps.audit.chainfile verifies offline). What the database holds, so a changed row shows in the file too."""
    content = _hashed(**_stored_fields(event))
    return canonical_json({**content, "hash": event.hash})


def head_seq(tenant_id: uuid.UUID) -> int:
    """The sequence number of the tenant's newest event (0 before its first)."""
    with connection.cursor() as cursor:
        cursor.execute(_HEAD, [tenant_id])
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def verify_all(tenant_id: uuid.UUID | None = None) -> list[tuple[uuid.UUID, int, Break | None]]:
    """verify_chain for one tenant, or for every tenant; raises UnknownTenantError for an unknown id."""
    if tenant_id is not None:
        if not Tenant.objects.filter(pk=tenant_id).exists():
            raise UnknownTenantError(str(tenant_id))
        tenant_ids = [tenant_id]
    else:
        tenant_ids = list(Tenant.objects.order_by("created_at", "id").values_list("id", flat=True))
    return [(tid, *verify_chain(tid)) for tid in tenant_ids]
