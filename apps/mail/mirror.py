"""Mirroring changes made in Oaken onto IMAP servers: read state as \\Seen, pins as \\Flagged, folder moves as
IMAP MOVE.

The change commits in Oaken first; a task then makes the server match the message's state *at the time the
task runs*, so repeated, late or reordered tasks all converge on the latest state. Tasks for one account take
turns (`mirror_lock`, which a sync's flag pass takes too), so each reads the messages after the one before it
wrote. A folder whose UIDVALIDITY is not the one Oaken synced is left alone (its UIDs name other messages now;
the next sync lists it again). Messages of local accounts, and messages whose server UID is not known, wait.

On a Gmail server (apps.mail.gmail) a message of All Mail is in the inbox by its \\Inbox label, not by a folder:
moving it between the inbox and the archive in Oaken adds or removes that label; it stays where it is in All Mail.
A move to Trash or Spam (folders there too) is an IMAP MOVE as anywhere. A label put on or taken off a Gmail
message in Oaken is put on or taken off on the server (STORE X-GM-LABELS), each label named by the change as
Oaken holds it when the task runs; labels the change did not name are left alone.

Flags: a change marks which flags wait to be pushed (`flags_pending`, FLAG_SEEN / FLAG_FLAGGED) and since when
(`flags_pending_at`) in its own transaction. The push sets only those flags, and clears the mark for the
messages the server still holds, unless a newer change came meanwhile. While a flag is marked, a sync keeps
Oaken's value of it and takes the server's value of the other one.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import defaultdict
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from functools import partial

from celery import current_app
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone
from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientAbortError, IMAPClientError

from apps.mail.imap import imap_session
from apps.mail.locks import session_lock
from apps.mail.models import (
    FLAG_FLAGGED,
    FLAG_SEEN,
    AccountKind,
    Folder,
    FolderKind,
    Label,
    MailAccount,
    Message,
    MessageLabel,
    OAuthState,
)
from apps.workspaces.models import Tenant

log = logging.getLogger("oaken.mail.mirror")

SEEN = b"\\Seen"
FLAGGED = b"\\Flagged"
# each flag Oaken mirrors: its bit in flags_pending, the IMAP flag, the Message field
FLAGS = ((FLAG_SEEN, SEEN, "read"), (FLAG_FLAGGED, FLAGGED, "pinned"))
_LOCK_WAIT_SECONDS = 30.0
# the names of the tasks (apps.mail.tasks) that run push_flags and push_moves
PUSH_FLAGS_TASK = "mail.push_flags"
PUSH_MOVES_TASK = "mail.push_moves"
PUSH_LABELS_TASK = "mail.push_labels"


class MirrorBusyError(Exception):
    """Another task kept the account's mirror lock too long; the task is tried again later."""


def mirror_lock(account_id: uuid.UUID | str, *, wait: float = _LOCK_WAIT_SECONDS) -> AbstractContextManager[bool]:
    """Hold the account's mirror lock, waiting up to `wait` seconds; yields whether it is held."""
    return session_lock(f"imap-mirror:{account_id}", wait=wait)


def _enqueue(task_name: str, tenant: Tenant, message_ids: Sequence[uuid.UUID]) -> None:
    # By name from the Celery app's registry (MailConfig.ready registers the mail tasks in every process):
    # apps.mail.tasks is the thin interface over this module and sync, and importing it here closed a circle.
    task = current_app.tasks[task_name]
    ids = [str(pk) for pk in message_ids]
    transaction.on_commit(partial(task.delay, tenant_id=str(tenant.pk), message_ids=ids))


def mirror_flags(*, tenant: Tenant, message_ids: Sequence[uuid.UUID | str], flags: int) -> None:
    """Mark these flags (FLAG_SEEN | FLAG_FLAGGED) of these messages as waiting to be pushed, in this
    transaction, and push them once it commits."""
    ids = list(
        Message.objects.for_tenant(tenant)
        .filter(id__in=message_ids, account__kind=AccountKind.IMAP)
        .values_list("id", flat=True)
    )
    if ids:
        Message.objects.for_tenant(tenant).filter(id__in=ids).update(
            flags_pending=F("flags_pending").bitor(flags), flags_pending_at=timezone.now()
        )
        _enqueue(PUSH_FLAGS_TASK, tenant, ids)


