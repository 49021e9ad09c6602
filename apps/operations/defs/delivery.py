"""The outbound worker's steps (SPEC §10: execution is the `send` class on the `internal` door).

A Celery task delivering a request calls these through apps.gate.internal.call_internal, one call per state
change, so each is checked, run in its own transaction and audited by the gate like any other call; the SMTP
conversation happens between the calls, never inside one. They are for the system only (callers=internal):
persons and agents are answered NOT_AVAILABLE, exactly as for an operation that does not exist, and the REST
door has no path for them. What each step may do is decided in apps.outbound.execution.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Id
from apps.operations.registry import Callers, Ceiling, OpClass, operation
from apps.outbound import execution
from apps.outbound.models import OutboundRequest
from apps.outbound.selectors import access_internal_outbound_request_by_id, outbound_request

ReasonCode = Annotated[str, StringConstraints(max_length=100, pattern=r"^[a-z_]*$")]


class RequestRef(Closed):
    request_id: Id


class AttemptIn(RequestRef):
    attempt: int = Field(ge=0, description="the claim's attempt number, as claim_outbound_send answered it")


class OutcomeIn(AttemptIn):
    outcome: Literal["sent", "refused", "temporary", "unknown"] = Field(
        description="sent: the server accepted the message; refused: a definite refusal; temporary: nothing was "
        "sent and trying later may work; unknown: the connection was lost once DATA began"
    )
    error: ReasonCode = Field(default="", description="a fixed reason code, never a server's text")
    refused_recipients: list[Annotated[str, StringConstraints(max_length=320)]] = Field(default=[], max_length=500)
    http_status: int | None = Field(
        default=None, ge=100, le=599, description="a one-click unsubscribe: the list's answer to the POST"
    )


class StepOut(Closed):
    request_id: str
    state: str
    attempt: int
    error: str
    retry_at: datetime | None


def _step(request: OutboundRequest) -> StepOut:
    return StepOut(
        request_id=str(request.pk),
        state=request.state,
        attempt=request.attempts,
        error=request.error,
        retry_at=execution.retry_at(request),
    )


def _the_request(ctx: Context, data: RequestRef) -> uuid.UUID:
    """The id of the tenant's request named (each step moves it by a guarded UPDATE of its own)."""
    return access_internal_outbound_request_by_id(data.request_id, tenant=ctx.tenant)


_INTERNAL: dict[str, Any] = {"op_class": OpClass.SEND, "ceiling": Ceiling.NEVER, "callers": Callers.INTERNAL,
             "targets": _the_request, "output": StepOut}  # fmt: skip


@operation(
    name="claim_outbound_send",
    summary="A worker claims a due request for one delivery attempt (queued/approved → sending), before any "
    "SMTP traffic; content changed since approval fails instead.",
    input=RequestRef,
    **_INTERNAL,
)
def claim_outbound_send(ctx: Context, data: RequestRef) -> StepOut:
    return _step(execution.claim(ctx.targets, act=ctx))


@operation(
    name="begin_outbound_data",
    summary="A worker records, before the DATA command (or a one-click unsubscribe's POST), that it begins: from "
    "then on the request is never retried.",
    input=AttemptIn,
    **_INTERNAL,
)
def begin_outbound_data(ctx: Context, data: AttemptIn) -> StepOut:
    execution.begin_data(ctx.targets, data.attempt, act=ctx)
    return _step(outbound_request(ctx.targets, tenant=ctx.tenant))


@operation(
    name="record_outbound_outcome",
    summary="A worker records what the mail server answered: sent, failed, unknown, or queued for another "
    "attempt after a backoff (only when nothing was sent).",
    input=OutcomeIn,
    **_INTERNAL,
)
def record_outbound_outcome(ctx: Context, data: OutcomeIn) -> StepOut:
    return _step(
        execution.record_outcome(
            ctx.targets,
            data.attempt,
            data.outcome,
            data.error,
            list(data.refused_recipients),
            act=ctx,
            http_status=data.http_status,
        )
    )


@operation(
    name="release_scheduled_send",
    summary="The schedule queues an approved scheduled send whose time has come (approved → queued).",
    input=RequestRef,
    **_INTERNAL,
)
def release_scheduled_send(ctx: Context, data: RequestRef) -> StepOut:
    return _step(execution.release(ctx.targets, act=ctx))


class RecoverIn(AttemptIn):
    silent_since: datetime = Field(description="the claim's last step must be older than this (the sweeper's cut)")


@operation(
    name="recover_outbound_send",
    summary="The sweeper takes back a claim whose worker went silent: queued again if DATA never began (while "
    "attempts are left), unknown if it had.",
    input=RecoverIn,
    **_INTERNAL,
)
def recover_outbound_send(ctx: Context, data: RecoverIn) -> StepOut:
    return _step(execution.recover(ctx.targets, data.attempt, data.silent_since, act=ctx))


@operation(
    name="reconcile_outbound",
    summary="Reconciliation found an unknown request's Message-ID in the account's Sent folder (unknown → sent).",
    input=RequestRef,
    **_INTERNAL,
)
def reconcile_outbound(ctx: Context, data: RequestRef) -> StepOut:
    return _step(execution.reconcile_found(ctx.targets, act=ctx))
