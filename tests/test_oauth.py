"""The OAuth 2.1 authorization server as MCP clients meet it: discovery, registration, consent, tokens."""

from __future__ import annotations

import json
import re
import threading
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from django.db import connection as db_connection
from django.test import Client
from django.utils import timezone
from oauth2_provider.models import AccessToken, Application, RefreshToken

from apps.agents.connections import caller_for_token
from apps.agents.models import Connection
from apps.core.kinds import Principal
from apps.core.redis_client import redis_client
from apps.oauth.tasks import forget_unused_clients
from tests.callers import as_person, call, refusal
from tests.conftest import Person
from tests.oauthflow import (
    ORIGIN,
    REDIRECT,
    RESOURCE,
    Authorization,
    connect,
    consent,
    exchange,
    redirect_params,
    refresh,
    register,
    start,
)


@pytest.fixture(autouse=True)
def _fresh_registration_counters() -> None:
    for key in redis_client().scan_iter("oauth-registrations:*"):
        redis_client().delete(key)


@pytest.fixture
def browser(alice: Person) -> Client:
    client = Client()
    client.force_login(alice.user)
    return client


# --- discovery ------------------------------------------------------------------------------------------------


def test_authorization_server_metadata_has_what_rfc_8414_and_mcp_clients_require(db: None, client: Client) -> None:
    response = client.get("/.well-known/oauth-authorization-server", HTTP_ORIGIN="https://app.example")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response["Access-Control-Allow-Origin"] == "*"
    doc = response.json()
    assert doc["issuer"] == ORIGIN
    assert doc["authorization_endpoint"] == ORIGIN + "/oauth/authorize/"
    assert doc["token_endpoint"] == ORIGIN + "/oauth/token/"
    assert doc["registration_endpoint"] == ORIGIN + "/oauth/register/"
    assert doc["response_types_supported"] == ["code"]
    assert doc["code_challenge_methods_supported"] == ["S256"]
    assert set(doc["grant_types_supported"]) == {"authorization_code", "refresh_token"}
    assert set(doc["scopes_supported"]) == {"read", "write", "send"}
    assert doc["authorization_response_iss_parameter_supported"] is True
    assert "none" in doc["token_endpoint_auth_methods_supported"]


