"""Confirmation tokens (SPEC §5): random, stored hashed, short-lived, single-use, bound, capped."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.gate.models import ConfirmationToken


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue(*, caller: Caller, operation: str, digest: str, ttl_seconds: int, cap: int) -> tuple[str, int]:
    """A new token for this caller, operation and input; returns (token, seconds it lives).

    Must run inside a transaction. Past the per-caller cap, the oldest live tokens are revoked.
    """
    now = timezone.now()
    token = secrets.token_urlsafe(32)  # 256 bits
    live = (
        ConfirmationToken.objects.for_tenant(caller.tenant)
        .filter(caller_key=caller.key, used_at__isnull=True, expires_at__gt=now)
        .order_by("-created_at")
        .values_list("id", flat=True)
    )
    surplus = list(live[cap - 1 :])
    if surplus:
        ConfirmationToken.objects.for_tenant(caller.tenant).filter(id__in=surplus).update(used_at=now)
    ConfirmationToken.objects.create(
        tenant=caller.tenant,
        caller_key=caller.key,
        operation=operation,
        input_digest=digest,
        token_hash=_hash(token),
        created_at=now,
        expires_at=now + timedelta(seconds=ttl_seconds),
    )
    return token, ttl_seconds


def redeem(*, caller: Caller, token: str, operation: str, digest: str) -> None:
    """Burn the token (whatever happens next) and accept it only for the same caller, operation and input."""
    now = timezone.now()
    # Its own transaction, committed at once: an attempt burns the token even if the call then fails.
    with transaction.atomic():
        burned = (
            ConfirmationToken.objects.for_tenant(caller.tenant)
            .filter(token_hash=_hash(token), used_at__isnull=True)
            .select_for_update()
            .first()
        )
        if burned is not None:
            burned.used_at = now
            burned.save(update_fields=["used_at"])
    if burned is None:
        raise OakenError("CONFIRMATION_INVALID", "confirmation_token is unknown, used or revoked; ask again")
    if burned.expires_at <= now:
        raise OakenError("CONFIRMATION_INVALID", "confirmation_token has expired; ask again")
    if burned.caller_key != caller.key or burned.operation != operation or burned.input_digest != digest:
        raise OakenError(
            "CONFIRMATION_INVALID",
            "confirmation_token was issued for another call; it is now spent, ask again",
        )
