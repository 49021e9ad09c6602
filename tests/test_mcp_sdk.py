"""The MCP door driven by the official MCP Python SDK client over real HTTP (gunicorn with two workers on
loopback), with an API key and through the whole OAuth flow (discovery, registration, PKCE, consent)."""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from django.conf import settings
from django.test import Client as DjangoClient
from django.utils import timezone
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from mcp.types import ElicitRequestParams, ElicitRequestURLParams, ElicitResult, ErrorData, TextContent
from pydantic import AnyUrl

from apps.agents.keys import issue_key
from apps.agents.models import ApiKey, Connection
from apps.core.callers import Caller
from apps.operations.exposure import offered_operations
from apps.outbound.models import OutboundRequest
from tests.browser import chromium_page
from tests.callers import as_person, call, membership
from tests.conftest import PASSWORD, Person
from tests.mailbox import World, build_world, read_flags
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LEGACY_AND_AUTO = pytest.mark.parametrize("mode", ["legacy", "auto"])


def _text(result: Any) -> str:
    """The text block of a tool result (Oaken always sends exactly one)."""
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


def _key(person: Person, scopes: list[str], workspaces: list[str] | None = None) -> str:
    _, key = issue_key(
        membership=membership(person),
        scopes=scopes,
        workspaces=workspaces or ["default"],
        allow_list=None,
        expires_at=None,
        created_via="cli",
    )
    return key


def _session(
    url: str,
    mode: str,
    body: Callable[[Client], Awaitable[Any]],
    *,
    key: str | None = None,
    auth: httpx2.Auth | None = None,
    **options: Any,
) -> Any:
    async def run() -> Any:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with (
            httpx2.AsyncClient(headers=headers, auth=auth, timeout=30) as http,
            Client(streamable_http_client(url + "/mcp", http_client=http), mode=mode, **options) as client,
        ):
            return await body(client)

    return asyncio.run(run())


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build_world(tmp_path)


def _offered_names(key: str) -> list[str]:
    from apps.agents.keys import caller_for_key

    caller = caller_for_key(key)
    assert isinstance(caller, Caller)
    return sorted(op.name for op in offered_operations(caller))


@LEGACY_AND_AUTO
def test_each_scope_set_lists_exactly_its_tools(live_url: str, world: World, mode: str) -> None:
    lists = {}
    for scopes in (["read"], ["read", "write"], ["read", "write", "send"]):
        key = _key(world.alice.person, scopes)

        async def body(client: Client) -> Any:
            return [tool.name for tool in (await client.list_tools()).tools], client.session.protocol_version

        names, version = _session(live_url, mode, body, key=key)
        assert version == ("2026-07-28" if mode == "auto" else "2025-11-25")
        assert names == _offered_names(key)
        lists[tuple(scopes)] = set(names)
    read, write = lists[("read",)], lists[("read", "write")]
    assert {"get_message", "list_messages", "search", "status"} <= read
    assert "mark_read" not in read and "mark_read" in write and read < write
    never = {"create_api_key", "revoke_connection", "set_operation_exposure", "list_audit_events", "get_raw_message"}
    assert not never & set().union(*lists.values())


@LEGACY_AND_AUTO
def test_a_mutation_returns_a_proposal_then_applies_with_its_token_once(live_url: str, world: World, mode: str) -> None:
    box = world.alice
    key = _key(box.person, ["read", "write"])
    notices = box.notices[5:17]  # twelve unread: above the unconfirmed maximum
    before = read_flags()

    async def body(client: Client) -> Any:
        proposal = await client.call_tool("mark_read", {"message_ids": notices})
        token = json.loads(_text(proposal))["error"]["proposal"]["token"]
        applied = await client.call_tool("mark_read", {"message_ids": notices, "confirmation_token": token})
        replay = await client.call_tool("mark_read", {"message_ids": notices, "confirmation_token": token})
        return proposal, applied, replay

    proposal, applied, replay = _session(live_url, mode, body, key=key)
    assert proposal.is_error is True and "CONFIRMATION_REQUIRED" in _text(proposal)
    assert applied.is_error is False
    assert replay.is_error is True and "CONFIRMATION_INVALID" in _text(replay)
    after = read_flags()
    assert {m for m in after if after[m] != before[m]} == set(notices)
    assert all(after[m] for m in notices)


@LEGACY_AND_AUTO
def test_reading_never_marks_read_and_mail_text_is_fenced(live_url: str, world: World, mode: str) -> None:
    box = world.alice
    key = _key(box.person, ["read"])
    before = read_flags()
    message_id = box.messages["quoted"]

    async def body(client: Client) -> Any:
        got = await client.call_tool("get_message", {"message_id": message_id})
        listed = await client.call_tool("list_messages", {"account_id": box.personal})
        return got, listed

    got, listed = _session(live_url, mode, body, key=key)
    assert read_flags() == before
    assert got.is_error is False
    message = got.structured_content["message"]
    flag = got.structured_content["untrusted_content"]
    marker = flag["marker"]
    assert re.fullmatch(r"[0-9a-f]{24}", marker) and "message.text" in flag["fields"]
    assert message["text"].startswith(f"[untrusted:{marker}]") and message["text"].endswith(f"[/untrusted:{marker}]")
    assert "ignore all previous instructions" in message["text"]
    assert listed.structured_content["untrusted_content"]["marker"] != marker  # a new marker per response