@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"])
def test_protected_resource_metadata_names_the_mcp_endpoint(db: None, client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    doc = response.json()
    assert doc["resource"] == RESOURCE  # RFC 9728 §3: required
    assert doc["authorization_servers"] == [ORIGIN]
    assert doc["bearer_methods_supported"] == ["header"]
    assert set(doc["scopes_supported"]) == {"read", "write", "send"}


def test_browser_clients_may_preflight_discovery_registration_and_token(db: None, client: Client) -> None:
    for path in ("/.well-known/oauth-protected-resource/mcp", "/oauth/register/", "/oauth/token/"):
        response = client.options(
            path,
            HTTP_ORIGIN="https://inspector.example",
            HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST",
            HTTP_ACCESS_CONTROL_REQUEST_HEADERS="content-type, mcp-protocol-version",
        )
        assert response["Access-Control-Allow-Origin"] == "*", path
        assert "mcp-protocol-version" in response["Access-Control-Allow-Headers"]
    # the console is not opened to other origins
    page = client.get("/accounts/sign-in", HTTP_ORIGIN="https://inspector.example")
    assert "Access-Control-Allow-Origin" not in page


# --- registration ---------------------------------------------------------------------------------------------


def test_open_registration_makes_a_public_client(db: None, client: Client) -> None:
    response = register(client, redirect_uris=[REDIRECT, "https://claude.ai/api/mcp/auth_callback", "cursor://cb"])
    assert response.status_code == 201
    doc = response.json()
    assert doc["token_endpoint_auth_method"] == "none" and "client_secret" not in doc
    app = Application.objects.get(client_id=doc["client_id"])
    assert app.client_type == "public" and app.name == "Test Assistant" and app.user is None


@pytest.mark.parametrize(
    "uri",
    [
        "http://evil.example/cb",
        "javascript:alert(1)",
        "https://host/cb#frag",
        "data:text/html,x",
        "ftp://x/",
        "https://good.example/cb http://evil.example/cb",
        "https://good.example/cb\nhttp://evil.example/cb",
        "https://good.example/" + "x" * 2000,
    ],
)
def test_registration_refuses_unsafe_redirect_uris(db: None, client: Client, uri: str) -> None:
    response = register(client, redirect_uris=[REDIRECT, uri])
    assert response.status_code == 400 and response.json()["error"] == "invalid_redirect_uri"
    assert uri not in response.content.decode()
    assert not Application.objects.exists()


def test_a_registration_that_is_not_strict_json_is_refused(db: None, client: Client) -> None:
    """Registration reads JSON as every door does: a key named twice (which one counts is up to the parser) or a
    NaN is refused, and the answer quotes nothing of the body."""
    uris = json.dumps([REDIRECT])
    for body in (
        f'{{"redirect_uris": {uris}, "client_name": "one", "client_name": "tw1ce-name"}}',
        f'{{"redirect_uris": {uris}, "client_name": "nan", "logo_uri": NaN}}',
    ):
        response = client.post("/oauth/register/", body, content_type="application/json")
        assert response.status_code == 400 and response.json()["error"] == "invalid_client_metadata", body
        assert "tw1ce" not in response.content.decode()
    assert register(client).status_code == 201


def test_registration_sizes_are_bounded(db: None, client: Client) -> None:
    assert register(client, redirect_uris=[f"https://a.example/{i}" for i in range(11)]).status_code == 400
    assert register(client, name="n" * 201).status_code == 400
    assert not Application.objects.exists()


def test_a_registration_cannot_be_changed_or_deleted(db: None, client: Client) -> None:
    doc = register(client).json()
    path = urlsplit(doc["registration_client_uri"]).path
    auth: dict[str, Any] = {"HTTP_AUTHORIZATION": f"Bearer {doc['registration_access_token']}"}
    body = json.dumps({"redirect_uris": ["http://evil.example/cb"], "client_name": "x"})
    assert client.put(path, body, content_type="application/json", **auth).status_code == 405
    assert client.delete(path, **auth).status_code == 405
    app = Application.objects.get(client_id=doc["client_id"])
    assert app.redirect_uris == REDIRECT


def test_registration_offers_only_the_authorization_code_grant(db: None, client: Client) -> None:
    response = register(client, grant_types=["client_credentials"])
    assert response.status_code == 400 and not Application.objects.exists()


def test_registration_is_rate_limited_per_address(db: None, client: Client, settings) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "OAUTH_REGISTRATIONS_PER_HOUR": 3}
    assert [register(client).status_code for _ in range(3)] == [201, 201, 201]
    refused = register(client)
    assert refused.status_code == 429 and refused["Retry-After"] == "3600"
    other = Client(REMOTE_ADDR="127.0.0.9")
    assert register(other).status_code == 201


def test_unused_registrations_are_forgotten(db: None, browser: Client, settings) -> None:
    unused = register(browser).json()["client_id"]
    auth, _ = connect(browser)
    pending = start(browser)
    consent(browser, pending)  # consented, code never redeemed
    old = timezone.now() - timedelta(hours=settings.OAUTH_UNUSED_CLIENT_HOURS + 1)
    Application.objects.update(created=old)
    Connection.objects.unscoped().filter(activated_at__isnull=True).update(created_at=old)
    from oauth2_provider.models import Grant

    Grant.objects.update(expires=timezone.now() - timedelta(seconds=1))
    result = forget_unused_clients()
    assert result == {"pending_connections": 1, "clients": 2}
    assert set(Application.objects.values_list("client_id", flat=True)) == {auth.client_id}
    assert unused != auth.client_id


def create_tenant_for(person: Person) -> Any:
    """A second tenant the person belongs to (as OWNER)."""
    from apps.core.kinds import Role
    from apps.workspaces.models import Membership, Tenant, Workspace

    tenant = Tenant.objects.create(name="Team B")
    Workspace.objects.create(tenant=tenant, name="default")
    Membership.objects.create(tenant=tenant, user=person.user, role=Role.OWNER)
    return tenant


def consent_posting(browser: Client, auth: Authorization, page: str) -> Any:
    """POST the consent form as the page rendered it (hidden fields included), Read only."""
    hidden = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page))
    hidden.pop("csrfmiddlewaretoken", None)
    form = {**hidden, **auth.params(), "allow": "on", "workspaces": ["default"], "lifetime": "24h"}
    form["tenant"] = hidden["tenant"]
    return browser.post(auth.url(), form)


