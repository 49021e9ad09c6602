"""Bringing snoozed messages back when their time comes (the beat's `mail.return_snoozed`), on the internal door.

Each due message takes two calls through the gate, each its own committed, audited transaction: `mark_unread` (the
read-state operation: the return never changes read state any other way, SPEC §9), then `return_snoozed_message`,
one guarded UPDATE on the message's own state (still snoozed until the time read, and due). Of any number of beats
and workers running this at once, or again after a worker died, one return changes the message and the others are
refused (CONFLICT, audited); a worker that died before the return committed changed nothing, and the next run
returns the message. Marking unread first means no death between the two calls leaves a returned message read;
a message no longer snoozed when a worker reaches it (returned by another, or unsnoozed) is left alone.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.utils import timezone

from apps.core.errors import OakenError
from apps.gate.internal import call_internal
from apps.mail.models import Message
from apps.mail.selectors import due_snoozes
from apps.workspaces.models import Tenant

log = logging.getLogger("oaken.mail")

# due messages handled per run (the beat runs every minute; more wait for the next run)
RETURN_BATCH = 500


def return_due(now: datetime | None = None) -> int:
    """Return the snoozed messages whose time has come; how many this run returned."""
    now = now or timezone.now()
    tenants: dict[object, Tenant] = {}
    returned = 0
    for tenant_id, message_id, until in due_snoozes(now, RETURN_BATCH):
        if tenant_id not in tenants:
            tenants[tenant_id] = Tenant.objects.get(pk=tenant_id)
        tenant = tenants[tenant_id]
        still = Message.objects.for_tenant(tenant).filter(pk=message_id, snoozed_until=until).exists()
        if not still:
            continue  # returned by another worker meanwhile, or unsnoozed, or snoozed again
        try:
            call_internal(tenant, "mark_unread", {"message_ids": [str(message_id)]})
            call_internal(tenant, "return_snoozed_message", {"message_id": str(message_id), "until": until.isoformat()})
        except OakenError as error:
            if error.code != "CONFLICT":  # CONFLICT: another worker returned it (the refusal is audited)
                log.warning("snoozed message %s not returned: %s", message_id, error.code)
            continue
        returned += 1
    return returned
