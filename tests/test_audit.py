"""The audit log: a hash chain per tenant, appended in the caller's transaction; `oaken audit verify`."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.models import ProtectedError
from django.db.transaction import TransactionManagementError

from apps.audit.log import (
    Break,
    append_internal_event,
    append_record,
    event_hash,
    input_digest,
    verify_all,
    verify_chain,
)
from apps.audit.models import ZERO_HASH, AuditEvent, AuditImmutableError, ChainHead
from apps.core.changes import Change
from apps.workspaces.models import Tenant, Workspace
from tests.commands import run_json
from tests.conftest import Person


def _append(tenant: Tenant, n: int = 1, **overrides: Any) -> list[AuditEvent]:
    """n events, each in its own transaction, as the gate appends them."""
    events = []
    for i in range(n):
        fields: dict[str, Any] = {
            "principal": "agent",
            "door": "mcp",
            "operation": "archive_messages",
            "outcome": "ok",
            "person_id": uuid.uuid4(),
            "credential_id": "conn-1",
            "credential_kind": "oauth",
            "targets": [Change(id=f"msg-{i}", before={"folder": "inbox"}, after={"folder": "archive"})],
            "input_digest": input_digest({"ids": [f"msg-{i}"]}),
        }
        fields.update(overrides)
        with transaction.atomic():
            events.append(append_record(tenant=tenant, **fields))
    return events


def _chain(tenant: Tenant) -> dict[int, AuditEvent]:
    return {e.seq: e for e in AuditEvent.objects.for_tenant(tenant).order_by("seq")}


@contextmanager
def _triggers_off() -> Iterator[Any]:
    """Tamper on purpose: the append-only triggers are skipped for this block only (needs a superuser)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        yield cursor
        cursor.execute("SET LOCAL session_replication_role = origin")


def _cli(*args: str) -> tuple[int, Any]:
    return run_json("audit", *args)


@pytest.mark.django_db(transaction=True)
def test_an_event_commits_with_the_change_it_records(alice: Person, mallory: Person) -> None:
    with transaction.atomic():
        Workspace.objects.for_tenant(alice.tenant).filter(pk=alice.workspace.pk).update(name="renamed")
        event = append_record(
            tenant=alice.tenant,
            principal="person",
            door="ui",
            operation="rename_workspace",
            outcome="ok",
            person_id=alice.user.pk,
            targets=[Change(id=str(alice.workspace.pk), before="default", after="renamed")],
        )
    stored = AuditEvent.objects.for_tenant(alice.tenant).get()
    assert stored.pk == event.pk
    assert (stored.seq, stored.prev_hash, stored.hash) == (1, ZERO_HASH, event.hash)
    assert stored.targets == [{"id": str(alice.workspace.pk), "before": "default", "after": "renamed"}]
    assert (stored.person_id, stored.door, stored.principal) == (alice.user.pk, "ui", "person")
    assert Workspace.objects.for_tenant(alice.tenant).get(pk=alice.workspace.pk).name == "renamed"
    head = ChainHead.objects.get(tenant=alice.tenant)
    assert (head.seq, head.hash) == (1, event.hash)
    assert not AuditEvent.objects.for_tenant(mallory.tenant).exists()


@pytest.mark.django_db(transaction=True)
def test_a_rollback_leaves_neither_the_change_nor_the_event(alice: Person, mallory: Person) -> None:
    class Boom(Exception):
        pass

    def rename_then_fail() -> None:
        with transaction.atomic():
            Workspace.objects.for_tenant(alice.tenant).filter(pk=alice.workspace.pk).update(name="renamed")
            _append(alice.tenant, 1, operation="rename_workspace")
            raise Boom

    _append(alice.tenant, 2)
    with pytest.raises(Boom):
        rename_then_fail()
    assert Workspace.objects.for_tenant(alice.tenant).get(pk=alice.workspace.pk).name == "default"
    assert [e.operation for e in _chain(alice.tenant).values()] == ["archive_messages"] * 2
    assert ChainHead.objects.get(tenant=alice.tenant).seq == 2
    # the next append takes the seq the rolled-back one had: no gap
    (event,) = _append(alice.tenant)
    assert event.seq == 3
    assert verify_chain(alice.tenant.pk) == (3, None)
    assert not ChainHead.objects.filter(tenant=mallory.tenant).exists()


