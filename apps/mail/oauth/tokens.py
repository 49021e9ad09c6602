"""The tokens of a mailbox connected by OAuth, over time.

Whichever process needs the mailbox (a sync, a delivery, a check) asks `login_config` for its login settings; for an
OAuth mailbox they carry an access token valid for a while yet. One that expires within REFRESH_MARGIN is refreshed
first, under the account's row lock (SELECT ... FOR UPDATE): a second process asking at the same time waits for the
first and then finds the new token, so at most one refresh per account is in flight, and a rotated refresh token is
stored in the same transaction that learnt it. A refresh refused as `invalid_grant` (revoked, password changed,
consent withdrawn) puts the account in needs_reconnect: sync and delivery stop trying until the person reconnects.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.core.encryption import CredentialsUnreadableError
from apps.mail.models import MailAccount, OAuthState
from apps.mail.oauth import client
from apps.mail.oauth.providers import provider as find_provider
from apps.mail.reasons import MailServerError

# an access token expiring sooner than this is refreshed before use (a long sync outlives none of its logins)
REFRESH_MARGIN = timedelta(minutes=5)


def _fresh(account: MailAccount, now: datetime) -> bool:
    tokens = account.oauth_tokens
    if not isinstance(tokens, dict) or not tokens.get("access_token"):
        return False
    return account.oauth_expires_at is None or account.oauth_expires_at - REFRESH_MARGIN > now


def stored_tokens(account: MailAccount) -> dict[str, Any]:
    try:
        tokens = account.oauth_tokens
    except CredentialsUnreadableError:
        raise MailServerError("credentials_unreadable", "oauth") from None
    return dict(tokens) if isinstance(tokens, dict) else {}


def access_token(account: MailAccount) -> str:
    """A valid access token for the OAuth mailbox, refreshed first where it expires soon (at most one refresh per
    account at a time); MailServerError("needs_reconnect") once the provider refused the grant."""
    now = timezone.now()
    if account.oauth_state == OAuthState.NEEDS_RECONNECT:
        raise MailServerError("needs_reconnect", "oauth")
    if _fresh(account, now):
        return str(stored_tokens(account)["access_token"])
    provider = find_provider(account.oauth_provider)
    if provider is None:
        raise MailServerError("provider_unavailable", "oauth")
    failure = ""
    with transaction.atomic():
        locked = MailAccount.objects.unscoped().select_for_update().get(pk=account.pk)
        if locked.oauth_state == OAuthState.NEEDS_RECONNECT:
            failure = "needs_reconnect"
        elif not _fresh(locked, now):  # nobody refreshed it while this process waited for the lock
            tokens = stored_tokens(locked)
            try:
                answer = client.refresh(provider, refresh_token=str(tokens.get("refresh_token", "")), now=now)
            except client.ProviderError as exc:
                if exc.code == "invalid_grant":
                    locked.oauth_state = OAuthState.NEEDS_RECONNECT
                    locked.save(update_fields=["oauth_state"])
                    failure = "needs_reconnect"
                else:
                    failure = "token_refresh_failed"
            else:
                tokens["access_token"] = answer.access_token
                if answer.refresh_token:  # rotated: the old one may already be dead at the provider
                    tokens["refresh_token"] = answer.refresh_token
                locked.oauth_tokens = tokens
                locked.oauth_expires_at = answer.expires_at
                locked.save(update_fields=["oauth_tokens", "oauth_expires_at"])
    account.oauth_tokens = locked.oauth_tokens
    account.oauth_expires_at = locked.oauth_expires_at
    account.oauth_state = locked.oauth_state
    if failure:
        raise MailServerError(failure, "oauth")
    return str(stored_tokens(account)["access_token"])


def login_config(account: MailAccount, part: str) -> dict[str, Any]:
    """The "imap" or "smtp" login settings of a connected mailbox, decrypted in memory only (never logged): for an
    OAuth mailbox with a fresh access token as "bearer" and the provider's SASL "mechanism"."""
    try:
        credentials = account.credentials
    except CredentialsUnreadableError:
        raise MailServerError("credentials_unreadable", f"{part}.password") from None
    if not isinstance(credentials, dict) or not isinstance(credentials.get(part), dict):
        raise MailServerError("not_connected", f"{part}.host")
    config = dict(credentials[part])
    if account.oauth_provider:
        provider = find_provider(account.oauth_provider)
        if provider is None:
            raise MailServerError("provider_unavailable", "oauth")
        config["bearer"] = access_token(account)
        config["mechanism"] = provider.mechanism
    return config
