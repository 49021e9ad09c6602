"""Exposure (SPEC §6, §7): ceilings in code, tenant settings within them, allow-lists, person-bound tools."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import BaseModel, ConfigDict

from apps.accounts.models import User
from apps.audit.models import AuditEvent
from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.kinds import Door
from apps.gate.dispatch import dispatch
from apps.operations.exposure import offered_operations, tenant_settings
from apps.operations.models import ExposureSetting
from apps.operations.registry import Callers, Ceiling, OpClass, operation, registry
from apps.workspaces.models import Membership
from tests.callers import as_agent, as_person
from tests.conftest import Person


def _names(caller: Caller) -> set[str]:
    return {op.name for op in offered_operations(caller)}


def _set(p: Person, name: str, level: str) -> dict[str, object]:
    return dispatch(
        as_person(p), Door.UI, "set_operation_exposure", {"operation": name, "level": level}, confirm=True
    ).output


class Empty(BaseModel):
    model_config = ConfigDict(extra="forbid")


@pytest.fixture
def extra_ops() -> Iterator[None]:
    """A person-bound operation, for the duration of a test (plugins' exposure: tests/test_plugins.py)."""
    operation(
        name="my_notifications",
        summary="t",
        input=Empty,
        output=Empty,
        op_class=OpClass.READ,
        ceiling=Ceiling.ON,
        person_bound=True,
    )(lambda ctx, data: Empty())
    yield
    registry.remove("my_notifications")


def test_an_admin_switches_an_operation_off_and_on_for_agents(alice: Person, mallory: Person) -> None:
    assert "search" in _names(as_agent(alice))
    assert _set(alice, "search", "off") == {"target": "search", "level": "off", "previous": "on"}
    assert "search" not in _names(as_agent(alice))
    with pytest.raises(OakenError) as info:
        dispatch(as_agent(alice), Door.MCP, "search", {"query": "x"})
    assert info.value.code == "NOT_AVAILABLE"
    # persons are not limited by exposure, and mallory's tenant is unaffected
    assert dispatch(as_person(alice), Door.UI, "search", {"query": "x"}).output["hits"] == []
    assert "search" in _names(as_agent(mallory))
    _set(alice, "search", "on")
    assert "search" in _names(as_agent(alice))
    event = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="set_operation_exposure", outcome="ok").last()
    assert event is not None and event.targets == [
        {"id": "search", "before": {"level": "off"}, "after": {"level": "on"}}
    ]


def test_nothing_raises_an_operation_above_its_ceiling(alice: Person) -> None:
    with pytest.raises(OakenError) as info:
        _set(alice, "get_raw_message", "on")
    assert (info.value.code, info.value.field) == ("INVALID_INPUT", "level")
    with pytest.raises(OakenError) as info:
        _set(alice, "no_such_operation", "on")
    assert info.value.code == "NOT_FOUND"
    ExposureSetting.objects.create(tenant=alice.tenant, target="verify_audit", level="on")  # even a forged row
    assert "verify_audit" not in _names(as_agent(alice))


def test_exposure_changes_are_for_admins_and_persons_only(alice: Person) -> None:
    member = User.objects.create_user(email="member@example.test", password="x")
    Membership.objects.create(tenant=alice.tenant, user=member, role="MEMBER")
    with pytest.raises(OakenError) as info:
        dispatch(
            Caller.person(Membership.objects.get(user=member)),
            Door.UI,
            "set_operation_exposure",
            {"operation": "search", "level": "off"},
            confirm=True,
        )
    assert info.value.code == "FORBIDDEN"
    with pytest.raises(OakenError) as info:
        dispatch(as_agent(alice), Door.MCP, "set_operation_exposure", {"operation": "search", "level": "off"})
    assert info.value.code == "NOT_AVAILABLE"
    assert not ExposureSetting.objects.for_tenant(alice.tenant).exists()


def test_the_exposure_list_shows_ceiling_setting_and_offer(alice: Person) -> None:
    _set(alice, "search", "off")
    rows = {
        r["name"]: r for r in dispatch(as_person(alice), Door.UI, "list_operation_exposure", {}).output["operations"]
    }
    assert rows["search"] == {
        "name": "search",
        "summary": registry.get("search").summary,  # type: ignore[union-attr]
        "op_class": "read",
        "ceiling": "on",
        "plugin": None,
        "setting": "off",
        "offered_to_agents": False,
        "group": "read",  # the groups the console shows (issue 37)
    }
    assert rows["get_raw_message"]["ceiling"] == "never" and not rows["get_raw_message"]["offered_to_agents"]
    # every operation a person or an agent can call; the system's own (claim_outbound_send…) are nobody's to offer
    assert set(rows) == {op.name for op in registry if op.callers not in (Callers.INTERNAL, Callers.STANDING)}
    assert "claim_outbound_send" not in rows and rows["create_api_key"]["ceiling"] == "never"


