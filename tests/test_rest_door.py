"""The REST door: session + CSRF, one POST path per operation, domain errors as HTTP statuses, Oaken-Tenant."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.middleware.csrf import CSRF_ALLOWED_CHARS, CSRF_SECRET_LENGTH
from django.test import Client
from django.utils.crypto import get_random_string

from apps.accounts.models import User
from apps.audit.models import AuditEvent
from apps.core.errors import NOT_AVAILABLE_MESSAGE
from apps.mail.models import Label
from apps.operations.registry import Callers, registry
from apps.workspaces.models import Membership
from tests.conftest import Mailbox, Person, make_person

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as Answer

OPS = "/api/v1/ops"
SECRET = "zq-secret-value"


# ---------------------------------------------------------------- helpers shared by the REST tests


def api_client(user: User | None = None, *, csrf: bool = True) -> Client:
    """A browser-like client: CSRF enforced, signed in as `user`, sending the CSRF cookie and header."""
    client = Client(enforce_csrf_checks=True)
    if user is not None:
        client.force_login(user)
    if csrf:
        # what the browser holds after a console page set the cookie: the secret in the cookie and,
        # from the page's JavaScript, the same secret in the X-CSRFToken header
        token = get_random_string(CSRF_SECRET_LENGTH, CSRF_ALLOWED_CHARS)
        client.cookies[settings.CSRF_COOKIE_NAME] = token
        client.defaults["HTTP_X_CSRFTOKEN"] = token
    return client


def post(
    client: Client,
    op: str,
    body: Any = None,
    *,
    confirm: bool = False,
    tenant: object = None,
    key: str | None = None,
    raw: str | None = None,
    content_type: str = "application/json",
) -> Answer:
    headers: dict[str, str] = {}
    if tenant is not None:
        headers["Oaken-Tenant"] = str(tenant)
    if key is not None:
        headers["Idempotency-Key"] = key
    data = raw if raw is not None else json.dumps({} if body is None else body)
    url = f"{OPS}/{op}" + ("?confirm=true" if confirm else "")
    return client.post(url, data=data, content_type=content_type, headers=headers)


def error_of(response: Answer) -> dict[str, Any]:
    """The one error shape: {"error": {"code", "message", ...}} and nothing else."""
    body = response.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert isinstance(error["code"], str) and isinstance(error["message"], str) and error["message"]
    assert set(error) <= {"code", "message", "field", "missing_scope", "retry_after", "proposal"}
    return error


def member_of(person: Person, email: str = "bob@example.test") -> Person:
    """A second person, OWNER of a tenant of their own (their first), who is a MEMBER of `person`'s tenant."""
    bob = make_person(email, "Bob's tenant")
    Membership.objects.create(tenant=person.tenant, user=bob.user, role="MEMBER")
    return bob


# ---------------------------------------------------------------- authentication


def test_a_post_without_the_csrf_token_is_refused(alice: Person, alice_mail: Mailbox, mallory: Person) -> None:
    body = {"account_id": alice_mail.account_id, "name": "Receipts"}
    no_token = api_client(alice.user, csrf=False)
    wrong_token = api_client(alice.user)
    wrong_token.defaults["HTTP_X_CSRFTOKEN"] = get_random_string(CSRF_SECRET_LENGTH, CSRF_ALLOWED_CHARS)

    for client in (no_token, wrong_token):
        response = post(client, "create_label", body)
        assert response.status_code == 403
        assert error_of(response)["code"] == "FORBIDDEN"
    assert not Label.objects.for_tenant(alice.tenant).exists()

    response = post(api_client(alice.user), "create_label", body)
    assert response.status_code == 200
    assert Label.objects.for_tenant(alice.tenant).get().name == "Receipts"
    assert not Label.objects.for_tenant(mallory.tenant).exists()


def test_a_request_without_a_session_is_unauthenticated(alice: Person) -> None:
    anonymous = api_client()
    for response in (post(anonymous, "status"), anonymous.get(OPS)):
        assert response.status_code == 401
        assert error_of(response)["code"] == "UNAUTHENTICATED"


# ---------------------------------------------------------------- calls and their answers


def test_a_call_answers_200_with_the_operations_output(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox
) -> None:
    op = registry.get("list_messages")
    assert op is not None
    for person, own, other in ((alice, alice_mail, mallory_mail), (mallory, mallory_mail, alice_mail)):
        response = post(api_client(person.user), "list_messages", {})
        assert response.status_code == 200
        assert response["Content-Type"] == "application/json"
        output = op.output_model.model_validate(response.json())  # exactly the operation's output model
        subjects = {m.subject for m in output.messages}  # type: ignore[attr-defined]
        assert subjects == set(own.subjects)
        assert not any(s in response.content.decode() for s in other.subjects)
        assert not any(i in response.content.decode() for i in other.message_ids)