@pytest.mark.django_db(transaction=True)
def test_appending_outside_a_transaction_is_refused(alice: Person, mallory: Person) -> None:
    assert not connection.in_atomic_block
    with pytest.raises(TransactionManagementError, match="transaction"):
        append_record(tenant=alice.tenant, principal="internal", door="internal", operation="x", outcome="ok")
    assert not AuditEvent.objects.for_tenant(alice.tenant).exists()
    assert not ChainHead.objects.filter(tenant__in=[alice.tenant, mallory.tenant]).exists()


@pytest.mark.django_db(transaction=True)
def test_an_event_alone_commits_by_itself_from_the_tenants_first_event_on(alice: Person, mallory: Person) -> None:
    """alone=True: the event is its own transaction (a call that ran no statement), the head made on the way."""
    assert not connection.in_atomic_block
    assert not ChainHead.objects.filter(tenant=alice.tenant).exists()
    fields: dict[str, Any] = {"principal": "internal", "door": "internal", "operation": "x", "outcome": "ok"}
    first = append_record(tenant=alice.tenant, alone=True, durable=False, **fields)
    second = append_record(tenant=alice.tenant, alone=True, **fields)  # durable: waits for its flush at once
    assert (first.seq, second.seq, second.prev_hash) == (1, 2, first.hash)
    assert not connection.in_atomic_block and connection.get_autocommit()
    assert verify_chain(alice.tenant.pk) == (2, None)
    assert ChainHead.objects.get(tenant=alice.tenant).seq == 2
    assert not ChainHead.objects.filter(tenant=mallory.tenant).exists()

    # inside a transaction it joins it like any event, and rolls back with it
    def change_then_fail() -> None:
        with transaction.atomic():
            append_record(tenant=alice.tenant, alone=True, **fields)
            raise RuntimeError("the change failed")

    with pytest.raises(RuntimeError):
        change_then_fail()
    assert verify_chain(alice.tenant.pk) == (2, None)


@pytest.mark.django_db(transaction=True)
def test_the_commit_is_made_durable_before_any_other_commit_hook_runs(alice: Person, mallory: Person) -> None:
    import apps.audit.log

    calls: list[str] = []
    real = apps.audit.log._make_durable

    def durable() -> None:
        real()
        calls.append("durable")

    with mock.patch("apps.audit.log._make_durable", durable), transaction.atomic():
        transaction.on_commit(lambda: calls.append("enqueued by the handler"))
        _append(alice.tenant)
        assert calls == []
    assert calls == ["durable", "enqueued by the handler"]
    assert verify_chain(alice.tenant.pk) == (1, None)
    assert verify_chain(mallory.tenant.pk) == (0, None)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("principal", "robot"),
        ("door", "web"),
        ("credential_kind", "password"),
        ("operation", ""),
        ("operation", "x" * 201),
        ("outcome", ""),
        ("input_digest", "not-a-digest"),
    ],
)
def test_append_refuses_malformed_fields(alice: Person, mallory: Person, field: str, value: str) -> None:
    overrides: dict[str, Any] = {field: value}
    with pytest.raises(ValueError, match=field):
        _append(alice.tenant, **overrides)
    assert not AuditEvent.objects.for_tenant(alice.tenant).exists()