# --- consent and tokens ---------------------------------------------------------------------------------------


def test_anonymous_people_are_sent_to_sign_in_first(db: None, client: Client) -> None:
    auth = start(client)
    response = client.get(auth.url())
    assert response.status_code == 302 and response["Location"].startswith("/accounts/sign-in?next=")


def test_consent_page_shows_the_client_and_where_it_returns(db: None, browser: Client) -> None:
    auth = start(browser)
    page = browser.get(auth.url()).content.decode()
    assert "Test Assistant" in page and "127.0.0.1:33418" in page and "Alice&#x27;s tenant" in page


def test_granted_scopes_are_what_was_asked_and_ticked(db: None, browser: Client, alice: Person) -> None:
    _, tokens = connect(browser)  # asked read write send; only Read ticked
    assert tokens["scope"] == "read" and tokens["token_type"] == "Bearer"
    assert 0 < tokens["expires_in"] <= 3600 and tokens["refresh_token"]
    caller = caller_for_token(tokens["access_token"], RESOURCE)
    assert caller is not None and caller.principal == Principal.AGENT
    assert caller.scopes == frozenset({"read"}) and caller.workspaces == ("default",)
    assert caller.credential_kind == "oauth" and caller.tenant == alice.tenant and caller.user == alice.user
    connection = Connection.objects.for_tenant(alice.tenant).get()
    assert caller.credential_id == str(connection.pk) and connection.activated_at is not None
    assert connection.expires_at is not None
    assert timedelta(hours=23) < connection.expires_at - timezone.now() <= timedelta(hours=24)


def test_ticking_what_was_not_requested_grants_nothing_more(db: None, browser: Client) -> None:
    auth = start(browser, scope="read write")
    code = redirect_params(consent(browser, auth, write=True, send=True))["code"]
    assert exchange(browser, auth, code).json()["scope"] == "read write"


def test_editing_the_scope_field_never_grants_more_than_the_client_asked(
    db: None, browser: Client, alice: Person, mallory: Person
) -> None:
    # the client asked for Read alone; the page's hidden scope is edited to ask for everything, all ticked
    auth = start(browser, scope="read")
    form = consent(browser, auth, write=True, send=True, scope="read write send", resource=ORIGIN + "/elsewhere")
    code = redirect_params(form)["code"]
    tokens = exchange(browser, auth, code).json()
    assert tokens["scope"] == "read"
    connection = Connection.objects.for_tenant(alice.tenant).get()
    assert connection.scopes == ["read"]
    caller = caller_for_token(tokens["access_token"], RESOURCE)  # and the resource is the sealed one, /mcp
    assert caller is not None and caller.scopes == frozenset({"read"})
    # asked for all three, the person unticks Send: what remains is the intersection
    auth = start(browser, scope="read write send")
    code = redirect_params(consent(browser, auth, write=True, scope="read write send"))["code"]
    assert exchange(browser, auth, code).json()["scope"] == "read write"
    assert not Connection.objects.for_tenant(mallory.tenant).exists()


def test_a_consent_without_its_seal_or_with_another_persons_is_refused(
    db: None, browser: Client, alice: Person, mallory: Person
) -> None:
    auth = start(browser)
    for seal in ("", "forged", "x" * 5000):
        response = consent(browser, auth, seal=seal)
        assert response.status_code == 400 and "Location" not in response
        assert "start again" in response.content.decode()
    # a seal mallory's page was given is not alice's
    theirs = Client()
    theirs.force_login(mallory.user)
    page = theirs.get(auth.url()).content.decode()
    match = re.search(r'name="seal" value="([^"]+)"', page)
    assert match is not None
    response = consent(browser, auth, seal=match.group(1))
    assert response.status_code == 400 and "Location" not in response
    assert not Connection.objects.for_tenant(alice.tenant).exists()
    assert not Connection.objects.for_tenant(mallory.tenant).exists()


