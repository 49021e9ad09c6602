"""The read-state service: the only code that marks mail read or unread (SPEC §9).

Only `mark_read`, `mark_unread` and `summarize_messages(mark_read=true)` reach it, after the
gate has passed them; a test keeps the registry, the gate and the plugin bridge from importing it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from apps.mail.models import Message
from apps.workspaces.models import Tenant


def set_read(*, tenant: Tenant, message_ids: Sequence[uuid.UUID], read: bool) -> list[tuple[uuid.UUID, bool]]:
    """Set the read flag; returns (id, previous value) for each message that changed."""
    rows = list(
        Message.objects.for_tenant(tenant)
        .filter(id__in=message_ids)
        .exclude(read=read)
        .select_for_update()
        .values_list("id", "read")
    )
    if rows:
        Message.objects.for_tenant(tenant).filter(id__in=[r[0] for r in rows]).update(read=read)
    return rows
