"""The gate: the one way in for every door (SPEC §4).

exposure → authority → input → data scope → class → confirmation → limits →
run in a transaction, validate the output, audit in that same transaction.
Every call appends exactly one audit event, refusals included.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone
from psycopg.pq import TransactionStatus
from pydantic import BaseModel, ValidationError

from apps.audit.log import append_event, input_digest
from apps.core.bounds import bounds
from apps.core.callers import Caller, DoorMismatchError
from apps.core.changes import REVERSES, Change
from apps.core.errors import OakenError
from apps.core.kinds import DOORS_OF, Door, Principal
from apps.core.schema_paths import UNKNOWN_ARGUMENT, dotted, known_path
from apps.gate import confirmation, idempotency, payload
from apps.gate.preflight import reachable
from apps.operations import reads
from apps.operations.context import Context
from apps.operations.registry import OpClass, Operation, Preview, registry

log = logging.getLogger("oaken.gate")
_DATABASE_AWAY = (OperationalError, InterfaceError)


def _database_away(operation: str, exc: BaseException) -> OakenError:
    """The database went away (a restart, a failover): logged by the exception's type, answered
    SERVICE_UNAVAILABLE; whatever the call had begun rolled back with it."""
    log.error("operation %s: the database is unavailable: %s", operation, type(exc).__name__)
    return OakenError("SERVICE_UNAVAILABLE", "the database cannot be reached right now; nothing was changed")


def _failed(operation: str, doing: str, exc: BaseException) -> OakenError:
    """A bug in one of the operation's steps (`doing`, as the log says it): logged by the exception's type alone
    and answered INTERNAL_ERROR, never with its message, which could quote the input."""
    log.error("operation %s %s: %s", operation, doing, type(exc).__name__)
    return OakenError("INTERNAL_ERROR", "the operation failed and changed nothing")


# what the audit records for a call of a name no operation has: the name is the caller's own text, never stored
UNKNOWN_OPERATION = "(unknown operation)"


def _audited_name(name: Any) -> str:
    """The operation a call names, as its audit event records it: a registered operation's name, else
    UNKNOWN_OPERATION (an agent could otherwise write text of its choosing into the audit log)."""
    return name if isinstance(name, str) and registry.get(name) is not None else UNKNOWN_OPERATION


def _composed(ctx: Context) -> Callable[..., dict[str, Any]]:
    """ctx.call for an operation made of other calls: each one the whole gate, as the same caller through the same
    door, confirmed by the confirmation the composing call was given, inside its transaction (so its event and its
    change commit or roll back with the composing call's)."""

    def call(name: str, raw_input: dict[str, Any], *, reverses: int | None = None) -> dict[str, Any]:
        return dispatch(ctx.caller, ctx.door, name, raw_input, confirm=True, reverses=reverses).output

    return call


@dataclass(frozen=True)
class Result:
    operation: str
    output: dict[str, Any]
    replayed: bool = False


class _Audited(OakenError):
    """A refusal whose audit event was already written with the change it belongs to."""


def dispatch(
    caller: Caller,
    door: Door | str,
    name: str,
    raw_input: Any,
    *,
    confirm: bool = False,
    confirmation_token: str | None = None,
    idempotency_key: str | None = None,
    began: datetime | None = None,
    reverses: int | None = None,
) -> Result:
    """Check, run and audit one call of operation `name`; raises OakenError on any refusal. `began`: the time of
    the call a client made, when this is a waiting operation's call again (apps.gate.waiting). `reverses`: the
    sequence number of the audit event this call undoes (a composing operation's ctx.call), recorded first among
    its event's targets as {"id": "reverses", "after": {"event": seq}}."""
    door = Door(door)
    if door not in DOORS_OF[caller.principal]:
        raise DoorMismatchError(f"a {caller.principal} cannot call through the {door} door")
    digest = ""
    op_name = _audited_name(name)
    try:
        op = reachable(caller, door, name)
        data = _parse(op, raw_input)
        digest = input_digest(data.model_dump(mode="json"))
        if idempotency_key is not None:
            idempotency.check_key(op, idempotency_key)
            # A key that already succeeded answers as it did then, whatever has changed since
            # (the message it deleted is gone, the confirmation it needed was given). Only a call that completed
            # binds its key: a refused or failed one changed nothing and kept nothing (docs/gate.md).
            stored = idempotency.stored_response(caller, op.name, idempotency_key, digest)
            if stored is not None:
                _append(caller, door.value, op.name, "REPLAYED", digest, alone=True)
                return Result(op.name, stored, replayed=True)
        ctx = Context(caller=caller, door=door.value, now=timezone.now(), bounds=bounds, began=began)
        if reverses is not None:
            ctx.touch(REVERSES, None, {"event": reverses})
        if op.composes:
            ctx.call = _composed(ctx)
        if op.targets is not None:
            ctx.targets = op.targets(ctx, data)
        _class(caller, op)
        if op.op_class == OpClass.MUTATE:
            _confirmation(ctx, op, data, digest, confirm=confirm, token=confirmation_token)
        _limits(op, data)
        if op.verify is not None:
            _verify(op, ctx, data)
        if op.gather is not None:
            ctx.gathered = _gather(op, ctx, data)
        return _run(ctx, op, data, digest, idempotency_key)
    except _Audited:
        raise
    except OakenError as refusal:
        _audit_refusal(caller, door, op_name, refusal.code, digest, refusal.record)
        raise
    except _DATABASE_AWAY as exc:
        away = _database_away(op_name, exc)
        _audit_refusal(caller, door, op_name, "SERVICE_UNAVAILABLE", digest)
        raise away from None
    except Exception as exc:
        # a bug in a step before the handler (resolving targets, a preview, a confirmation): answered and audited
        # like a failing handler, its message never repeated (it could quote the input)
        failed = _failed(op_name, "failed before it ran", exc)
        _audit_refusal(caller, door, op_name, "INTERNAL_ERROR", digest)
        raise failed from None


# pydantic messages that can quote a piece of the input (a UUID's stray character, a union's tag): a fixed phrase
_FIXED_MESSAGES = {
    "uuid_parsing": "Input should be a valid UUID",
    "union_tag_invalid": "does not name one of the kinds this field takes",
    "json_invalid": "Input should be valid JSON",
}


@cache
def _input_schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()


def _refusal_at(op: Operation, loc: Sequence[str | int], phrase: str, *, extra: bool = False) -> OakenError:
    """INVALID_INPUT at `loc`, naming only the part of it the operation's schema knows (never a key the caller
    made up: that would echo the input)."""
    known = known_path(_input_schema(op.input_model), loc)
    if extra:
        if known:
            return OakenError.invalid(dotted(known), f"holds {UNKNOWN_ARGUMENT}, not a field of this operation")
        return OakenError.invalid("", f"{UNKNOWN_ARGUMENT} was sent, not a field of this operation")
    if len(known) == len(loc):
        return OakenError.invalid(dotted(loc), phrase)
    if known:
        return OakenError.invalid(dotted(known), f"a value inside it {phrase}")
    return OakenError.invalid("", f"{UNKNOWN_ARGUMENT} {phrase}")


def _parse(op: Operation, raw: Any) -> BaseModel:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise OakenError.invalid("", "input must be a JSON object")
    try:
        payload.check_storable(raw, lambda path, phrase: _refusal_at(op, path, phrase))
    except payload.TooManyItemsError as refused:  # named, like every refusal, only as far as the schema knows
        known = known_path(_input_schema(op.input_model), refused.path)
        raise payload.TooManyItemsError(known, per_container=refused.per_container) from None
    try:
        return op.input_model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False, include_context=False)[0]
        kind, loc = first["type"], tuple(first["loc"])
        if kind == "extra_forbidden":
            raise _refusal_at(op, loc, "", extra=True) from None
        message = "is required" if kind == "missing" else _FIXED_MESSAGES.get(kind, str(first["msg"]))
        known = known_path(_input_schema(op.input_model), loc)
        raise OakenError.invalid(dotted(known), message) from None


