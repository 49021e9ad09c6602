"""API keys (SPEC §7, issue 4 §5-6): shown once, stored as a hash, scoped, revocable, resolved to an agent caller."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from apps.agents.keys import caller_for_key
from apps.agents.models import ApiKey
from apps.audit.models import AuditEvent
from apps.core.errors import OakenError
from apps.core.kinds import Door, Principal
from apps.gate.dispatch import dispatch
from apps.gate.models import IdempotencyRecord
from apps.operations.exposure import offered_operations
from apps.operations.registry import OpClass
from tests.callers import as_agent, as_person, call, refusal
from tests.commands import run_json
from tests.conftest import Person


def _create(p: Person, **data: object) -> dict[str, object]:
    return call(as_person(p), "create_api_key", {"scopes": ["read"], **data}, confirm=True)


def _cli(*args: str) -> tuple[int, Any]:
    return run_json("apikey", *args)


def test_a_key_is_shown_once_and_stored_only_as_a_hash(alice: Person, mallory: Person) -> None:
    created = _create(alice, name="laptop", scopes=["write"])
    key, info = created["key"], created["api_key"]
    assert isinstance(key, str) and key.startswith(info["prefix"] + "_")  # type: ignore[index]
    row = ApiKey.objects.for_tenant(alice.tenant).get()
    assert key not in (row.key_hash, row.prefix) and len(row.key_hash) == 64
    assert row.scopes == ["read", "write"] and row.workspaces == ["default"] and row.created_via == "ui"
    listed = call(as_person(alice), "list_api_keys", {})["api_keys"]
    assert [k["prefix"] for k in listed] == [row.prefix]
    assert key not in json.dumps(listed)
    # nothing in the audit log carries it either
    assert all(key not in json.dumps(e.targets) for e in AuditEvent.objects.for_tenant(alice.tenant))
    assert call(as_person(mallory), "list_api_keys", {})["api_keys"] == []


def test_a_key_resolves_to_an_agent_of_its_person_and_tenant(alice: Person, mallory: Person) -> None:
    key = _create(alice, scopes=["send"], workspaces=["default", "work"], operations=["list_accounts", "status"])["key"]
    caller = caller_for_key(str(key))
    assert caller is not None
    assert (caller.principal, caller.tenant, caller.user) == (Principal.AGENT, alice.tenant, alice.user)
    assert caller.scopes == {"read", "write", "send"}
    assert caller.workspaces == ("default", "work")
    assert caller.allow_list == {"list_accounts", "status"} and caller.credential_kind == "apikey"
    assert {op.name for op in offered_operations(caller)} == {"list_accounts", "status"}
    assert dispatch(caller, Door.MCP, "status", {}).output["tenant"] == alice.tenant.name
    assert ApiKey.objects.for_tenant(alice.tenant).get().last_used_at is not None
    theirs = caller_for_key(str(_create(mallory)["key"]))
    assert theirs is not None and theirs.tenant == mallory.tenant


def test_unknown_revoked_and_expired_keys_resolve_to_nothing(alice: Person, mallory: Person) -> None:
    assert caller_for_key("oak_00000000_" + "x" * 43) is None
    assert caller_for_key("not-a-key") is None
    key = str(_create(alice)["key"])
    row = ApiKey.objects.for_tenant(alice.tenant).get()
    call(as_person(alice), "revoke_api_key", {"api_key_id": str(row.pk)}, confirm=True)
    assert caller_for_key(key) is None
    expiring = str(_create(alice, expires_in_days=1)["key"])
    assert caller_for_key(expiring) is not None
    ApiKey.objects.for_tenant(alice.tenant).filter(revoked_at__isnull=True).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert caller_for_key(expiring) is None
    assert ApiKey.objects.for_tenant(mallory.tenant).count() == 0


def test_another_tenant_cannot_see_or_revoke_a_key(alice: Person, mallory: Person) -> None:
    _create(alice)
    row = ApiKey.objects.for_tenant(alice.tenant).get()
    refused = refusal(as_person(mallory), "revoke_api_key", {"api_key_id": str(row.pk)}, confirm=True)
    assert refused.code == "NOT_FOUND"
    assert ApiKey.objects.for_tenant(alice.tenant).get().revoked_at is None


def test_agents_never_manage_keys(alice: Person) -> None:
    for name in ("create_api_key", "list_api_keys", "revoke_api_key"):
        assert refusal(as_agent(alice, scopes={"send"}), name, {}).code == "NOT_AVAILABLE"


def test_bad_input_names_the_field(alice: Person) -> None:
    refused = refusal(as_person(alice), "create_api_key", {"scopes": ["admin-zq"]}, confirm=True)
    assert (refused.code, refused.field) == ("INVALID_INPUT", "scopes.0")
    assert "admin-zq" not in json.dumps(refused.as_dict())
    refused = refusal(as_person(alice), "create_api_key", {"scopes": ["read"], "operations": ["nope"]}, confirm=True)
    assert (refused.code, refused.field) == ("INVALID_INPUT", "operations")
    assert not ApiKey.objects.for_tenant(alice.tenant).exists()


def test_a_key_is_never_stored_for_replay(alice: Person) -> None:
    with pytest.raises(OakenError) as info:
        dispatch(as_person(alice), Door.UI, "create_api_key", {"scopes": ["read"]}, confirm=True, idempotency_key="k1")
    assert (info.value.code, info.value.field) == ("INVALID_INPUT", "idempotency_key")
    assert not IdempotencyRecord.objects.for_tenant(alice.tenant).exists()
    assert not ApiKey.objects.for_tenant(alice.tenant).exists()


def test_the_cli_creates_and_revokes(alice: Person, mallory: Person) -> None:
    code, created = _cli(
        "create",
        "--user",
        alice.user.email,
        "--scopes",
        "read,write",
        "--workspaces",
        "default",
        "--ops",
        "status",
        "--expires-in",
        "30d",
    )
    assert code == 0
    assert created["api_key"]["scopes"] == ["read", "write"] and created["api_key"]["operations"] == ["status"]
    expires = ApiKey.objects.for_tenant(alice.tenant).get().expires_at
    assert expires is not None and timedelta(days=29) < expires - timezone.now() <= timedelta(days=30)
    assert caller_for_key(created["key"]) is not None
    code, revoked = _cli("revoke", created["api_key"]["id"], "--user", alice.user.email)
    assert code == 0 and revoked["revoked"] is True
    assert caller_for_key(created["key"]) is None
    code, error = _cli("create", "--user", alice.user.email, "--scopes", "read", "--expires-in", "soon")
    assert code == 1 and error["error"]["field"] == "expires_in"
    code, error = _cli("revoke", "not-an-id", "--user", alice.user.email)
    assert code == 1 and error["error"]["code"] == "NOT_FOUND"
    assert not ApiKey.objects.for_tenant(mallory.tenant).exists()


def test_the_cli_limits_a_key_to_a_tool_set(alice: Person, mallory: Person) -> None:
    code, created = _cli("create", "--user", alice.user.email, "--scopes", "write", "--tool-set", "mail-read")
    assert code == 0 and created["api_key"]["tool_set"] == "mail-read"
    caller = caller_for_key(created["key"])
    assert caller is not None and {op.op_class for op in offered_operations(caller)} == {OpClass.READ}
    code, error = _cli("create", "--user", alice.user.email, "--scopes", "read", "--tool-set", "not-a-set")
    assert code == 1 and (error["error"]["code"], error["error"]["field"]) == ("NOT_FOUND", "tool_set")
    assert not ApiKey.objects.for_tenant(mallory.tenant).exists()


def test_the_cli_revokes_only_keys_the_person_may_see_in_their_tenant(alice: Person, mallory: Person) -> None:
    """`oaken apikey revoke` goes through revoke_api_key as the named person: another tenant's key, or another
    member's for a MEMBER, does not exist for them."""
    from tests.callers import joined

    alices = _create(alice)["api_key"]["id"]  # type: ignore[index]
    code, error = _cli("revoke", str(alices), "--user", mallory.user.email)
    assert code == 1 and error["error"] == {
        "code": "NOT_FOUND",
        "message": "api_key_id: no such item",
        "field": "api_key_id",
    }
    bob = joined(alice, "bob@example.test", "MEMBER")
    code, error = _cli("revoke", str(alices), "--user", bob.user.email, "--tenant", str(alice.tenant.pk))
    assert code == 1 and error["error"]["code"] == "NOT_FOUND"
    assert ApiKey.objects.for_tenant(alice.tenant).get().revoked_at is None
    refused = AuditEvent.objects.for_tenant(mallory.tenant).get(operation="revoke_api_key")
    assert (refused.outcome, refused.door, refused.person_id) == ("NOT_FOUND", "cli", mallory.user.pk)
    code, revoked = _cli("revoke", str(alices), "--user", alice.user.email)
    assert code == 0 and revoked["revoked"] is True
    done = AuditEvent.objects.for_tenant(alice.tenant).get(operation="revoke_api_key", outcome="ok")
    assert (done.door, done.person_id) == ("cli", alice.user.pk)