def test_write_and_send_ticked_until_revoked_every_workspace(db: None, browser: Client, alice: Person) -> None:
    _, tokens = connect(browser, write=True, send=True, every_workspace=True, lifetime="until_revoked")
    assert set(tokens["scope"].split()) == {"read", "write", "send"}
    caller = caller_for_token(tokens["access_token"], RESOURCE)
    assert caller is not None and caller.workspaces == () and caller.workspace_filter is None
    assert Connection.objects.for_tenant(alice.tenant).get().expires_at is None


def test_authorization_response_carries_state_and_iss(db: None, browser: Client) -> None:
    auth = start(browser)
    params = redirect_params(consent(browser, auth))
    assert params["state"] == auth.state and params["iss"] == ORIGIN and params["code"]


def test_denying_tells_the_client_access_denied(db: None, browser: Client, alice: Person) -> None:
    auth = start(browser)
    params = redirect_params(consent(browser, auth, allow=False))
    assert params["error"] == "access_denied" and "code" not in params
    assert not Connection.objects.for_tenant(alice.tenant).exists()


def test_the_grant_goes_to_the_tenant_the_page_showed(db: None, browser: Client, alice: Person) -> None:
    from apps.workspaces.selectors import SESSION_TENANT_KEY

    other = create_tenant_for(alice)
    auth = start(browser)
    page = browser.get(auth.url()).content.decode()
    assert "Alice&#x27;s tenant" in page
    session = browser.session
    session[SESSION_TENANT_KEY] = str(other.pk)  # switched in another tab before the person clicked Allow
    session.save()
    params = redirect_params(consent_posting(browser, auth, page))
    assert params["code"]
    assert Connection.objects.for_tenant(alice.tenant).count() == 1
    assert not Connection.objects.for_tenant(other).exists()


def test_a_forged_client_or_redirect_in_the_form_is_refused(db: None, browser: Client) -> None:
    auth = start(browser)
    overrides: list[dict[str, Any]] = [{"client_id": "nope"}, {"redirect_uri": "https://attacker.example/x"}]
    for override in overrides:
        for allow in (True, False):
            response = consent(browser, auth, allow=allow, **override)
            assert response.status_code == 400 and "Location" not in response


def test_approval_prompt_auto_cannot_skip_consent(db: None, browser: Client) -> None:
    _, _ = connect(browser)
    auth = start(browser)
    page = browser.get(auth.url(approval_prompt="auto"))
    assert page.status_code == 200 and "Allow" in page.content.decode()


def test_a_workspace_is_required(db: None, browser: Client) -> None:
    auth = start(browser)
    response = consent(browser, auth, workspaces=())
    assert response.status_code == 200 and "Pick at least one workspace" in response.content.decode()


@pytest.mark.parametrize(
    "redirect_uri",
    [REDIRECT + "/", REDIRECT.replace("callback", "Callback"), REDIRECT + "?x=1", "http://127.0.0.1:33418/other"],
)
def test_redirect_uris_must_match_exactly(db: None, browser: Client, redirect_uri: str) -> None:
    auth = start(browser)
    response = browser.get(auth.url(redirect_uri=redirect_uri))
    assert response.status_code == 400  # shown to the person, never sent to the unregistered address
    assert "Location" not in response


def test_loopback_redirect_may_use_another_port(db: None, browser: Client) -> None:
    auth = start(browser, redirect_uri="http://127.0.0.1:50123/callback")
    params = redirect_params(consent(browser, auth))
    assert exchange(browser, auth, params["code"]).status_code == 200


def test_pkce_plain_is_refused(db: None, browser: Client) -> None:
    auth = start(browser)
    auth.challenge = auth.verifier
    response = browser.get(auth.url(code_challenge_method="plain"))
    params = redirect_params(response) if response.status_code == 302 else {"error": "invalid_request"}
    assert params["error"] == "invalid_request" and "code" not in params


@pytest.mark.parametrize("method", ["plain", None])  # no method means plain (RFC 7636 §4.3)
def test_pkce_plain_is_refused_before_the_consent_page_renders(
    db: None, browser: Client, alice: Person, method: str | None
) -> None:
    auth = start(browser)
    response = browser.get(auth.url(code_challenge=auth.verifier, code_challenge_method=method))
    assert response.status_code == 302 and response["Location"].startswith(REDIRECT + "?")
    params = redirect_params(response)
    assert params["error"] == "invalid_request" and "S256" in params["error_description"]
    assert params["state"] == auth.state and params["iss"] == ORIGIN and "code" not in params
    assert not Connection.objects.for_tenant(alice.tenant).exists()


