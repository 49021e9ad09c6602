"""The OpenAPI 3.1 document of the REST door is generated from the registry and matches what the door answers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from jsonschema import Draft202012Validator

from apps.core.callers import Caller
from apps.core.ids import IDEMPOTENCY_KEY_MAX_CHARS, IDEMPOTENCY_KEY_PATTERN
from apps.core.kinds import Door
from apps.gate.preflight import may_call
from apps.operations.registry import Callers, Ceiling, OpClass, Operation, registry
from tests.callers import membership
from tests.conftest import Mailbox, Person, give_mail
from tests.test_rest_door import api_client, post

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
    """What the REST door serves: every operation but the system's own (internal door only), the server's own
    side's (cli and internal doors only), a standing authority's (an automatic reply answering by itself) and
    the invitation page's own (accepting an invitation)."""
    hidden = (Callers.INTERNAL, Callers.STANDING, Callers.SERVER, Callers.INVITEES)
    return [op for op in registry if op.callers not in hidden]


def test_the_systems_own_operations_have_no_path(document: dict[str, Any]) -> None:
    internal = [op.name for op in registry if op.callers in (Callers.INTERNAL, Callers.STANDING)]
    assert {"claim_outbound_send", "send_automatically", "stop_automation"} <= set(internal)
    assert not {f"{OPS_PREFIX}{name}" for name in internal} & set(document["paths"])


def test_the_server_sides_own_operations_have_no_path(document: dict[str, Any]) -> None:
    """import_mail names a file on the server: no door over the network may name one."""
    server = [op.name for op in registry if op.callers == Callers.SERVER]
    assert "import_mail" in server
    assert not {f"{OPS_PREFIX}{name}" for name in server} & set(document["paths"])


def test_accepting_an_invitation_has_no_path(document: dict[str, Any]) -> None:
    """A person with no role yet accepts an invitation on its own console page, never over the REST door."""
    invitees = [op.name for op in registry if op.callers == Callers.INVITEES]
    assert invitees == ["accept_invitation"]
    assert not {f"{OPS_PREFIX}{name}" for name in invitees} & set(document["paths"])


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
    for status in ("400", "401", "403", "404", "409", "413", "422", "429", "503"):
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