def test_invalid_input_names_the_field_and_never_echoes_the_value(
    alice: Person, alice_mail: Mailbox, mallory: Person
) -> None:
    client = api_client(alice.user)
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("list_messages", {"limit": SECRET}, "limit"),  # wrong type
        ("list_messages", {"unread_only": {"nested": SECRET}}, "unread_only"),  # wrong type, nested value
        ("create_label", {"account_id": alice_mail.account_id, "name": "x", "color": SECRET}, "color"),  # pattern
        ("set_operation_exposure", {"operation": "search", "level": SECRET}, "level"),  # not one of the choices
        ("create_label", {"account_id": alice_mail.account_id}, "name"),  # missing
    ]
    for op, body, field in cases:
        response = post(client, op, body)
        assert response.status_code == 400, (op, body)
        error = error_of(response)
        assert error["code"] == "INVALID_INPUT"
        assert error["field"] == field
        assert field in error["message"]
        assert SECRET not in response.content.decode()

    # an argument the operation does not take is not named: its name is the caller's own text
    response = post(client, "status", {"surprise": 1})
    assert response.status_code == 400
    assert error_of(response) == {
        "code": "INVALID_INPUT",
        "message": "an unknown argument was sent, not a field of this operation",
    }
    assert not Label.objects.for_tenant(alice.tenant).exists()


