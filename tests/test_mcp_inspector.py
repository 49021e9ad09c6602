"""The MCP door driven by a second real client: the MCP Inspector CLI (Node), against gunicorn on loopback.

The CLI is installed by the project itself (package.json / package-lock.json, `npm ci` in `make test`) into
./node_modules; these tests skip only when that binary is missing. Each run is one CLI process:
`mcp-inspector --cli URL --transport http --header "Authorization: Bearer KEY" --method ...` with
`--stored-auth-only` (a refused credential fails at once instead of starting a browser OAuth flow) and
`--format json`. Exit codes: 0 success, 5 a tool error (`isError`, or a tool the server did not list),
3 authentication refused.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from apps.agents.keys import issue_key
from apps.agents.models import ApiKey
from apps.audit.models import AuditEvent
from apps.mail.models import Message
from apps.operations.exposure import offered_operations
from apps.operations.registry import OpClass, registry
from tests.callers import as_agent, as_person, call, membership
from tests.conftest import Person, make_person
from tests.liveserver import live_url  # noqa: F401 (fixture)
from tests.mailbox import Mailbox, build_mailbox

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLI = Path(__file__).resolve().parent.parent / "node_modules" / ".bin" / "mcp-inspector"
WRITE_TOOLS = {"mark_read", "archive_messages", "add_labels", "create_label", "create_draft"}


@dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def result(self) -> dict[str, Any]:
        body = json.loads(self.out)
        assert isinstance(body, dict) and "result" in body, self.out[:500]
        return dict(body["result"])

    @property
    def error(self) -> dict[str, Any]:
        body = json.loads(self.err.strip().splitlines()[-1])
        return dict(body["error"])


@dataclass
class World:
    alice: Mailbox
    mallory: Mailbox


@pytest.fixture
def cli() -> Path:
    if not (CLI.exists() and os.access(CLI, os.X_OK)):
        pytest.skip(f"the MCP Inspector CLI is not installed ({CLI}): `make test` installs it with npm ci")
    return CLI


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The CLI keeps a catalog and OAuth state under ~/.mcp-inspector: a fresh, private home per test."""
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def world(transactional_db: None, tmp_path: Path) -> World:
    alice = make_person("alice@example.test", "Alice's tenant")
    mallory = make_person("mallory@example.test", "Mallory's tenant")
    return World(
        alice=build_mailbox(alice, tmp_path / "alice", prefix="alice"),
        mallory=build_mailbox(mallory, tmp_path / "mallory", prefix="mallory", with_work=False),
    )


def _key(person: Person, scopes: list[str], allow_list: list[str] | None = None) -> tuple[ApiKey, str]:
    return issue_key(
        membership=membership(person),
        scopes=scopes,
        workspaces=["default"],
        allow_list=allow_list,
        expires_at=None,
        created_via="cli",
    )


