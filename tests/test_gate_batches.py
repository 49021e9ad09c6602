"""Operations that commit their own batches (an import): run outside a transaction, audited once after they end,
with what they recorded, whether they finished or failed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from pydantic import BaseModel, ConfigDict

from apps.audit.models import AuditEvent
from apps.core.errors import OakenError
from apps.core.kinds import Door
from apps.gate.dispatch import dispatch
from apps.mail.importing import import_mail
from apps.mail.models import Message
from apps.operations.context import Context
from apps.operations.registry import (
    Callers,
    Ceiling,
    DefinitionError,
    OpClass,
    Operation,
    Preview,
    Registry,
    operation,
    registry,
)
from tests.callers import as_person
from tests.conftest import Person
from tests.mailfactory import conversation, write_mbox


class Ids(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message_ids: list[str]
    fail_after: int = -1


class Seen(BaseModel):
    model_config = ConfigDict(extra="forbid")
    in_transaction: bool


def pin_one_at_a_time(ctx: Context, data: Ids) -> Seen:
    """Pins each message in a transaction of its own, as an import stores a batch; fails after `fail_after`."""
    outside = not connection.in_atomic_block
    for i, pk in enumerate(data.message_ids):
        if i == data.fail_after:
            raise RuntimeError("disk on fire: secret detail")
        with transaction.atomic():
            Message.objects.for_tenant(ctx.tenant).filter(pk=pk).update(pinned=True)
        ctx.touch(pk, {"pinned": False}, {"pinned": True})
    return Seen(in_transaction=not outside)


@pytest.fixture
def batched_op() -> Iterator[None]:
    operation(
        name="test_pin_in_batches",
        summary="t",
        input=Ids,
        output=Seen,
        op_class=OpClass.MUTATE,
        ceiling=Ceiling.NEVER,
        callers=Callers.PERSONS,
        commits_in_batches=True,
    )(pin_one_at_a_time)
    yield
    registry.remove("test_pin_in_batches")


def _mail(p: Person, tmp_path: Path) -> list[str]:
    import_mail(
        tenant=p.tenant,
        workspace=p.workspace,
        account_name="A",
        path=write_mbox(tmp_path / f"{p.user.pk}.mbox", conversation(3, prefix=str(p.user.pk))),
    )
    return [str(pk) for pk in Message.objects.for_tenant(p.tenant).order_by("date").values_list("pk", flat=True)]


@pytest.mark.django_db(transaction=True)
def test_it_runs_outside_a_transaction_and_is_audited_once_after(
    alice: Person, mallory: Person, tmp_path: Path, batched_op: None
) -> None:
    ids = _mail(alice, tmp_path)
    theirs = _mail(mallory, tmp_path)
    out = dispatch(as_person(alice), Door.UI, "test_pin_in_batches", {"message_ids": ids}).output
    assert out == {"in_transaction": False}
    [event] = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="test_pin_in_batches")
    assert event.outcome == "ok"
    assert event.targets == [{"id": pk, "before": {"pinned": False}, "after": {"pinned": True}} for pk in ids]
    assert not Message.objects.for_tenant(mallory.tenant).filter(pinned=True).exists()
    assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(operation="test_pin_in_batches").exists()
    assert len(theirs) == 3


@pytest.mark.django_db(transaction=True)
def test_a_failure_keeps_the_finished_batches_and_audits_them(
    alice: Person, mallory: Person, tmp_path: Path, batched_op: None
) -> None:
    ids = _mail(alice, tmp_path)
    with pytest.raises(OakenError) as info:
        dispatch(as_person(alice), Door.UI, "test_pin_in_batches", {"message_ids": ids, "fail_after": 2})
    assert info.value.as_dict() == {
        "code": "INTERNAL_ERROR",
        "message": "the operation failed; the batches it had finished are kept",
    }
    pinned = set(Message.objects.for_tenant(alice.tenant).filter(pinned=True).values_list("pk", flat=True))
    assert {str(pk) for pk in pinned} == set(ids[:2])
    [event] = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="test_pin_in_batches")
    assert event.outcome == "INTERNAL_ERROR"
    assert [t["id"] for t in event.targets] == ids[:2]
    assert "secret detail" not in str(event.targets)
    assert not AuditEvent.objects.for_tenant(mallory.tenant).exists()


def test_what_may_commit_in_batches() -> None:
    def define(**overrides: Any) -> Operation:
        spec: dict[str, Any] = {
            "name": "a",
            "summary": "t",
            "input": Ids,
            "output": Seen,
            "op_class": OpClass.MUTATE,
            "ceiling": Ceiling.NEVER,
            "commits_in_batches": True,
            "target": Registry(),
        }
        return operation(**(spec | overrides))(lambda ctx, data: Seen(in_transaction=False))

    with pytest.raises(DefinitionError, match="read commits nothing"):
        define(op_class=OpClass.READ)
    with pytest.raises(DefinitionError, match="never be offered to agents"):
        define(ceiling=Ceiling.OFF, preview=lambda ctx, data: Preview(()))
    with pytest.raises(DefinitionError, match="idempotency key"):
        define(idempotent_input=True)
    assert define().commits_in_batches