def test_every_error_sent_back_to_the_client_names_the_issuer(db: None, browser: Client) -> None:
    auth = start(browser)
    missing = redirect_params(browser.get(auth.url(code_challenge=None, code_challenge_method=None)))
    denied = redirect_params(consent(browser, auth, allow=False))
    for params in (missing, denied):
        assert params["iss"] == ORIGIN and params["state"] == auth.state and "code" not in params
    assert (missing["error"], denied["error"]) == ("invalid_request", "access_denied")


def test_after_a_form_error_the_consent_page_still_names_the_client(db: None, browser: Client) -> None:
    auth = start(browser)
    page = consent(browser, auth, workspaces=()).content.decode()
    assert "Pick at least one workspace" in page
    assert "Connect Test Assistant?" in page and "unnamed" not in page


def test_a_request_without_a_challenge_is_refused(db: None, browser: Client) -> None:
    auth = start(browser)
    response = browser.get(auth.url(code_challenge=None, code_challenge_method=None))
    params = redirect_params(response)
    assert params["error"] == "invalid_request" and "code" not in params


def test_a_wrong_verifier_or_none_is_refused(db: None, browser: Client) -> None:
    auth = start(browser)
    code = redirect_params(consent(browser, auth))["code"]
    assert exchange(browser, auth, code, code_verifier=None).status_code == 400
    assert exchange(browser, auth, code, code_verifier="x" * 50).status_code == 400


def test_a_wrong_verifier_does_not_burn_the_code(db: None, browser: Client, alice: Person) -> None:
    # Whoever presents a wrong verifier never had it; spending the code on their attempt would only let anyone
    # who saw the code (a log, a referrer) stop the real client from finishing. The code still works once.
    auth = start(browser)
    code = redirect_params(consent(browser, auth))["code"]
    wrong = exchange(browser, auth, code, code_verifier="x" * 50)
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"
    assert Connection.objects.for_tenant(alice.tenant).get().revoked_at is None
    right = exchange(browser, auth, code)
    assert right.status_code == 200 and right.json()["access_token"]
    assert exchange(browser, auth, code).status_code == 400  # and only once


def test_a_reused_code_fails_and_revokes_what_it_issued(db: None, browser: Client, alice: Person) -> None:
    auth = start(browser)
    code = redirect_params(consent(browser, auth))["code"]
    first = exchange(browser, auth, code).json()
    assert caller_for_token(first["access_token"], RESOURCE) is not None
    again = exchange(browser, auth, code)
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
    assert caller_for_token(first["access_token"], RESOURCE) is None
    assert refresh(browser, auth, first["refresh_token"]).status_code == 400
    assert Connection.objects.for_tenant(alice.tenant).get().revoked_reason == "code_reused"


def test_a_connection_revoked_for_a_replayed_code_is_audited_and_listed_with_the_reason(
    db: None, browser: Client, alice: Person, mallory: Person
) -> None:
    auth = start(browser)
    code = redirect_params(consent(browser, auth))["code"]
    first = exchange(browser, auth, code).json()
    assert exchange(browser, auth, code).status_code == 400
    assert exchange(browser, auth, code).status_code == 400  # a third try revokes nothing more
    [listed] = call(as_person(alice), "list_connections")["connections"]
    assert listed["revoked"] is True and listed["revoked_reason"] == "authorization code replayed"
    events = call(as_person(alice), "list_audit_events", {"operation": "connection_revoked"})["events"]
    assert len(events) == 1  # once, however often the code comes back
    [event] = events
    assert event["principal"] == "internal" and event["outcome"] == "ok"
    assert event["targets"] == [
        {
            "id": listed["id"],
            "kind": "connection",
            "name": "Test Assistant",
            "before": {"revoked": False},
            "after": {"revoked": True, "reason": "authorization code replayed"},
        }
    ]
    assert event["description"] == "Oaken connection revoked on connection Test Assistant"
    text = json.dumps(events)  # no secret: neither the code nor a token
    assert code not in text and first["access_token"] not in text and first["refresh_token"] not in text
    # the other tenant: no connection, no event
    assert call(as_person(mallory), "list_connections")["connections"] == []
    assert call(as_person(mallory), "list_audit_events", {"operation": "connection_revoked"})["events"] == []


