"""Who calls the REST door: an agent's bearer credential (door `api`) or a person's session (door `ui`).

A request with an Authorization header in the Bearer scheme is a bearer request: its credential decides, and it
never falls back to the session (a wrong, empty or revoked key is 401, not the person signed in in the same
browser). Another scheme is not Oaken's to read (a reverse proxy's Basic login in front of the console sends one
with every request): such a request is the session's, CSRF included.
A bearer request carries no ambient credential, so it needs no CSRF token; only SessionAuthentication, which runs
when there is no Authorization header, checks one. A request carrying both a signed-in session and an
Authorization header is refused (400, RFC 6750 §3.1 `invalid_request`: more than one way of authenticating):
either credential could be the one meant, and picking one would act for a principal the caller may not have
meant. It is refused before either credential is resolved, so it is not audited: it has no one caller, nor one
tenant whose chain could hold it.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from apps.agents.bearer import caller_for_bearer, is_bearer, presented
from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.links import api_resource, public_origin

# the scopes a client may ask for to call the REST API (as at /mcp)
CHALLENGE_SCOPE = "read write send"
METADATA_PATH = "/.well-known/oauth-protected-resource/api/v1"


class CredentialRefused(exceptions.AuthenticationFailed):
    """A bearer request refused before it had a caller: `error` in the one shape, `challenge` the RFC 6750 error
    code its WWW-Authenticate header names (None: no error, the bare challenge)."""

    def __init__(self, error: OakenError, challenge: str | None) -> None:
        super().__init__(error.message)
        self.error = error
        self.challenge = challenge


def invalid_credential() -> CredentialRefused:
    unknown = OakenError("UNAUTHENTICATED", "the credential is unknown, expired or revoked")
    return CredentialRefused(unknown, "invalid_token")


def challenge(request: Any, error: str | None = None, *, scope: str = CHALLENGE_SCOPE, description: str = "") -> str:
    """The WWW-Authenticate value of a refused REST call: Bearer, where the REST API's protected-resource metadata
    is (RFC 9728, for an OAuth client to find its authorization server), the scope to ask for, and `error`."""
    parts = [f'resource_metadata="{public_origin(request) + METADATA_PATH}"', f'scope="{scope}"']
    if error:
        parts.insert(0, f'error="{error}"')
    if description:
        parts.append(f'error_description="{description}"')
    return "Bearer " + ", ".join(parts)


def _signed_in(request: Request) -> bool:
    """Whether the request also carries a signed-in session (Django's AuthenticationMiddleware read its cookie)."""
    user = getattr(request._request, "user", None)
    return bool(user is not None and user.is_authenticated)


class BearerAuthentication(BaseAuthentication):
    """`Authorization: Bearer <API key or OAuth token>` (apps.agents.bearer): the user is the person the credential
    acts for, `request.auth` the agent Caller the gate checks. An OAuth token is accepted only when it was issued
    for the REST API (its resource indicator <origin>/api/v1, apps.oauth.resource), never one issued for /mcp."""

    def authenticate(self, request: Request) -> tuple[Any, Caller] | None:
        header = request.META.get("HTTP_AUTHORIZATION")
        if not is_bearer(header):
            return None  # the session's turn (SessionAuthentication, with its CSRF check)
        if _signed_in(request):
            both = OakenError.invalid("", "send one credential: a session cookie or an Authorization header, not both")
            raise CredentialRefused(both, "invalid_request")
        credential = presented(header)
        caller = caller_for_bearer(credential, api_resource(request._request)) if credential else None
        if caller is None:
            raise invalid_credential()
        return caller.user, caller

    def authenticate_header(self, request: Request) -> str:
        return challenge(request._request)


class BearerScheme(OpenApiAuthenticationExtension):
    """The OpenAPI document's `bearer` security scheme (the session is drf-spectacular's own `cookieAuth`)."""

    target_class = BearerAuthentication
    name = "bearer"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An agent's credential: an API key (oak_…) or an OAuth access token issued for this REST "
            "API (resource <origin>/api/v1). The caller is an agent under the rules of the MCP door: exposure, "
            "scopes, workspaces, confirmation by proposal and token (?confirmation_token). No CSRF token.",
        }
