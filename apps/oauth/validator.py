"""The toolkit's validator, bent to Oaken's connections (SPEC §7).

- Every authorization code comes from the consent page, which first records a connection; the code's hash is
  kept on it. Redeeming the code activates the connection, links the tokens to it and fixes the token family.
- A code redeemed twice (even concurrently: the connection row is locked) revokes the connection and every
  token it issued. A rotated refresh token presented again revokes its family and the connection.
- An access token never outlives its connection's deadline, and refreshing never moves the deadline.
- Resource indicators are mapped onto one of the two resources there are, /mcp (the default) or the REST API
  (/api/v1); a token is always bound to exactly one.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from oauth2_provider.models import AccessToken, Grant, RefreshToken
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauthlib.oauth2.rfc6749 import errors

from apps.agents.connections import revoke_connection, revoked_reason_words
from apps.agents.models import Connection, ConnectionToken
from apps.audit.log import append_internal_event
from apps.core.changes import Change
from apps.core.links import public_origin
from apps.oauth.resource import INVALID_TARGET, canonical_resources


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _connections() -> Any:
    # Token endpoints authenticate a client, not a tenant: the code or refresh token is what finds the
    # connection, so these lookups cannot be scoped to a tenant in advance.
    return Connection.objects.unscoped()


def _revoke(connection: Connection, reason: str) -> None:
    """Revoke a connection for the system's own reason, and audit it in the same transaction (once: a connection
    already revoked is left as it is). The event names the connection and the reason, never a code or token."""
    with transaction.atomic():
        if revoke_connection(connection, reason):
            after = {"revoked": True, "reason": revoked_reason_words(reason)}
            change = Change(str(connection.pk), {"revoked": False}, after)
            append_internal_event("connection_revoked", tenant=connection.tenant, targets=[change])


def _code_reused(code: str) -> None:
    """A code redeemed before: whoever holds it now, what it issued is void."""
    used = _connections().filter(code_hash=_digest(code), activated_at__isnull=False).first()
    if used is not None:
        _revoke(used, "code_reused")


def _grant(code: str, client: Any, request: Any) -> Any:
    """The code's grant; invalid_grant when it is gone (redeemed meanwhile)."""
    grant = Grant.objects.filter(code=code, application=client).first()
    if grant is None:
        _code_reused(code)
        raise errors.InvalidGrantError(request=request)
    return grant