def test_a_connection_revoked_by_a_person_says_so_and_an_active_one_has_no_reason(
    db: None, browser: Client, alice: Person
) -> None:
    connect(browser)
    [active] = call(as_person(alice), "list_connections")["connections"]
    assert active["revoked"] is False and active["revoked_reason"] == ""
    revoked = call(as_person(alice), "revoke_connection", {"connection_id": active["id"]}, confirm=True)
    assert revoked["revoked_reason"] == "revoked by a person"
    # a person's revocation is the gate's own event, not a system one
    assert call(as_person(alice), "list_audit_events", {"operation": "connection_revoked"})["events"] == []


def test_refresh_rotates_and_a_replayed_refresh_token_revokes_the_family(db: None, browser: Client) -> None:
    auth, first = connect(browser)
    second = refresh(browser, auth, first["refresh_token"])
    assert second.status_code == 200
    second_tokens = second.json()
    assert second_tokens["refresh_token"] != first["refresh_token"] and second_tokens["scope"] == "read"
    assert caller_for_token(second_tokens["access_token"], RESOURCE) is not None
    replay = refresh(browser, auth, first["refresh_token"])
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    assert refresh(browser, auth, second_tokens["refresh_token"]).status_code == 400
    assert caller_for_token(second_tokens["access_token"], RESOURCE) is None


def test_refreshing_never_extends_the_connection_deadline(db: None, browser: Client, alice: Person) -> None:
    auth, first = connect(browser)
    connection = Connection.objects.for_tenant(alice.tenant).get()
    deadline = timezone.now() + timedelta(minutes=10)
    Connection.objects.for_tenant(alice.tenant).update(expires_at=deadline)
    renewed = refresh(browser, auth, first["refresh_token"]).json()
    assert renewed["expires_in"] <= 600
    access = AccessToken.objects.filter(oaken_link__connection=connection).order_by("-created").first()
    assert access is not None and access.expires <= deadline
    assert Connection.objects.for_tenant(alice.tenant).get().expires_at == deadline


def test_an_expired_connection_cannot_refresh_or_call(db: None, browser: Client, alice: Person) -> None:
    auth, first = connect(browser)
    Connection.objects.for_tenant(alice.tenant).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = refresh(browser, auth, first["refresh_token"])
    assert response.status_code == 400 and response.json()["error"] == "invalid_grant"
    assert caller_for_token(first["access_token"], RESOURCE) is None


def test_tokens_are_bound_to_the_mcp_resource(db: None, browser: Client) -> None:
    _, tokens = connect(browser)
    assert caller_for_token(tokens["access_token"], RESOURCE) is not None
    assert caller_for_token(tokens["access_token"], "https://elsewhere.example/mcp") is None
    assert AccessToken.objects.get(oaken_link__isnull=False).resource == [RESOURCE]


def test_a_token_with_no_or_another_audience_is_refused(db: None, browser: Client) -> None:
    _, tokens = connect(browser)
    for audience in ([], ["https://elsewhere.example/mcp"]):
        AccessToken.objects.filter(oaken_link__isnull=False).update(resource=audience)
        assert caller_for_token(tokens["access_token"], RESOURCE) is None


@pytest.mark.parametrize("resource", [None, ORIGIN, RESOURCE + "/", RESOURCE])
def test_what_clients_send_as_resource_all_mean_mcp(db: None, browser: Client, resource: str | None) -> None:
    auth = start(browser, resource=resource)
    code = redirect_params(consent(browser, auth))["code"]
    tokens = exchange(browser, auth, code, resource=resource).json()
    assert caller_for_token(tokens["access_token"], RESOURCE) is not None