def _class(caller: Caller, op: Operation) -> None:
    if op.op_class == OpClass.SEND and caller.principal == Principal.AGENT:
        raise OakenError("FORBIDDEN", "agents cannot send; they request outbound mail, which a person approves")


def proposal(op: Operation, preview: Preview | None) -> dict[str, Any]:
    """What a confirmation-required answer carries: ids with before/after values, a count, and what the person
    must be shown. It is answered, never stored: the audit keeps the input's digest, so a send request's body
    in its proposal is never written down."""
    if preview is None:
        return {"operation": op.name, "changes": [], "count": None, "summary": op.summary}
    offer: dict[str, Any] = {
        "operation": op.name,
        "changes": [{"id": c.id, "before": c.before, "after": c.after} for c in preview.changes],
        "count": preview.count,
        "summary": preview.summary or op.summary,
    }
    if preview.shown:
        offer["shown"] = preview.shown
    # the person's dialog: a question, a verb and a short list in words (the changes stay for programs)
    for key, value in (("title", preview.title), ("verb", preview.verb), ("lines", list(preview.lines))):
        if value:
            offer[key] = value
    return offer


def _confirmation(
    ctx: Context, op: Operation, data: BaseModel, digest: str, *, confirm: bool, token: str | None
) -> None:
    caller = ctx.caller
    if caller.principal == Principal.INTERNAL or not op.confirm.needs_confirmation(data, ctx.bounds):
        return
    if op.completed is not None and op.completed(ctx, data):
        return  # a retry of what was already confirmed: the handler answers with what the first call made
    if caller.principal == Principal.PERSON:
        if confirm:
            return
        preview = op.preview(ctx, data) if op.preview is not None else None
        raise OakenError(
            "CONFIRMATION_REQUIRED",
            "confirm this change: repeat the call with confirm set",
            proposal=proposal(op, preview),
        )
    if token:
        confirmation.redeem(caller=caller, token=token, operation=op.name, digest=digest)
        return
    assert op.preview is not None  # the registry guarantees a preview for mutations agents can reach
    preview = op.preview(ctx, data)
    with transaction.atomic():
        issued, ttl = confirmation.issue(
            caller=caller,
            operation=op.name,
            digest=digest,
            ttl_seconds=ctx.bounds.CONFIRMATION_TTL_SECONDS,
            cap=ctx.bounds.CONFIRMATION_TOKENS_PER_CALLER,
        )
        _append(caller, ctx.door, op.name, "CONFIRMATION_REQUIRED", digest)
    offer = proposal(op, preview) | {"token": issued, "expires_in": ttl}
    raise _Audited(
        "CONFIRMATION_REQUIRED",
        "nothing has changed yet: show this proposal to the user, then repeat the same call with confirmation_token",
        proposal=offer,
    )