@LEGACY_AND_AUTO
def test_out_of_workspace_and_other_tenant_ids_are_refused(live_url: str, world: World, mode: str) -> None:
    key = _key(world.alice.person, ["read"], workspaces=["default"])
    work_message = world.alice.messages["work-zeppelin"]
    foreign = world.mallory.messages["zeppelin"]

    async def body(client: Client) -> Any:
        return [await client.call_tool("get_message", {"message_id": m}) for m in (work_message, foreign)]

    work, other = _session(live_url, mode, body, key=key)
    assert work.is_error is True and "OUT_OF_SCOPE" in _text(work)
    assert other.is_error is True and "NOT_FOUND" in _text(other)
    assert "Zeppelin" not in _text(other)


@LEGACY_AND_AUTO
def test_not_available_is_identical_for_off_never_and_unknown(live_url: str, world: World, mode: str) -> None:
    alice = world.alice.person
    call(as_person(alice), "set_operation_exposure", {"operation": "search", "level": "off"}, confirm=True)
    key = _key(alice, ["read", "write", "send"])

    async def body(client: Client) -> Any:
        names = [tool.name for tool in (await client.list_tools()).tools]
        answers = [await client.call_tool(name, {}) for name in ("search", "create_api_key", "no_such")]
        return names, answers

    names, answers = _session(live_url, mode, body, key=key)
    assert "search" not in names and "create_api_key" not in names
    texts = {_text(a) for a in answers}
    assert all(a.is_error for a in answers) and len(texts) == 1 and "NOT_AVAILABLE" in texts.pop()


@LEGACY_AND_AUTO
def test_a_revoked_key_is_refused_on_its_next_call(live_url: str, world: World, mode: str) -> None:
    key = _key(world.alice.person, ["read"])

    async def first(client: Client) -> Any:
        return (await client.call_tool("status", {})).is_error

    assert _session(live_url, mode, first, key=key) is False
    ApiKey.objects.for_tenant(world.alice.person.tenant).update(revoked_at=timezone.now())
    response = httpx2.post(
        live_url + "/mcp",
        headers={
            "Authorization": f"Bearer {key}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25",
        },
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    )
    assert response.status_code == 401
    assert 'resource_metadata="' in response.headers["WWW-Authenticate"]


# --- asking the client to open the approval page (URL elicitation, SPEC §10) ----------------------------------


def _session_cookie(person: Person) -> str:
    browser = DjangoClient()
    browser.force_login(person.user)
    return browser.cookies[settings.SESSION_COOKIE_NAME].value


@LEGACY_AND_AUTO
def test_a_url_capable_client_is_asked_to_open_the_approval_page_where_only_a_person_approves(
    live_url: str, world: World, imap_server: ImapServer, smtp_server: SmtpServer, mode: str
) -> None:
    alice, mallory = world.alice.person, world.mallory.person
    account = imap_account(alice, imap_server, smtp_server, mail_user(imap_server, "alice"))
    key = _key(alice, ["read", "write", "send"])
    email = {
        "account_id": str(account.pk),
        "to": [mail_user(imap_server, "bob")],
        "subject": "Quarterly figures",
        "body": "The totals are in.\n",
        "idempotency_key": f"figures-{mode}",
    }
    asked: list[ElicitRequestParams] = []

    async def open_page(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        asked.append(params)  # a real client shows the URL, and opens it in the browser once the user agrees
        return ElicitResult(action="accept")

    async def send(client: Client) -> Any:
        proposal = await client.call_tool("send_email", email)
        token = json.loads(_text(proposal))["error"]["proposal"]["token"]
        made = await client.call_tool("send_email", {**email, "confirmation_token": token})
        return made, client.session.protocol_version

    made, version = _session(live_url, mode, send, key=key, elicitation_callback=open_page)
    [request] = OutboundRequest.objects.for_tenant(alice.tenant)
    url = f"{live_url}/outbound?request={request.pk}"  # the origin the agent reached
    # the agent's result is the same either way: the request, waiting, with the page where a person decides
    assert made.is_error is False and made.structured_content["request_id"] == str(request.pk)
    assert made.structured_content["state"] == "awaiting_approval" and made.structured_content["approval_url"] == url
    if version == "2025-11-25":
        assert asked == []  # declared at initialize, which this stateless server does not keep
        return
    assert version == "2026-07-28"
    [elicit] = asked
    assert isinstance(elicit, ElicitRequestURLParams) and elicit.url == url and "approve" in elicit.message
    assert request.state == "awaiting_approval"  # the client accepted opening it: that approves nothing

    # the person opens the page in their own signed-in browser session; another tenant's person sees nothing
    path = urlsplit(url).path + "?" + urlsplit(url).query
    cookies = {"alice": _session_cookie(alice), "mallory": _session_cookie(mallory)}
    with chromium_page(live_url) as page:
        page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": cookies["mallory"], "url": live_url}])
        page.goto(path)
        page.wait_for_selector("#outbound-list >> text=Nothing is waiting for your approval.")
        page.context.clear_cookies()
        page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": cookies["alice"], "url": live_url}])
        page.goto(path)
        page.click(f'article[data-request-id="{request.pk}"] button[data-action=approve]')
        page.click("#ask-first-yes")  # the page asks once more before it approves
        page.wait_for_selector("#notice >> text=Approved: it is queued for delivery.")

    async def look(client: Client) -> Any:
        return await client.call_tool("get_outbound_request", {"request_id": str(request.pk)})

    seen = _session(live_url, mode, look, key=key, elicitation_callback=open_page)
    assert seen.structured_content["state"] == "queued" and len(asked) == 1
    assert OutboundRequest.objects.for_tenant(alice.tenant).count() == 1
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


# --- the whole OAuth flow, consent given in a signed-in browser session --------------------------------------


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


_HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)"')


