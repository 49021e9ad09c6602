"""Operation definitions are checked when they are defined (SPEC §3): each rule raises."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from apps.audit.models import AuditEvent
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.gate.internal import call_internal
from apps.operations.registry import (
    ALWAYS,
    Callers,
    Ceiling,
    DefinitionError,
    OpClass,
    Preview,
    Registry,
    operation,
    registry,
)
from tests.conftest import Person


class In(BaseModel):
    model_config = ConfigDict(extra="forbid")
    x: int = 0


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ok: bool = True


class Loose(BaseModel):
    x: int = 0


def _preview(ctx: object, data: In) -> Preview:
    return Preview((Change("1", 0, 1),))


def define(target: Registry, **overrides: object) -> object:
    spec: dict[str, object] = {
        "name": "thing",
        "summary": "A thing.",
        "input": In,
        "output": Out,
        "op_class": OpClass.READ,
        "ceiling": Ceiling.ON,
        "target": target,
    }
    spec.update(overrides)
    return operation(**spec)(lambda ctx, data: Out())  # type: ignore[arg-type]


def test_a_valid_definition_is_registered() -> None:
    target = Registry()
    op = define(target)
    assert target.get("thing") is op
    assert [o.name for o in target] == ["thing"]


def test_a_send_operation_offered_to_agents_raises() -> None:
    for ceiling in (Ceiling.ON, Ceiling.OFF):
        with pytest.raises(DefinitionError, match="send"):
            define(Registry(), op_class=OpClass.SEND, ceiling=ceiling)
    define(Registry(), op_class=OpClass.SEND, ceiling=Ceiling.NEVER)


def test_a_read_that_changes_read_state_raises() -> None:
    with pytest.raises(DefinitionError, match="read state"):
        define(Registry(), changes_read_state=True)


def test_a_read_whose_module_reaches_the_read_state_service_raises(tmp_path: Path) -> None:
    module = tmp_path / "sneaky_ops.py"
    module.write_text("from apps.mail import readstate  # noqa: F401\ndef handler(ctx, data):\n    return None\n")
    sys.path.insert(0, str(tmp_path))
    try:
        sneaky = importlib.import_module("sneaky_ops")
        with pytest.raises(DefinitionError, match="read-state service"):
            operation(
                name="sneaky",
                summary="s",
                input=In,
                output=Out,
                op_class=OpClass.READ,
                ceiling=Ceiling.ON,
                target=Registry(),
            )(sneaky.handler)
        # the same module may define a mutation that marks read
        operation(
            name="sneaky",
            summary="s",
            input=In,
            output=Out,
            op_class=OpClass.MUTATE,
            ceiling=Ceiling.ON,
            preview=_preview,
            changes_read_state=True,
            target=Registry(),
        )(sneaky.handler)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("sneaky_ops", None)


def test_a_mutation_offered_to_agents_without_a_preview_raises() -> None:
    for ceiling in (Ceiling.ON, Ceiling.OFF):
        with pytest.raises(DefinitionError, match="preview"):
            define(Registry(), op_class=OpClass.MUTATE, ceiling=ceiling)
    define(Registry(), op_class=OpClass.MUTATE, ceiling=Ceiling.NEVER, confirm=ALWAYS)
    define(Registry(), name="other", op_class=OpClass.MUTATE, ceiling=Ceiling.ON, preview=_preview)


def test_plugin_operations_are_namespaced_never_on_and_never_mark_read() -> None:
    with pytest.raises(DefinitionError, match=r"<plugin>\.<name>"):
        define(Registry(), name="thing", plugin="acme", ceiling=Ceiling.OFF)
    with pytest.raises(DefinitionError, match="on by default"):
        define(Registry(), name="acme.thing", plugin="acme", ceiling=Ceiling.ON)
    with pytest.raises(DefinitionError, match="mark mail read"):
        define(
            Registry(),
            name="acme.thing",
            plugin="acme",
            ceiling=Ceiling.OFF,
            op_class=OpClass.MUTATE,
            preview=_preview,
            changes_read_state=True,
        )
    with pytest.raises(DefinitionError, match="namespaced"):
        define(Registry(), name="acme.thing")
    op = define(Registry(), name="acme.thing", plugin="acme", ceiling=Ceiling.OFF)
    assert op.default_level == "off"  # type: ignore[attr-defined]


def test_operations_for_persons_or_the_system_only_are_never_offered_to_agents() -> None:
    for callers in (Callers.INTERNAL, Callers.STANDING, Callers.PERSONS, Callers.SERVER):
        for ceiling in (Ceiling.ON, Ceiling.OFF):
            with pytest.raises(DefinitionError, match="never be offered to agents"):
                define(Registry(), op_class=OpClass.SEND, ceiling=ceiling, callers=callers)
        with pytest.raises(DefinitionError, match="plugin operations"):
            define(Registry(), name="acme.thing", plugin="acme", ceiling=Ceiling.NEVER, callers=callers)
        op = define(Registry(), op_class=OpClass.SEND, ceiling=Ceiling.NEVER, callers=callers)
        assert op.callers == callers  # type: ignore[attr-defined]
    for extra in ({"person_bound": True}, {"idempotent_input": True}, {"returns_secret": True}):
        with pytest.raises(DefinitionError, match="internal operation"):
            define(Registry(), op_class=OpClass.SEND, ceiling=Ceiling.NEVER, callers=Callers.INTERNAL, **extra)
    assert define(Registry()).callers == Callers.ANY  # type: ignore[attr-defined]


def test_two_operations_with_one_name_raise() -> None:
    target = Registry()
    define(target)
    with pytest.raises(DefinitionError, match="already defined"):
        define(target)


def test_open_models_raise() -> None:
    with pytest.raises(DefinitionError, match="forbid extra"):
        define(Registry(), input=Loose)
    with pytest.raises(DefinitionError, match="forbid extra"):
        define(Registry(), output=Loose)


def test_names_are_snake_case() -> None:
    for bad in ("Thing", "thing-1", "1thing", "a..b", ""):
        with pytest.raises(DefinitionError):
            define(Registry(), name=bad)


def test_the_built_in_registry_follows_every_rule() -> None:
    names = [op.name for op in registry]
    assert names == sorted(names)
    for op in registry:
        assert op.input_model.model_config.get("extra") == "forbid"
        assert op.output_model.model_config.get("extra") == "forbid"
        if op.op_class == OpClass.SEND:
            assert op.ceiling == Ceiling.NEVER
        if op.op_class == OpClass.MUTATE and op.ceiling != Ceiling.NEVER:
            assert op.preview is not None
    never = {op.name for op in registry if op.ceiling == Ceiling.NEVER}
    assert {
        "set_operation_exposure",
        "list_operation_exposure",
        "list_audit_events",
        "verify_audit",
        "get_raw_message",
    } <= never


# Decisions only a person makes (SPEC §1: only a person can confirm, approve or change what agents may do):
# no agent and no task of the system's own may make them either.
PERSON_DECISIONS = (
    "approve_outbound", "reject_outbound", "settle_outbound_request", "create_send_policy", "delete_send_policy",
    "set_operation_exposure", "create_api_key", "revoke_api_key", "grant_connection", "revoke_connection",
    "connect_mailbox", "update_mailbox_credentials", "remove_mailbox", "invite_member", "cancel_invitation",
    "change_member_role", "remove_member", "create_workspace", "rename_workspace", "create_tool_set",
    "delete_tool_set",
)  # fmt: skip


def test_a_persons_decisions_are_for_persons_only() -> None:
    for name in PERSON_DECISIONS:
        op = registry.get(name)
        assert op is not None and op.callers == Callers.PERSONS, name


@pytest.mark.django_db
def test_the_system_cannot_make_a_persons_decision(alice: Person, mallory: Person) -> None:
    for name in PERSON_DECISIONS:
        with pytest.raises(OakenError) as refused:
            call_internal(alice.tenant, name, {})
        assert refused.value.code == "NOT_AVAILABLE", name
    assert not AuditEvent.objects.for_tenant(mallory.tenant).exists()


def test_the_registry_knows_the_internal_events_and_no_operation_takes_their_names() -> None:
    """The sync's changes are audited as `imap_sync`, appended outside the gate: a name the registry documents."""
    assert "imap_sync" in registry.internal_events
    assert "imap_sync" not in registry
    with pytest.raises(DefinitionError, match="internal audit event"):
        define(Registry(), name="imap_sync")


def test_only_a_change_whose_output_names_a_request_may_say_it_awaits_approval() -> None:
    from apps.operations.registry import DefinitionError, Registry

    class NoRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        ok: bool

    for op_class, output in ((OpClass.READ, NoRequest), (OpClass.MUTATE, NoRequest)):
        with pytest.raises(DefinitionError, match="awaiting approval"):
            operation(
                name="test_awaits",
                summary="t",
                input=NoRequest,
                output=output,
                op_class=op_class,
                ceiling=Ceiling.NEVER,
                awaits_approval=True,
                target=Registry(),
            )(lambda ctx, data: None)
    expected = {"send_email", "send_draft", "schedule_draft", "unsubscribe", "set_auto_reply", "set_forwarding"}
    assert {op.name for op in registry if op.awaits_approval} == expected
