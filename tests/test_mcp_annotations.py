"""Tool annotations (MCP 2025-11-25 ToolAnnotations): every tool's hints follow from its operation's definition, and
tools/list carries them for every tool a credential is offered."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from apps.agents.keys import issue_key
from apps.core.kinds import Scope
from apps.core.redis_client import redis_client
from apps.mcp.tools import ADDITIVE_VERBS, DESTRUCTIVE_VERBS, tool, tool_annotations, verb
from apps.operations.registry import Ceiling, OpClass, registry
from tests.callers import membership
from tests.conftest import Person

HINTS = {"title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    for key in redis_client().scan_iter("mcp-requests:*"):
        redis_client().delete(key)


def test_every_tools_annotations_follow_its_operations_class_and_scope() -> None:
    for op in registry:
        hints = tool(op)["annotations"]
        assert set(hints) == HINTS, op.name
        assert all(isinstance(hints[name], bool) for name in HINTS - {"title"}), op.name
        read = op.op_class == OpClass.READ
        assert hints["readOnlyHint"] is read, op.name
        assert hints["openWorldHint"] is (op.op_class == OpClass.SEND or op.scope == Scope.SEND), op.name
        assert hints["idempotentHint"] is (read or op.idempotent_input), op.name
        if read:
            assert hints["destructiveHint"] is False, op.name
        else:
            assert hints["destructiveHint"] is (verb(op) not in ADDITIVE_VERBS), op.name
        assert hints["title"] == tool(op)["title"] and hints["title"] and "_" not in hints["title"], op.name


def test_every_mutation_an_agent_may_be_offered_has_a_known_verb() -> None:
    """A new mutation whose verb is in neither list fails here until someone decides whether it destroys."""
    assert not ADDITIVE_VERBS & DESTRUCTIVE_VERBS
    unplaced = {
        op.name
        for op in registry
        if op.plugin is None and op.ceiling != Ceiling.NEVER and op.op_class != OpClass.READ
        if verb(op) not in ADDITIVE_VERBS | DESTRUCTIVE_VERBS
    }
    assert not unplaced, f"place these operations' verbs in apps.mcp.tools: {sorted(unplaced)}"


@pytest.mark.parametrize(
    ("name", "destructive", "open_world", "idempotent"),
    [
        ("trash_messages", True, False, False),
        ("delete_draft", True, False, False),
        ("delete_label", True, False, False),
        ("create_draft", False, False, False),
        ("mark_read", False, False, False),
        ("send_email", False, True, True),
        ("unsubscribe", True, True, True),
        ("set_forwarding", True, True, False),
    ],
)
def test_what_a_person_expects_of_familiar_tools(
    name: str, destructive: bool, open_world: bool, idempotent: bool
) -> None:
    op = registry.get(name)
    assert op is not None
    hints = tool_annotations(op)
    assert hints["readOnlyHint"] is False
    assert (hints["destructiveHint"], hints["openWorldHint"], hints["idempotentHint"]) == (
        destructive,
        open_world,
        idempotent,
    )


def test_reads_are_read_only_and_closed_world() -> None:
    for name in ("list_messages", "get_message", "search", "list_drafts"):
        op = registry.get(name)
        assert op is not None
        assert tool_annotations(op) == {
            "title": tool(op)["title"],
            "readOnlyHint": True,
            "destructiveHint": False,
            "idempotentHint": True,
            "openWorldHint": False,
        }


def test_tools_list_carries_the_annotations_of_every_tool(client: Client, alice: Person, mallory: Person) -> None:
    key = issue_key(
        membership=membership(alice), scopes=["send"], workspaces=["default"], allow_list=None, expires_at=None
    )[1]
    response = client.generic(
        "POST",
        "/mcp",
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        content_type="application/json",
        HTTP_ACCEPT="application/json, text/event-stream",
        HTTP_AUTHORIZATION=f"Bearer {key}",
        HTTP_MCP_PROTOCOL_VERSION="2025-11-25",
    )
    listed = response.json()["result"]["tools"]
    assert {"send_email", "trash_messages", "list_messages"} <= {t["name"] for t in listed}
    for entry in listed:
        op = registry.get(entry["name"])
        assert op is not None
        assert entry["annotations"] == tool_annotations(op), entry["name"]
