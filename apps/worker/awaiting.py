"""The waiting-for-reply nudge (the beat's `mail.nudge_awaiting`), on the internal door.

For each person who turned the nudge on (set_preferences awaiting_reply_nudge), the threads of the workspaces they
reach that wait for reply past their number of days and were not yet nudged for their last message
(apps.mail.awaiting.nudges_due) take two calls through the gate, each its own committed, audited transaction:
`mark_unread` on the thread's newest message from the other side (when it has one in the inbox or archive; read
state changes only through the read-state operations, SPEC §9), then `nudge_awaiting_thread`, one guarded UPDATE on
the thread's own state (not yet nudged for that last message), which also brings that message to the top of the
inbox. Of any number of beats and workers running this at once, or again after a worker died, one nudge changes the
thread and the others are refused (CONFLICT, audited); a thread answered meanwhile is refused as well.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.utils import timezone

from apps.core.errors import OakenError
from apps.gate.internal import call_internal
from apps.mail.awaiting import nudges_due, received_in_thread
from apps.mail.models import Thread

log = logging.getLogger("oaken.mail")

# threads nudged per run at most (the beat runs every ten minutes; more wait for the next run)
NUDGE_BATCH = 200


def nudge_due(now: datetime | None = None) -> int:
    """Nudge the threads waiting for reply that are due; how many this run nudged."""
    now = now or timezone.now()
    nudged = 0
    for tenant, thread_id, message_id in nudges_due(now, NUDGE_BATCH):
        thread = Thread.objects.for_tenant(tenant).select_related("account").filter(pk=thread_id).first()
        if thread is None:
            continue
        received = received_in_thread(tenant, thread=thread)
        try:
            if received is not None and received.read:
                call_internal(tenant, "mark_unread", {"message_ids": [str(received.pk)]})
            call_internal(tenant, "nudge_awaiting_thread", {"thread_id": thread_id, "message_id": message_id})
        except OakenError as error:
            if error.code != "CONFLICT":  # CONFLICT: nudged by another worker, or answered (the refusal is audited)
                log.warning("thread %s not nudged: %s", thread_id, error.code)
            continue
        nudged += 1
    return nudged
