"""Mirroring changes made in Oaken onto IMAP servers: read state as \\Seen, folder moves as IMAP MOVE.

The change commits in Oaken first; a task then makes the server match the message's state *at the
time the task runs*, so repeated, late or reordered tasks all converge on the latest state. Messages
of local accounts, and messages whose server UID is not known yet, are left alone.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import Sequence
from functools import partial

from django.db import transaction
from imapclient import IMAPClient

from apps.mail.imap import imap_session
from apps.mail.models import AccountKind, Folder, MailAccount, Message
from apps.workspaces.models import Tenant

_SEEN = b"\\Seen"


def _enqueue(task_name: str, tenant: Tenant, message_ids: Sequence[uuid.UUID]) -> None:
    from apps.mail import tasks

    task = getattr(tasks, task_name)
    ids = [str(pk) for pk in message_ids]
    transaction.on_commit(partial(task.delay, tenant_id=str(tenant.pk), message_ids=ids))


def mirror_read_state(*, tenant: Tenant, message_ids: Sequence[uuid.UUID]) -> None:
    """After this transaction commits, set or clear \\Seen on the server for these messages."""
    _enqueue("push_read_state_task", tenant, message_ids)


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
        .only("id", "account_id", "read", "imap_uid", "imap_folder__name", "folder__name", "folder_id")
    )
    by_account: dict[uuid.UUID, list[Message]] = defaultdict(list)
    for m in messages:
        by_account[m.account_id].append(m)
    return by_account


def _account(tenant: Tenant, account_id: uuid.UUID) -> MailAccount:
    return MailAccount.objects.for_tenant(tenant).select_related("tenant").get(pk=account_id)


def push_read_state(*, tenant: Tenant, message_ids: Sequence[str]) -> int:
    """Make \\Seen on the server match each message's read state; returns how many messages were set."""
    done = 0
    for account_id, messages in _on_server(tenant, message_ids).items():
        by_folder: dict[str, dict[bool, list[int]]] = defaultdict(lambda: {True: [], False: []})
        for m in messages:
            assert m.imap_folder is not None and m.imap_uid is not None
            by_folder[m.imap_folder.name][m.read].append(m.imap_uid)
        with imap_session(_account(tenant, account_id)) as client:
            for name, uids in by_folder.items():
                client.select_folder(name)
                if uids[True]:
                    client.add_flags(uids[True], [_SEEN], silent=True)
                if uids[False]:
                    client.remove_flags(uids[False], [_SEEN], silent=True)
                done += len(uids[True]) + len(uids[False])
    return done


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
                    # only if nothing moved it meanwhile; without a new UID, the next sync finds it
                    Message.objects.for_tenant(tenant).filter(
                        pk=m.pk, imap_folder_id=source_id, imap_uid=m.imap_uid
                    ).update(imap_folder_id=target_id, imap_uid=new_uids.get(m.imap_uid or 0))
                moved += len(group)
    return moved