class OakenValidator(OAuth2Validator):
    def save_authorization_code(
        self, client_id: str, code: dict[str, str], request: Any, *args: Any, **kwargs: Any
    ) -> None:
        connection_id = getattr(request, "oaken_connection", None)
        if connection_id is None:  # only the consent page issues codes
            raise errors.AccessDeniedError(request=request)
        super().save_authorization_code(client_id, code, request, *args, **kwargs)
        claimed = (
            _connections()
            .filter(pk=connection_id, user=request.user, application=request.client, code_hash__isnull=True)
            .update(code_hash=_digest(code["code"]))
        )
        if claimed != 1:
            raise errors.AccessDeniedError(request=request)

    def validate_code(self, client_id: str, code: str, client: Any, request: Any, *args: Any, **kwargs: Any) -> bool:
        if super().validate_code(client_id, code, client, request, *args, **kwargs):
            return True
        _code_reused(code)
        return False

    # The toolkit reads the code's grant again after validate_code (the redirect URI, the PKCE challenge): a
    # concurrent redemption may have used and deleted it in between, which must answer invalid_grant (and void
    # what the code issued), never a server error.

    def confirm_redirect_uri(
        self, client_id: str, code: str, redirect_uri: str, client: Any, request: Any, *args: Any, **kwargs: Any
    ) -> bool:
        return _grant(code, client, request).redirect_uri_allowed(redirect_uri)

    def get_code_challenge(self, code: str, request: Any) -> str | None:
        return _grant(code, request.client, request).code_challenge or None

    def get_code_challenge_method(self, code: str, request: Any) -> str | None:
        return _grant(code, request.client, request).code_challenge_method or None

    def validate_refresh_token(self, refresh_token: str, client: Any, request: Any, *args: Any, **kwargs: Any) -> bool:
        valid = super().validate_refresh_token(refresh_token, client, request, *args, **kwargs)
        rt = (
            RefreshToken.objects.filter(token_checksum=_digest(refresh_token))
            .exclude(token_family__isnull=True)
            .order_by("-created")
            .first()
        )
        if rt is None:
            return False
        connection = _connections().filter(token_family=rt.token_family).first()
        if connection is None:
            return False
        if not valid:
            if rt.revoked is not None and connection.revoked_at is None:
                _revoke(connection, "refresh_reused")
            return False
        return connection.is_live()

    def _check_and_set_request_resource(self, request: Any) -> None:
        requested = getattr(request, "resource", None)
        if isinstance(requested, str):
            requested = [value for key, value in (getattr(request, "decoded_body", None) or []) if key == "resource"]
        if requested:
            canonical = canonical_resources(list(requested), public_origin())
            if canonical is None:
                raise errors.CustomOAuth2Error(
                    error="invalid_target",
                    description=INVALID_TARGET,
                    request=request,
                )
            request.resource = canonical
        super()._check_and_set_request_resource(request)

    def revoke_token(self, token: str, token_type_hint: str | None, request: Any, *args: Any, **kwargs: Any) -> None:
        """RFC 7009: a client giving up a token gives up its connection (the console then shows it revoked)."""
        application = getattr(request.client, "pk", None)
        checksum = _digest(token)
        family = (
            RefreshToken.objects.filter(token_checksum=checksum, application_id=application)
            .exclude(token_family__isnull=True)
            .values_list("token_family", flat=True)
            .first()
        )
        connection = None
        if application is not None and family is not None:
            connection = _connections().filter(token_family=family, application_id=application).first()
        elif application is not None:
            link = ConnectionToken.objects.filter(
                access_token__token_checksum=checksum, access_token__application_id=application
            ).first()
            connection = link.connection if link is not None else None
        super().revoke_token(token, token_type_hint, request, *args, **kwargs)
        if connection is not None:
            _revoke(connection, "revoked_by_client")

    def save_bearer_token(self, token: dict[str, Any], request: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().save_bearer_token(token, request, *args, **kwargs)
        except errors.InvalidGrantError:
            reused = getattr(request, "oaken_reused", None)
            if reused is not None:  # revoked outside the failed transaction, so it stays revoked
                _revoke(*reused)
            raise

    def _save_bearer_token(self, token: dict[str, Any], request: Any, *args: Any, **kwargs: Any) -> None:
        now = timezone.now()
        if request.grant_type == "authorization_code":
            connection = _connections().select_for_update().filter(code_hash=_digest(request.code)).first()
            if connection is not None and connection.activated_at is not None:
                request.oaken_reused = (connection, "code_reused")
                raise errors.InvalidGrantError(request=request)
        elif request.grant_type == "refresh_token":
            presented = request.refresh_token_instance
            connection = _connections().select_for_update().filter(token_family=presented.token_family).first()
            # under the connection's lock: a concurrent refresh with the same token may have rotated it already
            if connection is not None and RefreshToken.objects.filter(pk=presented.pk, revoked__isnull=False).exists():
                request.oaken_reused = (connection, "refresh_reused")
                raise errors.InvalidGrantError(request=request)
        else:
            raise errors.UnsupportedGrantTypeError(request=request)
        if connection is None or not connection.is_live(now):
            raise errors.InvalidGrantError(request=request)
        lifetime = settings.OAUTH_ACCESS_TOKEN_SECONDS
        if connection.expires_at is not None:
            lifetime = min(lifetime, int((connection.expires_at - now).total_seconds()))
        token["expires_in"] = lifetime
        if not set(token["scope"].split()) <= set(connection.scopes):
            raise errors.InvalidScopeError(request=request)
        super()._save_bearer_token(token, request, *args, **kwargs)
        access = AccessToken.objects.get(token_checksum=_digest(token["access_token"]))
        ConnectionToken.objects.get_or_create(access_token=access, defaults={"connection": connection})
        fields = ["last_used_at"]
        connection.last_used_at = now
        if connection.activated_at is None:
            connection.activated_at = now
            fields.append("activated_at")
        if connection.token_family is None:
            refresh = RefreshToken.objects.filter(access_token=access).first()
            if refresh is not None:
                connection.token_family = refresh.token_family
                fields.append("token_family")
        connection.save(update_fields=fields)
