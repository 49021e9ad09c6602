"""The REST door with a bearer credential: an API key or an OAuth token makes the caller an agent on the `api` door,
held to exactly the rules of /mcp (exposure, scopes, workspaces, confirmation by proposal and token, idempotency,
the credential's requests a minute, audit), without CSRF and never falling back to a session. Mallory's tenant,
with mail and a key of her own, sees none of alice's."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.test import Client
from django.utils import timezone

from apps.agents.bearer import RATE_KEY
from apps.agents.keys import issue_key
from apps.agents.models import ApiKey
from apps.audit.models import AuditEvent
from apps.core.errors import NOT_AVAILABLE_MESSAGE
from apps.core.kinds import Door
from apps.core.redis_client import redis_client
from apps.mail.importing import import_mail
from apps.mail.models import Label, Message
from apps.operations.defs import audit as audit_ops
from apps.operations.exposure import offered_operations
from apps.outbound.models import Draft, OutboundRequest
from apps.workspaces.models import Workspace
from tests.callers import as_agent, membership
from tests.conftest import Mailbox, Person, give_mail
from tests.mailfactory import raw_message, write_mbox
from tests.mailservers import ImapServer, SmtpServer
from tests.oauthflow import ORIGIN, connect, consent, exchange, redirect_params, start
from tests.outbound_accounts import imap_account, mail_user
from tests.test_mcp_door import post as mcp_post
from tests.test_mcp_door import rpc
from tests.test_rest_door import OPS, api_client, error_of

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as Answer

API_RESOURCE = ORIGIN + "/api/v1"
METADATA = f'resource_metadata="{ORIGIN}/.well-known/oauth-protected-resource/api/v1"'


def key_for(person: Person, scopes: list[str], workspaces: list[str] | None = None) -> str:
    return issue_key(
        membership=membership(person),
        scopes=scopes,
        workspaces=["default"] if workspaces is None else workspaces,
        allow_list=None,
        expires_at=None,
    )[1]


def bearer_client() -> Client:
    """A script's client: no session, no CSRF cookie, and Django's CSRF checks enforced all the same."""
    return Client(enforce_csrf_checks=True)


def call(
    token: str,
    op: str,
    body: Any = None,
    *,
    client: Client | None = None,
    confirmation_token: str | None = None,
    key: str | None = None,
    tenant: object = None,
) -> Answer:
    """POST /api/v1/ops/<op> with `Authorization: Bearer <token>`."""
    headers = {"Authorization": f"Bearer {token}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    if tenant is not None:
        headers["Oaken-Tenant"] = str(tenant)
    url = f"{OPS}/{op}" + (f"?confirmation_token={confirmation_token}" if confirmation_token else "")
    data = json.dumps({} if body is None else body)
    return (client or bearer_client()).post(url, data=data, content_type="application/json", headers=headers)


def listed(token: str) -> list[str]:
    response = bearer_client().get(OPS, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.content
    return [row["name"] for row in response.json()["operations"]]


def _events(person: Person) -> list[AuditEvent]:
    return list(AuditEvent.objects.for_tenant(person.tenant).order_by("seq"))


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    for key in redis_client().scan_iter(RATE_KEY.format(kind="*", id="*")):
        redis_client().delete(key)


# ---------------------------------------------------------------- the whole way, with a key a person made


@pytest.fixture
def world(alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer) -> dict[str, Any]:
    """Alice's mailbox that can send, and mallory's."""
    account = imap_account(alice, imap_server, smtp_server, mail_user(imap_server, "alice"))
    theirs = imap_account(mallory, imap_server, smtp_server, mail_user(imap_server, "mallory"))
    return {"account": str(account.pk), "theirs": str(theirs.pk), "bob": mail_user(imap_server, "bob")}


def test_a_key_lists_reads_drafts_and_requests_a_send_confirming_with_the_token(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox, world: dict[str, Any]
) -> None:
    # alice makes the key in the console (her session, CSRF, confirm): shown once
    made = api_client(alice.user).post(
        f"{OPS}/create_api_key?confirm=true",
        data=json.dumps({"name": "script", "scopes": ["read", "write", "send"]}),
        content_type="application/json",
    )
    assert made.status_code == 200, made.content
    key, key_id = made.json()["key"], made.json()["api_key"]["id"]
    theirs = key_for(mallory, ["read", "write", "send"])
    before_theirs = len(_events(mallory))

    # list: exactly what the gate offers this agent, and nothing only persons may call
    names = listed(key)
    agent = as_agent(alice, scopes={"read", "write", "send"})
    assert names == [op.name for op in offered_operations(agent, door=Door.API)]
    assert {"list_messages", "get_message", "create_draft", "send_draft"} <= set(names)
    assert not {"create_api_key", "approve_outbound", "list_audit_events", "revoke_api_key"} & set(names)

    # read: her own mail; mallory's ids are not found, as ids that do not exist
    response = call(key, "list_messages", {"account_id": alice_mail.account_id})
    assert response.status_code == 200
    assert {m["subject"] for m in response.json()["messages"]} == set(alice_mail.subjects)
    opened = call(key, "get_message", {"message_id": alice_mail.message_ids[0]})
    assert opened.status_code == 200 and opened.json()["message"]["subject"] in alice_mail.subjects
    foreign = call(key, "get_message", {"message_id": mallory_mail.message_ids[0]})
    assert foreign.status_code == 404 and error_of(foreign)["code"] == "NOT_FOUND"
    assert not any(s in foreign.content.decode() for s in mallory_mail.subjects)

    # draft
    draft = call(key, "create_draft", {"account_id": world["account"], "to": [world["bob"]], "subject": "Figures"})
    assert draft.status_code == 200, draft.content
    draft_id = draft.json()["id"]

    # send request: a proposal with a token, and nothing made yet
    send = {"draft_id": draft_id, "idempotency_key": uuid.uuid4().hex}
    asked = call(key, "send_draft", send)
    assert asked.status_code == 409
    error = error_of(asked)
    assert error["code"] == "CONFIRMATION_REQUIRED" and "confirmation_token" in error["message"]
    proposal = error["proposal"]
    assert proposal["operation"] == "send_draft" and proposal["token"] and proposal["expires_in"] > 0
    assert not OutboundRequest.objects.for_tenant(alice.tenant).exists()

    # the token is the caller's own: mallory's key cannot redeem it, nor reach alice's draft
    stolen = call(theirs, "send_draft", send, confirmation_token=proposal["token"])
    assert stolen.status_code == 404 and error_of(stolen)["code"] == "NOT_FOUND"
    # ... nor another input with it
    other = call(key, "send_draft", {**send, "idempotency_key": uuid.uuid4().hex}, confirmation_token="x" * 40)
    assert other.status_code == 409 and error_of(other)["code"] == "CONFIRMATION_INVALID"

    # confirm: the same call, with the token
    confirmed = call(key, "send_draft", send, confirmation_token=proposal["token"])
    assert confirmed.status_code == 200, confirmed.content
    request = confirmed.json()
    assert request["state"] == "awaiting_approval"
    stored = OutboundRequest.objects.for_tenant(alice.tenant).get()
    assert str(stored.pk) == request["request_id"] and stored.door == "api"
    # the token is spent; the repeat answers with the request it made, never a second one
    again = call(key, "send_draft", send, confirmation_token=proposal["token"])
    assert again.status_code == 200 and again.json()["request_id"] == request["request_id"]
    assert OutboundRequest.objects.for_tenant(alice.tenant).count() == 1

    # audited: door api, the agent, the key as credential; never the draft's words
    events = [e for e in _events(alice) if e.principal == "agent"]
    assert events and all(e.door == "api" for e in events)
    assert {(e.credential_kind, e.credential_id) for e in events} == {("apikey", key_id)}
    assert [e.outcome for e in events if e.operation == "send_draft"] == [
        "CONFIRMATION_REQUIRED",
        "CONFIRMATION_INVALID",
        "ok",
        "ok",
    ]
    assert "Figures" not in json.dumps([e.targets for e in events])
    # the person's audit view says which door, in words
    seq = next(e.seq for e in events if e.operation == "create_draft")
    detail = api_client(alice.user).post(f"{OPS}/get_audit_event", json.dumps({"seq": seq}), "application/json")
    assert detail.json()["door_words"] == audit_ops._DOOR_NAMES["api"]
    assert "over the REST API" in detail.json()["event"]["description"]

    # mallory: her own mail only, and her chain holds only her key's one refusal
    response = call(theirs, "list_messages", {"account_id": mallory_mail.account_id})
    assert {m["subject"] for m in response.json()["messages"]} == set(mallory_mail.subjects)
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()
    assert [e.outcome for e in _events(mallory)[before_theirs:]] == ["NOT_FOUND", "ok"]
    assert not Draft.objects.for_tenant(mallory.tenant).exists()


# ---------------------------------------------------------------- what a credential may do


def test_a_read_only_key_is_refused_a_mutation_naming_the_missing_scope(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox
) -> None:
    key = key_for(alice, ["read"])
    assert "create_label" not in listed(key)
    response = call(key, "create_label", {"account_id": alice_mail.account_id, "name": "Receipts"})
    assert response.status_code == 403
    error = error_of(response)
    assert error["code"] == "INSUFFICIENT_SCOPE" and error["missing_scope"] == "write"
    assert "new key" in error["message"]
    assert "WWW-Authenticate" not in response  # an API key cannot be widened by asking
    assert not Label.objects.for_tenant(alice.tenant).exists()
    assert not Label.objects.for_tenant(mallory.tenant).exists()
    assert _events(alice)[-1].outcome == "INSUFFICIENT_SCOPE" and _events(alice)[-1].door == "api"


def test_a_key_limited_to_one_workspace_never_reads_another_nor_another_tenant(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox, tmp_path: Path
) -> None:
    clients = Workspace.objects.create(tenant=alice.tenant, name="clients")
    counts = import_mail(
        tenant=alice.tenant,
        workspace=clients,
        account_name="clients mail",
        path=write_mbox(tmp_path / "clients.mbox", [raw_message(subject="Client secret plan")]),
    )
    hidden = str(Message.objects.for_tenant(alice.tenant).get(account_id=counts.account_id).pk)
    key = key_for(alice, ["read", "write"], workspaces=["default"])

    accounts = call(key, "list_accounts").json()["accounts"]
    assert [a["id"] for a in accounts] == [alice_mail.account_id]
    refused = call(key, "get_message", {"message_id": hidden})
    assert refused.status_code == 403 and error_of(refused)["code"] == "OUT_OF_SCOPE"
    listing = call(key, "list_messages", {"account_id": str(counts.account_id)})
    assert listing.status_code == 403 and error_of(listing)["code"] == "OUT_OF_SCOPE"
    # a read across every account cannot be narrowed to the key's reach: it asks for an account
    everywhere = call(key, "list_messages", {})
    assert everywhere.status_code == 403 and error_of(everywhere)["field"] == "account_id"
    for answer in (refused, listing, everywhere):
        assert "Client secret plan" not in answer.content.decode()
    theirs = call(key, "get_message", {"message_id": mallory_mail.message_ids[0]})
    assert theirs.status_code == 404 and error_of(theirs)["code"] == "NOT_FOUND"
    # the key's own workspace reads normally
    mine = call(key, "list_messages", {"account_id": alice_mail.account_id})
    assert {m["subject"] for m in mine.json()["messages"]} == set(alice_mail.subjects)
    # naming a tenant that is not the key's is not found, whichever tenant it is
    for tenant in (mallory.tenant.pk, uuid.uuid4(), "not-a-tenant"):
        response = call(key, "list_accounts", tenant=tenant)
        assert response.status_code == 404 and error_of(response)["field"] == "tenant"
    assert call(key, "list_accounts", tenant=alice.tenant.pk).status_code == 200


def test_operations_only_persons_may_call_are_not_available_to_a_bearer(
    alice: Person, alice_mail: Mailbox, mallory: Person
) -> None:
    key = key_for(alice, ["read", "write", "send"], workspaces=[])
    keys_before = ApiKey.objects.for_tenant(alice.tenant).count()
    for op, body in (
        ("create_api_key", {"scopes": ["read", "write", "send"]}),
        ("approve_outbound", {"request_id": str(uuid.uuid4()), "content_hash": "0" * 64}),
        ("list_audit_events", {}),
        ("set_operation_exposure", {"operation": "search", "level": "off"}),
        ("no_such_operation", {}),
    ):
        response = call(key, op, body)
        assert response.status_code == 404, op
        assert error_of(response) == {"code": "NOT_AVAILABLE", "message": NOT_AVAILABLE_MESSAGE}
        event = _events(alice)[-1]
        assert (event.door, event.principal, event.outcome) == ("api", "agent", "NOT_AVAILABLE")
    assert ApiKey.objects.for_tenant(alice.tenant).count() == keys_before
    # the upload door too: refused by the gate before a byte is read
    upload = bearer_client().post(
        "/api/v1/imports/upload?filename=x.mbox",
        data=b"From x\n",
        content_type="application/octet-stream",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert upload.status_code == 404 and error_of(upload)["code"] == "NOT_AVAILABLE"
    assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(principal="agent").exists()


# ---------------------------------------------------------------- authentication


def test_a_bearer_call_needs_no_csrf_token(alice: Person, alice_mail: Mailbox, mallory: Person) -> None:
    key = key_for(alice, ["read", "write"])
    response = call(key, "create_label", {"account_id": alice_mail.account_id, "name": "Receipts"})
    assert response.status_code == 200, response.content
    assert Label.objects.for_tenant(alice.tenant).get().name == "Receipts"
    assert not Label.objects.for_tenant(mallory.tenant).exists()
    # the session alone keeps its CSRF check exactly as before
    no_csrf = api_client(alice.user, csrf=False)
    response = no_csrf.post(
        f"{OPS}/create_label", json.dumps({"account_id": alice_mail.account_id, "name": "B"}), "application/json"
    )
    assert response.status_code == 403 and error_of(response)["code"] == "FORBIDDEN"


def test_a_session_and_a_bearer_together_are_refused(alice: Person, alice_mail: Mailbox, mallory: Person) -> None:
    key = key_for(alice, ["read", "write"])
    before = len(_events(alice))
    signed_in = api_client(alice.user)  # a session, and the CSRF token too
    for credential in (key, "oak_00000000_nothing", key_for(mallory, ["read", "write"])):
        response = call(
            credential, "create_label", {"account_id": alice_mail.account_id, "name": "X"}, client=signed_in
        )
        assert response.status_code == 400
        error = error_of(response)
        assert error["code"] == "INVALID_INPUT" and "not both" in error["message"]
        assert response["WWW-Authenticate"].startswith('Bearer error="invalid_request"')
        assert credential not in response.content.decode()
    listing = signed_in.get(OPS, headers={"Authorization": f"Bearer {key}"})
    assert listing.status_code == 400
    # a proxy's Basic login beside the session is not a second credential of Oaken's: the session's call, CSRF and all
    basic = {"Authorization": "Basic YWxpY2U6cHc="}
    as_person = signed_in.get(OPS, headers=basic)
    assert as_person.status_code == 200
    assert "create_api_key" in {row["name"] for row in as_person.json()["operations"]}  # only a person's list has it
    unguarded = api_client(alice.user, csrf=False)
    refused = unguarded.post(
        f"{OPS}/create_label",
        json.dumps({"account_id": alice_mail.account_id, "name": "Y"}),
        "application/json",
        headers=basic,
    )
    assert refused.status_code == 403 and error_of(refused)["code"] == "FORBIDDEN"
    # refused before either credential was read: no one's call, in no chain
    assert len(_events(alice)) == before and not AuditEvent.objects.for_tenant(mallory.tenant).exists()
    assert not Label.objects.for_tenant(alice.tenant).exists()


def test_a_bad_revoked_or_expired_credential_is_unauthenticated_and_never_the_session(
    alice: Person, alice_mail: Mailbox, mallory: Person
) -> None:
    key = key_for(alice, ["read"])
    expired = key_for(alice, ["read"])
    ApiKey.objects.for_tenant(alice.tenant).filter(prefix=expired[:12]).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert call(key, "status").status_code == 200
    row = ApiKey.objects.for_tenant(alice.tenant).get(prefix=key[:12])
    revoked = api_client(alice.user).post(
        f"{OPS}/revoke_api_key?confirm=true", json.dumps({"api_key_id": str(row.pk)}), "application/json"
    )
    assert revoked.status_code == 200, revoked.content
    before = len(_events(alice))
    for credential in (key, expired, "oak_00000000_nothing", "not-a-token", "x" * 600):
        for response in (
            call(credential, "status"),
            bearer_client().get(OPS, HTTP_AUTHORIZATION=f"Bearer {credential}"),
        ):
            assert response.status_code == 401
            assert error_of(response)["code"] == "UNAUTHENTICATED"
            assert response["WWW-Authenticate"] == f'Bearer error="invalid_token", {METADATA}, scope="read write send"'
            assert credential not in response.content.decode()
    # a Bearer header is the credential, even an empty one
    for header in ("Bearer", "Bearer ", "bearer  "):
        response = bearer_client().post(f"{OPS}/status", "{}", "application/json", HTTP_AUTHORIZATION=header)
        assert response.status_code == 401 and 'error="invalid_token"' in response["WWW-Authenticate"]
    # another scheme is no credential of Oaken's (a proxy's Basic login): without a session, unauthenticated
    for header in ("Basic YWxpY2U6cHc=", key):
        response = bearer_client().post(f"{OPS}/status", "{}", "application/json", HTTP_AUTHORIZATION=header)
        assert response.status_code == 401 and "error=" not in response["WWW-Authenticate"]
    # no credential at all: the challenge says where to find how to get one
    response = bearer_client().post(f"{OPS}/status", "{}", "application/json")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == f'Bearer {METADATA}, scope="read write send"'
    assert len(_events(alice)) == before and not AuditEvent.objects.for_tenant(mallory.tenant).exists()


# ---------------------------------------------------------------- OAuth tokens and their resource


def test_an_oauth_token_works_on_the_rest_api_only_when_issued_for_it(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox
) -> None:
    browser = Client()
    browser.force_login(alice.user)
    auth = start(browser, resource=API_RESOURCE)
    for_api = exchange(browser, auth, redirect_params(consent(browser, auth))["code"]).json()
    _, for_mcp = connect(browser)  # no resource asked for: /mcp, as every MCP client gets
    api_token, mcp_token = for_api["access_token"], for_mcp["access_token"]

    response = call(api_token, "list_messages", {"account_id": alice_mail.account_id})
    assert response.status_code == 200
    assert {m["subject"] for m in response.json()["messages"]} == set(alice_mail.subjects)
    assert AuditEvent.objects.for_tenant(alice.tenant).filter(door="api", credential_kind="oauth").exists()
    # a token for /mcp is not one for the REST API, nor the other way round
    wrong = call(mcp_token, "list_messages", {"account_id": alice_mail.account_id})
    assert wrong.status_code == 401 and 'error="invalid_token"' in wrong["WWW-Authenticate"]
    assert mcp_post(Client(), rpc("ping"), token=api_token).status_code == 401
    assert mcp_post(Client(), rpc("ping"), token=mcp_token).status_code == 200

    # read only (nothing ticked): a mutation is a step-up challenge naming the scope to ask for
    refused = call(api_token, "create_label", {"account_id": alice_mail.account_id, "name": "X"})
    assert refused.status_code == 403 and error_of(refused)["missing_scope"] == "write"
    assert refused["WWW-Authenticate"] == f'Bearer error="insufficient_scope", {METADATA}, scope="read write"'
    assert not Label.objects.for_tenant(alice.tenant).exists()
    # mallory's ids stay not found for alice's connection
    theirs = call(api_token, "get_message", {"message_id": mallory_mail.message_ids[0]})
    assert theirs.status_code == 404 and not AuditEvent.objects.for_tenant(mallory.tenant).exists()


def test_the_rest_api_has_its_own_protected_resource_metadata(db: None, client: Client) -> None:
    doc = client.get("/.well-known/oauth-protected-resource/api/v1").json()
    assert doc["resource"] == API_RESOURCE and doc["authorization_servers"] == [ORIGIN]
    assert client.get("/.well-known/oauth-protected-resource/mcp").json()["resource"] == ORIGIN + "/mcp"


# ---------------------------------------------------------------- idempotency and rate limits


def test_an_idempotency_key_replays_the_first_answer_for_the_same_credential(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox
) -> None:
    key, other = key_for(alice, ["read", "write"]), key_for(alice, ["read", "write"])
    body = {"account_id": alice_mail.account_id, "name": "Receipts"}
    first = call(key, "create_label", body, key="label-1")
    again = call(key, "create_label", body, key="label-1")
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert Label.objects.for_tenant(alice.tenant).count() == 1
    mismatch = call(key, "create_label", {**body, "name": "Other"}, key="label-1")
    assert mismatch.status_code == 422 and error_of(mismatch)["code"] == "IDEMPOTENCY_MISMATCH"
    # the key is the caller's: another credential's same key is its own call (a label by that name exists)
    response = call(other, "create_label", body, key="label-1")
    assert "Idempotent-Replayed" not in response
    assert Label.objects.for_tenant(alice.tenant).count() == 1
    assert not Label.objects.for_tenant(mallory.tenant).exists()


def test_a_credential_has_one_budget_of_requests_over_mcp_and_rest(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox, settings: Any
) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "MCP_REQUESTS_PER_MINUTE": 3}
    key, theirs = key_for(alice, ["read"]), key_for(mallory, ["read"])
    assert call(key, "status").status_code == 200
    assert mcp_post(Client(), rpc("ping"), token=key).status_code == 200
    assert call(key, "status").status_code == 200
    limited = call(key, "status")
    assert limited.status_code == 429 and error_of(limited)["code"] == "RATE_LIMITED"
    assert 0 < int(limited["Retry-After"]) <= 60
    assert mcp_post(Client(), rpc("ping"), token=key).status_code == 429
    # another credential has a minute of its own, and sees its own mail only
    response = call(theirs, "list_messages", {"account_id": mallory_mail.account_id})
    assert {m["subject"] for m in response.json()["messages"]} == set(mallory_mail.subjects)


def test_every_door_has_words_in_the_audit_view(db: None) -> None:
    assert set(audit_ops._DOOR_WORDS) == set(audit_ops._DOOR_NAMES) == set(Door.values)


def test_a_second_tenants_key_sees_nothing_of_the_first(
    alice: Person, alice_mail: Mailbox, mallory: Person, tmp_path: Path
) -> None:
    theirs = key_for(mallory, ["read", "write"], workspaces=[])
    own = give_mail(mallory, tmp_path, "mallorys")
    for op in ("list_messages", "list_accounts", "list_labels", "list_drafts"):
        response = call(theirs, op)
        assert response.status_code == 200, (op, response.content)
        text = response.content.decode()
        assert alice_mail.account_id not in text and not any(s in text for s in alice_mail.subjects)
    listing = call(theirs, "list_messages", {}).json()["messages"]
    assert {m["subject"] for m in listing} == set(own.subjects)
    for message_id in alice_mail.message_ids:
        assert call(theirs, "get_message", {"message_id": message_id}).status_code == 404