def test_an_allow_list_narrows_what_a_credential_is_offered(alice: Person) -> None:
    narrow = as_agent(alice, allow_list={"list_accounts", "get_message", "get_raw_message"})
    assert _names(narrow) == {"list_accounts", "get_message"}
    with pytest.raises(OakenError) as info:
        dispatch(narrow, Door.MCP, "search", {"query": "x"})
    assert info.value.code == "NOT_AVAILABLE"


def test_scopes_decide_which_tools_are_listed(alice: Person) -> None:
    reader, writer = _names(as_agent(alice, scopes={"read"})), _names(as_agent(alice, scopes={"read", "write"}))
    assert "get_message" in reader and "mark_read" not in reader
    assert "mark_read" in writer
    assert not {op.name for op in registry if op.ceiling == Ceiling.NEVER} & writer


def test_person_bound_operations_are_for_oauth_connections_only(alice: Person, extra_ops: None) -> None:
    assert "my_notifications" in _names(as_agent(alice, credential_kind="oauth"))
    assert "my_notifications" not in _names(as_agent(alice, credential_kind="apikey"))


def test_an_api_key_brings_its_tenants_exposure_read_in_the_same_statement(alice: Person, mallory: Person) -> None:
    """caller_for_key reads the tenant's exposure settings with the key (one round trip fewer per call): the gate
    decides on exactly what the settings hold at that moment, each tenant its own."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from apps.agents.keys import EXPOSURE_TABLE, caller_for_key, issue_key

    assert ExposureSetting._meta.db_table == EXPOSURE_TABLE  # named in a lower layer, not imported
    _set(alice, "search", "off")
    keys = {
        who: issue_key(
            membership=Membership.objects.for_user(p.user).get(tenant=p.tenant),
            scopes=["read"],
            workspaces=["default"],
            allow_list=None,
            expires_at=None,
        )[1]
        for who, p in (("alice", alice), ("mallory", mallory))
    }
    caller = caller_for_key(keys["alice"])
    theirs = caller_for_key(keys["mallory"])
    assert caller is not None and theirs is not None
    assert caller.exposure == {"search": "off"} and theirs.exposure == {}  # another tenant's setting stays its own
    with CaptureQueriesContext(connection) as queries:
        with pytest.raises(OakenError) as info:
            dispatch(caller, Door.MCP, "search", {"query": "x"})
        assert info.value.code == "NOT_AVAILABLE"
        dispatch(theirs, Door.MCP, "list_accounts", {})
    assert not any(EXPOSURE_TABLE in q["sql"] for q in queries.captured_queries)
    assert "search" not in _names(caller) and "search" in _names(theirs)
    # switched back on: the next request's key lookup sees it
    _set(alice, "search", "on")
    again = caller_for_key(keys["alice"])
    assert again is not None and again.exposure == {"search": "on"} and "search" in _names(again)


def test_operations_are_offered_a_group_at_a_time(alice: Person, mallory: Person) -> None:
    """/exposure's groups come from the registry (plugin, ceiling, scope, domain), each switched as a whole."""
    listed = dispatch(as_person(alice), Door.UI, "list_operation_exposure", {}).output
    groups = {g["key"]: g for g in listed["groups"]}
    assert [g["key"] for g in listed["groups"]][:4] == ["read", "organize", "draft", "send"]
    assert groups["people"]["switch"] is None and groups["read"]["switch"] == "group:read"
    assert all(g["title"] and g["explanation"].endswith(".") for g in listed["groups"])
    rows = {r["name"]: r["group"] for r in listed["operations"]}
    assert rows["search"] == "read" and rows["trash_messages"] == "organize" and rows["create_draft"] == "draft"
    assert rows["send_email"] == "send" and rows["create_api_key"] == "people"
    read = [name for name, group in rows.items() if group == "read"]
    assert groups["read"]["operations"] == len(read) == groups["read"]["offered"]

    _set(alice, "group:read", "off")
    assert {name: tenant_settings(alice.tenant).get(name) for name in read} == dict.fromkeys(read, "off")
    assert tenant_settings(mallory.tenant) == {}
    again = dispatch(as_person(alice), Door.UI, "list_operation_exposure", {}).output
    assert next(g for g in again["groups"] if g["key"] == "read")["offered"] == 0
    _set(alice, "group:read", "on")
    assert all(tenant_settings(alice.tenant)[name] == "on" for name in read)
    # what is never offered cannot be switched as a group either, nor a group that does not exist
    for target in ("group:people", "group:nothing"):
        with pytest.raises(OakenError) as refused:
            dispatch(
                as_person(alice), Door.UI, "set_operation_exposure", {"operation": target, "level": "on"}, confirm=True
            )
        assert refused.value.code == "NOT_FOUND"
