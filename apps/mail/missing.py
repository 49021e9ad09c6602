"""Messages no longer where Oaken saw them on the server (apps.mail.sync marks them missing): after a complete
pass over every folder they are looked for by Message-ID; one found was moved by another client and is followed
there, one not found for the grace period was deleted on the server and is removed here too. Custom folders the
server no longer has go once they are empty.

What a sync changes in messages people already had (flags, folders, removals) is recorded here too, as the
internal audit event `imap_sync`.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from imapclient import IMAPClient

from apps.audit.log import append_internal_event
from apps.core.bounds import bounds
from apps.core.changes import Change
from apps.mail.models import Folder, FolderKind, MailAccount, Message, Thread
from apps.mail.store import refresh_thread_stats
from apps.workspaces.models import Tenant

_AUDIT_TARGETS_MAX = 500
# missing messages looked for by Message-ID: at most this many per sync, this many per SEARCH command
_SETTLE_MAX = 500
_SEARCH_IDS_MAX = 50
_MESSAGE_ID = re.compile(r"<([^<>]*)>")


def record_sync_changes(tenant: Tenant, targets: list[Change]) -> None:
    """Record what a sync changed in messages people already had (flags, folders, removals), inside the
    transaction that changed it: ids and values, never mail text. Storing new mail is not an event.

    Appended as the internal event `imap_sync` (apps.audit.events), not through the gate: the change is made
    in the batch's own transaction, which a gate call (input parsed and digested, a transaction of its own)
    would only slow, for a change no caller asked for."""
    for start in range(0, len(targets), _AUDIT_TARGETS_MAX):
        append_internal_event("imap_sync", tenant=tenant, targets=targets[start : start + _AUDIT_TARGETS_MAX])


def relocation(folder_id: uuid.UUID, imap_folder_id: uuid.UUID | None, to: Folder) -> dict[str, Any]:
    """Where a message goes when the server has it in `to` now: its server place, and its Oaken folder too
    when Oaken showed it where the server had it (a move made in Oaken and not pushed yet keeps its folder)."""
    update: dict[str, Any] = {"imap_folder": to, "imap_missing_since": None}
    if folder_id != to.pk and (imap_folder_id is None or folder_id == imap_folder_id):
        update |= {"folder": to, "trashed_from": folder_id if to.kind == FolderKind.TRASH else None}
    return update


def _search_message_ids(client: IMAPClient, message_ids: Sequence[str]) -> dict[str, list[tuple[int, int]]]:
    """In the selected folder: (UID, size) of each message whose Message-ID is one of these, by Message-ID."""
    found: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for start in range(0, len(message_ids), _SEARCH_IDS_MAX):
        chunk = message_ids[start : start + _SEARCH_IDS_MAX]
        criteria: list[str] = []
        for i, mid in enumerate(chunk):
            if i < len(chunk) - 1:
                criteria.append("OR")
            criteria += ["HEADER", "Message-ID", f"<{mid}>"]
        uids = client.search(criteria)
        if not uids:
            continue
        for uid, item in client.fetch(uids, ["RFC822.SIZE", "BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)]"]).items():
            header = bytes(item.get(b"BODY[HEADER.FIELDS (MESSAGE-ID)]", b"")).decode("ascii", "replace")
            ids = _MESSAGE_ID.findall(header)
            if ids:
                found[ids[0].strip()].append((uid, int(item.get(b"RFC822.SIZE", -1))))
    return found


def settle_missing(
    account: MailAccount, client: IMAPClient, folders: list[Folder], started: datetime
) -> tuple[int, int]:
    """After a complete pass over every folder: look for the messages that went missing in this sync, and for
    those missing longer than the grace period, by Message-ID in every folder. One found is in that folder now
    (moved by another client, or a copy where its old place went); one still not found after the grace period
    was deleted on the server and is removed here too.

    A message without a Message-ID cannot be looked for, and is never removed."""
    grace = timedelta(seconds=bounds.SYNC_MISSING_GRACE_SECONDS)
    candidates = list(
        Message.objects.for_tenant(account.tenant)
        .filter(account=account, imap_missing_since__isnull=False)
        .filter(Q(imap_missing_since__gte=started) | Q(imap_missing_since__lte=started - grace))
        .exclude(message_id="")
        .order_by("imap_missing_since")
        .values_list("pk", "message_id", "size", "folder_id", "imap_folder_id", "imap_missing_since")[:_SETTLE_MAX]
    )
    if not candidates:
        return 0, 0
    by_id: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for row in candidates:
        by_id[row[1]].append(row)
    taken = set()
    found: dict[uuid.UUID, tuple[Folder, int]] = {}
    for folder in folders:
        client.select_folder(folder.name, readonly=True)
        for mid, places in _search_message_ids(client, sorted(by_id)).items():
            held_uids = set(
                Message.objects.for_tenant(account.tenant)
                .filter(imap_folder=folder, imap_uid__in=[uid for uid, _ in places])
                .values_list("imap_uid", flat=True)
            )
            for pk, _, size, *_ in by_id.get(mid, []):
                for uid, server_size in places:
                    if (
                        pk not in found
                        and (folder.pk, uid) not in taken
                        and uid not in held_uids
                        and (server_size == size)
                    ):
                        found[pk] = (folder, uid)
                        taken.add((folder.pk, uid))
    moved: list[Change] = []
    with transaction.atomic():
        rows = {row[0]: row for row in candidates}
        for pk, (folder, uid) in found.items():
            _, _, _, folder_id, imap_folder_id, _ = rows[pk]
            update = relocation(folder_id, imap_folder_id, folder) | {"imap_uid": uid}
            if "folder" in update:
                moved.append(Change(str(pk), {"folder_id": str(folder_id)}, {"folder_id": str(folder.pk)}))
            Message.objects.for_tenant(account.tenant).filter(pk=pk, imap_uid__isnull=True).update(**update)
        record_sync_changes(account.tenant, moved)
    gone = [row for row in candidates if row[0] not in found and row[5] <= started - grace]
    return len(found), _remove(account, gone)


def _remove(account: MailAccount, rows: Sequence[tuple[Any, ...]]) -> int:
    """Remove messages the server deleted (looked for and not found); each removal is audited (ids only)."""
    removed = 0
    for start in range(0, len(rows), 500):
        chunk = rows[start : start + 500]
        with transaction.atomic():
            gone = list(
                Message.objects.for_tenant(account.tenant)
                .filter(pk__in=[row[0] for row in chunk], imap_uid__isnull=True, imap_missing_since__isnull=False)
                .select_for_update()
                .order_by("pk")
                .values_list("pk", "folder_id", "thread_id")
            )
            if not gone:
                continue
            Message.objects.for_tenant(account.tenant).filter(pk__in=[pk for pk, _, _ in gone]).delete()
            _recount_threads(account, {thread_id for _, _, thread_id in gone})
            record_sync_changes(
                account.tenant,
                [Change(str(pk), {"folder_id": str(f)}, {"removed": "deleted on the server"}) for pk, f, _ in gone],
            )
            removed += len(gone)
    return removed


def _recount_threads(account: MailAccount, thread_ids: set[uuid.UUID]) -> None:
    """Threads that lost messages: drop those left empty, recount the others."""
    left = Message.objects.for_tenant(account.tenant).filter(thread_id__in=thread_ids).values("thread_id")
    Thread.objects.for_tenant(account.tenant).filter(pk__in=thread_ids).exclude(pk__in=left).delete()
    refresh_thread_stats(account.tenant, thread_ids)


def forget_empty_gone_folders(account: MailAccount, listed: list[Folder]) -> None:
    """Custom folders the server no longer has, once no message is in them, go too."""
    gone = (
        Folder.objects.for_tenant(account.tenant)
        .filter(account=account, kind=FolderKind.CUSTOM, imap_uidvalidity__isnull=True)
        .exclude(pk__in=[f.pk for f in listed])
    )
    if not gone.exists():
        return
    in_use = Message.objects.for_tenant(account.tenant).filter(folder_id=OuterRef("pk"))
    gone.filter(~Exists(in_use)).delete()
