"""The OpenAPI 3.1 document of the REST door is generated from the registry and matches what the door answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from jsonschema import Draft202012Validator

from apps.operations.registry import Callers, Operation, registry
from tests.conftest import Person
from tests.test_rest_door import Mailbox, api_client, give_mail, post

OPS_PREFIX = "/api/v1/ops/"


@pytest.fixture
def document(alice: Person) -> dict[str, Any]:
    response = api_client(alice.user).get("/api/schema", {"format": "json"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/vnd.oai.openapi+json")
    schema: dict[str, Any] = response.json()
    return schema


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        ref = schema["$ref"]
        assert ref.startswith("#/components/schemas/"), ref
        schema = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return schema


def _json_schema(content: dict[str, Any]) -> dict[str, Any]:
    assert list(content) == ["application/json"]
    schema: dict[str, Any] = content["application/json"]["schema"]
    return schema


def _validator(document: dict[str, Any], content: dict[str, Any]) -> Draft202012Validator:
    """A validator for one body schema of the document, its $refs resolved against the document's components."""
    return Draft202012Validator({"components": document["components"], **_json_schema(content)})


def _same_shape(component: dict[str, Any], model_schema: dict[str, Any], where: str) -> None:
    assert component.get("type") == "object", where
    assert set(component.get("properties", {})) == set(model_schema.get("properties", {})), where
    assert set(component.get("required", [])) == set(model_schema.get("required", [])), where
    assert component.get("additionalProperties") is False, where  # closed, like the model


def test_the_document_is_openapi_3_1(document: dict[str, Any]) -> None:
    assert document["openapi"].startswith("3.1.")
    assert document["info"]["title"] == "Oaken API"
    operation_ids = [
        spec["operationId"]
        for methods in document["paths"].values()
        for spec in methods.values()
        if "operationId" in spec
    ]
    assert len(operation_ids) == len(set(operation_ids))


def _served() -> list[Operation]:
    """What the REST door serves: every operation but the system's own (internal door only) and the server's own
    side's (cli and internal doors only)."""
    return [op for op in registry if op.callers not in (Callers.INTERNAL, Callers.SERVER)]


def test_the_systems_own_operations_have_no_path(document: dict[str, Any]) -> None:
    internal = [op.name for op in registry if op.callers == Callers.INTERNAL]
    assert "claim_outbound_send" in internal
    assert not {f"{OPS_PREFIX}{name}" for name in internal} & set(document["paths"])


def test_the_server_sides_own_operations_have_no_path(document: dict[str, Any]) -> None:
    """import_mail names a file on the server: no door over the network may name one."""
    server = [op.name for op in registry if op.callers == Callers.SERVER]
    assert "import_mail" in server
    assert not {f"{OPS_PREFIX}{name}" for name in server} & set(document["paths"])


def test_one_post_path_per_registered_operation(document: dict[str, Any]) -> None:
    op_paths = {path: methods for path, methods in document["paths"].items() if path.startswith(OPS_PREFIX)}
    assert set(op_paths) == {f"{OPS_PREFIX}{op.name}" for op in _served()}
    for op in _served():
        methods = op_paths[f"{OPS_PREFIX}{op.name}"]
        assert list(methods) == ["post"], op.name
        spec = methods["post"]
        assert spec["operationId"] == op.name
        assert spec["summary"] == op.summary
        parameters = {(p["in"], p["name"]) for p in spec["parameters"]}
        assert {("header", "Oaken-Tenant"), ("query", "confirm")} <= parameters
        # a key only where the gate accepts one: never for an operation whose answer holds a secret
        assert (("header", "Idempotency-Key") in parameters) is not op.returns_secret, op.name
    # the listing of what a person may call is the only other path of the door
    assert set(document["paths"]) - set(op_paths) == {"/api/v1/ops"}
    assert document["paths"]["/api/v1/ops"]["get"]["operationId"] == "list_operations"


def test_request_and_response_schemas_are_the_operations_models(
    document: dict[str, Any], subtests: pytest.Subtests
) -> None:
    for op in _served():
        with subtests.test(op.name):
            _check_bodies(document, op)


def _check_bodies(document: dict[str, Any], op: Operation) -> None:
    spec = document["paths"][f"{OPS_PREFIX}{op.name}"]["post"]
    request = _resolve(document, _json_schema(spec["requestBody"]["content"]))
    _same_shape(request, op.input_model.model_json_schema(), f"{op.name} input")
    output = _resolve(document, _json_schema(spec["responses"]["200"]["content"]))
    _same_shape(output, op.output_model.model_json_schema(mode="serialization"), f"{op.name} output")
    for status in ("400", "401", "403", "404", "409", "422", "429", "503"):
        error = _resolve(document, _json_schema(spec["responses"][status]["content"]))
        assert set(error["properties"]) == {"error"}
        body = _resolve(document, error["properties"]["error"])
        assert {"code", "message"} <= set(body["required"])
        assert {"field", "missing_scope", "retry_after", "proposal"} <= set(body["properties"])


def test_what_the_door_answers_validates_against_the_document(
    document: dict[str, Any], alice: Person, mallory: Person, tmp_path: Path
) -> None:
    mail: Mailbox = give_mail(alice, tmp_path, "alice")
    client = api_client(alice.user)
    calls: list[tuple[str, dict[str, Any], str]] = [
        ("list_messages", {}, "200"),
        ("get_message", {"message_id": mail.message_ids[0]}, "200"),
        ("list_accounts", {}, "200"),
        ("create_label", {"account_id": mail.account_id, "name": "Receipts"}, "200"),
        ("get_message", {"message_id": "nope"}, "404"),
        ("list_messages", {"limit": "many"}, "400"),
    ]
    for op, body, status in calls:
        spec = document["paths"][f"{OPS_PREFIX}{op}"]["post"]
        response = post(client, op, body)
        assert str(response.status_code) == status, (op, response.content)
        _validator(document, spec["responses"][status]["content"]).validate(response.json())
        if status == "200":
            _validator(document, spec["requestBody"]["content"]).validate(body)


def test_the_api_docs_page_answers_html(alice: Person) -> None:
    response = api_client(alice.user).get("/api/docs")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    assert b"/api/schema" in response.content


def test_the_document_and_the_docs_are_public_and_the_same_for_everyone(
    document: dict[str, Any], alice: Person, mallory: Person, tmp_path: Path
) -> None:
    give_mail(alice, tmp_path, "alice")
    anonymous = Client().get("/api/schema", {"format": "json"})
    assert anonymous.status_code == 200 and anonymous["Content-Type"].startswith("application/vnd.oai.openapi+json")
    assert anonymous.json() == document  # nothing in it depends on who asks
    assert api_client(mallory.user).get("/api/schema", {"format": "json"}).json() == document
    assert not anonymous.cookies  # no session was read or made
    docs = Client().get("/api/docs")
    assert docs.status_code == 200 and b"/api/schema" in docs.content
    # only the operations the REST door serves to persons; nothing about any tenant
    assert {p.removeprefix(OPS_PREFIX) for p in document["paths"] if p.startswith(OPS_PREFIX)} == {
        op.name for op in _served()
    }
    text = anonymous.content.decode()
    for person in (alice, mallory):
        secrets = [
            str(person.tenant.pk),
            person.tenant.name,
            person.user.email,
            str(person.user.pk),
            str(person.workspace.pk),
        ]
        assert not [s for s in secrets if s in text]
