"""Client ID Metadata Documents (MCP authorization, revision 2025-11-25; draft-ietf-oauth-client-id-metadata-document):
a client names itself by an https URL, and the JSON document at that URL describes it.

- A document is fetched only when a signed-in person opens the consent page for it (apps.oauth.views), never by
  the token endpoint, so nobody can make Oaken fetch a URL without signing in; each fetch counts as a registration
  against the open-registration throttles (OAUTH_REGISTRATIONS_*).
- The fetch is apps.core.pinned's: the host resolved once, every address public unless
  OAUTH_CLIENT_DOCUMENT_ALLOW_PRIVATE_HOSTS is on, the connection to a checked address, TLS verified (against
  OAUTH_CLIENT_DOCUMENT_CA_FILE alone when set). One GET, no redirect followed, no cookie or credential sent;
  OAUTH_CLIENT_DOCUMENT_TIMEOUT_SECONDS for each step and the whole answer, at most OAUTH_CLIENT_DOCUMENT_MAX_BYTES,
  strict JSON (apps.gate.payload's parser).
- The document must name itself (`client_id` equal to its URL, exactly), give a `client_name` and its
  `redirect_uris` (the registration policy and bounds: apps.oauth.redirects), and be a public client
  (`token_endpoint_auth_method` "none", no client secret) using the authorization code.
- The client is then a toolkit Application marked `registration_source="cimd"`, kept until `cimd_expires_at` (the
  document's Cache-Control max-age within OAUTH_CLIENT_DOCUMENT_CACHE_MIN/MAX_SECONDS) and fetched again after.
  The authorization request's redirect URI must be one of the document's, exactly (the toolkit's check).
- Anything else is `DocumentRefused`: an OAuth error code and fixed words. Neither the document's content, nor the
  URL, nor what the server said is ever repeated or logged.
"""

from __future__ import annotations

import http.client
import re
import time
import unicodedata
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import SplitResult, urlsplit

import redis
from django.conf import settings
from oauth2_provider.models import Application

from apps.agents.services import record_document_client
from apps.core import pinned
from apps.core.bounds import bounds
from apps.core.errors import OakenError
from apps.core.redis_client import count_hit
from apps.gate import payload
from apps.oauth.redirects import MAX_CLIENT_NAME_LENGTH, MAX_REDIRECT_URIS, redirect_uri_problem

MAX_CLIENT_ID_LENGTH = 255  # the toolkit's client_id column
_MAX_AGE = re.compile(r"(?:^|[,\s])max-age\s*=\s*(\d{1,10})(?:$|[,\s])", re.IGNORECASE)
_JSON_TYPE = re.compile(r"application/([a-z0-9.+-]+\+)?json", re.IGNORECASE)


class DocumentRefused(Exception):
    """The client's document cannot describe a client here: `error` (an OAuth error code), `description` (fixed
    words, never the document's or the URL's), `status` (of the page that says so)."""

    def __init__(self, description: str, error: str = "invalid_client", status: int = 400) -> None:
        super().__init__(description)
        self.error, self.description, self.status = error, description, status


_NOT_CONNECTED = {
    "unresolved": "the client_id URL's host has no address",
    "private": "the client_id URL's host is not a public address",
    "unreachable": "the client's document could not be fetched",
    "tls": "the client's document could not be fetched over verified TLS",
}


def names_a_document(client_id: str) -> bool:
    """Whether the client_id is a URL (so a client ID metadata document, or refused as one), not an id Oaken
    issued (a registration's ids never hold "://")."""
    return "://" in client_id[:10]