def test_chains_are_per_tenant(alice: Person, mallory: Person) -> None:
    _append(alice.tenant, 3)
    _append(mallory.tenant, 2)
    _append(alice.tenant, 1)
    alice_chain, mallory_chain = _chain(alice.tenant), _chain(mallory.tenant)
    assert list(alice_chain) == [1, 2, 3, 4]
    assert list(mallory_chain) == [1, 2]
    assert mallory_chain[1].prev_hash == ZERO_HASH
    assert mallory_chain[2].prev_hash == mallory_chain[1].hash
    assert alice_chain[4].prev_hash == alice_chain[3].hash
    assert verify_chain(alice.tenant.pk) == (4, None)
    assert verify_chain(mallory.tenant.pk) == (2, None)
    # a break in mallory's chain is hers alone
    with _triggers_off() as cursor:
        cursor.execute("UPDATE audit_auditevent SET outcome = 'FORBIDDEN' WHERE id = %s", [mallory_chain[1].pk])
    assert verify_chain(alice.tenant.pk) == (4, None)
    assert verify_chain(mallory.tenant.pk) == (
        1,
        Break(mallory.tenant.pk, 1, mallory_chain[1].pk, "hash mismatch"),
    )


def test_a_tenant_without_events_verifies_empty(alice: Person, mallory: Person) -> None:
    _append(mallory.tenant, 1)
    assert verify_chain(alice.tenant.pk) == (0, None)
    assert verify_chain(uuid.uuid4()) == (0, None)


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_make_one_linear_chain(alice: Person, mallory: Person) -> None:
    writers, per_writer = 8, 100
    start = threading.Barrier(writers + 2)
    done = threading.Event()
    errors: list[BaseException] = []
    verified: list[tuple[int, Break | None]] = []

    def write(tenant: Tenant, n: int) -> None:
        try:
            start.wait()
            _append(tenant, n)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    def verify_meanwhile() -> None:
        # verification while appends go on must never see a break that is not there
        try:
            start.wait()
            while not done.is_set():
                verified.append(verify_chain(alice.tenant.pk))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(alice.tenant, per_writer)) for _ in range(writers)]
    threads.append(threading.Thread(target=write, args=(mallory.tenant, 50)))
    checker = threading.Thread(target=verify_meanwhile)
    for thread in [*threads, checker]:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    checker.join()

    assert errors == []
    chain = list(AuditEvent.objects.for_tenant(alice.tenant).order_by("seq"))
    assert [e.seq for e in chain] == list(range(1, writers * per_writer + 1))
    assert chain[0].prev_hash == ZERO_HASH
    assert all(later.prev_hash == earlier.hash for earlier, later in itertools.pairwise(chain))
    assert all(later.created_at >= earlier.created_at for earlier, later in itertools.pairwise(chain))
    assert verify_chain(alice.tenant.pk) == (800, None)
    assert verify_chain(mallory.tenant.pk) == (50, None)
    assert list(_chain(mallory.tenant)) == list(range(1, 51))
    assert verified and all(broken is None for _, broken in verified)


def test_a_stored_event_hashes_as_it_did_when_appended(alice: Person, mallory: Person) -> None:
    when = datetime(2026, 3, 1, 12, 30, 15, 123457, tzinfo=UTC)
    targets = [
        Change(id="msg-1", before={"labels": ["b", "a"], "read": False}, after={"labels": [], "read": True}),
        # numbers jsonb spells its own way, non-ASCII text, and values JSON has no type for
        Change(id="n", before={"big": 1e16, "tiny": 1.5e-7, "third": 0.1 + 0.2, "int": 2**62}, after=1.0),
        Change(id='Fran\u00e7oise \u2603 "q"', before=uuid.UUID(int=7), after=when),
        Change(id="no floats", before={"z": {"b": None, "a": [1, "\u00e9"]}}, after={1: "int key"}),
    ]
    appended = []
    for i in range(3):
        with transaction.atomic():
            appended.append(
                append_record(
                    tenant=alice.tenant,
                    principal="agent",
                    door="mcp",
                    operation="label_messages",
                    outcome="ok",
                    person_id=alice.user.pk if i else None,
                    credential_id="key-1",
                    credential_kind="apikey",
                    targets=targets[i:],
                    input_digest=input_digest({"b": 1, "a": ["\u00e9"]}),
                )
            )
    for event in appended:
        stored = AuditEvent.objects.for_tenant(alice.tenant).get(pk=event.pk)
        assert stored.created_at == event.created_at  # to the microsecond
        assert event_hash(stored) == stored.hash == event.hash == event_hash(event)
        assert stored.targets == event.targets
        assert (stored.seq, stored.prev_hash) == (event.seq, event.prev_hash)
    assert any(e.created_at.microsecond % 1000 for e in appended)
    assert appended[0].targets[1]["before"]["big"] == 10**16
    assert appended[0].targets[2] == {
        "id": 'Fran\u00e7oise \u2603 "q"',
        "before": str(uuid.UUID(int=7)),
        "after": str(when),
    }
    assert appended[2].targets[-1]["after"] == {"1": "int key"}
    assert verify_chain(alice.tenant.pk) == (3, None)


