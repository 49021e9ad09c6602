"""Webhooks (apps.webhooks): where their deliveries may go. Their timeouts and retries are bounds (operations.py)."""

from __future__ import annotations

from config.env import env_bool, env_str

# A webhook's https endpoint may be on a loopback or private address only when this is on (tests; self-hosting
# beside the consumer; never for a hosted service: a webhook must not reach into Oaken's own network). The CA file,
# when set, is the only trust for deliveries (tests trust their own self-signed receiver with it); empty: the
# system's trust store.
WEBHOOK_ALLOW_PRIVATE_HOSTS = env_bool("OAKEN_WEBHOOK_ALLOW_PRIVATE_HOSTS", False)
WEBHOOK_CA_FILE = env_str("OAKEN_WEBHOOK_CA_FILE")