def _url(client_id: str) -> SplitResult:
    """The client_id as a URL the draft allows (§3): https, a host, a path other than "/", no userinfo, query,
    fragment or dot segment; a host written as a private address is refused before anything is resolved."""
    if len(client_id) > MAX_CLIENT_ID_LENGTH or any(ch.isspace() or not ch.isprintable() for ch in client_id):
        raise DocumentRefused("a client_id URL is at most 255 characters, without spaces or control characters")
    try:
        parts = urlsplit(client_id)
        parts.port  # noqa: B018 (an invalid port raises here)
    except ValueError:
        raise DocumentRefused("the client_id is not a valid URL") from None
    if parts.scheme != "https":
        raise DocumentRefused("a client_id URL must be https")
    if not parts.hostname or "@" in parts.netloc:
        raise DocumentRefused("a client_id URL names a host, without user or password")
    if parts.query or parts.fragment or "?" in client_id or "#" in client_id:
        raise DocumentRefused("a client_id URL carries no query or fragment")
    if parts.path in ("", "/") or any(segment in (".", "..") for segment in parts.path.split("/")):
        raise DocumentRefused("a client_id URL has a path, without . or .. segments")
    if not settings.OAUTH_CLIENT_DOCUMENT_ALLOW_PRIVATE_HOSTS and pinned.literal_private(parts.hostname):
        raise DocumentRefused(_NOT_CONNECTED["private"])
    return parts


def _fetch(parts: SplitResult) -> tuple[bytes, str]:
    """The document's bytes and its Cache-Control header."""
    timeout = bounds.OAUTH_CLIENT_DOCUMENT_TIMEOUT_SECONDS
    limit = bounds.OAUTH_CLIENT_DOCUMENT_MAX_BYTES
    try:
        connection = pinned.open_https(
            parts.hostname or "",
            parts.port or 443,
            timeout=timeout,
            allow_private=settings.OAUTH_CLIENT_DOCUMENT_ALLOW_PRIVATE_HOSTS,
            ca_file=settings.OAUTH_CLIENT_DOCUMENT_CA_FILE,
        )
    except pinned.Unreachable as exc:
        raise DocumentRefused(_NOT_CONNECTED[exc.reason]) from None
    try:
        connection.answer_within(timeout)
        connection.request(
            "GET",
            parts.path,
            headers={
                "Accept": "application/json",
                "User-Agent": "Oaken (client ID metadata document)",
                "Connection": "close",
            },
        )
        response = connection.getresponse()
        if response.status != 200:
            raise DocumentRefused(
                "the client's document URL redirects, which is not followed"
                if 300 <= response.status < 400
                else f"the client's document URL answered HTTP {response.status}, not 200"
            )
        if not _JSON_TYPE.fullmatch((response.getheader("Content-Type") or "").split(";")[0].strip()):
            raise DocumentRefused("the client's document is not application/json")
        declared = response.getheader("Content-Length") or ""
        if declared.isdigit() and int(declared) > limit:
            raise DocumentRefused(f"the client's document is larger than {limit} bytes")
        body = response.read(limit + 1)
        cache_control = response.getheader("Cache-Control") or ""
    except TimeoutError:
        raise DocumentRefused("the client's document took too long to fetch") from None
    except (OSError, http.client.HTTPException):
        raise DocumentRefused(_NOT_CONNECTED["unreachable"]) from None
    finally:
        connection.close()
    if len(body) > limit:
        raise DocumentRefused(f"the client's document is larger than {limit} bytes")
    return body, cache_control


def _plain_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_CLIENT_NAME_LENGTH:
        raise DocumentRefused("the client's document needs a client_name of 1 to 200 characters")
    # control and format characters (bidirectional overrides among them) would make the consent page show a name
    # other than the one held
    if any(unicodedata.category(ch).startswith("C") for ch in name):
        raise DocumentRefused("the client's client_name may not hold control or format characters")
    return name


