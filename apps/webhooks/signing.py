"""Standard Webhooks signatures (https://www.standardwebhooks.com), made by its maintained library.

A secret is `whsec_` and 32 random bytes in base64, as the specification and its libraries spell it. A delivery is
signed `v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">` once per secret in force: during a
rotation's grace period both the new and the previous secret sign, space-separated, so a consumer verifies with
either while it moves to the new one.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime

from standardwebhooks import Webhook as Signer

SECRET_PREFIX = "whsec_"  # noqa: S105 (the format's prefix, not a secret)


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def signature(secrets_in_force: Sequence[str], *, msg_id: str, timestamp: int, body: str) -> str:
    """The webhook-signature header: one v1 signature per secret, space-separated."""
    when = datetime.fromtimestamp(timestamp, UTC)
    return " ".join(Signer(secret).sign(msg_id, when, body) for secret in secrets_in_force)