def mirror_moves(*, tenant: Tenant, message_ids: Sequence[uuid.UUID | str]) -> None:
    """After this transaction commits, move these messages on the server to their Oaken folder."""
    ids = list(
        Message.objects.for_tenant(tenant)
        .filter(id__in=message_ids, account__kind=AccountKind.IMAP)
        .values_list("id", flat=True)
    )
    if ids:
        _enqueue(PUSH_MOVES_TASK, tenant, ids)


def _accounts_of(tenant: Tenant, message_ids: Sequence[str]) -> list[uuid.UUID]:
    """The IMAP accounts of these messages a push can log in to now: one waiting to be reconnected is left until
    it is (its marks wait; resume_pushes queues them again then), not retried against a refused grant."""
    return sorted(
        set(
            Message.objects.for_tenant(tenant)
            .filter(id__in=message_ids, account__kind=AccountKind.IMAP)
            .exclude(account__oauth_state=OAuthState.NEEDS_RECONNECT)
            .values_list("account_id", flat=True)
        )
    )


# at most this many message ids per push task queued by resume_pushes
RESUME_BATCH = 500


def resume_pushes(*, tenant: Tenant, account: MailAccount) -> int:
    """After this transaction commits, push what waited while the account could not be logged in to (it was
    waiting to be reconnected): flags still marked, and messages whose Oaken folder is not their server folder.
    Returns how many messages were queued. Gmail label changes carry no mark, and are not resumed."""
    messages = Message.objects.for_tenant(tenant).filter(account=account, imap_uid__isnull=False)
    flagged = list(messages.exclude(flags_pending=0).values_list("id", flat=True))
    moved = list(
        messages.filter(imap_folder__isnull=False).exclude(folder_id=F("imap_folder_id")).values_list("id", flat=True)
    )
    for task_name, ids in ((PUSH_FLAGS_TASK, flagged), (PUSH_MOVES_TASK, moved)):
        for start in range(0, len(ids), RESUME_BATCH):
            _enqueue(task_name, tenant, ids[start : start + RESUME_BATCH])
    return len(set(flagged) | set(moved))


def _on_server(tenant: Tenant, account_id: uuid.UUID, message_ids: Sequence[str]) -> list[Message]:
    """The messages of one account as they are now (read under the mirror lock), where the server has them."""
    return list(
        Message.objects.for_tenant(tenant)
        .filter(id__in=message_ids, account_id=account_id, imap_uid__isnull=False, imap_folder__isnull=False)
        .select_related("imap_folder", "folder")
        .only(
            "id",
            "account_id",
            "read",
            "pinned",
            "flags_pending",
            "flags_pending_at",
            "imap_uid",
            "folder_id",
            "folder__name",
            "folder__kind",
            "folder__imap_uidvalidity",
            "imap_folder__name",
            "imap_folder__kind",
            "imap_folder__imap_uidvalidity",
            "gmail_msgid",
        )
    )


def _account(tenant: Tenant, account_id: uuid.UUID) -> MailAccount:
    return MailAccount.objects.for_tenant(tenant).select_related("tenant").get(pk=account_id)


def _select(client: IMAPClient, folder: Folder) -> bool:
    """Select the folder for changes; False when its UIDVALIDITY is not the one Oaken's UIDs belong to."""
    info = client.select_folder(folder.name)
    return folder.imap_uidvalidity is not None and int(info[b"UIDVALIDITY"]) == folder.imap_uidvalidity


def _uid_list(uids: Sequence[int]) -> str:
    return ",".join(str(u) for u in sorted(set(uids)))


def _by_folder(messages: Sequence[Message]) -> dict[uuid.UUID, list[Message]]:
    groups: dict[uuid.UUID, list[Message]] = defaultdict(list)
    for m in messages:
        assert m.imap_folder_id is not None
        groups[m.imap_folder_id].append(m)
    return groups


def push_flags(*, tenant: Tenant, message_ids: Sequence[str]) -> int:
    """Set the flags waiting to be pushed for these messages on the server, and clear their mark; returns how
    many messages the server now agrees with."""
    done = 0
    for account_id in _accounts_of(tenant, message_ids):
        with mirror_lock(account_id) as held:
            if not held:
                raise MirrorBusyError(str(account_id))
            messages = [m for m in _on_server(tenant, account_id, message_ids) if m.flags_pending]
            if not messages:
                continue
            with imap_session(_account(tenant, account_id)) as client:
                for group in _by_folder(messages).values():
                    done += _push_folder_flags(tenant, client, group)
    return done