def test_input_digest_is_sha256_of_canonical_json(alice: Person, mallory: Person) -> None:
    import hashlib

    expected = hashlib.sha256('{"a":["é",null],"b":1}'.encode()).hexdigest()
    assert input_digest({"b": 1, "a": ["é", None]}) == expected
    assert input_digest({"a": ["é", None], "b": 1}) == expected
    assert input_digest({"id": uuid.UUID(int=1)}) == input_digest({"id": str(uuid.UUID(int=1))})
    assert len(input_digest(None)) == 64


# Each tampering takes alice's five-event chain and says where verification must find the first break.
Tamper = Callable[[Any, dict[int, AuditEvent]], tuple[int, int | None, str]]


def _edit_a_field(cursor: Any, chain: dict[int, AuditEvent]) -> tuple[int, int | None, str]:
    cursor.execute("UPDATE audit_auditevent SET outcome = 'ok_really' WHERE id = %s", [chain[3].pk])
    return 3, chain[3].pk, "hash mismatch"


def _edit_targets(cursor: Any, chain: dict[int, AuditEvent]) -> tuple[int, int | None, str]:
    cursor.execute(
        'UPDATE audit_auditevent SET targets = \'[{"id": "msg-9", "before": null, "after": null}]\' WHERE id = %s',
        [chain[2].pk],
    )
    return 2, chain[2].pk, "hash mismatch"


def _edit_and_rehash(cursor: Any, chain: dict[int, AuditEvent]) -> tuple[int, int | None, str]:
    forged = chain[3]
    forged.operation = "read_messages"
    cursor.execute(
        "UPDATE audit_auditevent SET operation = %s, hash = %s WHERE id = %s",
        [forged.operation, event_hash(forged), forged.pk],
    )
    return 4, chain[4].pk, "previous hash mismatch"


def _delete_the_first(cursor: Any, chain: dict[int, AuditEvent]) -> tuple[int, int | None, str]:
    cursor.execute("DELETE FROM audit_auditevent WHERE id = %s", [chain[1].pk])
    return 2, chain[2].pk, "sequence gap"


def _delete_a_middle_one(cursor: Any, chain: dict[int, AuditEvent]) -> tuple[int, int | None, str]:
    cursor.execute("DELETE FROM audit_auditevent WHERE id = %s", [chain[3].pk])
    return 4, chain[4].pk, "sequence gap"


def _delete_the_last(cursor: Any, chain: dict[int, AuditEvent]) -> tuple[int, int | None, str]:
    cursor.execute("DELETE FROM audit_auditevent WHERE id = %s", [chain[5].pk])
    return 5, None, "head mismatch"


def _swap_two_rows(cursor: Any, chain: dict[int, AuditEvent]) -> tuple[int, int | None, str]:
    for event_id, seq in ((chain[2].pk, 0), (chain[4].pk, 2), (chain[2].pk, 4)):
        cursor.execute("UPDATE audit_auditevent SET seq = %s WHERE id = %s", [seq, event_id])
    return 2, chain[4].pk, "previous hash mismatch"


def _edit_a_prev_hash(cursor: Any, chain: dict[int, AuditEvent]) -> tuple[int, int | None, str]:
    cursor.execute("UPDATE audit_auditevent SET prev_hash = %s WHERE id = %s", [chain[2].hash, chain[4].pk])
    return 4, chain[4].pk, "previous hash mismatch"


def _move_the_head_back(cursor: Any, chain: dict[int, AuditEvent]) -> tuple[int, int | None, str]:
    cursor.execute(
        "UPDATE audit_chainhead SET seq = 4, hash = %s WHERE tenant_id = %s",
        [chain[4].hash, chain[4].tenant_id],
    )
    return 5, chain[5].pk, "head mismatch"


