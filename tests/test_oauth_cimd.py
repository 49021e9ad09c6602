"""Client ID Metadata Documents (issue 41 item 5): a client names itself by an https URL, Oaken fetches the document
there through its pinned client (apps.oauth.cimd) when a person opens the consent page, and the client connects
like a registered one.

The documents are served by a loopback HTTPS site with a self-signed certificate Oaken is told to trust (never by
turning verification off), reachable only because the private-address allowance is on; the tests of the refusal
turn it off. Every hostile document is refused as an OAuth error page, never a 500, and never repeats the
document or the URL. Mallory, in another tenant, connects the same client: neither sees the other's connection.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import re
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from django.test import Client
from django.utils import timezone
from mcp import Client as McpClient
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata
from oauth2_provider.models import Application

from apps.agents.models import Connection
from apps.core.redis_client import redis_client
from apps.oauth.cimd import cache_seconds
from tests.callers import as_person, call
from tests.conftest import Person
from tests.embeddings_server import self_signed
from tests.liveserver import serving
from tests.oauthflow import REDIRECT, Authorization, consent, exchange, pkce, redirect_params
from tests.test_mcp_sdk import ConsentingPerson, MemoryStorage

CANARY = "CANARY-7731"  # in every hostile document: no page may ever show it


class DocumentServer:
    """A loopback HTTPS site publishing documents: path -> (status, headers, body, hold seconds before answering,
    drip seconds between body bytes); it counts the GETs of each path."""

    def __init__(self, cert: Path, key: Path) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.routes: dict[str, tuple[int, dict[str, str], bytes, float, float]] = {}
        self.hits: Counter[str] = Counter()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.hits[self.path] += 1
                status, headers, body, hold, drip = owner.routes.get(self.path, (404, {}, b"", 0.0, 0.0))
                time.sleep(hold)
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    for i in range(len(body)) if drip else ():
                        self.wfile.write(body[i : i + 1])
                        self.wfile.flush()
                        time.sleep(drip)
                    if not drip:
                        self.wfile.write(body)
                except OSError:
                    pass  # the client gave up

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def publish(
        self,
        path: str,
        document: dict[str, Any] | bytes,
        *,
        status: int = 200,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        length: bool = True,
        hold: float = 0.0,
        drip: float = 0.0,
    ) -> str:
        body = document if isinstance(document, bytes) else json.dumps(document).encode()
        sent = {"Content-Type": content_type, "Connection": "close", **(headers or {})}
        if length:
            sent["Content-Length"] = str(len(body))
        self.routes[path] = (status, sent, body, hold, drip)
        return self.url(path)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def document(client_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "client_id": client_id,
        "client_name": "Document Assistant",
        "redirect_uris": [REDIRECT],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        **fields,
    }


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed("127.0.0.1", tmp_path_factory.mktemp("cimd-tls"))


@pytest.fixture(scope="module")
def site(certificate: tuple[Path, Path]) -> Iterator[DocumentServer]:
    server = DocumentServer(*certificate)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def live_url(django_db_setup: None, django_db_blocker: object, certificate: tuple[Path, Path]) -> Iterator[str]:
    """The real web server, trusting the document site's certificate and allowed to reach loopback."""
    env = {"OAKEN_OAUTH_CIMD_CA_FILE": str(certificate[0]), "OAKEN_OAUTH_CIMD_ALLOW_PRIVATE_HOSTS": "true"}
    with serving(env) as url:
        yield url


@pytest.fixture(autouse=True)
def trusting(certificate: tuple[Path, Path], settings: Any) -> None:
    settings.OAUTH_CLIENT_DOCUMENT_CA_FILE = str(certificate[0])
    settings.OAUTH_CLIENT_DOCUMENT_ALLOW_PRIVATE_HOSTS = True
    for key in redis_client().scan_iter("oauth-registrations*"):
        redis_client().delete(key)


@pytest.fixture
def browser(alice: Person) -> Client:
    client = Client()
    client.force_login(alice.user)
    return client


def authorization(client_id: str, **kw: Any) -> Authorization:
    verifier, challenge = pkce()
    return Authorization(client_id, verifier, challenge, "st4te", **kw)


def bound(settings: Any, **values: int) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, **values}


# ---------------------------------------------------------------- discovery and the whole flow