def _push_folder_flags(tenant: Tenant, client: IMAPClient, group: list[Message]) -> int:
    folder = group[0].imap_folder
    assert folder is not None
    if not _select(client, folder):
        return 0
    try:
        for bit, flag, attribute in FLAGS:
            for on in (True, False):
                uids = [m.imap_uid for m in group if m.flags_pending & bit and getattr(m, attribute) is on]
                if uids:
                    store = client.add_flags if on else client.remove_flags
                    store([u for u in uids if u is not None], [flag], silent=True)
        present = set(client.search(["UID", _uid_list([m.imap_uid for m in group if m.imap_uid is not None])]))
    except IMAPClientAbortError:
        raise
    except IMAPClientError:
        # the server refused the change (a read-only folder): its flags stand, and the next sync of the folder
        # reads them all again (not only those changed since its MODSEQ) and gives them back to Oaken
        log.warning("the server refused to change flags in a folder of account %s", group[0].account_id)
        Folder.objects.for_tenant(tenant).filter(pk=folder.pk).update(imap_highestmodseq=0)
        present = {m.imap_uid for m in group}
    # messages expunged meanwhile stay marked: the next sync finds them elsewhere or lets them go
    agreed = [m for m in group if m.imap_uid in present]
    _clear_pending(tenant, agreed)
    return len(agreed)


def _clear_pending(tenant: Tenant, messages: Sequence[Message]) -> None:
    """Clear the pending mark of messages whose flags were pushed, unless a newer change (or move) came since."""
    if not messages:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE mail_message AS m SET flags_pending = 0, flags_pending_at = NULL
              FROM unnest(%s::uuid[], %s::timestamptz[], %s::bigint[]) AS v(id, at, uid)
             WHERE m.id = v.id AND m.tenant_id = %s AND m.flags_pending_at = v.at AND m.imap_uid = v.uid
            """,
            [
                [m.pk for m in messages],
                [m.flags_pending_at for m in messages],
                [m.imap_uid for m in messages],
                tenant.pk,
            ],
        )


def repush_stale_flags(*, account: MailAccount, older_than: datetime) -> int:
    """Queue the push again for messages whose flags have waited since before `older_than` (their task gave up
    or was lost) and whose server UID is known; returns how many. Each is queued again at most that often."""
    rows = Message.objects.for_tenant(account.tenant).filter(
        account=account, flags_pending_at__lt=older_than, imap_uid__isnull=False
    )
    ids = list(rows.values_list("id", flat=True)[:1000])
    if ids:
        Message.objects.for_tenant(account.tenant).filter(id__in=ids).update(flags_pending_at=timezone.now())
        _enqueue(PUSH_FLAGS_TASK, account.tenant, ids)
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
    for account_id in _accounts_of(tenant, message_ids):
        with mirror_lock(account_id) as held:
            if not held:
                raise MirrorBusyError(str(account_id))
            groups: dict[tuple[uuid.UUID, uuid.UUID], list[Message]] = defaultdict(list)
            # Gmail's All Mail: {whether the message is in the inbox: its messages}, by All Mail folder
            inbox_labels: dict[uuid.UUID, dict[bool, list[Message]]] = defaultdict(lambda: defaultdict(list))
            for m in _on_server(tenant, account_id, message_ids):
                if _in_all_mail(m):
                    assert m.imap_folder_id is not None
                    if m.folder.kind in _BY_LABEL:
                        inbox_labels[m.imap_folder_id][m.folder.kind == FolderKind.INBOX].append(m)
                        continue
                if m.imap_folder_id != m.folder_id:
                    assert m.imap_folder_id is not None
                    groups[(m.imap_folder_id, m.folder_id)].append(m)
            if not groups and not inbox_labels:
                continue
            with imap_session(_account(tenant, account_id)) as client:
                for by_inbox in inbox_labels.values():
                    moved += _push_inbox_labels(client, by_inbox)
                for (source_id, target_id), group in groups.items():
                    source, target = group[0].imap_folder, group[0].folder
                    assert source is not None
                    if not _select(client, source):
                        continue
                    new_uids = _move(client, [m.imap_uid for m in group if m.imap_uid is not None], target)
                    for m in group:
                        # without a new UID it counts as missing until the next sync finds it in the target
                        new_uid = new_uids.get(m.imap_uid or 0)
                        missing = None if new_uid else timezone.now()
                        Message.objects.for_tenant(tenant).filter(
                            pk=m.pk, imap_folder_id=source_id, imap_uid=m.imap_uid
                        ).update(imap_folder_id=target_id, imap_uid=new_uid, imap_missing_since=missing)
                    moved += len(group)
    return moved


# the Oaken folders a message of Gmail's All Mail shows in by its labels: a move between them is a label change
# (the inbox and the archive; Sent and Drafts are Gmail's to set)
_BY_LABEL = (FolderKind.INBOX, FolderKind.ARCHIVE, FolderKind.SENT, FolderKind.DRAFTS)


def _in_all_mail(m: Message) -> bool:
    """Whether the server has the message in Gmail's All Mail (a Gmail id, and its server folder the archive)."""
    return m.gmail_msgid is not None and m.imap_folder is not None and m.imap_folder.kind == FolderKind.ARCHIVE