def test_the_document_is_made_once_per_process_and_served_alike_to_everyone_after(
    alice: Person, mallory: Person, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Making the document costs a few tenths of a second of CPU: a public page that made it on every request
    (drf-spectacular's own view does) would let anyone burn the web workers' time, and kept Swagger UI waiting."""
    from drf_spectacular.generators import SchemaGenerator

    from apps.api import schema

    made: list[bool] = []
    make = SchemaGenerator.get_schema

    def counted(self: SchemaGenerator, *args: Any, **kwargs: Any) -> Any:
        made.append(True)
        return make(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counted)
    monkeypatch.setattr(schema, "_documents", {})
    first = Client().get("/api/schema", {"format": "json"})
    answers = [
        first,
        api_client(alice.user).get("/api/schema", {"format": "json"}),
        api_client(mallory.user).get("/api/schema"),  # YAML: the same document, another rendering
        Client().get("/api/schema", {"format": "json"}),
    ]
    assert [a.status_code for a in answers] == [200] * 4 and len(made) == 1
    assert all(a.content == first.content for a in answers if a is not answers[2])
    yaml = answers[2]
    assert yaml["Content-Type"].startswith("application/vnd.oai.openapi") and b"openapi: 3.1.0" in yaml.content
    assert "/api/v1/ops/list_messages" in first.json()["paths"]


def _request_schema(document: dict[str, Any], op: Operation) -> dict[str, Any]:
    spec = document["paths"][f"{OPS_PREFIX}{op.name}"]["post"]
    return _resolve(document, _json_schema(spec["requestBody"]["content"]))


def _branches(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in schema.get("anyOf", [schema]) if b.get("type") != "null"]


def test_every_bound_the_gate_enforces_is_in_the_document_with_its_setting(
    document: dict[str, Any], subtests: pytest.Subtests
) -> None:
    """Each operation's Bounds (settings.OPERATIONS, enforced by the gate) are its request schema's maxItems,
    maximum or maxLength: a client learns every limit before it calls, from the same source as the gate."""
    keyword = {"array": "maxItems", "integer": "maximum", "string": "maxLength"}
    bounded = [op for op in _served() if op.bounds]
    assert {"list_messages", "mark_read", "search", "summarize_messages", "send_email"} <= {op.name for op in bounded}
    for op in bounded:
        with subtests.test(op.name):
            properties = _request_schema(document, op)["properties"]
            for bound in op.bounds:
                for branch in _branches(properties[bound.field]):
                    # the setting, or the model's own smaller bound
                    assert branch[keyword[branch["type"]]] <= settings.OPERATIONS[bound.setting], bound
    spec = _request_schema(document, registry.get("list_messages"))  # type: ignore[arg-type]
    assert _branches(spec["properties"]["limit"])[0]["maximum"] == settings.OPERATIONS["PAGE_SIZE_MAX"]
    mark = _request_schema(document, registry.get("mark_read"))  # type: ignore[arg-type]
    assert mark["properties"]["message_ids"]["maxItems"] == settings.OPERATIONS["BATCH_MAX"]
    summarize = _request_schema(document, registry.get("summarize_messages"))  # type: ignore[arg-type]
    assert summarize["properties"]["message_ids"]["maxItems"] == settings.OPERATIONS["SUMMARIZE_MAX"]


def test_the_idempotency_key_tenant_and_listing_answers_are_described(document: dict[str, Any]) -> None:
    for op in _served():
        parameters = {p["name"]: p for p in document["paths"][f"{OPS_PREFIX}{op.name}"]["post"]["parameters"]}
        if "Idempotency-Key" in parameters:
            key = parameters["Idempotency-Key"]["schema"]
            assert (key["minLength"], key["maxLength"]) == (1, IDEMPOTENCY_KEY_MAX_CHARS)
            assert key["pattern"] == IDEMPOTENCY_KEY_PATTERN
        assert parameters["Oaken-Tenant"]["schema"] == {"type": "string", "format": "uuid"}
        assert "413" in document["paths"][f"{OPS_PREFIX}{op.name}"]["post"]["responses"]
    listing = document["paths"]["/api/v1/ops"]["get"]
    assert {"200", "400", "401", "404", "429", "503"} <= set(listing["responses"])
    assert "Oaken-Tenant" in {p["name"] for p in listing["parameters"]}
    # and the door answers the listing's 401 as described
    answer = Client().get("/api/v1/ops")
    assert answer.status_code == 401
    _validator(document, listing["responses"]["401"]["content"]).validate(answer.json())


def test_free_text_in_a_request_excludes_what_the_gate_refuses(document: dict[str, Any]) -> None:
    """The gate refuses a NUL in any text (no column stores it): every free text of every request says so."""
    seen = 0
    for name, component in document["components"]["schemas"].items():
        if not name.endswith("Request"):
            continue
        for prop in component.get("properties", {}).values():
            for branch in _branches(prop):
                if branch.get("type") == "string" and not {"enum", "const"} & set(branch):
                    patterns = [branch["pattern"], *(p["pattern"] for p in branch.get("allOf", []))]
                    assert any(re.search(pattern, "a\u0000") is None for pattern in patterns), (name, patterns)
                    seen += 1
    assert seen > 50


def test_the_published_maximum_is_accepted_and_one_more_is_refused(
    document: dict[str, Any], alice: Person, mallory: Person, tmp_path: Path
) -> None:
    """What the document says, the door does: at its maximum a call runs, past it LIMIT_EXCEEDED names the field;
    and the key's bound likewise."""
    give_mail(alice, tmp_path, "alice")
    client = api_client(alice.user)
    limit = _branches(_request_schema(document, registry.get("list_messages"))["properties"]["limit"])[0]  # type: ignore[arg-type]
    assert post(client, "list_messages", {"limit": limit["maximum"]}).status_code == 200
    over = post(client, "list_messages", {"limit": limit["maximum"] + 1})
    assert over.status_code == 422 and over.json()["error"] == {
        "code": "LIMIT_EXCEEDED",
        "message": f"limit: at most {limit['maximum']} per call",
        "field": "limit",
    }
    assert post(client, "list_messages", {}, key="k" * IDEMPOTENCY_KEY_MAX_CHARS).status_code == 200
    too_long = post(client, "list_messages", {}, key="k" * (IDEMPOTENCY_KEY_MAX_CHARS + 1))
    assert too_long.status_code == 400 and too_long.json()["error"]["field"] == "idempotency_key"


def test_the_tool_list_publishes_the_same_bounds() -> None:
    """The MCP tool list (and `oaken ops list --json`) take an operation's input schema from the same place."""
    from apps.mcp.tools import tool

    for name, field, setting in (
        ("mark_read", "message_ids", "BATCH_MAX"),
        ("summarize_messages", "message_ids", "SUMMARIZE_MAX"),
        ("search", "query", "QUERY_MAX_CHARS"),
    ):
        op = registry.get(name)
        assert op is not None
        schema = tool(op)["inputSchema"]["properties"][field]
        assert settings.OPERATIONS[setting] in {b.get("maxItems", b.get("maxLength")) for b in _branches(schema)}
    listed = tool(registry.get("list_messages"))["inputSchema"]["properties"]
    assert _branches(listed["limit"])[0]["maximum"] == settings.OPERATIONS["PAGE_SIZE_MAX"]
    created = tool(registry.get("create_label"))["inputSchema"]["properties"]
    assert created["idempotency_key"]["pattern"] == IDEMPOTENCY_KEY_PATTERN


def test_every_array_and_free_form_object_of_a_request_says_the_item_bound_every_door_holds(
    document: dict[str, Any],
) -> None:
    """No door lets an array or object of more than INPUT_ARRAY_MAX items through (apps.gate.payload, before the
    body is parsed): the document says so wherever the schema names no tighter bound."""
    most = settings.OPERATIONS["INPUT_ARRAY_MAX"]
    arrays = objects = 0
    stack: list[Any] = [c for n, c in document["components"]["schemas"].items() if n.endswith("Request")]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if node.get("type") == "array":
                assert 0 < node["maxItems"] <= most, node
                arrays += 1
            elif node.get("type") == "object" and node.get("additionalProperties") not in (None, False):
                assert 0 < node["maxProperties"] <= most, node
                objects += 1
            stack.extend(node.values())
    assert arrays > 20 and objects >= 1


def _agent(alice: Person, kind: str) -> Caller:
    """An agent of alice's granted everything a credential of `kind` can be, in a tenant offering every operation
    up to its ceiling: what no credential of that kind can call, none ever can."""
    return Caller.agent(
        membership(alice),
        scopes={"read", "write", "send"},
        workspaces=(),
        credential_id="any",
        credential_kind=kind,
        exposure={op.name: "on" for op in registry},
    )


def test_the_security_schemes_say_who_may_call_each_operation(document: dict[str, Any], alice: Person) -> None:
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearer"]["type"] == "http" and schemes["bearer"]["scheme"] == "bearer"
    assert schemes["cookieAuth"] == {"type": "apiKey", "in": "cookie", "name": settings.SESSION_COOKIE_NAME}
    by_key, by_token = _agent(alice, "apikey"), _agent(alice, "oauth")
    for op in _served():
        if op.plugin is not None:
            continue  # a plugin's operations are offered while it is healthy, which no document can know
        spec = document["paths"][f"{OPS_PREFIX}{op.name}"]["post"]
        callers = spec["x-oaken-callers"]
        assert callers[0] == "person", op.name
        assert ("api_key" in callers) is may_call(by_key, Door.API, op.name), op.name
        assert ("oauth" in callers) is may_call(by_token, Door.API, op.name), op.name
        if callers == ["person"]:
            assert op.callers == Callers.PERSONS or op.ceiling == Ceiling.NEVER, op.name
            assert spec["security"] == [{"cookieAuth": []}], op.name
            assert "confirmation_token" not in {p["name"] for p in spec["parameters"]}, op.name
        else:
            assert spec["security"] == [{"bearer": []}, {"cookieAuth": []}], op.name
            token = "confirmation_token" in {p["name"] for p in spec["parameters"]}
            assert token is (op.op_class == OpClass.MUTATE), op.name
    assert {"create_api_key", "approve_outbound", "list_audit_events"} <= {
        op.name
        for op in _served()
        if document["paths"][f"{OPS_PREFIX}{op.name}"]["post"]["security"] == [{"cookieAuth": []}]
    }
    assert document["paths"]["/api/v1/ops"]["get"]["security"] == [{"bearer": []}, {"cookieAuth": []}]