def test_the_server_metadata_advertises_client_id_metadata_documents(db: None, client: Client) -> None:
    doc = client.get("/.well-known/oauth-authorization-server").json()
    assert doc["client_id_metadata_document_supported"] is True
    assert doc["registration_endpoint"].endswith("/oauth/register/")  # registration stays beside it


def test_the_metadata_says_no_when_documents_are_off(db: None, client: Client, settings: Any) -> None:
    settings.OAUTH_CLIENT_DOCUMENTS = False
    response = client.get("/.well-known/oauth-authorization-server")
    assert response["Access-Control-Allow-Origin"] == "*"
    assert response.json()["client_id_metadata_document_supported"] is False


def test_a_document_client_connects_and_the_consent_page_names_the_host_that_vouches(
    site: DocumentServer, browser: Client, alice: Person, mallory: Person
) -> None:
    client_id = site.url("/clients/assistant.json")
    site.publish("/clients/assistant.json", document(client_id), headers={"Cache-Control": "max-age=600"})
    auth = authorization(client_id)
    page = browser.get(auth.url())
    assert page.status_code == 200, page.content[:500]
    text = page.content.decode()
    assert "Document Assistant" in text
    vouched = re.search(r'<p id="vouched-by">.*?</p>', text, re.S)
    assert vouched is not None and f"<code>127.0.0.1:{site.port}</code>" in vouched.group()

    code = redirect_params(consent(browser, auth, write=True))["code"]
    tokens = exchange(browser, auth, code)
    assert tokens.status_code == 200, tokens.content
    app = Application.objects.get(client_id=client_id)
    assert app.registration_source == Application.RegistrationSource.CIMD
    assert app.client_type == Application.CLIENT_PUBLIC and app.redirect_uris == REDIRECT
    connection = Connection.objects.for_tenant(alice.tenant).get()
    assert connection.client_name == f"Document Assistant (127.0.0.1:{site.port})"
    assert connection.scopes == ["read", "write"]

    # mallory connects the same client in her tenant: each sees only their own connection
    theirs = Client()
    theirs.force_login(mallory.user)
    other = authorization(client_id)
    assert exchange(theirs, other, redirect_params(consent(theirs, other))["code"]).status_code == 200
    mine = call(as_person(alice), "list_connections", {})["connections"]
    hers = call(as_person(mallory), "list_connections", {})["connections"]
    assert [c["id"] for c in mine] == [str(connection.pk)]
    assert len(hers) == 1 and hers[0]["id"] != str(connection.pk) and hers[0]["scopes"] == ["read"]
    assert site.hits["/clients/assistant.json"] == 1  # the second person's page used the document held


def test_the_document_is_kept_for_its_max_age_within_the_bounds_and_then_fetched_again(
    site: DocumentServer, browser: Client, settings: Any
) -> None:
    bound(settings, OAUTH_CLIENT_DOCUMENT_CACHE_MIN_SECONDS=300, OAUTH_CLIENT_DOCUMENT_CACHE_MAX_SECONDS=3600)
    assert cache_seconds("max-age=1") == 300 and cache_seconds("public, max-age=99999999") == 3600
    assert cache_seconds("max-age=900") == 900 and cache_seconds("") == 300
    assert cache_seconds("no-store, max-age=900") == 300 and cache_seconds("s-maxage=900") == 300

    client_id = site.url("/clients/kept.json")
    site.publish("/clients/kept.json", document(client_id), headers={"Cache-Control": "max-age=99999999"})
    before = timezone.now()
    assert browser.get(authorization(client_id).url()).status_code == 200
    assert browser.get(authorization(client_id).url()).status_code == 200
    assert site.hits["/clients/kept.json"] == 1
    app = Application.objects.get(client_id=client_id)
    assert app.cimd_expires_at is not None
    assert timedelta(seconds=3590) < app.cimd_expires_at - before < timedelta(seconds=3660)

    # once it expires it is fetched again, and what the document now says is what holds
    moved = "http://127.0.0.1:40000/elsewhere"
    site.publish("/clients/kept.json", document(client_id, redirect_uris=[moved], client_name="Renamed"))
    Application.objects.filter(pk=app.pk).update(cimd_expires_at=timezone.now() - timedelta(seconds=1))
    refused = browser.get(authorization(client_id).url())
    assert site.hits["/clients/kept.json"] == 2
    assert refused.status_code == 400 and b"Mismatching redirect URI" in refused.content
    assert browser.get(authorization(client_id, redirect_uri=moved).url()).status_code == 200
    assert Application.objects.get(pk=app.pk).name == "Renamed"