class ConsentingPerson:
    """A person who signed in to Oaken in a browser and answers the consent page: only Read, `default`."""

    def __init__(self, base: str, person: Person) -> None:
        self.base, self.person = base, person
        self.result: AuthorizationCodeResult | None = None

    async def sign_in(self, http: httpx2.AsyncClient) -> None:
        page = await http.get(self.base + "/accounts/sign-in")
        token = _HIDDEN.search(page.text)
        assert token is not None and token.group(1) == "csrfmiddlewaretoken"
        form = {"csrfmiddlewaretoken": token.group(2), "username": self.person.user.email, "password": PASSWORD}
        signed = await http.post(self.base + "/accounts/sign-in", data=form)
        assert signed.status_code == 302, signed.text[:300]

    async def redirect(self, authorization_url: str) -> None:
        async with httpx2.AsyncClient(timeout=30, follow_redirects=False) as browser:
            await self.sign_in(browser)
            page = await browser.get(authorization_url)
            assert page.status_code == 200, page.text[:500]
            assert "SDK test client" in page.text
            form = {name: html.unescape(value) for name, value in _HIDDEN.findall(page.text)}
            form.update(allow="on", workspaces="default", lifetime="24h")
            answer = await browser.post(authorization_url, data=form)
        assert answer.status_code == 302, answer.text[:500]
        params = {k: v[0] for k, v in parse_qs(urlsplit(answer.headers["Location"]).query).items()}
        self.result = AuthorizationCodeResult(code=params["code"], state=params.get("state"), iss=params.get("iss"))

    async def callback(self) -> AuthorizationCodeResult:
        assert self.result is not None
        return self.result


@LEGACY_AND_AUTO
def test_the_whole_oauth_flow_with_the_sdk_provider(live_url: str, world: World, mode: str) -> None:
    alice = world.alice.person
    alice.user.email_verified_at = timezone.now()
    alice.user.save(update_fields=["email_verified_at"])
    person = ConsentingPerson(live_url, alice)
    storage = MemoryStorage()
    provider = OAuthClientProvider(
        server_url=live_url + "/mcp",
        client_metadata=OAuthClientMetadata(
            client_name="SDK test client",
            redirect_uris=[AnyUrl("http://127.0.0.1:33418/cb")],
            grant_types=["authorization_code", "refresh_token"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=person.redirect,
        callback_handler=person.callback,
    )

    async def body(client: Client) -> Any:
        names = [tool.name for tool in (await client.list_tools()).tools]
        status = await client.call_tool("status", {})
        got = await client.call_tool("get_message", {"message_id": world.alice.messages["zeppelin"]})
        return names, status, got

    names, status, got = _session(live_url, mode, body, auth=provider)
    assert storage.tokens is not None and storage.tokens.scope == "read"
    assert "get_message" in names and "mark_read" not in names
    assert status.is_error is False and status.structured_content["workspaces"] == ["default"]
    assert got.is_error is False
    connection = Connection.objects.for_tenant(alice.tenant).get()
    assert connection.client_name == "SDK test client" and connection.scopes == ["read"]
    assert not Connection.objects.for_tenant(world.mallory.person.tenant).exists()

    # a revoked connection is refused on its next call
    call(as_person(alice), "revoke_connection", {"connection_id": str(connection.pk)}, confirm=True)
    response = httpx2.post(
        live_url + "/mcp",
        headers={
            "Authorization": f"Bearer {storage.tokens.access_token}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25",
        },
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    )
    assert response.status_code == 401 and 'error="invalid_token"' in response.headers["WWW-Authenticate"]