def test_another_resource_is_refused_at_authorization_and_token(db: None, browser: Client, alice: Person) -> None:
    # before the consent page is shown (issue 35): an error redirect to the client, with its state and our iss
    for foreign in (
        ["https://elsewhere.example/mcp"],
        [RESOURCE, "https://elsewhere.example/mcp"],
        ["not a uri"],
        [RESOURCE, ORIGIN + "/api/v1"],  # each of ours, but one token is for one of them
        [ORIGIN + "/api/v2"],
    ):
        auth = start(browser, resource=None)
        response = browser.get(auth.url() + "&" + urlencode([("resource", r) for r in foreign]))
        params = redirect_params(response)
        assert response["Location"].startswith(REDIRECT + "?")
        assert params["error"] == "invalid_target" and "code" not in params
        assert params["state"] == auth.state and params["iss"] == ORIGIN
        assert "elsewhere" not in params.get("error_description", "")
    assert not Connection.objects.for_tenant(alice.tenant).exists()
    auth = start(browser)
    code = redirect_params(consent(browser, auth))["code"]
    response = exchange(browser, auth, code, resource="https://elsewhere.example/mcp")
    assert response.status_code == 400 and response.json()["error"] == "invalid_target"


@pytest.mark.parametrize("resource", [ORIGIN + "/api/v1", ORIGIN + "/api/v1/"])
def test_a_token_for_the_rest_api_is_bound_to_it_alone_and_keeps_it_when_refreshed(
    db: None, browser: Client, resource: str
) -> None:
    auth = start(browser, resource=resource)
    tokens = exchange(browser, auth, redirect_params(consent(browser, auth))["code"]).json()
    api = ORIGIN + "/api/v1"
    assert AccessToken.objects.get(oaken_link__isnull=False).resource == [api]
    assert caller_for_token(tokens["access_token"], api) is not None
    assert caller_for_token(tokens["access_token"], RESOURCE) is None
    renewed = refresh(browser, auth, tokens["refresh_token"]).json()
    assert caller_for_token(renewed["access_token"], api) is not None
    assert caller_for_token(renewed["access_token"], RESOURCE) is None
    # a refresh cannot move the token to the other resource
    moved = browser.post(
        "/oauth/token/",
        {
            "grant_type": "refresh_token",
            "refresh_token": renewed["refresh_token"],
            "client_id": auth.client_id,
            "resource": RESOURCE,
        },
    )
    assert moved.status_code == 400 and moved.json()["error"] == "invalid_target"


def test_tokens_are_stored_only_as_hashes(db: None, browser: Client) -> None:
    _, tokens = connect(browser)
    assert AccessToken.objects.get(oaken_link__isnull=False).token == "" and RefreshToken.objects.get().token == ""
    dump = json.dumps(list(AccessToken.objects.values()), default=str)
    assert tokens["access_token"] not in dump


# --- connections ----------------------------------------------------------------------------------------------


def test_revoking_a_connection_revokes_all_its_tokens(db: None, browser: Client, alice: Person) -> None:
    auth, first = connect(browser)
    second = refresh(browser, auth, first["refresh_token"]).json()
    listed = call(as_person(alice), "list_connections")["connections"]
    assert [c["client_name"] for c in listed] == ["Test Assistant"] and listed[0]["redirect_host"] == "127.0.0.1:33418"
    call(as_person(alice), "revoke_connection", {"connection_id": listed[0]["id"]}, confirm=True)
    assert caller_for_token(second["access_token"], RESOURCE) is None
    assert refresh(browser, auth, second["refresh_token"]).status_code == 400
    assert call(as_person(alice), "list_connections")["connections"][0]["revoked"] is True


@pytest.mark.parametrize("which", ["refresh_token", "access_token"])
def test_a_client_revoking_its_token_ends_the_connection(db: None, browser: Client, alice: Person, which: str) -> None:
    auth, tokens = connect(browser)
    stranger = start(browser)  # another client cannot revoke this one's tokens
    assert Client().post("/oauth/revoke/", {"token": tokens[which], "client_id": stranger.client_id}).status_code == 200
    assert caller_for_token(tokens["access_token"], RESOURCE) is not None
    response = Client().post("/oauth/revoke/", {"token": tokens[which], "client_id": auth.client_id})
    assert response.status_code == 200
    assert caller_for_token(tokens["access_token"], RESOURCE) is None
    assert refresh(browser, auth, tokens["refresh_token"]).status_code == 400
    connection = Connection.objects.for_tenant(alice.tenant).get()
    assert connection.revoked_at is not None and connection.revoked_reason == "revoked_by_client"