# ---------------------------------------------------------------- attacks


def _refused(response: Any, url: str, error: str = "invalid_client") -> str:
    """The page is the OAuth error page (never a 500), in words that repeat neither the document nor the URL."""
    assert response.status_code in (400, 429, 503), response.status_code
    text = response.content.decode()
    assert "This connection cannot go ahead" in text and 'role="alert"' in text
    assert CANARY not in text and url not in text and "/clients/" not in text
    assert not Application.objects.filter(client_id=url).exists()
    assert not response.has_header("Location")
    return re.sub(r"\s+", " ", text)


# what each hostile document is, and the words its refusal gives
HOSTILE = {
    "another_client_id": (
        lambda url: document("https://elsewhere.example/client.json", note=CANARY),
        "names another client_id than its URL",
    ),
    "no_client_name": (
        lambda url: {k: v for k, v in document(url, note=CANARY).items() if k != "client_name"},
        "needs a client_name",
    ),
    "a_client_secret": (lambda url: document(url, client_secret=CANARY), "may not hold a client secret"),
    "a_confidential_client": (
        lambda url: document(url, token_endpoint_auth_method="client_secret_basic", n=CANARY),
        "is public",
    ),
    "an_implicit_grant": (lambda url: document(url, grant_types=["implicit"], note=CANARY), "authorization_code"),
    "no_redirect_uris": (lambda url: document(url, redirect_uris=[], note=CANARY), "1 to 10 redirect_uris"),
    "too_many_redirect_uris": (
        lambda url: document(url, redirect_uris=[f"https://a.example/{i}" for i in range(11)]),
        "1 to 10 redirect_uris",
    ),
    "a_javascript_redirect_uri": (
        lambda url: document(url, redirect_uris=[f"javascript:alert('{CANARY}')"]),
        "redirect URIs must be https",
    ),
    "a_plain_http_redirect_uri": (
        lambda url: document(url, redirect_uris=["http://evil.example/cb"], note=CANARY),
        "must be loopback",
    ),
    "a_long_name": (lambda url: document(url, client_name=CANARY * 30), "client_name of 1 to 200"),
    "a_bidi_override_in_the_name": (
        lambda url: document(url, client_name=f"Safe\u202e{CANARY}"),
        "control or format characters",
    ),
    "a_list": (lambda url: [document(url, note=CANARY)], "not a JSON object"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_document_that_does_not_describe_a_public_client_of_its_own_url_is_refused(
    site: DocumentServer, browser: Client, kind: str
) -> None:
    path = f"/clients/{kind}.json"
    url = site.url(path)
    make, words = HOSTILE[kind]
    site.publish(path, json.dumps(make(url)).encode())
    assert words in _refused(browser.get(authorization(url).url()), url)


def test_a_redirect_uri_not_in_the_document_is_refused_and_nothing_is_sent_to_it(
    site: DocumentServer, browser: Client
) -> None:
    url = site.publish("/clients/narrow.json", document(site.url("/clients/narrow.json")))
    for wrong in ("http://127.0.0.1:33418/callback/x", "https://evil.example/callback", REDIRECT + "?a=1"):
        response = browser.get(authorization(url, redirect_uri=wrong).url())
        assert response.status_code == 400 and not response.has_header("Location")
        assert b"Mismatching redirect URI" in response.content


def test_an_http_client_id_is_refused_without_a_fetch(site: DocumentServer, browser: Client) -> None:
    url = f"http://127.0.0.1:{site.port}/clients/plain.json"
    site.publish("/clients/plain.json", document(url))
    text = _refused(browser.get(authorization(url).url()), url)
    assert "must be https" in text and site.hits["/clients/plain.json"] == 0


@pytest.mark.parametrize(
    "client_id",
    [
        "https://127.0.0.1:{port}/",
        "https://127.0.0.1:{port}/clients/q.json?token=SECRET-Q",
        "https://user:SECRET-P@127.0.0.1:{port}/clients/u.json",
        "https://127.0.0.1:{port}/clients/../x.json",
        "https://127.0.0.1:{port}/clients/f.json#frag",
        "https://127.0.0.1:99999/clients/p.json",
        "https://127.0.0.1:{port}/" + "a" * 300,
    ],
)
def test_a_client_id_url_the_draft_forbids_is_refused_without_a_fetch(
    site: DocumentServer, browser: Client, client_id: str
) -> None:
    url = client_id.format(port=site.port)
    fetched = sum(site.hits.values())
    text = _refused(browser.get(authorization(url).url()), url)
    assert "SECRET" not in text and sum(site.hits.values()) == fetched


def test_a_document_over_the_size_bound_is_refused(site: DocumentServer, browser: Client, settings: Any) -> None:
    bound(settings, OAUTH_CLIENT_DOCUMENT_MAX_BYTES=5120)
    for length in (True, False):  # declared too large, or found too large while reading
        path = f"/clients/large-{length}.json"
        url = site.url(path)
        site.publish(path, document(url, padding=CANARY * 600), length=length)
        assert "larger than 5120 bytes" in _refused(browser.get(authorization(url).url()), url)
    url = site.publish("/clients/small.json", document(site.url("/clients/small.json"), padding="x" * 4000))
    assert browser.get(authorization(url).url()).status_code == 200


@pytest.mark.parametrize("how", ["hold", "drip"])
def test_a_slow_document_server_is_given_up_within_the_time_bound(
    site: DocumentServer, browser: Client, settings: Any, how: str
) -> None:
    bound(settings, OAUTH_CLIENT_DOCUMENT_TIMEOUT_SECONDS=1)
    path = f"/clients/slow-{how}.json"
    url = site.url(path)
    # holding the answer 3 s, or dripping its 200-odd bytes 50 ms apart (10 s and more)
    site.publish(
        path, document(url, note=CANARY), hold=3.0 if how == "hold" else 0.0, drip=0.05 if how == "drip" else 0.0
    )
    started = time.monotonic()
    text = _refused(browser.get(authorization(url).url()), url)
    assert time.monotonic() - started < 2.5
    assert "took too long" in text


def test_a_private_address_is_refused_without_the_operator_allowance(
    site: DocumentServer, browser: Client, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.OAUTH_CLIENT_DOCUMENT_ALLOW_PRIVATE_HOSTS = False
    url = site.publish("/clients/inside.json", document(site.url("/clients/inside.json")))
    assert "not a public address" in _refused(browser.get(authorization(url).url()), url)
    # a name that resolves to loopback is refused when it is resolved, before any connection
    real = socket.getaddrinfo

    def resolving(host: str, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == "docs.example" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolving)
    named = f"https://docs.example:{site.port}/clients/inside.json"
    assert "not a public address" in _refused(browser.get(authorization(named).url()), named)
    assert site.hits["/clients/inside.json"] == 0


@pytest.mark.parametrize(
    "answer",
    [
        {"document": b"<html>" + CANARY.encode() + b"</html>", "content_type": "text/html"},
        {"document": b"{'client_id': '" + CANARY.encode() + b"'}"},
        {"document": b'{"client_id": 1, "client_id": 2, "x": "' + CANARY.encode() + b'"}'},
        {"document": b'{"n": NaN, "x": "' + CANARY.encode() + b'"}'},
        {"document": b"\xff\xfe" + CANARY.encode()},
        {"document": b"[" * 5000},
        {"document": b'{"x": "' + CANARY.encode() + b'"}', "status": 302, "headers": {"Location": "/clients/ok.json"}},
        {"document": CANARY.encode(), "status": 500},
    ],
    ids=["html", "not_json", "repeated_key", "nan", "not_utf8", "deep", "redirect", "server_error"],
)
def test_a_document_that_is_not_strict_json_from_a_200_is_refused(
    site: DocumentServer, browser: Client, answer: dict[str, Any]
) -> None:
    path = f"/clients/bad-{len(site.routes)}.json"
    url = site.url(path)
    site.publish(path, **answer)
    _refused(browser.get(authorization(url).url()), url)


def test_an_unreachable_or_untrusted_host_is_refused(site: DocumentServer, browser: Client, settings: Any) -> None:
    closed = "https://127.0.0.1:9/clients/none.json"
    assert "could not be fetched" in _refused(browser.get(authorization(closed).url()), closed)
    settings.OAUTH_CLIENT_DOCUMENT_CA_FILE = ""  # the system's trust store, which does not know the site
    url = site.publish("/clients/untrusted.json", document(site.url("/clients/untrusted.json")))
    assert "verified TLS" in _refused(browser.get(authorization(url).url()), url)


def test_the_token_endpoint_never_fetches_a_document(site: DocumentServer, client: Client, alice: Person) -> None:
    url = site.publish("/clients/token.json", document(site.url("/clients/token.json")))
    body = {"grant_type": "authorization_code", "code": "x", "redirect_uri": REDIRECT, "client_id": url}
    response = client.post("/oauth/token/", {**body, "code_verifier": "v" * 43})
    assert response.status_code == 401 and response.json()["error"] == "invalid_client"
    assert site.hits["/clients/token.json"] == 0


def test_a_document_never_takes_over_a_client_registered_otherwise(site: DocumentServer, browser: Client) -> None:
    url = site.url("/clients/taken.json")
    Application.objects.create(
        client_id=url,
        name="Provisioned",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris="https://provisioned.example/cb",
    )
    site.publish("/clients/taken.json", document(url))
    response = browser.get(authorization(url).url())
    assert response.status_code == 400 and b"registered otherwise" in response.content
    assert Application.objects.get(client_id=url).redirect_uris == "https://provisioned.example/cb"
    assert site.hits["/clients/taken.json"] == 0


def test_fetches_count_against_the_registration_throttle(site: DocumentServer, browser: Client, settings: Any) -> None:
    bound(settings, OAUTH_REGISTRATIONS_PER_HOUR=2)
    for i in range(2):
        url = site.publish(f"/clients/t{i}.json", document(site.url(f"/clients/t{i}.json")))
        assert browser.get(authorization(url).url()).status_code == 200
    url = site.publish("/clients/t2.json", document(site.url("/clients/t2.json")))
    response = browser.get(authorization(url).url())
    assert response.status_code == 429 and "too many new clients" in _refused(response, url)
    assert site.hits["/clients/t2.json"] == 0


def test_a_signed_out_visitor_makes_no_fetch(site: DocumentServer, client: Client, db: None) -> None:
    url = site.publish("/clients/anon.json", document(site.url("/clients/anon.json")))
    response = client.get(authorization(url).url())
    assert response.status_code == 302 and "sign-in" in response["Location"]
    assert site.hits["/clients/anon.json"] == 0


# ---------------------------------------------------------------- the MCP SDK's own client


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_sdk_client_connects_with_its_client_id_metadata_document(
    live_url: str, site: DocumentServer, alice: Person, mallory: Person
) -> None:
    alice.user.email_verified_at = timezone.now()
    alice.user.save(update_fields=["email_verified_at"])
    client_id = site.url("/sdk/client.json")
    redirect = "http://127.0.0.1:33418/cb"
    site.publish(
        "/sdk/client.json",
        document(client_id, client_name="SDK test client", redirect_uris=[redirect]),
        headers={"Cache-Control": "max-age=3600"},
    )
    person = ConsentingPerson(live_url, alice)
    storage = MemoryStorage()
    provider = OAuthClientProvider(
        server_url=live_url + "/mcp",
        client_metadata=OAuthClientMetadata(
            client_name="SDK test client",
            redirect_uris=[redirect],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=person.redirect,
        callback_handler=person.callback,
        client_metadata_url=client_id,
    )

    async def run() -> list[str]:
        async with (
            httpx2.AsyncClient(auth=provider, timeout=30) as http,
            McpClient(streamable_http_client(live_url + "/mcp", http_client=http), mode="legacy") as client,
        ):
            return [tool.name for tool in (await client.list_tools()).tools]

    names = asyncio.run(run())
    assert "get_message" in names and "mark_read" not in names
    assert storage.client is not None and storage.client.client_id == client_id  # no registration was made
    assert storage.tokens is not None and storage.tokens.scope == "read"
    assert site.hits["/sdk/client.json"] == 1
    assert not Application.objects.filter(registration_source=Application.RegistrationSource.DCR).exists()
    app = Application.objects.get(client_id=client_id)
    assert app.registration_source == Application.RegistrationSource.CIMD
    connection = Connection.objects.for_tenant(alice.tenant).get()
    assert connection.application_id == app.pk
    assert connection.client_name == f"SDK test client (127.0.0.1:{site.port})"
    assert not Connection.objects.for_tenant(mallory.tenant).exists()