def _edit_the_head_hash(cursor: Any, chain: dict[int, AuditEvent]) -> tuple[int, int | None, str]:
    cursor.execute("UPDATE audit_chainhead SET hash = %s WHERE tenant_id = %s", [ZERO_HASH, chain[5].tenant_id])
    return 5, chain[5].pk, "head mismatch"


@pytest.mark.parametrize(
    "tamper",
    [
        _edit_a_field,
        _edit_targets,
        _edit_and_rehash,
        _delete_the_first,
        _delete_a_middle_one,
        _delete_the_last,
        _swap_two_rows,
        _edit_a_prev_hash,
        _move_the_head_back,
        _edit_the_head_hash,
    ],
)
def test_verification_names_the_first_broken_event(alice: Person, mallory: Person, tamper: Tamper) -> None:
    _append(alice.tenant, 5)
    _append(mallory.tenant, 3)
    chain = _chain(alice.tenant)
    with _triggers_off() as cursor:
        seq, event_id, reason = tamper(cursor, chain)

    checked, broken = verify_chain(alice.tenant.pk)
    assert broken == Break(alice.tenant.pk, seq, event_id, reason)
    assert 0 < checked <= 5
    assert verify_chain(mallory.tenant.pk) == (3, None)

    code, data = _cli("verify")
    assert code == 1
    assert data["ok"] is False
    first = {"tenant_id": str(alice.tenant.pk), "seq": seq, "event_id": event_id, "reason": reason}
    assert data["first_broken"] == first
    by_tenant = {t["tenant_id"]: t for t in data["tenants"]}
    assert by_tenant[str(mallory.tenant.pk)] == {"tenant_id": str(mallory.tenant.pk), "events": 3, "ok": True}
    assert by_tenant[str(alice.tenant.pk)]["ok"] is False

    code, data = _cli("verify", "--tenant", str(alice.tenant.pk))
    assert code == 1
    assert data["first_broken"] == first
    assert [t["tenant_id"] for t in data["tenants"]] == [str(alice.tenant.pk)]
    assert _cli("verify", "--tenant", str(mallory.tenant.pk))[0] == 0


def test_an_event_put_in_beside_the_head_is_found(alice: Person, mallory: Person) -> None:
    _append(alice.tenant, 2)
    chain = _chain(alice.tenant)
    forged = AuditEvent(
        tenant=alice.tenant,
        seq=3,
        created_at=datetime.now(UTC),
        principal="person",
        door="ui",
        operation="send_message",
        outcome="ok",
        targets=[],
        prev_hash=chain[2].hash,
    )
    forged.hash = event_hash(forged)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO audit_auditevent (tenant_id, seq, created_at, principal, credential_id, "
            "credential_kind, door, operation, outcome, targets, input_digest, prev_hash, hash) "
            "VALUES (%s, 3, %s, 'person', '', '', 'ui', 'send_message', 'ok', '[]', '', %s, %s) RETURNING id",
            [alice.tenant.pk, forged.created_at, forged.prev_hash, forged.hash],
        )
        (forged_id,) = cursor.fetchone()
    assert verify_chain(alice.tenant.pk) == (3, Break(alice.tenant.pk, 3, forged_id, "head mismatch"))
    assert verify_chain(mallory.tenant.pk) == (0, None)


def test_verify_command_reports_every_chain_holding(alice: Person, mallory: Person) -> None:
    _append(alice.tenant, 4)
    _append(mallory.tenant, 2)
    code, data = _cli("verify")
    assert code == 0
    assert data["ok"] is True
    assert "first_broken" not in data
    assert {t["tenant_id"]: t["events"] for t in data["tenants"]} == {
        str(alice.tenant.pk): 4,
        str(mallory.tenant.pk): 2,
    }
    code, data = _cli("verify", "--tenant", str(mallory.tenant.pk))
    assert (code, data) == (
        0,
        {"ok": True, "tenants": [{"tenant_id": str(mallory.tenant.pk), "events": 2, "ok": True}]},
    )
    assert [(tid, n) for tid, n, _ in verify_all()] == [(alice.tenant.pk, 4), (mallory.tenant.pk, 2)]


