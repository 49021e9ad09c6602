"""The audit events the system appends outside the gate, by name: each one documented here, and no other.

The gate's events are named by the operation called. A few changes are made by the system's own work, where
going through the gate would cost more than the change itself (a sync's batch commits its messages' flags and
folders and their event in one transaction, thousands of times per sync): they are appended under one of
these names, which the operation registry knows (`registry.internal_events`, the operation reference lists
them) and no operation may take. `apps.audit.log.append_internal_event` refuses any other name.
"""

from __future__ import annotations

from types import MappingProxyType

INTERNAL_EVENTS = MappingProxyType(
    {
        "imap_sync": (
            "an IMAP sync followed the server: read and pinned flags, folders and removals of messages already "
            "held (ids with before and after values; storing new mail is not an event)"
        ),
        "webhook_disabled": (
            "a webhook whose endpoint failed every delivery for a day was disabled by the delivery worker (the "
            "webhook's id, with its state before and after)"
        ),
        "connection_revoked": (
            "a connection was ended by the system, not by a person: its authorization code or a refresh token was "
            "presented again, or its client gave up a token (the connection's id, with the reason in words)"
        ),
    }
)