def _described(client_id: str, body: bytes) -> tuple[str, list[str]]:
    """The client's name and redirect URIs from its document; DocumentRefused when it does not describe a public
    authorization-code client named by this very URL."""
    try:
        document = payload.loads(body)
    except (ValueError, RecursionError, OakenError):
        raise DocumentRefused("the client's document is not strict JSON") from None
    if not isinstance(document, dict):
        raise DocumentRefused("the client's document is not a JSON object")
    if document.get("client_id") != client_id:
        raise DocumentRefused("the client's document names another client_id than its URL")
    if "client_secret" in document or "client_secret_expires_at" in document:
        raise DocumentRefused("a client's document may not hold a client secret")
    if document.get("token_endpoint_auth_method", "none") != "none":
        raise DocumentRefused('a client described by a document is public: token_endpoint_auth_method "none"')
    grants = document.get("grant_types", ["authorization_code"])
    if (
        not isinstance(grants, list)
        or "authorization_code" not in grants
        or set(grants) - {"authorization_code", "refresh_token"}
    ):
        raise DocumentRefused("a client's document offers authorization_code (and refresh_token) only")
    responses = document.get("response_types", ["code"])
    if not isinstance(responses, list) or set(responses) != {"code"}:
        raise DocumentRefused('a client\'s document asks for response type "code" only')
    name = _plain_name(document.get("client_name"))
    uris = document.get("redirect_uris")
    if not isinstance(uris, list) or not 1 <= len(uris) <= MAX_REDIRECT_URIS:
        raise DocumentRefused(f"a client's document lists 1 to {MAX_REDIRECT_URIS} redirect_uris")
    for uri in uris:
        problem = redirect_uri_problem(uri) if isinstance(uri, str) else "redirect URIs are strings"
        if problem:
            raise DocumentRefused(f"the client's document: {problem}")
    return name, list(dict.fromkeys(uris))


def cache_seconds(cache_control: str) -> int:
    """How long a document is kept: its max-age within the floor and the ceiling; the floor without one, or with
    no-store or no-cache (the client is still recorded, and fetched again soon)."""
    floor = bounds.OAUTH_CLIENT_DOCUMENT_CACHE_MIN_SECONDS
    ceiling = bounds.OAUTH_CLIENT_DOCUMENT_CACHE_MAX_SECONDS
    lowered = cache_control.lower()
    found = _MAX_AGE.search(cache_control)
    if found is None or "no-store" in lowered or "no-cache" in lowered:
        return floor
    return max(floor, min(int(found.group(1)), ceiling))


def _throttle(client: str) -> None:
    """A fetch is a registration: the same bounds per client address and in all."""
    try:
        mine = count_hit(f"oauth-registrations:{client}", 3600)
        everyone = count_hit("oauth-registrations-all", 3600)
    except redis.RedisError:
        raise DocumentRefused("registration is unavailable, retry later", "temporarily_unavailable", 503) from None
    if mine > bounds.OAUTH_REGISTRATIONS_PER_HOUR or everyone > bounds.OAUTH_REGISTRATIONS_ALL_PER_HOUR:
        raise DocumentRefused("too many new clients from here, retry later", "temporarily_unavailable", 429)


def client_for_document(client_id: str, *, client: str, now: datetime) -> Application:
    """The client a client_id URL names, its document fetched (again) unless the one held is still fresh;
    `client` is the asking address, for the throttle. DocumentRefused when it cannot be."""
    if not settings.OAUTH_CLIENT_DOCUMENTS:
        raise DocumentRefused("this server does not take client ID metadata documents")
    parts = _url(client_id)
    held = Application.objects.filter(client_id=client_id).first()
    if held is not None and held.registration_source != Application.RegistrationSource.CIMD:
        raise DocumentRefused("the client_id is taken by a client registered otherwise")
    if held is not None and held.cimd_expires_at is not None and now < held.cimd_expires_at:
        return held
    _throttle(client)
    started = time.monotonic()
    body, cache_control = _fetch(parts)
    name, uris = _described(client_id, body)
    kept = timedelta(seconds=cache_seconds(cache_control))
    app = record_document_client(
        client_id=client_id,
        name=name,
        redirect_uris=uris,
        expires_at=now + timedelta(seconds=time.monotonic() - started) + kept,
    )
    if app is None:
        raise DocumentRefused("the client_id is taken by a client registered otherwise")
    return app