def test_another_tenant_cannot_see_or_revoke_a_connection(
    db: None, browser: Client, alice: Person, mallory: Person
) -> None:
    _, tokens = connect(browser)
    connection_id = call(as_person(alice), "list_connections")["connections"][0]["id"]
    assert call(as_person(mallory), "list_connections")["connections"] == []
    error = refusal(as_person(mallory), "revoke_connection", {"connection_id": connection_id}, confirm=True)
    assert error.code == "NOT_FOUND"
    caller = caller_for_token(tokens["access_token"], RESOURCE)
    assert caller is not None and caller.tenant == alice.tenant


def test_a_person_no_longer_a_member_loses_the_connection(db: None, browser: Client, alice: Person) -> None:
    _, tokens = connect(browser)
    from apps.workspaces.models import Membership

    Membership.objects.for_user(alice.user).delete()
    assert caller_for_token(tokens["access_token"], RESOURCE) is None


def test_a_code_redeemed_by_another_request_while_this_one_checks_it_is_invalid_grant(
    browser: Client, alice: Person, mallory: Person, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The toolkit reads the code's grant again after validating it: a concurrent redemption that used it in
    between (here: right after validate_code) answers invalid_grant and voids the connection, never a 500."""
    from oauth2_provider.models import Grant

    from apps.oauth.validator import OakenValidator

    auth = start(browser)
    code = redirect_params(consent(browser, auth))["code"]
    validate = OakenValidator.validate_code

    def and_meanwhile_another_redeems(self: Any, client_id: str, code: str, *args: Any, **kwargs: Any) -> bool:
        valid = validate(self, client_id, code, *args, **kwargs)
        Grant.objects.filter(code=code).delete()
        Connection.objects.for_tenant(alice.tenant).update(activated_at=timezone.now())
        return valid

    monkeypatch.setattr(OakenValidator, "validate_code", and_meanwhile_another_redeems)
    response = exchange(Client(), auth, code)
    assert (response.status_code, response.json()["error"]) == (400, "invalid_grant")
    assert Connection.objects.for_tenant(alice.tenant).get().revoked_at is not None
    assert not Connection.objects.for_tenant(mallory.tenant).exists()


@pytest.mark.django_db(transaction=True)
def test_a_code_redeemed_concurrently_yields_one_token_and_then_revokes(alice: Person, mallory: Person) -> None:
    browser = Client()
    browser.force_login(alice.user)
    auth = start(browser)
    code = redirect_params(consent(browser, auth))["code"]
    racers = 6
    barrier = threading.Barrier(racers)
    answers: list[tuple[int, dict[str, str]]] = []

    def redeem() -> None:
        barrier.wait()
        try:
            response = exchange(Client(), auth, code)
            answers.append((response.status_code, response.json()))
        finally:
            db_connection.close()

    threads = [threading.Thread(target=redeem) for _ in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [body for status, body in answers if status == 200]
    assert len(answers) == racers and len(winners) <= 1
    assert all(body["error"] == "invalid_grant" for status, body in answers if status != 200)
    for body in winners:  # the code was presented again, so what it issued is void too
        assert caller_for_token(body["access_token"], RESOURCE) is None
    assert Connection.objects.for_tenant(alice.tenant).get().revoked_at is not None
    assert not Connection.objects.for_tenant(mallory.tenant).exists()


@pytest.mark.django_db(transaction=True)
def test_a_refresh_token_presented_concurrently_rotates_once_and_revokes(alice: Person, mallory: Person) -> None:
    browser = Client()
    browser.force_login(alice.user)
    auth, tokens = connect(browser)
    racers = 4
    barrier = threading.Barrier(racers)
    answers: list[tuple[int, dict[str, Any]]] = []

    def use() -> None:
        barrier.wait()
        try:
            response = refresh(Client(), auth, tokens["refresh_token"])
            answers.append((response.status_code, response.json()))
        finally:
            db_connection.close()

    threads = [threading.Thread(target=use) for _ in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(status for status, _ in answers) in ([200] + [400] * (racers - 1), [400] * racers)
    assert all(body["error"] == "invalid_grant" for status, body in answers if status != 200)
    connection = Connection.objects.for_tenant(alice.tenant).get()
    assert connection.revoked_at is not None and connection.revoked_reason == "refresh_reused"
    assert not Connection.objects.for_tenant(mallory.tenant).exists()
