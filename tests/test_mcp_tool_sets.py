"""Tool sets (issue 41 item 5): a key or connection limited to a named set of tools sees only those tools over MCP
and is refused the others exactly as an allow-list refuses them; sets only ever narrow what scopes allow; a person's
own sets are theirs alone."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from apps.agents.connections import caller_for_token
from apps.agents.keys import caller_for_key
from apps.agents.models import ApiKey, Connection, ToolSet
from apps.audit.models import AuditEvent
from apps.core.kinds import Scope
from apps.core.redis_client import redis_client
from apps.operations.exposure import TOOL_SETS, built_in_set_members, group_of, offered_operations
from apps.operations.registry import Callers, Ceiling, OpClass, registry
from tests.callers import as_person, call, refusal
from tests.conftest import Mailbox, Person
from tests.oauthflow import RESOURCE, connect

LEGACY = "2025-11-25"


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    for key in [*redis_client().scan_iter("mcp-requests:*"), *redis_client().scan_iter("oauth-registrations:*")]:
        redis_client().delete(key)


def _key(p: Person, scopes: list[str], **data: Any) -> str:
    return str(call(as_person(p), "create_api_key", {"scopes": scopes, **data}, confirm=True)["key"])


def _rpc(client: Client, token: str, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params is not None else {})}
    response = client.generic(
        "POST",
        "/mcp",
        json.dumps(body),
        content_type="application/json",
        HTTP_ACCEPT="application/json, text/event-stream",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        HTTP_MCP_PROTOCOL_VERSION=LEGACY,
    )
    assert response.status_code == 200, response.content[:500]
    return response.json()["result"]


def _listed(client: Client, token: str) -> set[str]:
    return {tool["name"] for tool in _rpc(client, token, "tools/list")["tools"]}


def _called(client: Client, token: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return _rpc(client, token, "tools/call", {"name": name, "arguments": arguments})


def _agent_offerable(name: str) -> bool:
    op = registry.get(name)
    return op is not None and op.ceiling != Ceiling.NEVER and op.callers == Callers.ANY


# --- the built-in sets -----------------------------------------------------------------------------------------


def test_built_in_sets_come_from_the_operations_definitions() -> None:
    members = {name: {op.name for op in built_in_set_members(name)} for name in TOOL_SETS}
    assert set(members) == {"mail-read", "mail-organize", "drafting", "sending"}
    for op in registry:
        offerable = op.ceiling != Ceiling.NEVER and op.callers == Callers.ANY and op.plugin is None
        reads = offerable and op.scope == Scope.READ
        assert (op.name in members["mail-read"]) == reads, op.name
        assert (op.name in members["mail-organize"]) == (reads or (offerable and group_of(op) == "organize")), op.name
        assert (op.name in members["drafting"]) == (reads or (offerable and group_of(op) == "draft")), op.name
        assert (op.name in members["sending"]) == (reads or (offerable and group_of(op) in {"draft", "send"})), op.name
    # what each set means, on operations a person knows
    assert {"list_messages", "get_message", "search", "list_drafts"} <= members["mail-read"]
    assert not {"add_labels", "create_draft", "send_email"} & members["mail-read"]
    assert {"add_labels", "trash_messages", "mark_read"} <= members["mail-organize"]
    assert not {"create_draft", "send_email"} & members["mail-organize"]
    assert {"create_draft", "reply_to_message", "update_draft"} <= members["drafting"] - members["mail-organize"]
    assert {"send_email", "send_draft", "create_draft"} <= members["sending"] and "add_labels" not in members["sending"]
    # never a tool no agent may be offered
    assert all(_agent_offerable(name) for names in members.values() for name in names)


# --- a key limited to a set, over MCP ------------------------------------------------------------------------


def test_an_mcp_client_with_a_set_sees_only_its_tools_and_is_refused_the_others(
    client: Client, alice: Person, mallory: Person, alice_mail: Mailbox, mallory_mail: Mailbox
) -> None:
    limited = _key(alice, ["write"], tool_set="mail-read")
    row = ApiKey.objects.for_tenant(alice.tenant).get(tool_set="mail-read")
    assert row.allow_list is None
    reads = {op.name for op in built_in_set_members("mail-read")}
    listed = _listed(client, limited)
    assert listed and listed <= reads and "list_messages" in listed
    assert not any(registry.get(name).op_class != OpClass.READ for name in listed)  # type: ignore[union-attr]
    # a write tool its scopes allow, outside the set: refused as an allow-list refuses it, word for word
    outside = _called(client, limited, "mark_read", {"message_ids": alice_mail.message_ids[:1]})
    allow_listed = _key(alice, ["write"], operations=["list_messages"])
    as_listed = _called(client, allow_listed, "mark_read", {"message_ids": alice_mail.message_ids[:1]})
    missing = _called(client, limited, "no_such_tool", {})
    assert outside["isError"] and outside["structuredContent"]["error"]["code"] == "NOT_AVAILABLE"
    assert outside["structuredContent"] == as_listed["structuredContent"] == missing["structuredContent"]
    # a tool inside the set works, on alice's mail only
    found = _called(client, limited, "list_messages", {"account_id": alice_mail.account_id})
    assert not found["isError"]
    assert {m["id"] for m in found["structuredContent"]["messages"]} == set(alice_mail.message_ids)
    theirs = _called(client, limited, "list_messages", {"account_id": mallory_mail.account_id})
    assert theirs["isError"] and theirs["structuredContent"]["error"]["code"] == "NOT_FOUND"
    # the refusal is audited in alice's tenant, never in mallory's
    assert AuditEvent.objects.for_tenant(alice.tenant).filter(operation="mark_read", outcome="NOT_AVAILABLE").exists()
    assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(operation="mark_read").exists()


def test_each_built_in_set_is_what_its_key_is_offered(alice: Person, mallory: Person) -> None:
    for name in TOOL_SETS:
        caller = caller_for_key(_key(alice, ["send"], tool_set=name))
        assert caller is not None and caller.tool_set is not None and caller.tool_set.operations is None
        offered = {op.name for op in offered_operations(caller)}
        assert offered == {op.name for op in built_in_set_members(name) if op.default_level == "on"}, name


def test_a_set_never_widens_the_scopes(client: Client, alice: Person, mallory: Person) -> None:
    """Decided: a tool a set names but the scopes do not cover is not listed, and calling it answers
    INSUFFICIENT_SCOPE (the gate's authority step, saying how a person grants it), as for an allow-list."""
    call(as_person(alice), "create_tool_set", {"name": "outbound", "operations": ["list_messages", "send_email"]},
         confirm=True)  # fmt: skip
    for tool_set in ("outbound", "sending"):
        read_only = _key(alice, ["read"], tool_set=tool_set)
        listed = _listed(client, read_only)
        assert "send_email" not in listed and "create_draft" not in listed and "list_messages" in listed
        refused = _called(client, read_only, "send_email", {"account_id": "0" * 32, "to": ["a@example.org"]})
        assert refused["isError"]
        error = refused["structuredContent"]["error"]
        assert error["code"] == "INSUFFICIENT_SCOPE" and error["missing_scope"] == "send"
        assert "a person creates a new key" in error["message"]


# --- a person's own sets ---------------------------------------------------------------------------------------


def test_a_persons_own_set_limits_their_key_and_is_read_on_every_call(
    client: Client, alice: Person, mallory: Person, alice_mail: Mailbox
) -> None:
    made = call(
        as_person(alice),
        "create_tool_set",
        {"name": "triage", "operations": ["mark_read", "get_message", "list_messages", "get_message"]},
        confirm=True,
    )
    assert made["operations"] == sorted({"mark_read", "get_message", "list_messages"}, key=_registry_order)
    key = _key(alice, ["write"], tool_set="triage")
    assert _listed(client, key) == {"mark_read", "get_message", "list_messages"}
    trashed = _called(client, key, "trash_messages", {"message_ids": alice_mail.message_ids[:1]})
    assert trashed["structuredContent"]["error"]["code"] == "NOT_AVAILABLE"
    marked = _called(client, key, "mark_read", {"message_ids": alice_mail.message_ids[:1]})
    assert not marked["isError"], marked
    listed = call(as_person(alice), "list_tool_sets", {})["tool_sets"]
    assert [(s["name"], s["in_use"]) for s in listed if not s["built_in"]] == [("triage", 1)]
    # deleting the set leaves the key reaching nothing, never everything
    asked = refusal(as_person(alice), "delete_tool_set", {"name": "triage"})
    assert asked.code == "CONFIRMATION_REQUIRED" and asked.proposal is not None
    assert "1 key or connection limited to it will then reach no tool" in " ".join(asked.proposal["lines"])
    call(as_person(alice), "delete_tool_set", {"name": "triage"}, confirm=True)
    assert _listed(client, key) == set()
    gone = _called(client, key, "list_messages", {"account_id": alice_mail.account_id})
    assert gone["structuredContent"]["error"]["code"] == "NOT_AVAILABLE"


def _registry_order(name: str) -> int:
    return [op.name for op in registry].index(name)


def test_a_set_is_checked_when_it_is_made_and_when_a_key_names_it(alice: Person, mallory: Person) -> None:
    me = as_person(alice)
    for data, field in (
        ({"name": "mail-read", "operations": ["search"]}, "name"),  # a built-in name
        ({"name": "Triage", "operations": ["search"]}, "name"),  # not lowercase
        ({"name": "triage", "operations": ["create_api_key"]}, "operations"),  # never offered to agents
        ({"name": "triage", "operations": ["no_such_operation"]}, "operations"),
        ({"name": "triage", "operations": []}, "operations"),
    ):
        refused = refusal(me, "create_tool_set", data, confirm=True)
        assert (refused.code, refused.field) == ("INVALID_INPUT", field), data
        assert "no_such_operation" not in refused.message  # the value is never echoed
    call(me, "create_tool_set", {"name": "triage", "operations": ["search"]}, confirm=True)
    taken = refusal(me, "create_tool_set", {"name": "triage", "operations": ["get_message"]}, confirm=True)
    assert (taken.code, taken.field) == ("CONFLICT", "name")
    both = refusal(me, "create_api_key", {"scopes": ["read"], "tool_set": "triage", "operations": ["search"]})
    assert (both.code, both.field) == ("INVALID_INPUT", "tool_set")
    unknown = refusal(me, "create_api_key", {"scopes": ["read"], "tool_set": "nothing-here"})
    assert (unknown.code, unknown.field) == ("NOT_FOUND", "tool_set")
    built_in = refusal(me, "delete_tool_set", {"name": "mail-read"}, confirm=True)
    assert (built_in.code, built_in.field) == ("INVALID_INPUT", "name")
    assert not ApiKey.objects.for_tenant(alice.tenant).exists()


def test_a_second_tenants_sets_are_invisible(client: Client, alice: Person, mallory: Person) -> None:
    call(as_person(mallory), "create_tool_set", {"name": "triage", "operations": ["search", "add_labels"]},
         confirm=True)  # fmt: skip
    mine = call(as_person(alice), "list_tool_sets", {})["tool_sets"]
    assert [s["name"] for s in mine if not s["built_in"]] == []
    # alice cannot name mallory's set, nor delete it: to her it does not exist
    named = refusal(as_person(alice), "create_api_key", {"scopes": ["write"], "tool_set": "triage"}, confirm=True)
    assert (named.code, named.field) == ("NOT_FOUND", "tool_set")
    gone = refusal(as_person(alice), "delete_tool_set", {"name": "triage"}, confirm=True)
    assert (gone.code, gone.field) == ("NOT_FOUND", "name")
    # a set of alice's own by the same name is hers: her key reads her set, never mallory's
    call(as_person(alice), "create_tool_set", {"name": "triage", "operations": ["get_message"]}, confirm=True)
    assert _listed(client, _key(alice, ["write"], tool_set="triage")) == {"get_message"}
    assert _listed(client, _key(mallory, ["write"], tool_set="triage")) == {"search", "add_labels"}
    assert set(ToolSet.objects.for_tenant(mallory.tenant).get().operations) == {"search", "add_labels"}
    theirs = call(as_person(mallory), "list_tool_sets", {})["tool_sets"]
    assert [(s["name"], s["operations"]) for s in theirs if not s["built_in"]] == [
        ("triage", [n for n in (op.name for op in registry) if n in {"search", "add_labels"}])
    ]
    assert AuditEvent.objects.for_tenant(alice.tenant).filter(operation="create_tool_set", outcome="ok").count() == 1


def test_sets_are_for_persons_only() -> None:
    for name in ("create_tool_set", "list_tool_sets", "delete_tool_set"):
        op = registry.get(name)
        assert op is not None and op.ceiling == Ceiling.NEVER
    for name in ("create_tool_set", "delete_tool_set"):
        op = registry.get(name)
        assert op is not None and op.callers == Callers.PERSONS and op.confirm.kind == "always"


# --- a connection limited to a set, chosen on the consent screen --------------------------------------------


def test_the_consent_screen_limits_a_connection_to_a_set(alice: Person, mallory: Person) -> None:
    browser = Client()
    browser.force_login(alice.user)
    _, tokens = connect(browser, write=True, tool_set="mail-organize")
    connection = Connection.objects.for_tenant(alice.tenant).get()
    assert connection.tool_set == "mail-organize"
    caller = caller_for_token(tokens["access_token"], RESOURCE)
    assert caller is not None and caller.tool_set is not None
    offered = {op.name for op in offered_operations(caller)}
    assert offered and offered <= {op.name for op in built_in_set_members("mail-organize")}
    assert "add_labels" in offered and "create_draft" not in offered
    listed = call(as_person(alice), "list_connections", {})["connections"]
    assert [c["tool_set"] for c in listed] == ["mail-organize"]
    assert call(as_person(mallory), "list_connections", {})["connections"] == []


def test_the_consent_screen_offers_only_the_persons_own_sets(alice: Person, mallory: Person) -> None:
    call(as_person(mallory), "create_tool_set", {"name": "mallorys-set", "operations": ["search"]}, confirm=True)
    call(as_person(alice), "create_tool_set", {"name": "alices-set", "operations": ["search"]}, confirm=True)
    browser = Client()
    browser.force_login(alice.user)
    _, tokens = connect(browser, tool_set="alices-set")
    caller = caller_for_token(tokens["access_token"], RESOURCE)
    assert caller is not None and {op.name for op in offered_operations(caller)} == {"search"}
    refused = connect_refused(browser, tool_set="mallorys-set")
    assert "mallorys-set" not in refused
    assert Connection.objects.for_tenant(alice.tenant).filter(tool_set="mallorys-set").count() == 0


def connect_refused(browser: Client, **kw: Any) -> str:
    """The consent page shown again, for a choice it does not offer; its text."""
    from tests.oauthflow import consent, start

    response = consent(browser, start(browser), **kw)
    assert response.status_code == 200, response.status_code
    return response.content.decode()
