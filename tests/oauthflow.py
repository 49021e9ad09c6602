"""Driving the OAuth authorization-code + PKCE flow the way an MCP client does, through Django's test client."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from django.test import Client

ORIGIN = "http://testserver"
RESOURCE = ORIGIN + "/mcp"
REDIRECT = "http://127.0.0.1:33418/callback"


def pkce() -> tuple[str, str]:
    """A verifier and its S256 challenge."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def register(
    client: Client, *, name: str = "Test Assistant", redirect_uris: list[str] | None = None, **extra: Any
) -> Any:
    body = {
        "client_name": name,
        "redirect_uris": redirect_uris or [REDIRECT],
        "grant_types": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_method": "none",
        **extra,
    }
    return client.post("/oauth/register/", json.dumps(body), content_type="application/json")


@dataclass
class Authorization:
    client_id: str
    verifier: str
    challenge: str
    state: str
    redirect_uri: str = REDIRECT
    scope: str = "read write send"
    resource: str | None = RESOURCE

    def params(self, **override: Any) -> dict[str, str]:
        params = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": self.redirect_uri,
            "scope": self.scope,
            "state": self.state,
            "code_challenge": self.challenge,
            "code_challenge_method": "S256",
        }
        if self.resource is not None:
            params["resource"] = self.resource
        params.update(override)
        return {k: v for k, v in params.items() if v is not None}

    def url(self, **override: Any) -> str:
        return "/oauth/authorize/?" + urlencode(self.params(**override))


def start(client: Client, **kw: Any) -> Authorization:
    response = register(client)
    assert response.status_code == 201, response.content
    verifier, challenge = pkce()
    return Authorization(response.json()["client_id"], verifier, challenge, secrets.token_urlsafe(8), **kw)


def consent(
    client: Client,
    auth: Authorization,
    *,
    write: bool = False,
    send: bool = False,
    workspaces: tuple[str, ...] = ("default",),
    every_workspace: bool = False,
    lifetime: str = "24h",
    allow: bool = True,
    **override: Any,
) -> Any:
    """GET the consent page (it must render), then POST the person's choice; the redirect response."""
    page = client.get(auth.url())
    assert page.status_code == 200, page.content[:500]
    tenant = re.search(r'name="tenant" value="([^"]+)"', page.content.decode())
    assert tenant is not None, "the consent page names the tenant it grants in"
    seal = re.search(r'name="seal" value="([^"]+)"', page.content.decode())
    assert seal is not None, "the consent page seals what the client asked for"
    form: dict[str, Any] = {
        **auth.params(),
        "lifetime": lifetime,
        "workspaces": list(workspaces),
        "tenant": tenant.group(1),
        "seal": seal.group(1),
    }
    form.pop("resource", None)
    if auth.resource is not None:
        form["resource"] = auth.resource
    if allow:
        form["allow"] = "on"
    if write:
        form["grant_write"] = "on"
    if send:
        form["grant_send"] = "on"
    if every_workspace:
        form["all_workspaces"] = "on"
    form.update(override)
    return client.post(auth.url(), form)


def redirect_params(response: Any) -> dict[str, str]:
    assert response.status_code == 302, response.content[:500]
    location = urlsplit(response["Location"])
    return {k: v[0] for k, v in parse_qs(location.query).items()}


def exchange(client: Client, auth: Authorization, code: str, **override: Any) -> Any:
    body = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": auth.redirect_uri,
        "client_id": auth.client_id,
        "code_verifier": auth.verifier,
        **override,
    }
    return client.post("/oauth/token/", {k: v for k, v in body.items() if v is not None})


def refresh(client: Client, auth: Authorization, refresh_token: str) -> Any:
    return client.post(
        "/oauth/token/", {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": auth.client_id}
    )


def connect(client: Client, **consent_kw: Any) -> tuple[Authorization, dict[str, Any]]:
    """The whole flow for the signed-in person of `client`; the authorization and the token response."""
    auth = start(client)
    code = redirect_params(consent(client, auth, **consent_kw))["code"]
    tokens = exchange(client, auth, code)
    assert tokens.status_code == 200, tokens.content
    return auth, tokens.json()
