"""The read-state service: the only code that marks mail read or unread (SPEC §9).

Only `mark_read`, `mark_unread` and `summarize_messages(mark_read=true)` reach `set_read`, after the
gate has passed them; a test keeps the registry, the gate and the plugin bridge from importing it.
A change to messages of IMAP accounts is mirrored to the server (\\Seen) by a task once it commits; until
then the message's \\Seen is marked as waiting to be pushed, so a sync does not undo the change with the
server's older flag.
IMAP sync reports the server's \\Seen through `record_server_read`, which mirrors nothing back.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from django.db.models import F

from apps.mail.mirror import mirror_flags
from apps.mail.models import FLAG_SEEN, Message
from apps.workspaces.models import Tenant


def set_read(*, tenant: Tenant, message_ids: Sequence[uuid.UUID], read: bool) -> list[tuple[uuid.UUID, bool]]:
    """Set the read flag; returns (id, previous value) for each message that changed."""
    rows = list(
        Message.objects.for_tenant(tenant)
        .filter(id__in=message_ids)
        .exclude(read=read)
        .select_for_update()
        .order_by("pk")  # one locking order for every writer of these rows (a sync locks them too)
        .values_list("id", "read")
    )
    if rows:
        changed = [r[0] for r in rows]
        Message.objects.for_tenant(tenant).filter(id__in=changed).update(read=read)
        mirror_flags(tenant=tenant, message_ids=changed, flags=FLAG_SEEN)
    return rows


def record_server_read(*, tenant: Tenant, seen: Mapping[uuid.UUID, bool]) -> list[uuid.UUID]:
    """Take the IMAP server's \\Seen for these messages (sync); returns the ids whose read state changed.

    A message whose read state changed in Oaken and is not on the server yet keeps Oaken's (newer) value."""
    changed: list[uuid.UUID] = []
    for value in (True, False):
        ids = [pk for pk, s in seen.items() if s is value]
        if not ids:
            continue
        rows = list(
            Message.objects.for_tenant(tenant)
            .filter(id__in=ids)
            .annotate(seen_pending=F("flags_pending").bitand(FLAG_SEEN))
            .filter(seen_pending=0)
            .exclude(read=value)
            .select_for_update()
            .order_by("pk")
            .values_list("id", flat=True)
        )
        if rows:
            Message.objects.for_tenant(tenant).filter(id__in=rows).update(read=value)
            changed.extend(rows)
    return changed
