"""Mirroring changes made in Oaken onto IMAP servers: read state as \\Seen, pins as \\Flagged, folder moves as
IMAP MOVE.

The change commits in Oaken first; a task then makes the server match the message's state *at the
time the task runs*, so repeated, late or reordered tasks all converge on the latest state. Messages
of local accounts, and messages whose server UID is not known yet, are left alone.

Flags: the change marks the message `flags_pending_at` in its own transaction, and the push clears that mark
once the server holds the flags (only if no newer change came meanwhile). While the mark is there, a sync
keeps Oaken's flags instead of the server's older ones. A push sets both flags to Oaken's values: a change
another client made to the other flag in those few seconds gives way to Oaken's (last writer wins).
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from functools import partial

from django.db import transaction
from django.utils import timezone
from imapclient import IMAPClient

from apps.mail.imap import imap_session
from apps.mail.models import AccountKind, Folder, MailAccount, Message
from apps.workspaces.models import Tenant

_SEEN = b"\\Seen"
_FLAGGED = b"\\Flagged"


def _enqueue(task_name: str, tenant: Tenant, message_ids: Sequence[uuid.UUID]) -> None:
    from apps.mail import tasks

    task = getattr(tasks, task_name)
    ids = [str(pk) for pk in message_ids]
    transaction.on_commit(partial(task.delay, tenant_id=str(tenant.pk), message_ids=ids))


def mirror_flags(*, tenant: Tenant, message_ids: Sequence[uuid.UUID | str]) -> None:
    """Mark these messages' flags as pending (in this transaction) and, once it commits, set \\Seen and
    \\Flagged on the server to their read and pinned state."""
    rows = Message.objects.for_tenant(tenant).filter(id__in=message_ids, account__kind=AccountKind.IMAP)
    ids = list(rows.values_list("id", flat=True))
    if ids:
        Message.objects.for_tenant(tenant).filter(id__in=ids).update(flags_pending_at=timezone.now())
        _enqueue("push_flags_task", tenant, ids)


def mirror_moves(*, tenant: Tenant, message_ids: Sequence[uuid.UUID | str]) -> None:
    """After this transaction commits, move these messages on the server to their Oaken folder."""
    ids = list(
        Message.objects.for_tenant(tenant)
        .filter(id__in=message_ids, account__kind=AccountKind.IMAP)
        .values_list("id", flat=True)
    )
    if ids:
        _enqueue("push_moves_task", tenant, ids)


def _on_server(tenant: Tenant, message_ids: Sequence[str]) -> dict[uuid.UUID, list[Message]]:
    messages = (
        Message.objects.for_tenant(tenant)
        .filter(id__in=message_ids, account__kind=AccountKind.IMAP, imap_uid__isnull=False, imap_folder__isnull=False)
        .select_related("imap_folder", "folder")
        .only(
            "id",
            "account_id",
            "read",
            "pinned",
            "flags_pending_at",
            "imap_uid",
            "imap_folder__name",
            "folder__name",
            "folder_id",
        )
    )
    by_account: dict[uuid.UUID, list[Message]] = defaultdict(list)
    for m in messages:
        by_account[m.account_id].append(m)
    return by_account


def _account(tenant: Tenant, account_id: uuid.UUID) -> MailAccount:
    return MailAccount.objects.for_tenant(tenant).select_related("tenant").get(pk=account_id)


def push_flags(*, tenant: Tenant, message_ids: Sequence[str]) -> int:
    """Make \\Seen and \\Flagged on the server match each message's read and pinned state, then clear the
    messages' pending mark (unless a newer change set it again); returns how many messages were set."""
    done = 0
    for account_id, messages in _on_server(tenant, message_ids).items():
        by_folder: dict[str, dict[tuple[bytes, bool], list[int]]] = defaultdict(lambda: defaultdict(list))
        for m in messages:
            assert m.imap_folder is not None and m.imap_uid is not None
            by_folder[m.imap_folder.name][(_SEEN, m.read)].append(m.imap_uid)
            by_folder[m.imap_folder.name][(_FLAGGED, m.pinned)].append(m.imap_uid)
        with imap_session(_account(tenant, account_id)) as client:
            for name, groups in by_folder.items():
                client.select_folder(name)
                for (flag, on), uids in groups.items():
                    (client.add_flags if on else client.remove_flags)(uids, [flag], silent=True)
        for m in messages:
            Message.objects.for_tenant(tenant).filter(pk=m.pk, flags_pending_at=m.flags_pending_at).update(
                flags_pending_at=None
            )
        done += len(messages)
    return done


def repush_stale_flags(*, account: MailAccount, older_than: datetime) -> int:
    """Queue the push again for messages whose flags have been pending since before `older_than` (its task
    gave up or was lost); returns how many."""
    ids = list(
        Message.objects.for_tenant(account.tenant)
        .filter(account=account, flags_pending_at__lt=older_than)
        .values_list("id", flat=True)[:1000]
    )
    if ids:
        _enqueue("push_flags_task", account.tenant, ids)
    return len(ids)


def _uid_set(text: str) -> list[int]:
    uids: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition(":")
        a, b = int(low), int(high or low)
        uids.extend(range(min(a, b), max(a, b) + 1))
    return uids


_COPYUID = re.compile(r"^\s*(\d+)\s+([\d:,]+)\s+([\d:,]+)")


def _move(client: IMAPClient, uids: list[int], target: Folder) -> dict[int, int]:
    """MOVE (or COPY + delete where MOVE is missing); the new UIDs by old UID, where the server said (UIDPLUS)
    under the UIDVALIDITY the target folder's sync state holds."""
    responses = client._imap.untagged_responses
    responses.pop("COPYUID", None)
    if client.has_capability("MOVE"):
        client.move(uids, target.name)
    else:
        client.copy(uids, target.name)
        client.add_flags(uids, [b"\\Deleted"], silent=True)
        client.uid_expunge(uids)
    mapping: dict[int, int] = {}
    for raw in responses.pop("COPYUID", []):
        found = _COPYUID.match(raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw))
        if found and int(found[1]) == target.imap_uidvalidity:
            mapping.update(zip(_uid_set(found[2]), _uid_set(found[3]), strict=False))
    return mapping


def push_moves(*, tenant: Tenant, message_ids: Sequence[str]) -> int:
    """Move each message on the server to the folder it is in within Oaken; returns how many moved."""
    moved = 0
    for account_id, messages in _on_server(tenant, message_ids).items():
        groups: dict[tuple[uuid.UUID, uuid.UUID], list[Message]] = defaultdict(list)
        for m in messages:
            if m.imap_folder_id != m.folder_id:
                assert m.imap_folder_id is not None
                groups[(m.imap_folder_id, m.folder_id)].append(m)
        if not groups:
            continue
        with imap_session(_account(tenant, account_id)) as client:
            for (source_id, target_id), group in groups.items():
                source, target = group[0].imap_folder, group[0].folder
                assert source is not None
                client.select_folder(source.name)
                uids = [m.imap_uid for m in group if m.imap_uid is not None]
                new_uids = _move(client, uids, target)
                for m in group:
                    # only if nothing moved it meanwhile; without a new UID it counts as missing until the next
                    # sync finds it in the target folder
                    new_uid = new_uids.get(m.imap_uid or 0)
                    missing = None if new_uid else timezone.now()
                    Message.objects.for_tenant(tenant).filter(
                        pk=m.pk, imap_folder_id=source_id, imap_uid=m.imap_uid
                    ).update(imap_folder_id=target_id, imap_uid=new_uid, imap_missing_since=missing)
                moved += len(group)
    return moved