def inspect(cli: Path, home: Path, url: str, key: str, method: str, *args: str) -> Run:
    """One run of the CLI against /mcp with this key."""
    command = [
        str(cli),
        "--cli",
        url + "/mcp",
        "--transport",
        "http",
        "--header",
        f"Authorization: Bearer {key}",
        "--stored-auth-only",
        "--format",
        "json",
        "--method",
        method,
        *args,
    ]
    env = {**os.environ, "HOME": str(home), "NO_COLOR": "1", "CI": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    return Run(done.returncode, done.stdout, done.stderr)


def _leaks(run: Run, box: Mailbox, *, asked: str = "") -> list[str]:
    """What of the other tenant shows in a run: its tenant's name, its mail's own texts (its Message-IDs and
    bodies carry its prefix), its accounts, threads and labels, its messages other than the one asked for."""
    owned = [box.person.tenant.name, "mallory", box.personal, *box.threads.values(), *box.labels.values()]
    owned += [pk for pk in box.messages.values() if pk != asked]
    return [text for text in owned if text and (text.lower() in run.out.lower() or text.lower() in run.err.lower())]


def test_tools_list_shows_what_a_read_only_key_may_use(cli: Path, home: Path, live_url: str, world: World) -> None:  # noqa: F811
    alice, mallory = world.alice.person, world.mallory.person
    _, key = _key(alice, ["read"])
    listed = inspect(cli, home, live_url, key, "tools/list")
    assert listed.code == 0, listed.err
    names = [tool["name"] for tool in listed.result["tools"]]
    expected = sorted(op.name for op in offered_operations(as_agent(alice, scopes={"read"})))
    assert names == expected and {"status", "get_message", "list_messages"} <= set(names)
    assert not WRITE_TOOLS & set(names)
    for name in names:
        op = registry.get(name)
        assert op is not None and op.op_class == OpClass.READ, name
    tool = next(tool for tool in listed.result["tools"] if tool["name"] == "get_message")
    assert tool["annotations"]["readOnlyHint"] is True and tool["inputSchema"]["required"] == ["message_id"]

    # a key with an operation allow-list is offered exactly those; the other tenant's key sees its own tenant
    _, narrow = _key(alice, ["read", "write"], allow_list=["status", "get_message"])
    only = inspect(cli, home, live_url, narrow, "tools/list")
    assert only.code == 0 and sorted(t["name"] for t in only.result["tools"]) == ["get_message", "status"]
    _, other = _key(mallory, ["read"])
    theirs = inspect(cli, home, live_url, other, "tools/call", "--tool-name", "status")
    assert theirs.code == 0 and theirs.result["structuredContent"]["tenant"] == "Mallory's tenant"
    assert _leaks(listed, world.mallory) == [] and _leaks(only, world.mallory) == []


def test_status_and_get_message_stay_in_reach(cli: Path, home: Path, live_url: str, world: World) -> None:  # noqa: F811
    box, theirs = world.alice, world.mallory
    _, key = _key(box.person, ["read"])
    status = inspect(cli, home, live_url, key, "tools/call", "--tool-name", "status")
    assert status.code == 0, status.err
    assert status.result["isError"] is False
    # the key reaches the default workspace only: the Work account is not counted
    assert status.result["structuredContent"] == {
        **status.result["structuredContent"],
        "tenant": "Alice's tenant",
        "workspaces": ["default"],
        "accounts": 1,
    }

    got = inspect(
        cli,
        home,
        live_url,
        key,
        "tools/call",
        "--tool-name",
        "get_message",
        "--tool-args-json",
        json.dumps({"message_id": box.messages["zeppelin"]}),
    )
    assert got.code == 0, got.err
    message = got.result["structuredContent"]["message"]
    assert message["id"] == box.messages["zeppelin"] and "Zeppelin repair invoice" in message["subject"]
    assert got.result["structuredContent"]["untrusted_content"]["fields"]  # mail text comes fenced

    # another tenant's message is not found; this tenant's mail outside the key's workspaces is out of scope
    for foreign, code in ((theirs.messages["zeppelin"], "NOT_FOUND"), (box.messages["work-zeppelin"], "OUT_OF_SCOPE")):
        refused = inspect(
            cli,
            home,
            live_url,
            key,
            "tools/call",
            "--tool-name",
            "get_message",
            "--tool-args-json",
            json.dumps({"message_id": foreign}),
        )
        assert refused.code == 5, (refused.out, refused.err)
        # a refusal carries the error shape as structured content, as a success carries its output, and as text
        assert refused.result["isError"] is True and refused.result["structuredContent"]["error"]["code"] == code
        assert json.loads(refused.result["content"][0]["text"]) == refused.result["structuredContent"]
        assert refused.error["code"] == "tool_is_error"
        assert "Zeppelin fleet contract" not in refused.out and _leaks(refused, theirs, asked=foreign) == []
    assert _leaks(status, theirs) == [] and _leaks(got, theirs) == []


def test_a_tool_the_key_may_not_use_is_an_error(cli: Path, home: Path, live_url: str, world: World) -> None:  # noqa: F811
    box, theirs = world.alice, world.mallory
    _, key = _key(box.person, ["read"])
    before = Message.objects.unscoped().get(pk=box.messages["zeppelin"]).read
    ids = json.dumps({"message_ids": [box.messages["zeppelin"], theirs.messages["zeppelin"]]})
    run = inspect(cli, home, live_url, key, "tools/call", "--tool-name", "mark_read", "--tool-args-json", ids)
    # the server never listed it, so the client refuses it: exit 5, the error on stderr, no result
    assert run.code == 5, (run.out, run.err)
    assert run.out.strip() == ""
    assert run.error["code"] == "tool_not_found" and "mark_read" in run.error["message"]

    # sent anyway, past the client: the door answers with a tool error, and nothing changes in either tenant
    rpc = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "mark_read", "arguments": json.loads(ids)},
    }
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    answer = httpx2.post(live_url + "/mcp", json=rpc, headers=headers, timeout=30).json()["result"]
    assert answer["isError"] is True
    assert json.loads(answer["content"][0]["text"])["error"]["code"] == "INSUFFICIENT_SCOPE"
    assert Message.objects.unscoped().get(pk=box.messages["zeppelin"]).read is before
    assert Message.objects.unscoped().get(pk=theirs.messages["zeppelin"]).read is False
    outcomes = set(
        AuditEvent.objects.for_tenant(box.person.tenant)
        .filter(operation="mark_read", door="mcp")
        .values_list("outcome", flat=True)
    )
    assert outcomes == {"INSUFFICIENT_SCOPE"}
    assert not AuditEvent.objects.for_tenant(theirs.person.tenant).filter(door="mcp").exists()


def test_a_revoked_key_is_refused(cli: Path, home: Path, live_url: str, world: World) -> None:  # noqa: F811
    alice, mallory = world.alice.person, world.mallory.person
    row, key = _key(alice, ["read"])
    _, other = _key(mallory, ["read"])
    assert inspect(cli, home, live_url, key, "tools/list").code == 0

    assert call(as_person(alice), "revoke_api_key", {"api_key_id": str(row.pk)}, confirm=True)["revoked"] is True
    for args in (("tools/list",), ("tools/call", "--tool-name", "status")):
        run = inspect(cli, home, live_url, key, *args)
        assert run.code == 3, (run.out, run.err)
        assert run.out.strip() == ""
        assert run.error["code"] == "auth_required" and "revoked" in run.error["message"]
        assert "Alice's tenant" not in run.err
    unknown = inspect(cli, home, live_url, key[:-4] + "AAAA", "tools/list")
    assert unknown.code == 3 and unknown.error["code"] == "auth_required"

    # the other tenant's key is untouched
    still = inspect(cli, home, live_url, other, "tools/call", "--tool-name", "status")
    assert still.code == 0 and still.result["structuredContent"]["tenant"] == "Mallory's tenant"
