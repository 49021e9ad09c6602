"""The cli door (`oaken call`), the registry listing (`oaken ops list`), the generated reference (`oaken ops docs`)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from apps.audit.models import AuditEvent
from apps.mail.models import Label
from apps.operations import docs
from apps.operations.registry import registry
from apps.operations.schema import input_json_schema
from tests.commands import run
from tests.conftest import Mailbox, Person


def oaken_call(op: str, person: Person | str, *options: str, input: Any = None) -> tuple[int, dict[str, Any]]:
    email = person if isinstance(person, str) else person.user.email
    args = ["call", op, "--user", email, *options]
    if input is not None:
        args += ["--input", input if isinstance(input, str) else json.dumps(input)]
    code, out = run(*args)
    return code, json.loads(out)


# ---------------------------------------------------------------- oaken ops list


def test_ops_list_json_lists_every_operation_with_its_schemas() -> None:
    code, out = run("ops", "list", "--json")
    assert code == 0
    rows = json.loads(out)["operations"]
    assert [row["name"] for row in rows] == [op.name for op in registry]
    assert len(rows) >= 20
    for row in rows:
        op = registry.get(row["name"])
        assert op is not None
        assert row["summary"] == op.summary
        assert row["class"] == op.op_class.value
        assert row["ceiling"] == op.ceiling.value
        assert row["scope"] == op.scope.value
        assert row["role"] == op.role
        # the input model's schema with the gate's bounds (apps.operations.schema), as the tool list and the
        # OpenAPI document publish it
        assert row["input_schema"] == input_json_schema(op)
        assert row["output_schema"] == op.output_model.model_json_schema()
        assert row["input_schema"]["additionalProperties"] is False  # closed models


def test_ops_list_prints_one_line_per_operation() -> None:
    code, out = run("ops", "list")
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == [op.name for op in registry]
    for line, op in zip(lines, registry, strict=True):
        assert line.split()[1:3] == [op.op_class.value, op.ceiling.value]


# ---------------------------------------------------------------- oaken call


def test_call_prints_the_result_as_json(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox
) -> None:
    for person, own, other in ((alice, alice_mail, mallory_mail), (mallory, mallory_mail, alice_mail)):
        code, out = oaken_call("list_messages", person)
        assert code == 0
        assert {m["subject"] for m in out["messages"]} == set(own.subjects)
        assert not {m["id"] for m in out["messages"]} & set(other.message_ids)
    event = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="list_messages").get()
    assert (event.door, event.principal, event.outcome, event.person_id) == ("cli", "person", "ok", alice.user.pk)


def test_call_errors_print_the_json_error_and_exit_1(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox
) -> None:
    code, out = oaken_call("status", "nobody@example.test")
    assert code == 1
    assert out == {"error": {"code": "NOT_FOUND", "message": "no such person", "field": "user"}}

    code, out = oaken_call("status", alice, input="{not json")
    assert code == 1
    assert out["error"]["code"] == "INVALID_INPUT"
    assert out["error"]["field"] == "input"

    code, out = oaken_call("status", alice, input="[1, 2]")
    assert code == 1
    assert out["error"]["code"] == "INVALID_INPUT"

    # the doors' one parser: a key named twice is refused (the last one would win unseen), NaN is not JSON
    for lenient in ('{"limit": 1, "limit": 50}', '{"limit": NaN}'):
        code, out = oaken_call("list_messages", alice, input=lenient)
        assert (code, out["error"]["code"], out["error"]["field"]) == (1, "INVALID_INPUT", "input"), lenient

    code, out = oaken_call("list_messages", alice, input={"limit": "zq-secret-value"})
    assert code == 1
    assert out["error"]["code"] == "INVALID_INPUT"
    assert out["error"]["field"] == "limit"
    assert "zq-secret-value" not in json.dumps(out)

    code, out = oaken_call("no_such_operation", alice)
    assert (code, out["error"]["code"]) == (1, "NOT_AVAILABLE")

    # mallory's ids, and mallory's tenant, do not exist for alice (and the other way round)
    code, out = oaken_call("get_message", alice, input={"message_id": mallory_mail.message_ids[0]})
    assert code == 1
    assert out == {"error": {"code": "NOT_FOUND", "message": "message_id: no such item", "field": "message_id"}}
    code, out = oaken_call("list_messages", mallory, "--tenant", str(alice.tenant.pk))
    assert code == 1
    assert out["error"] == {"code": "NOT_FOUND", "message": "no such tenant for this person", "field": "tenant"}
    code, out = oaken_call("list_messages", mallory, "--tenant", str(uuid.uuid4()))
    assert (code, out["error"]["field"]) == (1, "tenant")
    code, out = oaken_call("list_messages", alice, "--tenant", str(alice.tenant.pk))
    assert code == 0
    assert {m["subject"] for m in out["messages"]} == set(alice_mail.subjects)


def test_call_a_mutation_needing_confirmation_applies_with_confirm(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox
) -> None:
    code, out = oaken_call("create_label", alice, input={"account_id": alice_mail.account_id, "name": "Old"})
    assert code == 0
    label_id = out["label"]["id"]

    code, out = oaken_call("delete_label", alice, input={"label_id": label_id})
    assert code == 1
    assert out["error"]["code"] == "CONFIRMATION_REQUIRED"
    assert out["error"]["proposal"]["changes"] == [
        {"id": label_id, "before": {"name": "Old", "messages": 0}, "after": None}
    ]
    assert Label.objects.for_tenant(alice.tenant).filter(pk=label_id).exists()

    code, out = oaken_call("delete_label", mallory, "--confirm", input={"label_id": label_id})
    assert (code, out["error"]["code"]) == (1, "NOT_FOUND")
    assert Label.objects.for_tenant(alice.tenant).filter(pk=label_id).exists()

    code, out = oaken_call("delete_label", alice, "--confirm", input={"label_id": label_id})
    assert code == 0
    assert out == {"deleted": label_id, "messages_unlabelled": 0}
    assert not Label.objects.for_tenant(alice.tenant).exists()


def test_call_with_an_idempotency_key_replays(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox
) -> None:
    body = {"account_id": alice_mail.account_id, "name": "Receipts"}
    first = oaken_call("create_label", alice, "--idempotency-key", "k1", input=body)
    again = oaken_call("create_label", alice, "--idempotency-key", "k1", input=body)
    assert first[0] == again[0] == 0
    assert again[1] == first[1]
    assert Label.objects.for_tenant(alice.tenant).count() == 1
    assert AuditEvent.objects.for_tenant(alice.tenant).filter(operation="create_label", outcome="REPLAYED").count() == 1

    code, out = oaken_call("create_label", alice, "--idempotency-key", "k1", input=body | {"name": "Other"})
    assert (code, out["error"]["code"]) == (1, "IDEMPOTENCY_MISMATCH")
    assert Label.objects.for_tenant(alice.tenant).count() == 1

    # mallory's k1 is her own
    code, out = oaken_call(
        "create_label", mallory, "--idempotency-key", "k1", input={"account_id": mallory_mail.account_id, "name": "M"}
    )
    assert code == 0
    assert out["label"]["account_id"] == mallory_mail.account_id
    assert Label.objects.for_tenant(alice.tenant).count() == Label.objects.for_tenant(mallory.tenant).count() == 1


# ---------------------------------------------------------------- docs/operations.md


def test_the_operation_reference_is_generated_from_the_registry() -> None:
    committed = docs.DOC_PATH.read_text() if docs.DOC_PATH.exists() else ""
    assert docs.render() == committed, "docs/operations.md is stale: run `oaken ops docs` and commit the result"


def test_every_operation_is_in_the_reference() -> None:
    text = docs.render()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [op.name for op in registry]
    for op in registry:
        row = next(r for r in rows if r.startswith(f"| `{op.name}` |"))
        assert f"| {op.op_class.value} | {op.scope.value} | {op.ceiling.value} | {op.role} |" in row
        assert op.summary in row


def test_ops_docs_writes_the_reference_and_check_tells_when_it_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "docs" / "operations.md"
    monkeypatch.setattr(docs, "DOC_PATH", target)

    assert run("ops", "docs", "--check") == (1, "docs/operations.md is stale\n")
    assert run("ops", "docs")[0] == 0
    assert target.read_text() == docs.render()
    assert run("ops", "docs", "--check") == (0, "docs/operations.md is current\n")

    target.write_text(docs.render().replace("| `", "| `x", 1))
    assert run("ops", "docs", "--check")[0] == 1


def test_every_door_command_lives_in_the_cli_app() -> None:
    """The cli door is one app: no domain app holds a command; serving is process management, not a door."""
    from django.core.management import get_commands

    commands = get_commands()
    for name in ("apikey", "audit", "call", "import_mail", "ops", "user"):
        assert commands[name] == "apps.cli", name
    assert commands["serve"] == "apps.server"