def _limits(op: Operation, data: BaseModel) -> None:
    for bound in op.bounds:
        value = getattr(data, bound.field, None)
        if value is None:
            continue
        size = value if isinstance(value, int) else len(value)
        maximum = bounds[bound.setting]
        if size > maximum:
            message = bound.message.format(field=bound.field, maximum=maximum)
            raise OakenError("LIMIT_EXCEEDED", message, field=bound.field)


def _verify(op: Operation, ctx: Context, data: BaseModel) -> None:
    """The operation's check against the outside world: a refusal passes through; anything else is a bug,
    answered (and audited) like a failing handler, its message never repeated (it could quote the input)."""
    assert op.verify is not None
    try:
        op.verify(ctx, data)
    except OakenError:
        raise
    except Exception as exc:
        raise _failed(op.name, "failed to verify its input", exc) from None


def _gather(op: Operation, ctx: Context, data: BaseModel) -> Any:
    """The operation's work outside the database (no transaction is open): a refusal passes through; anything
    else is a bug, answered like a failing handler, its message never repeated."""
    assert op.gather is not None
    try:
        return op.gather(ctx, data)
    except (OakenError, *_DATABASE_AWAY):
        raise
    except Exception as exc:
        raise _failed(op.name, "failed while gathering", exc) from None


def _output(op: Operation, produced: Any) -> dict[str, Any]:
    """The handler's result as JSON; anything but an instance of the declared model (validated when it was built)
    is checked against it (a ValidationError here is the handler's bug)."""
    if type(produced) is not op.output_model:
        produced = op.output_model.model_validate(
            produced.model_dump() if isinstance(produced, BaseModel) else produced
        )
    output: dict[str, Any] = produced.model_dump(mode="json")
    return output


def _run(ctx: Context, op: Operation, data: BaseModel, digest: str, idempotency_key: str | None) -> Result:
    if op.commits_in_batches:
        return _run_in_batches(ctx, op, data, digest)
    caller = ctx.caller
    try:
        with transaction.atomic():
            if idempotency_key is not None:
                stored = idempotency.claim(caller, op.name, idempotency_key, digest)
                if stored is not None:
                    _append(caller, ctx.door, op.name, "REPLAYED", digest)
                    return Result(op.name, stored, replayed=True)
            ctx.in_transaction = True
            if op.op_class != OpClass.READ and op.targets is not None:
                # a change works from what it reads inside its own transaction, not from the checks' reads
                ctx.targets = op.targets(ctx, data)
            output = _output(op, op.handler(ctx, data))
            if op.returns_mail and caller.principal == Principal.AGENT:
                # what this agent was given, kept for its credential before the answer leaves (SPEC §23)
                reads.record(caller, output)
            if idempotency_key is not None:
                idempotency.keep(caller, op.name, idempotency_key, output)
            alone = _holds_nothing()
            if not alone:
                _append(caller, ctx.door, op.name, "ok", digest, ctx.touched, durable=op.op_class != OpClass.READ)
        if alone:
            # the call ran no statement in its transaction (a read whose rows were read with its targets): its
            # event is that whole transaction, appended as one statement that commits by itself
            _append(
                caller, ctx.door, op.name, "ok", digest, ctx.touched, durable=op.op_class != OpClass.READ, alone=True
            )
    except OakenError:
        raise
    except ValidationError as exc:
        # the handler returned something its output model does not allow: a bug, and nothing commits
        raise _failed(op.name, "returned an invalid output", exc) from None
    except _DATABASE_AWAY as exc:
        # the database went away mid-call (a restart, a failover): the transaction rolled back with it
        raise _database_away(op.name, exc) from None
    except Exception as exc:
        raise _failed(op.name, "failed", exc) from None
    return Result(op.name, output)


