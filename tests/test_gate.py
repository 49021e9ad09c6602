"""The gate (SPEC §4): the checks in order, one error shape, one audit event per call, nothing half-done."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection
from pydantic import BaseModel, ConfigDict

from apps.accounts.models import User
from apps.audit.log import verify_chain
from apps.audit.models import AuditEvent
from apps.core.callers import Caller, DoorMismatchError
from apps.core.errors import NOT_AVAILABLE_MESSAGE, OakenError
from apps.core.kinds import Door
from apps.gate.dispatch import dispatch
from apps.gate.internal import call_internal
from apps.mail.importing import import_mail
from apps.mail.models import Message
from apps.operations.exposure import offered_operations
from apps.operations.models import ExposureSetting
from apps.operations.registry import ALWAYS, Callers, Ceiling, OpClass, operation, registry
from apps.workspaces.models import Membership
from tests import wire
from tests.callers import as_agent, as_person, door_of, refusal
from tests.conftest import Person
from tests.mailfactory import conversation, write_mbox


def _mail(p: Person, tmp_path: Path, n: int = 3) -> list[str]:
    import_mail(
        tenant=p.tenant,
        workspace=p.workspace,
        account_name="A",
        path=write_mbox(tmp_path / f"{p.user.pk}.mbox", conversation(n, prefix=str(p.user.pk))),
    )
    return [str(pk) for pk in Message.objects.for_tenant(p.tenant).order_by("date").values_list("pk", flat=True)]


def _events(p: Person) -> list[AuditEvent]:
    return list(AuditEvent.objects.for_tenant(p.tenant).order_by("seq"))


class Nothing(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message_id: str


class Ok(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ok: bool


@pytest.fixture
def broken_ops() -> Iterator[None]:
    """Operations that change something and then fail, or return what their model forbids."""

    def pin_then_crash(ctx: object, data: Nothing) -> Ok:
        Message.objects.for_tenant(ctx.tenant).filter(pk=data.message_id).update(pinned=True)  # type: ignore[attr-defined]
        raise RuntimeError("disk on fire: secret detail")

    def pin_then_lie(ctx: object, data: Nothing) -> dict[str, object]:
        Message.objects.for_tenant(ctx.tenant).filter(pk=data.message_id).update(pinned=True)  # type: ignore[attr-defined]
        return {"ok": "certainly", "extra": 1}

    def send_now(ctx: object, data: Nothing) -> Ok:
        return Ok(ok=True)

    common = {"input": Nothing, "output": Ok, "ceiling": Ceiling.NEVER, "confirm": ALWAYS}
    operation(name="test_pin_then_crash", summary="t", op_class=OpClass.MUTATE, **common)(pin_then_crash)  # type: ignore[arg-type]
    operation(name="test_pin_then_lie", summary="t", op_class=OpClass.MUTATE, **common)(pin_then_lie)  # type: ignore[arg-type]
    operation(
        name="test_send_now", summary="t", op_class=OpClass.SEND, input=Nothing, output=Ok, ceiling=Ceiling.NEVER
    )(send_now)
    operation(
        name="test_send_internal",
        summary="t",
        op_class=OpClass.SEND,
        input=Nothing,
        output=Ok,
        ceiling=Ceiling.NEVER,
        callers=Callers.INTERNAL,
    )(send_now)
    operation(
        name="test_send_personal",
        summary="t",
        op_class=OpClass.SEND,
        input=Nothing,
        output=Ok,
        ceiling=Ceiling.NEVER,
        callers=Callers.PERSONS,
    )(send_now)
    yield
    for name in (
        "test_pin_then_crash",
        "test_pin_then_lie",
        "test_send_now",
        "test_send_internal",
        "test_send_personal",
    ):
        registry.remove(name)


def test_a_caller_at_the_wrong_door_is_a_programming_error(alice: Person) -> None:
    with pytest.raises(DoorMismatchError):
        dispatch(as_person(alice), Door.MCP, "status", {})
    with pytest.raises(DoorMismatchError):
        dispatch(as_agent(alice), Door.UI, "status", {})
    with pytest.raises(DoorMismatchError):
        dispatch(Caller.internal(alice.tenant), Door.CLI, "status", {})
    assert _events(alice) == []


def test_not_available_reads_the_same_for_off_never_and_unknown(alice: Person, mallory: Person) -> None:
    ExposureSetting.objects.create(tenant=alice.tenant, target="search", level="off")
    agent = as_agent(alice)
    answers = [
        refusal(agent, "search", {"query": "x"}).as_dict(),  # switched off by the tenant
        refusal(agent, "get_raw_message", {"message_id": "x"}).as_dict(),  # ceiling never
        refusal(agent, "no_such_operation", {}).as_dict(),  # does not exist
        refusal(agent, "set_operation_exposure", {"operation": "search", "level": "on"}).as_dict(),
    ]
    assert answers == [{"code": "NOT_AVAILABLE", "message": NOT_AVAILABLE_MESSAGE}] * 4
    # mallory's tenant never switched search off
    assert dispatch(as_agent(mallory), Door.MCP, "search", {"query": "x"}).output == {
        "hits": [],
        "next_cursor": None,
        "index_complete": True,
    }


def test_exposure_is_checked_before_authority_and_authority_before_input(alice: Person) -> None:
    reader = as_agent(alice, scopes={"read"})
    assert refusal(reader, "get_raw_message", {"bogus": 1}).code == "NOT_AVAILABLE"
    refused = refusal(reader, "mark_read", {"bogus": 1})
    assert (refused.code, refused.missing_scope) == ("INSUFFICIENT_SCOPE", "write")


def test_insufficient_scope_says_how_a_person_grants_it(alice: Person) -> None:
    key = refusal(as_agent(alice, scopes={"read"}, credential_kind="apikey"), "mark_read", {"message_ids": ["x"]})
    oauth = refusal(as_agent(alice, scopes={"read"}, credential_kind="oauth"), "mark_read", {"message_ids": ["x"]})
    assert "Organize and draft" in key.message and "new key" in key.message
    assert "reconnects" in oauth.message and "ticks" in oauth.message
    assert key.as_dict()["missing_scope"] == oauth.as_dict()["missing_scope"] == "write"


def test_send_scope_implies_write(alice: Person, tmp_path: Path) -> None:
    ids = _mail(alice, tmp_path)
    sender = as_agent(alice, scopes={"send"})
    assert dispatch(sender, Door.MCP, "set_pinned", {"message_ids": ids[:1], "pinned": True}).output["changed"] == 1


def test_a_role_below_the_operations_role_is_forbidden(alice: Person) -> None:
    member = User.objects.create_user(email="member@example.test", password="x")
    Membership.objects.create(tenant=alice.tenant, user=member, role="MEMBER")
    caller = Caller.person(Membership.objects.get(user=member))
    refused = refusal(caller, "verify_audit", {})
    assert (refused.code, refused.http_status) == ("FORBIDDEN", 403)
    assert dispatch(caller, Door.UI, "status", {}).output["tenant"] == alice.tenant.name


def test_input_errors_name_the_field_and_never_echo_the_value(alice: Person) -> None:
    person = as_person(alice)
    # a field the schema knows is named; an argument it does not know is not (its name is the caller's text too)
    cases = {
        "message_id": {"message_id": ["zq-secret-value"]},
        None: {"message_id": "x", "extra_zq": "zq-secret-value"},
    }
    for field, data in cases.items():
        refused = refusal(person, "get_message", data)
        assert (refused.code, refused.field, refused.http_status) == ("INVALID_INPUT", field, 400)
        assert "zq" not in json.dumps(refused.as_dict())
    missing = refusal(person, "get_message", {})
    assert (missing.field, missing.message) == ("message_id", "message_id: is required")
    assert refusal(person, "get_message", ["not", "an", "object"]).code == "INVALID_INPUT"


def test_input_is_checked_before_data_scope(alice: Person, mallory: Person, tmp_path: Path) -> None:
    theirs = _mail(mallory, tmp_path)
    assert refusal(as_person(alice), "get_message", {"message_id": theirs[0], "x": 1}).code == "INVALID_INPUT"
    assert refusal(as_person(alice), "get_message", {"message_id": theirs[0]}).code == "NOT_FOUND"


def test_data_scope_is_checked_before_confirmation(alice: Person, mallory: Person, tmp_path: Path) -> None:
    mine, theirs = _mail(alice, tmp_path, 12), _mail(mallory, tmp_path)
    refused = refusal(as_agent(alice), "trash_messages", {"message_ids": [*mine[:11], theirs[0]]})
    assert refused.code == "NOT_FOUND" and refused.proposal is None


def test_confirmation_is_checked_before_limits(alice: Person, mallory: Person, tmp_path: Path, settings) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "BATCH_MAX": 11}
    ids = _mail(alice, tmp_path, 12)
    assert refusal(as_person(alice), "trash_messages", {"message_ids": ids}).code == "CONFIRMATION_REQUIRED"
    over = refusal(as_person(alice), "trash_messages", {"message_ids": ids}, confirm=True)
    assert (over.code, over.field, over.http_status) == ("LIMIT_EXCEEDED", "message_ids", 422)
    assert not Message.objects.for_tenant(alice.tenant).filter(folder__kind="trash").exists()
    assert not Message.objects.for_tenant(mallory.tenant).exists()


def test_send_runs_only_for_persons_and_the_system(alice: Person, broken_ops: None) -> None:
    assert dispatch(as_person(alice), Door.CLI, "test_send_now", {"message_id": "x"}).output == {"ok": True}
    assert call_internal(alice.tenant, "test_send_now", {"message_id": "x"}).output == {"ok": True}
    assert refusal(as_agent(alice, scopes={"send"}), "test_send_now", {"message_id": "x"}).code == "NOT_AVAILABLE"


def test_an_internal_operation_runs_only_on_the_internal_door(alice: Person, broken_ops: None) -> None:
    assert call_internal(alice.tenant, "test_send_internal", {"message_id": "x"}).output == {"ok": True}
    unknown = refusal(as_person(alice), "no_such_operation", {})
    for caller in (as_person(alice), as_agent(alice, scopes={"send"})):
        refused = refusal(caller, "test_send_internal", {"message_id": "x"})
        # exactly what an operation that does not exist answers
        assert (refused.code, refused.message) == ("NOT_AVAILABLE", unknown.message)
    assert "test_send_internal" not in {op.name for op in offered_operations(as_person(alice))}
    events = _events(alice)
    assert [(e.operation, e.principal, e.outcome) for e in events if e.operation == "test_send_internal"] == [
        ("test_send_internal", "internal", "ok"),
        ("test_send_internal", "person", "NOT_AVAILABLE"),
        ("test_send_internal", "agent", "NOT_AVAILABLE"),
    ]


def test_a_persons_only_operation_is_refused_to_agents_and_the_system(alice: Person, broken_ops: None) -> None:
    assert dispatch(as_person(alice), Door.CLI, "test_send_personal", {"message_id": "x"}).output == {"ok": True}
    for caller in (Caller.internal(alice.tenant), as_agent(alice, scopes={"send"})):
        with pytest.raises(OakenError) as info:
            dispatch(caller, door_of(caller), "test_send_personal", {"message_id": "x"})
        assert info.value.code == "NOT_AVAILABLE"


def test_every_call_appends_exactly_one_event_refusals_included(alice: Person, mallory: Person, tmp_path: Path) -> None:
    ids = _mail(alice, tmp_path)
    before = len(_events(alice))
    dispatch(as_person(alice), Door.UI, "get_message", {"message_id": ids[0]})
    refusal(as_person(alice), "get_message", {"message_id": "nope"})
    refusal(as_agent(alice), "no_such_operation", {})
    dispatch(as_agent(alice), Door.MCP, "set_pinned", {"message_ids": ids[:2], "pinned": True})
    events = _events(alice)[before:]
    assert [(e.operation, e.outcome, e.door) for e in events] == [
        ("get_message", "ok", "ui"),
        ("get_message", "NOT_FOUND", "ui"),
        ("(unknown operation)", "NOT_AVAILABLE", "mcp"),  # the name sent is the caller's text: not stored
        ("set_pinned", "ok", "mcp"),
    ]
    assert sorted(t["id"] for t in events[3].targets) == sorted(ids[:2])
    assert all(t["before"] == {"pinned": False} and t["after"] == {"pinned": True} for t in events[3].targets)
    assert events[1].targets == [] and len(events[1].input_digest) == 64
    assert events[3].credential_id == "key-1" and events[3].principal == "agent"
    assert [e.seq for e in _events(alice)] == list(range(1, len(_events(alice)) + 1))
    assert not AuditEvent.objects.for_tenant(mallory.tenant).exists()


def test_a_handler_failure_after_its_change_commits_nothing(alice: Person, tmp_path: Path, broken_ops: None) -> None:
    ids = _mail(alice, tmp_path)
    refused = refusal(as_person(alice), "test_pin_then_crash", {"message_id": ids[0]}, confirm=True)
    assert (refused.code, refused.http_status) == ("INTERNAL_ERROR", 500)
    assert "secret detail" not in refused.message
    assert not Message.objects.for_tenant(alice.tenant).filter(pinned=True).exists()
    last = _events(alice)[-1]
    assert (last.operation, last.outcome, last.targets) == ("test_pin_then_crash", "INTERNAL_ERROR", [])
    assert (
        not AuditEvent.objects.for_tenant(alice.tenant).filter(operation="test_pin_then_crash", outcome="ok").exists()
    )


def test_an_output_that_fails_validation_commits_nothing(alice: Person, tmp_path: Path, broken_ops: None) -> None:
    ids = _mail(alice, tmp_path)
    refused = refusal(as_person(alice), "test_pin_then_lie", {"message_id": ids[0]}, confirm=True)
    assert refused.code == "INTERNAL_ERROR"
    assert not Message.objects.for_tenant(alice.tenant).filter(pinned=True).exists()
    assert not AuditEvent.objects.for_tenant(alice.tenant).filter(operation="test_pin_then_lie", outcome="ok").exists()


def test_the_internal_door_runs_as_the_system_within_one_tenant(alice: Person, mallory: Person, tmp_path: Path) -> None:
    mine, theirs = _mail(alice, tmp_path), _mail(mallory, tmp_path)
    assert call_internal(alice.tenant, "get_message", {"message_id": mine[0]}).output["message"]["id"] == mine[0]
    with pytest.raises(OakenError) as info:
        call_internal(alice.tenant, "get_message", {"message_id": theirs[0]})
    assert info.value.code == "NOT_FOUND"
    assert _events(alice)[-1].principal == "internal"


@pytest.mark.django_db(transaction=True)
def test_verify_runs_after_every_check_and_outside_the_transaction(alice: Person, mallory: Person) -> None:
    """An operation's check against the outside world (a mail server's login) holds no transaction open."""
    seen: list[tuple[str, bool]] = []

    def verify(ctx: object, data: Nothing) -> None:
        seen.append((data.message_id, connection.in_atomic_block))
        if data.message_id == "refused":
            raise OakenError.invalid("message_id", "the server said no")

    def handler(ctx: object, data: Nothing) -> Ok:
        seen.append(("handler", connection.in_atomic_block))
        return Ok(ok=True)

    operation(
        name="test_verified",
        summary="t",
        op_class=OpClass.MUTATE,
        input=Nothing,
        output=Ok,
        ceiling=Ceiling.NEVER,
        confirm=ALWAYS,
        verify=verify,
    )(handler)
    try:
        assert refusal(as_person(alice), "test_verified", {"message_id": "x"}).code == "CONFIRMATION_REQUIRED"
        assert seen == []  # not before the person confirmed
        assert dispatch(as_person(alice), Door.UI, "test_verified", {"message_id": "x"}, confirm=True).output
        assert seen == [("x", False), ("handler", True)]
        error = refusal(as_person(alice), "test_verified", {"message_id": "refused"}, confirm=True)
        assert (error.code, error.field) == ("INVALID_INPUT", "message_id")
        assert seen[-1] == ("refused", False)
        assert [(e.operation, e.outcome) for e in _events(alice)] == [
            ("test_verified", "CONFIRMATION_REQUIRED"),
            ("test_verified", "ok"),
            ("test_verified", "INVALID_INPUT"),
        ]
        assert _events(mallory) == []
    finally:
        registry.remove("test_verified")


def test_a_verify_step_that_breaks_is_an_internal_error_audited_without_its_message(
    alice: Person, mallory: Person, caplog: pytest.LogCaptureFixture
) -> None:
    def verify(ctx: object, data: Nothing) -> None:
        raise UnicodeEncodeError("ascii", data.message_id, 0, 1, "the input's own characters")

    def handler(ctx: object, data: Nothing) -> Ok:
        raise AssertionError("never reached")

    operation(
        name="test_verify_breaks",
        summary="t",
        op_class=OpClass.MUTATE,
        input=Nothing,
        output=Ok,
        ceiling=Ceiling.NEVER,
        verify=verify,
    )(handler)
    try:
        error = refusal(as_person(alice), "test_verify_breaks", {"message_id": "pässwörd"})
        assert error.code == "INTERNAL_ERROR" and "pässwörd" not in error.message
        assert "pässwörd" not in caplog.text and "UnicodeEncodeError" in caplog.text
        assert [(e.operation, e.outcome) for e in _events(alice)] == [("test_verify_breaks", "INTERNAL_ERROR")]
        assert _events(mallory) == []
    finally:
        registry.remove("test_verify_breaks")


def _sent(path: Path) -> str:
    return "\n".join("\t".join(fields) for fields in wire.sent(path))


@pytest.mark.django_db(transaction=True)
def test_a_call_that_ran_no_statement_is_its_events_whole_transaction(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    """get_message reads its message with its targets, list_messages and get_thread their rows in gather, all
    before the call's transaction: it would hold the event alone, so the event is appended as one statement that
    commits by itself (no BEGIN, no COMMIT sent)."""
    mine, theirs = _mail(alice, tmp_path), _mail(mallory, tmp_path)
    thread = str(Message.objects.for_tenant(alice.tenant).get(pk=mine[0]).thread_id)
    agent = as_agent(alice, scopes={"read"})
    calls = [("get_message", {"message_id": mine[0]}), ("list_messages", {}), ("get_thread", {"thread_id": thread})]
    for name, arguments in calls:  # statements prepared, caches warm
        dispatch(agent, Door.MCP, name, arguments)
    with wire.traced(tmp_path / "read.trace") as trace:
        assert dispatch(agent, Door.MCP, "get_message", {"message_id": mine[0]}).output["message"]["id"] == mine[0]
        listed = dispatch(agent, Door.MCP, "list_messages", {}).output["messages"]
        threaded = dispatch(agent, Door.MCP, "get_thread", {"thread_id": thread}).output["messages"]
        with pytest.raises(OakenError) as refused:
            dispatch(agent, Door.MCP, "get_message", {"message_id": theirs[0]})
    assert refused.value.code == "NOT_FOUND"
    assert sorted(m["id"] for m in listed) == sorted(mine) and mine[0] in [m["id"] for m in threaded]
    sent = _sent(trace)
    assert "BEGIN" not in sent and "COMMIT" not in sent and "ROLLBACK" not in sent
    assert [(e.operation, e.outcome) for e in _events(alice)[-4:]] == [
        ("get_message", "ok"),
        ("list_messages", "ok"),
        ("get_thread", "ok"),
        ("get_message", "NOT_FOUND"),
    ]
    assert [e.operation for e in _events(mallory)] == []
    # a change still runs in a transaction with its event
    with wire.traced(tmp_path / "change.trace") as trace:
        dispatch(as_person(alice), Door.UI, "set_pinned", {"message_ids": [mine[0]], "pinned": True}, confirm=True)
    sent = _sent(trace)
    assert sent.count("BEGIN") == 1 and sent.count("COMMIT") == 1
    assert Message.objects.for_tenant(alice.tenant).get(pk=mine[0]).pinned
    assert not Message.objects.for_tenant(mallory.tenant).filter(pinned=True).exists()
    assert verify_chain(alice.tenant.pk) == (len(_events(alice)), None)


@pytest.mark.django_db(transaction=True)
def test_a_read_whose_handler_ran_a_statement_shares_its_transaction_with_its_event(
    alice: Person, mallory: Person
) -> None:
    seen: list[str] = []

    def handler(ctx: object, data: Nothing) -> Ok:
        with connection.cursor() as cursor:
            cursor.execute("SELECT (pg_current_xact_id()::text::numeric % 4294967296)::text")
            seen.append(cursor.fetchone()[0])
        return Ok(ok=True)

    operation(
        name="test_read_in_transaction",
        summary="t",
        op_class=OpClass.READ,
        input=Nothing,
        output=Ok,
        ceiling=Ceiling.NEVER,
    )(handler)
    try:
        assert dispatch(as_person(alice), Door.UI, "test_read_in_transaction", {"message_id": "x"}).output["ok"]
    finally:
        registry.remove("test_read_in_transaction")
    (event,) = [e for e in _events(alice) if e.operation == "test_read_in_transaction"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text FROM audit_auditevent WHERE id = %s", [event.pk])
        assert cursor.fetchone()[0] == seen[0]
    assert _events(mallory) == []