@pytest.mark.parametrize("tenant", [str(uuid.UUID(int=42)), "not-a-tenant-id", ""])
def test_verify_command_treats_an_unknown_tenant_as_not_found(alice: Person, mallory: Person, tenant: str) -> None:
    _append(alice.tenant, 1)
    code, data = _cli("verify", "--tenant", tenant)
    assert code == 1
    assert data == {"error": {"code": "NOT_FOUND", "field": "tenant", "message": "no such tenant"}}


def test_the_orm_refuses_to_change_or_delete_events(alice: Person, mallory: Person) -> None:
    _append(alice.tenant)
    stored = AuditEvent.objects.for_tenant(alice.tenant).get()
    stored.outcome = "NOT_AVAILABLE"
    with pytest.raises(AuditImmutableError, match="append-only"):
        stored.save()
    with pytest.raises(AuditImmutableError, match="append-only"):
        stored.delete()
    with pytest.raises(AuditImmutableError, match="append-only"):
        AuditEvent.objects.for_tenant(alice.tenant).update(outcome="NOT_AVAILABLE")
    with pytest.raises(AuditImmutableError, match="append-only"):
        AuditEvent.objects.for_tenant(alice.tenant).delete()
    with pytest.raises(AuditImmutableError, match="append_event"):
        AuditEvent(tenant=mallory.tenant, seq=1, prev_hash=ZERO_HASH, hash=ZERO_HASH).save()
    with pytest.raises(ProtectedError):
        alice.tenant.delete()
    assert AuditEvent.objects.for_tenant(alice.tenant).get().outcome == "ok"
    assert not AuditEvent.objects.for_tenant(mallory.tenant).exists()
    assert verify_chain(alice.tenant.pk) == (1, None)


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE audit_auditevent SET outcome = 'NOT_AVAILABLE' WHERE tenant_id = %s",
        "DELETE FROM audit_auditevent WHERE tenant_id = %s",
        "UPDATE audit_chainhead SET seq = seq + 2 WHERE tenant_id = %s",
        "UPDATE audit_chainhead SET seq = 0 WHERE tenant_id = %s",
        "DELETE FROM audit_chainhead WHERE tenant_id = %s",
    ],
)
def test_the_database_refuses_raw_changes(alice: Person, mallory: Person, sql: str) -> None:
    _append(alice.tenant, 2)
    _append(mallory.tenant, 1)
    refused = r"append-only|never deleted|advance by one"
    with pytest.raises(DatabaseError, match=refused), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, [alice.tenant.pk])
    assert [(e.seq, e.outcome) for e in _chain(alice.tenant).values()] == [(1, "ok"), (2, "ok")]
    assert ChainHead.objects.get(tenant=alice.tenant).seq == 2
    assert verify_chain(alice.tenant.pk) == (2, None)
    assert verify_chain(mallory.tenant.pk) == (1, None)


def test_an_internal_event_is_appended_only_under_a_documented_name(alice: Person, mallory: Person) -> None:
    """The system's own work outside the gate (the IMAP sync) is audited under a name apps.audit.events lists,
    so the chain holds no operation name nobody defined."""
    with transaction.atomic():
        event = append_internal_event(
            "imap_sync", tenant=alice.tenant, targets=[Change("msg-1", {"read": False}, {"read": True})]
        )
    assert (event.principal, event.door, event.operation, event.outcome) == ("internal", "internal", "imap_sync", "ok")
    with pytest.raises(ValueError, match="internal event"), transaction.atomic():
        append_internal_event("imap_sink", tenant=alice.tenant, targets=[])
    assert list(AuditEvent.objects.for_tenant(alice.tenant).values_list("operation", flat=True)) == ["imap_sync"]
    assert not AuditEvent.objects.for_tenant(mallory.tenant).exists()
    assert verify_chain(alice.tenant.pk) == (1, None)