def test_a_body_that_is_not_a_json_object_is_refused(alice: Person, mallory: Person) -> None:
    client = api_client(alice.user)
    for raw in ("[1, 2]", '"text"', "42", "null", "{not json", "[]"):
        response = post(client, "status", raw=raw)
        assert response.status_code == 400, raw
        assert error_of(response)["code"] == "INVALID_INPUT"
    response = post(client, "status", raw="a=1", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400
    assert error_of(response)["code"] == "INVALID_INPUT"
    # an empty body is the empty object
    assert post(client, "status", raw="").status_code == 200


def test_a_body_over_the_bound_or_of_too_many_objects_is_refused_before_it_is_parsed(
    alice: Person, mallory: Person, settings: Any
) -> None:
    client = api_client(alice.user)
    settings.OPERATION_BODY_MAX_BYTES = 1000
    response = post(client, "create_label", raw=json.dumps({"name": "x" * 2000}))
    assert response.status_code == 413 and error_of(response)["code"] == "LIMIT_EXCEEDED"
    settings.OPERATION_BODY_MAX_BYTES = 32 << 20
    response = post(client, "create_label", raw=json.dumps({"name": "x", "color": [{}] * 30_000}))
    assert response.status_code == 422 and error_of(response)["code"] == "LIMIT_EXCEEDED"
    assert not Label.objects.for_tenant(alice.tenant).exists()
    assert not Label.objects.for_tenant(mallory.tenant).exists()


def test_ids_of_another_tenant_are_not_found(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox
) -> None:
    as_alice = api_client(alice.user)
    theirs = post(as_alice, "get_message", {"message_id": mallory_mail.message_ids[0]})
    nowhere = post(as_alice, "get_message", {"message_id": str(uuid.uuid4())})
    assert theirs.status_code == nowhere.status_code == 404
    assert (
        error_of(theirs)
        == error_of(nowhere)
        == {
            "code": "NOT_FOUND",
            "message": "message_id: no such item",
            "field": "message_id",
        }
    )
    assert not any(s in theirs.content.decode() for s in mallory_mail.subjects)

    # mallory cannot create a label in alice's account, nor learn that it exists
    as_mallory = api_client(mallory.user)
    response = post(as_mallory, "create_label", {"account_id": alice_mail.account_id, "name": "Mine now"})
    assert response.status_code == 404
    assert error_of(response)["field"] == "account_id"
    assert not Label.objects.for_tenant(alice.tenant).exists()
    assert not Label.objects.for_tenant(mallory.tenant).exists()

    # her own message answers normally
    response = post(as_mallory, "get_message", {"message_id": mallory_mail.message_ids[0]})
    assert response.status_code == 200
    assert response.json()["message"]["subject"] in mallory_mail.subjects


def test_a_mutation_needing_confirmation_answers_409_with_the_proposal(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox
) -> None:
    client = api_client(alice.user)
    created = post(client, "create_label", {"account_id": alice_mail.account_id, "name": "Old"})
    label_id = created.json()["label"]["id"]
    post(client, "add_labels", {"message_ids": alice_mail.message_ids[:2], "label_ids": [label_id]})

    response = post(client, "delete_label", {"label_id": label_id})
    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "CONFIRMATION_REQUIRED"
    proposal = error["proposal"]
    assert proposal["operation"] == "delete_label"
    assert proposal["count"] == 1
    assert proposal["changes"] == [{"id": label_id, "before": {"name": "Old", "messages": 2}, "after": None}]
    assert not any(s in response.content.decode() for s in alice_mail.subjects)  # never mail text
    assert Label.objects.for_tenant(alice.tenant).filter(pk=label_id).exists()  # nothing changed yet

    # ?confirm=true on mallory's side cannot reach alice's label
    response = post(api_client(mallory.user), "delete_label", {"label_id": label_id}, confirm=True)
    assert response.status_code == 404
    assert Label.objects.for_tenant(alice.tenant).filter(pk=label_id).exists()

    response = post(client, "delete_label", {"label_id": label_id}, confirm=True)
    assert response.status_code == 200
    assert response.json() == {"deleted": label_id, "messages_unlabelled": 2}
    assert not Label.objects.for_tenant(alice.tenant).filter(pk=label_id).exists()


def test_a_count_over_its_bound_is_limit_exceeded(alice: Person, alice_mail: Mailbox, mallory: Person) -> None:
    client = api_client(alice.user)
    maximum = settings.OPERATIONS["PAGE_SIZE_MAX"]
    response = post(client, "list_messages", {"limit": maximum + 1})
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "LIMIT_EXCEEDED"
    assert error["field"] == "limit"
    assert str(maximum) in error["message"]
    assert post(client, "list_messages", {"limit": maximum}).status_code == 200


def test_a_tenant_the_person_is_not_in_is_not_found(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox
) -> None:
    as_mallory = api_client(mallory.user)
    answers = [
        post(as_mallory, "list_messages", {}, tenant=alice.tenant.pk),
        post(as_mallory, "list_messages", {}, tenant=uuid.uuid4()),
        post(as_mallory, "list_messages", {}, tenant="not-a-tenant-id"),
        as_mallory.get(OPS, headers={"Oaken-Tenant": str(alice.tenant.pk)}),
    ]
    for response in answers:
        assert response.status_code == 404
        assert error_of(response) == {"code": "NOT_FOUND", "message": "tenant: no such item", "field": "tenant"}
        assert not any(s in response.content.decode() for s in alice_mail.subjects)
    # her own tenant, named or not, answers with her own mail
    for tenant in (None, mallory.tenant.pk):
        response = post(as_mallory, "list_messages", {}, tenant=tenant)
        assert response.status_code == 200
        assert {m["subject"] for m in response.json()["messages"]} == set(mallory_mail.subjects)


# ---------------------------------------------------------------- what a person may call


def _listed(response: Answer) -> dict[str, dict[str, Any]]:
    assert response.status_code == 200
    return {row["name"]: row for row in response.json()["operations"]}


def test_the_operation_list_shows_what_the_person_may_call(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox
) -> None:
    admin_ops = {op.name for op in registry if op.role in {"ADMIN", "OWNER"}}
    assert {"set_operation_exposure", "verify_audit", "export_audit_chain"} <= admin_ops

    # alice owns her tenant: everything but the system's own operations (the internal door's only) and the server
    # side's (the cli and internal doors' only: they name the server's files)
    persons = [op.name for op in registry if op.callers not in (Callers.INTERNAL, Callers.STANDING, Callers.SERVER)]
    assert len(persons) < len(list(registry))
    rows = _listed(api_client(alice.user).get(OPS))
    assert list(rows) == persons
    create = registry.get("create_label")
    assert create is not None
    assert rows["create_label"] == {
        "name": "create_label",
        "summary": create.summary,
        "op_class": "mutate",
        "needs_role": "MEMBER",
    }

    # bob is a MEMBER of alice's tenant: no ADMIN operations there
    bob = member_of(alice)
    as_bob = api_client(bob.user)
    rows = _listed(as_bob.get(OPS, headers={"Oaken-Tenant": str(alice.tenant.pk)}))
    assert not admin_ops & set(rows)
    assert set(rows) == set(persons) - admin_ops
    # ... and calling one anyway is refused by role
    response = post(as_bob, "set_operation_exposure", {"operation": "search", "level": "off"}, tenant=alice.tenant.pk)
    assert response.status_code == 403
    assert error_of(response)["code"] == "FORBIDDEN"
    # what he may call works on alice's tenant's mail, never on mallory's
    response = post(as_bob, "list_messages", {}, tenant=alice.tenant.pk)
    assert {m["subject"] for m in response.json()["messages"]} == set(alice_mail.subjects)

    # in his own tenant (the first, used when no tenant is named) he is the OWNER
    assert set(_listed(as_bob.get(OPS))) == set(persons)
    assert post(as_bob, "list_messages", {}).json()["messages"] == []


def test_an_operation_path_takes_only_post(alice: Person, mallory: Person) -> None:
    response = api_client(alice.user).get(f"{OPS}/status")
    assert response.status_code == 405
    assert error_of(response)["code"] == "INVALID_INPUT"


def test_an_unknown_operation_is_not_available_in_the_one_error_shape(alice: Person, mallory: Person) -> None:
    response = post(api_client(alice.user), "no_such_operation", {})
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert error_of(response) == {"code": "NOT_AVAILABLE", "message": NOT_AVAILABLE_MESSAGE}
    assert AuditEvent.objects.for_tenant(alice.tenant).filter(outcome="NOT_AVAILABLE", door="ui").count() == 1

    response = post(api_client(), "no_such_operation", {})
    assert response.status_code == 401
    assert error_of(response)["code"] == "UNAUTHENTICATED"
