"""A loopback OAuth provider for mailboxes connected by OAuth: authorize (PKCE S256, consent given at once unless
told to refuse), token (authorization code; refresh with rotation; `invalid_grant` on demand), revocation
(RFC 7009), userinfo, and the token introspection Dovecot's oauth2 passdb asks (tests/mailservers.py).

It runs in a thread of the test process; what it saw is kept for the tests to assert on (how many refreshes, which
grants were revoked). A grant belongs to one address: the next /authorize consents as `next_address`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from tests.loopback import free_port

CLIENT_ID = "oaken-test-client"
CLIENT_SECRET = "oaken-test-secret"
SCOPES = ["openid", "email", "mail"]


@dataclass
class Grant:
    address: str
    refresh_token: str
    access_tokens: dict[str, float] = field(default_factory=dict)  # token -> expires (time.time())
    revoked: bool = False


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class OAuthProvider:
    """The provider; `url` its base, `providers_toml(name, imap, smtp)` an entry of Oaken's providers file."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.lock = threading.Lock()
        self.grants: list[Grant] = []
        self.codes: dict[str, dict[str, Any]] = {}
        self.next_address = ""
        self.refuse_with = ""  # an /authorize error to redirect back with (access_denied, ...)
        self.granted_scope = ""  # the scope the token endpoint says it granted ("" = what was asked)
        self.access_lifetime = 3600
        self.refresh_delay = 0.0  # seconds the token endpoint takes for a refresh (widens a race)
        self.refresh_calls = 0
        self.code_exchanges = 0
        self.id_token_audience: str | list[str] = ""  # the ID token's `aud`: this client's id unless set
        self.revocations: list[str] = []  # addresses whose grant was revoked through /revoke
        self.introspections = 0
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                if body is not None:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _form(self) -> dict[str, str]:
                length = int(self.headers.get("Content-Length") or 0)
                return {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                if parts.path == "/authorize":
                    self._send(*provider.authorize(query))
                elif parts.path == "/userinfo":
                    self._send(*provider.userinfo(self.headers.get("Authorization", "")))
                else:
                    self._send(404, {"error": "not_found"})

            def do_POST(self) -> None:
                path, form = urlsplit(self.path).path, self._form()
                if path == "/token":
                    self._send(*provider.token(form))
                elif path == "/revoke":
                    self._send(*provider.revoke(form))
                elif path == "/introspect":
                    self._send(*provider.introspect(form))
                else:
                    self._send(404, {"error": "not_found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # ------------------------------------------------------------ endpoints

    def authorize(self, query: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        redirect = query.get("redirect_uri", "")
        state = query.get("state", "")
        if query.get("client_id") != CLIENT_ID:
            return 400, {"error": "invalid_client"}, {}  # a wrong client is never redirected back
        if self.refuse_with:
            return 302, None, {"Location": f"{redirect}?{urlencode({'error': self.refuse_with, 'state': state})}"}
        if query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            location = f"{redirect}?{urlencode({'error': 'invalid_request', 'state': state})}"
            return 302, None, {"Location": location}
        code = secrets.token_urlsafe(16)
        with self.lock:
            self.codes[code] = {
                "challenge": query["code_challenge"],
                "redirect_uri": redirect,
                "address": self.next_address,
                "scope": query.get("scope", ""),
            }
        return 302, None, {"Location": f"{redirect}?{urlencode({'code': code, 'state': state})}"}

    def _issue(self, grant: Grant) -> str:
        token = "at-" + secrets.token_urlsafe(24)
        grant.access_tokens[token] = time.time() + self.access_lifetime
        return token

    def _id_token(self, address: str) -> str:
        header = _b64(json.dumps({"alg": "none"}).encode())
        audience = self.id_token_audience or CLIENT_ID
        claims = {"sub": address, "email": address, "email_verified": True, "aud": audience}
        return f"{header}.{_b64(json.dumps(claims).encode())}."

    def grant_for(self, address: str) -> dict[str, Any]:
        """A grant made without the browser (tests of the servers alone): its tokens as the token endpoint gives."""
        with self.lock:
            grant = Grant(address=address, refresh_token="rt-" + secrets.token_urlsafe(24))
            self.grants.append(grant)
            access = self._issue(grant)
        return {"access_token": access, "refresh_token": grant.refresh_token, "expires_in": self.access_lifetime}

    def token(self, form: dict[str, str]) -> tuple[int, Any]:
        if form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
            return 401, {"error": "invalid_client"}
        kind = form.get("grant_type")
        if kind == "authorization_code":
            with self.lock:
                self.code_exchanges += 1
                issued = self.codes.pop(form.get("code", ""), None)
                if issued is None or issued["redirect_uri"] != form.get("redirect_uri"):
                    return 400, {"error": "invalid_grant"}
                challenge = _b64(hashlib.sha256(form.get("code_verifier", "").encode()).digest())
                if challenge != issued["challenge"]:
                    return 400, {"error": "invalid_grant"}
                grant = Grant(address=issued["address"], refresh_token="rt-" + secrets.token_urlsafe(24))
                self.grants.append(grant)
                access = self._issue(grant)
            return 200, {
                "access_token": access,
                "token_type": "Bearer",
                "expires_in": self.access_lifetime,
                "refresh_token": grant.refresh_token,
                "scope": self.granted_scope or issued["scope"],
                "id_token": self._id_token(grant.address),
            }
        if kind == "refresh_token":
            time.sleep(self.refresh_delay)
            with self.lock:
                self.refresh_calls += 1
                found = next((g for g in self.grants if g.refresh_token == form.get("refresh_token")), None)
                if found is None or found.revoked:
                    return 400, {"error": "invalid_grant"}
                grant = found
                grant.refresh_token = "rt-" + secrets.token_urlsafe(24)  # rotation: the old one is dead now
                access = self._issue(grant)
            return 200, {
                "access_token": access,
                "token_type": "Bearer",
                "expires_in": self.access_lifetime,
                "refresh_token": grant.refresh_token,
            }
        return 400, {"error": "unsupported_grant_type"}

    def revoke(self, form: dict[str, str]) -> tuple[int, Any]:
        if form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
            return 401, {"error": "invalid_client"}
        token = form.get("token", "")
        with self.lock:
            for grant in self.grants:
                if token == grant.refresh_token or token in grant.access_tokens:
                    grant.revoked = True
                    self.revocations.append(grant.address)
        return 200, {}

    def _grant_of_access(self, token: str) -> Grant | None:
        for grant in self.grants:
            expires = grant.access_tokens.get(token)
            if expires is not None and expires > time.time() and not grant.revoked:
                return grant
        return None

    def introspect(self, form: dict[str, str]) -> tuple[int, Any]:
        with self.lock:
            self.introspections += 1
            grant = self._grant_of_access(form.get("token", ""))
        if grant is None:
            return 200, {"active": False}
        return 200, {"active": True, "username": grant.address}

    def check(self, address: str, token: str) -> bool:
        """Whether the access token is live and belongs to the address (the SMTP server's AUTH XOAUTH2)."""
        with self.lock:
            grant = self._grant_of_access(token)
        return grant is not None and grant.address == address

    def userinfo(self, authorization: str) -> tuple[int, Any]:
        with self.lock:
            grant = self._grant_of_access(authorization.removeprefix("Bearer "))
        if grant is None:
            return 401, {"error": "invalid_token"}
        return 200, {"email": grant.address}

    # ------------------------------------------------------------ what the tests do

    def revoke_grants(self, address: str) -> None:
        """The person withdrew consent at the provider: every grant of the address dies."""
        with self.lock:
            for grant in self.grants:
                if grant.address == address:
                    grant.revoked = True

    def expire_access(self, address: str) -> None:
        with self.lock:
            for grant in self.grants:
                if grant.address == address:
                    grant.access_tokens = {token: 0.0 for token in grant.access_tokens}

    def providers_toml(
        self, name: str, *, imap: Any, smtp: Any, mechanism: str = "XOAUTH2", address: str = "id_token"
    ) -> str:
        return f"""
[providers.{name}]
label = "Loopback Mail"
authorize_url = "{self.url}/authorize"
token_url = "{self.url}/token"
revoke_url = "{self.url}/revoke"
userinfo_url = "{self.url}/userinfo"
scopes = {json.dumps(SCOPES)}
client_id = "{CLIENT_ID}"
client_secret = "{CLIENT_SECRET}"
imap_host = "{imap.host}"
imap_port = {imap.port}
imap_security = "none"
smtp_host = "{smtp.host}"
smtp_port = {smtp.port}
smtp_security = "none"
mechanism = "{mechanism}"
address = "{address}"
"""

    def start(self) -> OAuthProvider:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def oauth_provider() -> Iterator[OAuthProvider]:
    provider = OAuthProvider().start()
    try:
        yield provider
    finally:
        provider.stop()


def use_providers_file(settings: Any, tmp_path: Path, text: str) -> None:
    """Point Oaken at a providers file holding `text` (pytest-django's settings fixture restores it after)."""
    from apps.mail.oauth import providers

    path = tmp_path / "providers.toml"
    path.write_text(text)
    settings.MAIL_OAUTH_PROVIDERS_FILE = str(path)
    providers.forget()
