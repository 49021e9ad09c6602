"""The provider's side of an OAuth mailbox: exchanging a code, refreshing and revoking tokens, learning the address.

Calls are form POSTs (client_secret_post) without redirects (following one would carry the client secret and the
tokens wherever it points), with a timeout and a bounded answer. Failures raise ProviderError with a fixed code:
the provider's own `error` when it is one OAuth defines, else a word of ours; never the provider's description,
a token, a code or the secret (they stay out of errors, logs and audit events).
"""

from __future__ import annotations

import base64
import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from apps.core.bounds import bounds
from apps.mail.oauth.providers import Provider

# the errors of RFC 6749 §5.2 and §4.1.2.1 a provider may answer, passed on as they are (anything else is
# "provider_error")
KNOWN_ERRORS = frozenset(
    {
        "invalid_request",
        "invalid_client",
        "invalid_grant",
        "unauthorized_client",
        "unsupported_grant_type",
        "invalid_scope",
        "access_denied",
        "unsupported_response_type",
        "server_error",
        "temporarily_unavailable",
        "consent_required",
        "interaction_required",
        "login_required",
    }
)
_MOST = 256 * 1024


class ProviderError(Exception):
    """The provider refused, or could not be asked. `code`: an OAuth error code, "provider_unreachable",
    "provider_error" (an answer that is not what OAuth says), or "scope_not_granted"."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def known_error(value: Any) -> str:
    return value if isinstance(value, str) and value in KNOWN_ERRORS else "provider_error"


@dataclass(frozen=True)
class Tokens:
    access_token: str
    refresh_token: str  # "" when the provider did not send a new one (the old one stays)
    expires_at: datetime | None
    scope: str
    id_token: str


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def _timeout() -> float:
    return float(bounds.MAIL_SERVER_TIMEOUT_SECONDS)


def _answer(request: urllib.request.Request) -> tuple[int, Any]:
    try:
        with _OPENER.open(request, timeout=_timeout()) as response:
            status, body = response.status, response.read(_MOST + 1)
    except urllib.error.HTTPError as exc:
        status = exc.code
        try:
            body = exc.read(_MOST + 1)
        except (OSError, http.client.HTTPException):
            body = b""
    except (OSError, ValueError, http.client.HTTPException):
        raise ProviderError("provider_unreachable") from None
    if len(body) > _MOST:
        raise ProviderError("provider_error")
    try:
        return status, json.loads(body) if body else {}
    except ValueError:
        return status, None


def _post(url: str, form: dict[str, str]) -> tuple[int, Any]:
    data = urllib.parse.urlencode(form).encode()
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
    return _answer(urllib.request.Request(url, data=data, headers=headers, method="POST"))  # noqa: S310


def _token_call(provider: Provider, form: dict[str, str], now: datetime) -> Tokens:
    form = form | {"client_id": provider.client_id}
    if provider.client_secret:
        form["client_secret"] = provider.client_secret
    status, body = _post(provider.token_url, form)
    if not isinstance(body, dict):
        raise ProviderError("provider_error")
    if status != 200 or "error" in body:
        raise ProviderError(known_error(body.get("error")))
    access = body.get("access_token")
    if not isinstance(access, str) or not access or str(body.get("token_type", "bearer")).lower() != "bearer":
        raise ProviderError("provider_error")
    expires_in = body.get("expires_in")
    if isinstance(expires_in, str) and expires_in.isdigit():  # some providers send the number as a string
        expires_in = int(expires_in)
    expires_at = None
    if isinstance(expires_in, int | float) and not isinstance(expires_in, bool) and 0 < expires_in < 10**8:
        expires_at = now + timedelta(seconds=int(expires_in))
    refresh = body.get("refresh_token")
    id_token = body.get("id_token")
    scope = body.get("scope")
    return Tokens(
        access_token=access,
        refresh_token=refresh if isinstance(refresh, str) else "",
        expires_at=expires_at,
        scope=scope if isinstance(scope, str) else "",
        id_token=id_token if isinstance(id_token, str) else "",
    )


def exchange_code(provider: Provider, *, code: str, verifier: str, redirect_uri: str, now: datetime) -> Tokens:
    """The tokens for an authorization code (PKCE: the verifier its challenge was made from)."""
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "code_verifier": verifier,
        "redirect_uri": redirect_uri,
    }
    tokens = _token_call(provider, form, now)
    if tokens.scope:
        granted = set(tokens.scope.split())
        mail_scopes = [s for s in provider.scopes if s not in ("openid", "email", "profile", "offline_access")]
        if not all(scope in granted for scope in mail_scopes):
            raise ProviderError("scope_not_granted")
    if not tokens.refresh_token:
        raise ProviderError("no_refresh_token")
    return tokens


def refresh(provider: Provider, *, refresh_token: str, now: datetime) -> Tokens:
    """A new access token (and, where the provider rotates them, a new refresh token)."""
    return _token_call(provider, {"grant_type": "refresh_token", "refresh_token": refresh_token}, now)


def revoke(provider: Provider, *, token: str) -> bool:
    """Ask the provider to revoke a token (RFC 7009); whether it said yes. Without a revocation endpoint, False."""
    if not provider.revoke_url:
        return False
    form = {"token": token, "token_type_hint": "refresh_token", "client_id": provider.client_id}
    if provider.client_secret:
        form["client_secret"] = provider.client_secret
    try:
        status, _ = _post(provider.revoke_url, form)
    except ProviderError:
        return False
    return status == 200


def id_token_email(id_token: str, *, client_id: str) -> str:
    """The `email` claim of an ID token received straight from the token endpoint over its own connection (OpenID
    Connect Core §3.1.3.7 lets a client that got it so rely on the connection instead of the signature); "" when
    there is none, it is not verified where the token says, or the token was not issued to this client (its `aud`
    must name `client_id`). The issuer is not compared: Microsoft's differs per organization under `common`, and
    the address is proven anyway by logging in to IMAP and SMTP as it with the access token."""
    try:
        payload = id_token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return ""
    if not isinstance(claims, dict) or claims.get("email_verified") is False:
        return ""
    audience = claims.get("aud")
    if client_id not in (audience if isinstance(audience, list) else [audience]):
        return ""
    email = claims.get("email") or claims.get("preferred_username")
    return email if isinstance(email, str) and "@" in email else ""


def userinfo_email(provider: Provider, *, access_token: str) -> str:
    """The address the provider's userinfo endpoint gives for the token; "" when it gives none."""
    if not provider.userinfo_url:
        return ""
    request = urllib.request.Request(  # noqa: S310
        provider.userinfo_url, headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json"}
    )
    status, body = _answer(request)
    if status != 200 or not isinstance(body, dict):
        return ""
    email = body.get("email")
    return email if isinstance(email, str) and "@" in email else ""
