"""Bounds on the mail anyone can make Oaken send (sign-up, password reset), per address and per client address.

Counted in Redis like the sign-in throttle. Past a bound the person gets the same page as always, so the
answer tells nothing about the address; only the mail is not sent.
"""

from __future__ import annotations

import hashlib

import redis
from django.http import HttpRequest

from apps.accounts.models import normalize_email
from apps.core.bounds import bounds
from apps.core.clients import client_address
from apps.core.redis_client import count_hit

KEY_PREFIX = "account-mail:"


class MailUncountableError(Exception):
    """Redis is away, so the mail cannot be counted: nothing is sent (the page says to try again)."""


def may_send(request: HttpRequest, email: str) -> bool:
    """Count one mail to `email` asked for by this request's client; whether both stay within their bounds."""
    address = hashlib.sha256(normalize_email(email).encode()).hexdigest()
    window = bounds.ACCOUNT_MAIL_WINDOW_SECONDS
    try:
        # both are counted every time, so a flood spread over addresses still fills the client's bound
        per_address = count_hit(f"{KEY_PREFIX}address:{address}", window)
        per_client = count_hit(f"{KEY_PREFIX}client:{client_address(request)}", window)
    except redis.RedisError:
        raise MailUncountableError from None
    return per_address <= bounds.ACCOUNT_MAIL_PER_ADDRESS and per_client <= bounds.ACCOUNT_MAIL_PER_CLIENT