def _run_in_batches(ctx: Context, op: Operation, data: BaseModel, digest: str) -> Result:
    """An operation that commits its own batches (an import) runs outside a transaction: its progress shows
    while it runs, and a failure keeps the batches it finished. Its one event follows in a transaction of its
    own, with what the handler recorded, whether it finished or failed."""
    caller = ctx.caller
    try:
        if op.targets is not None:
            # no transaction to resolve them in: as near to the work as the gate gets, after the checks
            ctx.targets = op.targets(ctx, data)
        output = _output(op, op.handler(ctx, data))
    except OakenError:
        raise
    except Exception as exc:
        _failed(op.name, "failed", exc)  # logged; the answer says what was kept
        with transaction.atomic():
            _append(caller, ctx.door, op.name, "INTERNAL_ERROR", digest, ctx.touched, durable=True)
        raise _Audited("INTERNAL_ERROR", "the operation failed; the batches it had finished are kept") from None
    with transaction.atomic():
        _append(caller, ctx.door, op.name, "ok", digest, ctx.touched, durable=True)
    return Result(op.name, output)


def _holds_nothing() -> bool:
    """Whether the transaction this (outermost) block opened has sent no statement yet and waits on no commit hook:
    psycopg sends BEGIN with a transaction's first statement, so the server has no transaction to commit."""
    raw = connection.connection
    return (
        len(connection.atomic_blocks) == 1
        and not connection.run_on_commit
        and (raw is None or raw.info.transaction_status == TransactionStatus.IDLE)
    )


def _append(
    caller: Caller,
    door: str,
    operation: str,
    outcome: str,
    digest: str,
    touched: list[Any] | None = None,
    *,
    durable: bool = False,
    alone: bool = False,
) -> None:
    """Audit this call. Only events that record a change wait for the disk before the call answers. `alone`: the
    event is the whole of its transaction (apps.audit.log.append_event); inside a caller's own transaction it is
    a savepoint of it, so a failed append leaves that transaction usable."""
    with transaction.atomic() if alone and connection.in_atomic_block else nullcontext():
        append_event(
            caller,
            door=door,
            operation=operation,
            outcome=outcome,
            targets=[Change(c.id, c.before, c.after) for c in touched or ()],
            input_digest=digest,
            durable=durable,
            alone=alone,
        )


def audit_refusal(caller: Caller, door: Door, name: str, code: str) -> None:
    """Audit a call of `name` that a door refused before it could reach the gate (a repeated call whose
    state did not hold, say), as the gate audits its own refusals: no input, only the code."""
    _audit_refusal(caller, door, _audited_name(name), code, "")


def _audit_refusal(
    caller: Caller, door: Door, operation: str, code: str, digest: str, record: Callable[[], None] | None = None
) -> None:
    """Audit a refusal; with what the refusal itself writes (`record`: a budget found spent), in one transaction."""
    try:
        if record is None:
            _append(caller, door.value, operation, code, digest, alone=True)
            return
        with transaction.atomic():
            _recorded(operation, record)
            _append(caller, door.value, operation, code, digest)
    except _DATABASE_AWAY as exc:
        # nothing can be written while the database is away, and the refusal changed nothing: the caller still
        # gets its answer (SERVICE_UNAVAILABLE, or the refusal) rather than a crash
        log.error("a refusal of %s could not be audited (database unavailable): %s", operation, type(exc).__name__)


def _recorded(operation: str, record: Callable[[], None]) -> None:
    """Run a refusal's own write in a savepoint: a bug in it is logged by its type, and the refusal is audited
    (and answered) all the same."""
    try:
        with transaction.atomic():
            record()
    except _DATABASE_AWAY:
        raise
    except Exception as exc:
        log.error("operation %s: what its refusal records was not written: %s", operation, type(exc).__name__)
