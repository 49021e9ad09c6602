"""The person's side of connecting a mailbox by OAuth: the authorization code flow with PKCE (S256) and `state`.

`begin` makes the authorization URL and keeps, server-side in Redis for STATE_SECONDS, the state with its PKCE
verifier, the person and tenant it is bound to, and the account being reconnected (if any). `take_state` takes it
back once (GETDEL: a state is single use). `finish` turns the provider's answer into a *grant*: the tokens and the
address (or the provider's refusal), kept encrypted in Redis for GRANT_SECONDS under a random handle that only the
same person in the same tenant can use (connect_mailbox_oauth takes the handle, never a token). Nothing here logs a
token, a code or a verifier, and none of them travels in a URL of Oaken's.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from apps.core.encryption import cipher
from apps.core.redis_client import redis_client
from apps.mail.oauth import client
from apps.mail.oauth.providers import Provider

STATE_SECONDS = 600
GRANT_SECONDS = 900
_STATE_KEY = "mail-oauth:state:"
_GRANT_KEY = "mail-oauth:grant:"
CALLBACK_PATH = "/mailboxes/oauth/callback"


def _seal(value: dict[str, Any]) -> bytes:
    return cipher().encrypt(json.dumps(value).encode())


def _open(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        found = json.loads(cipher().decrypt(bytes(value)))
    except Exception:
        return None
    return found if isinstance(found, dict) else None


def begin(provider: Provider, *, user_id: str, tenant_id: str, redirect_uri: str, account_id: str = "") -> str:
    """The provider's authorization URL for the person; the state and its verifier are kept server-side."""
    state = secrets.token_urlsafe(32)
    verifier = secrets.token_urlsafe(64)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    record = {
        "provider": provider.name,
        "user": user_id,
        "tenant": tenant_id,
        "account": account_id,
        "verifier": verifier,
        "redirect_uri": redirect_uri,
    }
    redis_client().set(_STATE_KEY + state, _seal(record), ex=STATE_SECONDS)
    query = {
        "response_type": "code",
        "client_id": provider.client_id,
        "redirect_uri": redirect_uri,
        "scope": " ".join(provider.scopes),
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **dict(provider.authorize_params),
    }
    separator = "&" if "?" in provider.authorize_url else "?"
    return provider.authorize_url + separator + urlencode(query)


def take_state(state: str) -> dict[str, Any] | None:
    """The flow a state belongs to, once (a second use, an expired or unknown state: None)."""
    if not state or len(state) > 200:
        return None
    return _open(redis_client().getdel(_STATE_KEY + state))


def finish(provider: Provider, flow: dict[str, Any], *, code: str, error: str, now: datetime) -> dict[str, Any]:
    """The grant the provider's answer makes: {"error": code} when it refused (the person said no, a wrong client,
    a scope not granted), else the tokens, their expiry and the address the provider says (or "")."""
    grant: dict[str, Any] = {"provider": provider.name, "account": flow.get("account", "")}
    if error or not code:
        return grant | {"error": client.known_error(error) if error else "invalid_request"}
    try:
        tokens = client.exchange_code(
            provider, code=code, verifier=flow["verifier"], redirect_uri=flow["redirect_uri"], now=now
        )
    except client.ProviderError as exc:
        return grant | {"error": exc.code}
    address = ""
    if provider.address == "id_token":
        address = client.id_token_email(tokens.id_token, client_id=provider.client_id)
    elif provider.address == "userinfo":
        try:
            address = client.userinfo_email(provider, access_token=tokens.access_token)
        except client.ProviderError:
            address = ""
    return grant | {
        "access_token": tokens.access_token,
        "refresh_token": tokens.refresh_token,
        "expires_at": tokens.expires_at.isoformat() if tokens.expires_at else None,
        "address": address,
    }


def keep_grant(grant: dict[str, Any], *, user_id: str, tenant_id: str) -> str:
    """Keep a grant for the person in the tenant; its handle."""
    handle = secrets.token_urlsafe(24)
    record = grant | {"user": user_id, "tenant": tenant_id}
    redis_client().set(_GRANT_KEY + handle, _seal(record), ex=GRANT_SECONDS)
    return handle


def read_grant(handle: str, *, user_id: str, tenant_id: str) -> dict[str, Any] | None:
    """The grant of a handle, for the person and tenant it was made for only."""
    if not handle or len(handle) > 200:
        return None
    grant = _open(redis_client().get(_GRANT_KEY + handle))
    if grant is None or grant.get("user") != user_id or grant.get("tenant") != tenant_id:
        return None
    return grant


def drop_grant(handle: str) -> None:
    redis_client().delete(_GRANT_KEY + handle)


def claim_grant(handle: str) -> bool:
    """Use the grant up: True for the one call that removed it (Redis's DEL is atomic), False for any other, which
    must not save a second mailbox holding the same refresh token."""
    return bool(redis_client().delete(_GRANT_KEY + handle))