def _push_inbox_labels(client: IMAPClient, by_inbox: dict[bool, list[Message]]) -> int:
    """Put the \\Inbox label on the messages of All Mail that Oaken shows in the inbox, and take it off those it
    shows in the archive (Sent and Drafts are left as they are); returns how many were changed."""
    some = next(iter(by_inbox.values()))[0]
    assert some.imap_folder is not None
    if not _select(client, some.imap_folder):
        return 0
    done = 0
    for inbox, group in by_inbox.items():
        uids = [m.imap_uid for m in group if m.imap_uid is not None and m.folder.kind in _INBOX_OR_ARCHIVE]
        if uids:
            (client.add_gmail_labels if inbox else client.remove_gmail_labels)(uids, ["\\Inbox"], silent=True)
            done += len(uids)
    return done


_INBOX_OR_ARCHIVE = (FolderKind.INBOX, FolderKind.ARCHIVE)


# ---------------------------------------------------------------- Gmail labels


def mirror_labels(
    *, tenant: Tenant, message_ids: Sequence[uuid.UUID | str], label_ids: Sequence[uuid.UUID | str]
) -> None:
    """After this transaction commits, put these labels on or take them off these messages on the server, as Oaken
    holds them then: only for messages of a Gmail server (a Gmail id), whose labels are the server's too."""
    ids = list(
        Message.objects.for_tenant(tenant)
        .filter(id__in=message_ids, account__kind=AccountKind.IMAP, gmail_msgid__isnull=False)
        .values_list("id", flat=True)
    )
    if not ids:
        return
    task = current_app.tasks[PUSH_LABELS_TASK]
    labels = [str(pk) for pk in label_ids]
    messages = [str(pk) for pk in ids]
    transaction.on_commit(partial(task.delay, tenant_id=str(tenant.pk), message_ids=messages, label_ids=labels))


def push_labels(*, tenant: Tenant, message_ids: Sequence[str], label_ids: Sequence[str]) -> int:
    """Make the server's X-GM-LABELS of these Gmail messages agree with Oaken for these labels: on where Oaken has
    the label on the message, off where it has not (a label deleted in Oaken meanwhile is left alone). Returns
    how many messages were stored to. A label put on this way counts as the server's from then on (a sync takes
    it off when the server does)."""
    done = 0
    for account_id in _accounts_of(tenant, message_ids):
        with mirror_lock(account_id) as held:
            if not held:
                raise MirrorBusyError(str(account_id))
            messages = [m for m in _on_server(tenant, account_id, message_ids) if m.gmail_msgid is not None]
            names = dict(
                Label.objects.for_tenant(tenant)
                .filter(account_id=account_id, id__in=label_ids)
                .values_list("pk", "name")
            )
            if not messages or not names:
                continue
            links = set(
                MessageLabel.objects.for_tenant(tenant)
                .filter(message_id__in=[m.pk for m in messages], label_id__in=list(names))
                .values_list("message_id", "label_id")
            )
            pushed: list[uuid.UUID] = []
            with imap_session(_account(tenant, account_id)) as client:
                for group in _by_folder(messages).values():
                    folder = group[0].imap_folder
                    assert folder is not None
                    if not _select(client, folder):
                        continue
                    pushed += [m.pk for m in group]
                    for label_id, name in names.items():
                        for on in (True, False):
                            uids = [m.imap_uid for m in group if ((m.pk, label_id) in links) is on and m.imap_uid]
                            if uids:
                                store = client.add_gmail_labels if on else client.remove_gmail_labels
                                store(uids, [name], silent=True)
                    done += len(group)
            MessageLabel.objects.for_tenant(tenant).filter(message_id__in=pushed, label_id__in=list(names)).update(
                from_server=True
            )
    return done
