"""IMAP sync: bring an IMAP account's folders, messages and flags into the store, incrementally, and follow what
happens on the server.

Per folder, the store keeps the server's UIDVALIDITY, the highest UID stored, the HIGHESTMODSEQ seen (CONDSTORE)
and the server's count of UIDs up to the highest one. A sync fetches only UIDs above the highest stored, in
batches; each batch is stored in one transaction together with the new highest UID, so an interrupted sync
resumes where the last stored batch ended, and a message is stored at most once (the store drops a message
whose Message-ID and content it already holds). When UIDVALIDITY changes, the folder is listed again from the
start: messages already held get their new UID instead of a second copy. Flags (\\Seen is read, \\Flagged is
pinned) of known messages come back with CHANGEDSINCE where the server offers CONDSTORE, else all at once; a
flag changed in Oaken that waits to be pushed (apps.mail.mirror) keeps Oaken's value.

Oaken keeps one place on the server per message. A message no longer where Oaken saw it is marked missing;
after a complete pass over every folder it is looked for by Message-ID: found, Oaken follows it there (a move
by another client); not found for a grace period, it was deleted on the server and is removed here too
(apps.mail.missing does both).

On a server with Gmail's extensions (X-GM-EXT-1), labels are not folders: All Mail is synced as the store of
messages, with Trash and Spam beside it, each message once by its X-GM-MSGID, its Gmail labels as Oaken labels
and the folder it shows in by its labels (apps.mail.gmail).

One account is synced by one worker at a time (a PostgreSQL session advisory lock, released even when
the worker dies, since its connection closes). A failing account backs off exponentially up to a cap,
and its last error is a fixed reason (apps.mail.reasons.REASONS), never the server's text.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientAbortError, IMAPClientError
from imapclient.response_parser import parse_fetch_response

from apps.core.bounds import bounds
from apps.core.changes import Change
from apps.mail import gmail, readstate
from apps.mail.gmail import GmailFolders
from apps.mail.imap import MailServerError, imap_session
from apps.mail.imapfetch import fetch_messages, fetch_sizes, uid_set
from apps.mail.locks import session_lock
from apps.mail.mirror import FLAGGED, SEEN, mirror_lock, repush_stale_flags
from apps.mail.missing import forget_empty_gone_folders, record_sync_changes, relocation, settle_missing
from apps.mail.models import (
    FLAG_FLAGGED,
    FLAG_SEEN,
    AccountKind,
    Folder,
    FolderKind,
    MailAccount,
    Message,
    OAuthState,
)
from apps.mail.parsing.message import TOO_LARGE
from apps.mail.pipeline import long_lived_frozen, parse_batch, read_ahead
from apps.mail.rows import MessageRow
from apps.mail.sources import RawItem
from apps.mail.store import MessageStore
from apps.workspaces.models import Tenant

log = logging.getLogger("oaken.mail.sync")

_SPECIAL_USE = {
    b"\\sent": FolderKind.SENT,
    b"\\drafts": FolderKind.DRAFTS,
    b"\\trash": FolderKind.TRASH,
    b"\\junk": FolderKind.SPAM,
    b"\\archive": FolderKind.ARCHIVE,
}
_UNSELECTABLE = {b"\\noselect", b"\\nonexistent"}
_ID_MAX = 900


@dataclass(frozen=True, slots=True)
class ImapItem(RawItem):
    uid: int
    seen: bool
    flagged: bool = False
    # on a Gmail server: the message's id and labels (apps.mail.gmail)
    gmail: gmail.Meta | None = None


@dataclass
class SyncCounts:
    folders: int = 0
    stored: int = 0
    relocated: int = 0
    failed: int = 0
    flags_changed: int = 0
    labels_changed: int = 0
    missing: int = 0
    removed: int = 0


def folder_kind(name: str, flags: Sequence[bytes], *, with_gmail: bool = False) -> FolderKind:
    """The Folder kind of a server folder: INBOX, a special-use flag (RFC 6154), or custom. On a Gmail server,
    All Mail (\\All) is the archive: where a message with no Inbox, Sent or Draft label shows."""
    if name.upper() == "INBOX":
        return FolderKind.INBOX
    if with_gmail and any(flag.lower() == gmail.ALL for flag in flags):
        return FolderKind.ARCHIVE
    for flag in flags:
        kind = _SPECIAL_USE.get(flag.lower())
        if kind is not None:
            return kind
    return FolderKind.CUSTOM


def _take_server_flags(tenant: Tenant, wanted: Mapping[uuid.UUID, tuple[bool, bool]]) -> tuple[list[Change], int]:
    """Give these messages the server's (\\Seen, \\Flagged) as (read, pinned), inside the caller's transaction.

    A flag that changed in Oaken and is not on the server yet keeps Oaken's (newer) value; the other flag is
    taken. Returns the audit targets of what changed, and how many messages kept a flag back that way."""
    if not wanted:
        return [], 0
    # every row first, in one order (the gate's writers lock in the same order): no deadlock with mark_read
    rows = list(
        Message.objects.for_tenant(tenant)
        .filter(id__in=list(wanted))
        .select_for_update()
        .order_by("pk")
        .values_list("pk", "read", "pinned", "flags_pending")
    )
    seen_to: dict[uuid.UUID, bool] = {}
    pins: dict[bool, list[uuid.UUID]] = {True: [], False: []}
    held_back = 0
    for pk, read, pinned, pending in rows:
        seen, flagged = wanted[pk]
        kept = False
        if seen != read:
            kept |= bool(pending & FLAG_SEEN)
            if not pending & FLAG_SEEN:
                seen_to[pk] = seen
        if flagged != pinned:
            kept |= bool(pending & FLAG_FLAGGED)
            if not pending & FLAG_FLAGGED:
                pins[flagged].append(pk)
        held_back += kept
    read_changed = set(readstate.record_server_read(tenant=tenant, seen=seen_to))
    for value, ids in pins.items():
        if ids:
            Message.objects.for_tenant(tenant).filter(id__in=ids).update(pinned=value)
    pin_changed = set(pins[True]) | set(pins[False])
    targets = []
    for pk in sorted(read_changed | pin_changed):
        seen, flagged = wanted[pk]
        before, after = {}, {}
        if pk in read_changed:
            before["read"], after["read"] = not seen, seen
        if pk in pin_changed:
            before["pinned"], after["pinned"] = not flagged, flagged
        targets.append(Change(str(pk), before, after))
    return targets, held_back


class _FolderStore(MessageStore):
    """Stores one folder's fetched messages; advances the folder's highest UID with each batch."""

    def __init__(
        self, account: MailAccount, folder: Folder, counts: SyncCounts, gmail_folders: GmailFolders | None = None
    ) -> None:
        super().__init__(account)
        self.folder = folder
        self.counts = counts
        self.gmail_folders = gmail_folders
        self.batch_last_uid = 0
        # messages whose server flags were not all taken because Oaken's own change waits to be pushed
        self.flags_held_back = 0

    def _placement(self, item: RawItem) -> tuple[uuid.UUID, bool, uuid.UUID | None, int | None]:
        assert isinstance(item, ImapItem)
        shown = self.folder
        if self.gmail_folders is not None and item.gmail is not None and self.folder == self.gmail_folders.all_mail:
            shown = self.gmail_folders.folder_for(item.gmail.labels)
        return shown.pk, item.seen, self.folder.pk, item.uid

    def _after_batch(
        self,
        items: list[RawItem],
        fresh: list[tuple[RawItem, MessageRow]],
        duplicates: list[tuple[RawItem, MessageRow]],
        failures: list[tuple[RawItem, str]],
    ) -> None:
        flagged = [item.uid for item, _ in fresh if isinstance(item, ImapItem) and item.flagged]
        if flagged:  # pinned is \Flagged (new messages start unpinned in the shared store)
            Message.objects.for_tenant(self.tenant).filter(imap_folder=self.folder, imap_uid__in=flagged).update(
                pinned=True
            )
        if self.gmail_folders is not None:
            self._gmail_after_batch(fresh, duplicates)
        else:
            self._relocate(duplicates)
        for item, reason in failures:
            log.warning("message %s of an IMAP account could not be stored: %s", item.position, reason)
        self.counts.stored += len(fresh)
        self.counts.failed += len(failures)
        self.folder.imap_last_uid = max(self.folder.imap_last_uid, self.batch_last_uid)
        Folder.objects.for_tenant(self.tenant).filter(pk=self.folder.pk).update(imap_last_uid=self.folder.imap_last_uid)

    def _gmail_after_batch(
        self, fresh: list[tuple[RawItem, MessageRow]], duplicates: list[tuple[RawItem, MessageRow]]
    ) -> None:
        """New messages get their Gmail id and labels. A message held already (same Message-ID and content) that
        has no Gmail id yet (synced before Oaken knew the server for Gmail) takes this place and this id; one with
        another id is another Gmail message of the same bytes, which Oaken holds once."""
        assert self.gmail_folders is not None
        metas = {item.uid: item.gmail for item, _ in fresh if isinstance(item, ImapItem) and item.gmail is not None}
        if metas:
            rows = (
                Message.objects.for_tenant(self.tenant)
                .filter(imap_folder=self.folder, imap_uid__in=list(metas))
                .values_list("pk", "imap_uid")
            )
            by_pk = {pk: metas[uid] for pk, uid in rows}
            ids = set(gmail.held_msgids(self.account, (m.msgid for m in by_pk.values())))
            given: dict[uuid.UUID, int] = {}
            for pk, meta in by_pk.items():
                if meta.msgid not in ids:  # the same id twice: the server's mistake, the first one keeps it
                    ids.add(meta.msgid)
                    given[pk] = meta.msgid
            gmail.give_msgids(self.tenant, given)
            gmail.take_server_labels(self.account, {pk: meta.labels for pk, meta in by_pk.items()})
        if not duplicates:
            return
        hashes = list({p.content_hash for _, p in duplicates})
        held = {
            (message_id, content_hash): (pk, folder_id)
            for pk, message_id, content_hash, folder_id in Message.objects.for_tenant(self.tenant)
            .filter(account=self.account, content_hash__in=hashes, gmail_msgid__isnull=True)
            .values_list("pk", "message_id", "content_hash", "folder_id")
        }
        found: list[tuple[int, gmail.Meta, uuid.UUID, uuid.UUID]] = []
        for item, p in duplicates:
            assert isinstance(item, ImapItem)
            key = (p.message_id.replace("\x00", "\ufffd")[:_ID_MAX], p.content_hash)
            if key in held and item.gmail is not None:
                found.append((item.uid, item.gmail, *held.pop(key)))
        self.counts.relocated += _gmail_follow(self.account, self.folder, self.gmail_folders, found)

    def _relocate(self, duplicates: list[tuple[RawItem, MessageRow]]) -> None:
        """A message already held turned up at a new UID. Where Oaken had lost its place on the server (a
        UIDVALIDITY change, a move pushed without the new UID, a move by another client whose source folder
        was synced first), it lives here now: never a second copy. Where its place still holds, this is
        another copy on the server (Gmail's All Mail, a COPY by another client): Oaken keeps the one place."""
        if not duplicates:
            return
        hashes = list({p.content_hash for _, p in duplicates})
        held = {
            (message_id, content_hash): (pk, folder_id, imap_folder_id, missing)
            for pk, message_id, content_hash, folder_id, imap_folder_id, missing in Message.objects.for_tenant(
                self.tenant
            )
            .filter(account=self.account, content_hash__in=hashes)
            .select_for_update()
            .order_by("pk")
            .values_list("pk", "message_id", "content_hash", "folder_id", "imap_folder_id", "imap_missing_since")
        }
        flags: dict[uuid.UUID, tuple[bool, bool]] = {}
        targets: list[Change] = []
        for item, p in duplicates:
            assert isinstance(item, ImapItem)
            key = (p.message_id.replace("\x00", "\ufffd")[:_ID_MAX], p.content_hash)
            if key not in held or held[key][3] is None:
                continue
            pk, folder_id, imap_folder_id, _ = held[key]
            update = relocation(folder_id, imap_folder_id, self.folder) | {"imap_uid": item.uid}
            if "folder" in update:
                targets.append(Change(str(pk), {"folder_id": str(folder_id)}, {"folder_id": str(self.folder.pk)}))
            Message.objects.for_tenant(self.tenant).filter(pk=pk).update(**update)
            held[key] = (pk, self.folder.pk if "folder" in update else folder_id, self.folder.pk, None)
            flags[pk] = (item.seen, item.flagged)
            self.counts.relocated += 1
        flag_targets, held_back = _take_server_flags(self.tenant, flags)
        self.flags_held_back += held_back
        self.counts.flags_changed += len(flag_targets)
        record_sync_changes(self.tenant, targets + flag_targets)


def _gmail_follow(
    account: MailAccount,
    folder: Folder,
    folders: GmailFolders,
    found: Sequence[tuple[int, gmail.Meta, uuid.UUID, uuid.UUID]],
) -> int:
    """Messages held already are at these UIDs of `folder` now, with this Gmail id and these labels (uid, meta,
    message id, its Oaken folder id): their server place, their id, the folder they show in (by their labels in
    All Mail; Trash or Spam itself), their flags and their labels follow, inside the caller's transaction.
    Returns how many."""
    if not found:
        return 0
    tenant = account.tenant
    targets: list[Change] = []
    flags: dict[uuid.UUID, tuple[bool, bool]] = {}
    for uid, meta, pk, folder_id in found:
        shown = folders.folder_for(meta.labels) if folder == folders.all_mail else folder
        update: dict[str, Any] = {
            "imap_folder": folder,
            "imap_uid": uid,
            "imap_missing_since": None,
            "gmail_msgid": meta.msgid,
        }
        if shown.pk != folder_id:
            update |= {"folder": shown, "trashed_from": folder_id if shown.kind == FolderKind.TRASH else None}
            targets.append(Change(str(pk), {"folder_id": str(folder_id)}, {"folder_id": str(shown.pk)}))
        # another row holding this place (the server gave the UID again) lets go of it first
        Message.objects.for_tenant(tenant).filter(imap_folder=folder, imap_uid=uid).exclude(pk=pk).update(imap_uid=None)
        Message.objects.for_tenant(tenant).filter(pk=pk).update(**update)
        flags[pk] = (SEEN in meta.flags, FLAGGED in meta.flags)
    flag_targets, _ = _take_server_flags(tenant, flags)
    label_targets = gmail.take_server_labels(account, {pk: meta.labels for _, meta, pk, _ in found})
    record_sync_changes(tenant, targets + flag_targets + label_targets)
    return len(found)


def _gmail_new(
    account: MailAccount, client: IMAPClient, folder: Folder, folders: GmailFolders, uids: list[int]
) -> tuple[dict[int, gmail.Meta], int]:
    """The Gmail id, labels and flags of these new UIDs of the selected folder; those whose id Oaken holds already
    (a message back from Trash, or moved there) are followed here without fetching them again. Returns the others'
    metadata by UID, and how many were followed."""
    metas: dict[int, gmail.Meta] = {}
    for start in range(0, len(uids), 5000):
        metas.update(gmail.meta_of(_fetch_range(client, uid_set(uids[start : start + 5000]), gmail.META, None)))
    held = gmail.held_msgids(account, (m.msgid for m in metas.values()))
    known = [(uid, meta, *held[meta.msgid]) for uid, meta in metas.items() if meta.msgid in held]
    with transaction.atomic():
        followed = _gmail_follow(account, folder, folders, known)
    return {uid: meta for uid, meta in metas.items() if meta.msgid not in held}, followed


def _apply_server_labels(
    account: MailAccount, folder: Folder, folders: GmailFolders, data: dict[int, dict[bytes, Any]]
) -> int:
    """Take the server's labels for these UIDs of a Gmail folder: the user's labels, and in All Mail the folder a
    message shows in (unless Oaken shows it elsewhere, as in Trash while that move waits to be pushed); returns how
    many messages changed."""
    metas = {
        uid: tuple(gmail._text(label) for label in item[b"X-GM-LABELS"] if label is not None)
        for uid, item in data.items()
        if isinstance(item.get(b"X-GM-LABELS"), (tuple, list))
    }
    changed = 0
    uids = list(metas)
    placed = folders.placed_by_labels
    for start in range(0, len(uids), 5000):
        rows = list(
            Message.objects.for_tenant(account.tenant)
            .filter(imap_folder=folder, imap_uid__in=uids[start : start + 5000])
            .values_list("pk", "imap_uid", "folder_id")
        )
        with transaction.atomic():
            targets = gmail.take_server_labels(account, {pk: metas[uid] for pk, uid, _ in rows})
            if folder == folders.all_mail:
                for pk, uid, folder_id in rows:
                    shown = folders.folder_for(metas[uid])
                    if folder_id in placed and shown.pk != folder_id:
                        Message.objects.for_tenant(account.tenant).filter(pk=pk).update(folder=shown)
                        targets.append(Change(str(pk), {"folder_id": str(folder_id)}, {"folder_id": str(shown.pk)}))
            record_sync_changes(account.tenant, targets)
        changed += len({t.id for t in targets})
    return changed


def _sync_folder_list(account: MailAccount, client: IMAPClient, *, with_gmail: bool = False) -> list[Folder]:
    """The account's selectable server folders as Folders, created when new (special-use mapped to kinds).

    On a Gmail server, folders without a kind (the user's labels, Starred, Important) are labels, not folders:
    none is made for them; All Mail is the archive, and when a sync from before Oaken knew the server for Gmail
    made it a custom folder, it becomes the archive and is listed again from the start (the messages held are
    found in it and take their Gmail ids).

    Labels synced as folders then are folders no more: each goes once its messages have moved to where their
    labels place them.

    A folder Oaken synced before that the server no longer has (deleted or renamed there; asked with STATUS, as
    a LIST can leave a folder out) lets go of its messages: they count as missing until a sync finds them."""
    existing = {f.name: f for f in Folder.objects.for_tenant(account.tenant).filter(account=account)}
    taken = {f.kind for f in existing.values() if f.kind != FolderKind.CUSTOM}
    folders = []
    for flags, _delimiter, name in client.list_folders():
        if any(flag.lower() in _UNSELECTABLE for flag in flags) or len(name) > 500:
            continue
        folder = existing.get(name)
        kind = folder_kind(name, flags, with_gmail=with_gmail)
        if folder is None:
            if kind != FolderKind.CUSTOM and kind in taken:
                kind = FolderKind.CUSTOM
            if with_gmail and kind == FolderKind.CUSTOM:
                continue
            taken.add(kind)
            folder = Folder.objects.create(tenant=account.tenant, account=account, kind=kind, name=name)
        elif with_gmail and kind == FolderKind.ARCHIVE and folder.kind == FolderKind.CUSTOM and kind not in taken:
            taken.add(kind)
            folder.kind, folder.imap_uidvalidity = FolderKind.ARCHIVE, None
            folder.save(update_fields=["kind", "imap_uidvalidity"])
        elif with_gmail and folder.kind == FolderKind.CUSTOM:
            # a label synced as a folder before: no longer read; it goes once its messages were found in All Mail
            if folder.imap_uidvalidity is not None:
                folder.imap_uidvalidity = None
                folder.save(update_fields=["imap_uidvalidity"])
            continue
        folders.append(folder)
    listed = {f.pk for f in folders}
    for unlisted in existing.values():
        if unlisted.pk in listed or unlisted.imap_uidvalidity is None or _folder_exists(client, unlisted.name):
            continue
        with transaction.atomic():
            _mark_missing(Message.objects.for_tenant(account.tenant).filter(imap_folder=unlisted))
            unlisted.imap_uidvalidity, unlisted.imap_last_uid, unlisted.imap_highestmodseq = None, 0, 0
            unlisted.imap_uid_count = None
            unlisted.save(update_fields=["imap_uidvalidity", "imap_last_uid", "imap_highestmodseq", "imap_uid_count"])
    # INBOX first: new mail is what people wait for
    return sorted(folders, key=lambda f: f.kind != FolderKind.INBOX)


def _folder_exists(client: IMAPClient, name: str) -> bool:
    try:
        client.folder_status(name, [b"UIDVALIDITY"])
    except IMAPClientAbortError:
        raise
    except IMAPClientError:
        return False
    return True


def _mark_missing(rows: QuerySet[Message]) -> int:
    """These messages are not where the server had them: forget their UID and note since when (kept if set)."""
    return rows.filter(imap_uid__isnull=False).update(
        imap_uid=None, imap_missing_since=Coalesce("imap_missing_since", Value(timezone.now()))
    )


def _apply_server_flags(account: MailAccount, folder: Folder, data: dict[int, dict[bytes, Any]]) -> tuple[int, int]:
    """Take the server's \\Seen and \\Flagged for these UIDs of the folder; returns how many messages changed,
    and how many kept a flag back because Oaken's own change waits to be pushed."""
    by_uid = {
        uid: (SEEN in flags, FLAGGED in flags)
        for uid, item in data.items()
        if b"FLAGS" in item
        for flags in [tuple(item[b"FLAGS"])]
    }
    changed = held_back = 0
    uids = list(by_uid)
    for start in range(0, len(uids), 5000):
        chunk = uids[start : start + 5000]
        rows = (
            Message.objects.for_tenant(account.tenant)
            .filter(imap_folder=folder, imap_uid__in=chunk)
            .values_list("pk", "imap_uid", "read", "pinned")
        )
        wanted = {pk: by_uid[uid] for pk, uid, read, pinned in rows if (read, pinned) != by_uid[uid]}
        if wanted:
            with transaction.atomic():
                targets, kept = _take_server_flags(account.tenant, wanted)
                record_sync_changes(account.tenant, targets)
            changed += len(targets)
            held_back += kept
    return changed, held_back


def _fetch_range(
    client: IMAPClient, uid_range: str, data: list[str], modifiers: list[str] | None
) -> dict[int, dict[bytes, Any]]:
    """UID FETCH over a range (IMAPClient.fetch takes lists of UIDs only, which for every held message of a
    large folder would make a command line of tens of kilobytes)."""
    args = ["UID", "FETCH", uid_range, f"({' '.join(data)})"]
    if modifiers:
        args.append(f"({' '.join(modifiers)})")
    imap = client._imap
    tag = imap._command(*args)
    typ, lines = imap._command_complete("FETCH", tag)
    if typ != "OK":
        raise IMAPClientError("fetch failed")
    typ, lines = imap._untagged_response(typ, lines, "FETCH")
    return dict(parse_fetch_response(lines, client.normalise_times, True))


_ESEARCH_COUNT = re.compile(rb"\bCOUNT\s+(\d+)", re.IGNORECASE)


def _count_uids(client: IMAPClient, high: int) -> int:
    """How many messages of the selected folder have a UID from 1 to `high` (ESEARCH COUNT where offered, so
    the UIDs themselves do not cross the network)."""
    if not client.has_capability("ESEARCH"):
        return len(client.search(["UID", f"1:{high}"]))
    imap = client._imap
    tag = imap._command("UID", "SEARCH", "RETURN", "(COUNT)", "UID", f"1:{high}")
    typ, _ = imap._command_complete("SEARCH", tag)
    if typ != "OK":
        raise IMAPClientError("search failed")
    for line in imap.untagged_responses.pop("ESEARCH", []):
        found = _ESEARCH_COUNT.search(line if isinstance(line, bytes) else str(line).encode())
        if found:
            return int(found[1])
    return 0


def _fetched_batches(
    client: IMAPClient,
    folder: Folder,
    batches: list[list[int]],
    too_large: set[int],
    metas: Mapping[int, gmail.Meta] | None = None,
) -> Iterator[tuple[list[int], list[RawItem], list[MessageRow | str]]]:
    """Each batch of UIDs with its messages fetched (one expunged meanwhile is simply absent) and parsed.
    A message over the size bound is never fetched (nor held, should the server have understated its size):
    it is there with the reason it cannot be stored."""
    max_bytes = bounds.IMPORT_MAX_MESSAGE_BYTES
    for uids in batches:
        fetched = fetch_messages(client, [uid for uid in uids if uid not in too_large], max_bytes)
        refused = [uid for uid in uids if uid in too_large or (uid in fetched and fetched[uid].too_large)]
        items: list[RawItem] = [
            ImapItem(
                position=f"{folder.pk}:{uid}",
                data=message.data,
                uid=uid,
                seen=SEEN in message.flags,
                flagged=FLAGGED in message.flags,
                gmail=metas.get(uid) if metas else None,
            )
            for uid in uids
            if (message := fetched.get(uid)) is not None and not message.too_large
        ]
        failed: list[RawItem] = [
            ImapItem(position=f"{folder.pk}:{uid}", data=b"", uid=uid, seen=False, flagged=False) for uid in refused
        ]
        outcomes: list[MessageRow | str] = [*parse_batch(items), *([TOO_LARGE] * len(failed))]
        yield uids, [*items, *failed], outcomes


def _batched(uids: list[int], sizes: Mapping[int, int], too_large: set[int]) -> list[list[int]]:
    """The UIDs in batches of at most SYNC_BATCH_SIZE messages and, but for a single message, at most
    SYNC_BATCH_MAX_BYTES (sizes as the server gave them; one it did not give counts as one over the bound)."""
    count, max_bytes = bounds.SYNC_BATCH_SIZE, bounds.SYNC_BATCH_MAX_BYTES
    batches: list[list[int]] = []
    batch: list[int] = []
    held = 0
    for uid in uids:
        size = 0 if uid in too_large else sizes.get(uid, max_bytes)
        if batch and (len(batch) == count or held + size > max_bytes):
            batches.append(batch)
            batch, held = [], 0
        batch.append(uid)
        held += size
    if batch:
        batches.append(batch)
    return batches


def sync_folder(
    account: MailAccount,
    client: IMAPClient,
    folder: Folder,
    *,
    condstore: bool,
    counts: SyncCounts,
    gmail_folders: GmailFolders | None = None,
) -> None:
    """Bring one folder up to date: UIDVALIDITY, flags of known messages, expunges, then new messages in batches.
    On a Gmail server (`gmail_folders`), the labels of known messages come with their flags, and new messages with
    their Gmail ids and labels."""
    info = client.select_folder(folder.name, readonly=True)
    uidvalidity = int(info[b"UIDVALIDITY"])
    highest_modseq = int(info.get(b"HIGHESTMODSEQ", 0)) if condstore else 0
    if folder.imap_uidvalidity != uidvalidity:
        with transaction.atomic():
            # The old UIDs mean nothing now: list the folder again; held messages get their new UIDs (those
            # not listed again stay missing from the server).
            _mark_missing(Message.objects.for_tenant(account.tenant).filter(imap_folder=folder))
            folder.imap_uidvalidity, folder.imap_last_uid, folder.imap_highestmodseq = uidvalidity, 0, 0
            folder.imap_uid_count = None
            folder.save(update_fields=["imap_uidvalidity", "imap_last_uid", "imap_highestmodseq", "imap_uid_count"])
    known_last, since = folder.imap_last_uid, folder.imap_highestmodseq
    # flags of held messages: those changed since the MODSEQ stored, else (no CONDSTORE, or no MODSEQ
    # stored yet, as after an interrupted first sync) all of them; taken in turn with pushes of Oaken's
    # changes, so a push cannot land between reading the server's flags and applying them
    if known_last > 0 and (not condstore or not since or highest_modseq != since):
        modifiers = [f"CHANGEDSINCE {since}"] if condstore and since else None
        wanted_data = ["FLAGS", "X-GM-LABELS"] if gmail_folders is not None else ["FLAGS"]
        with mirror_lock(account.pk) as locked:
            changed, held_back = 0, 1
            if locked:
                data = _fetch_range(client, f"1:{known_last}", wanted_data, modifiers)
                changed, held_back = _apply_server_flags(account, folder, data)
                if gmail_folders is not None:
                    counts.labels_changed += _apply_server_labels(account, folder, gmail_folders, data)
        counts.flags_changed += changed
        if held_back:
            highest_modseq = since  # ask for those messages' flags again next time, once Oaken's change is there
    # "n:*" always matches the highest UID, even below n
    new = sorted(uid for uid in client.search(["UID", f"{known_last + 1}:*"]) if uid > known_last)
    present = folder.imap_uid_count
    if known_last > 0:
        present = _count_uids(client, known_last)
        if folder.imap_uid_count is None or present < folder.imap_uid_count:
            counts.missing += _find_missing(account, client, folder, known_last)
    # (every UID above known_last is in `new`: this spares a query naming each of them)
    held = set(
        Message.objects.for_tenant(account.tenant)
        .filter(imap_folder=folder, imap_uid__gt=known_last)
        .values_list("imap_uid", flat=True)
    )
    wanted = [uid for uid in new if uid not in held]
    metas: dict[int, gmail.Meta] = {}
    if gmail_folders is not None:
        metas, followed = _gmail_new(account, client, folder, gmail_folders, wanted)
        counts.relocated += followed
        wanted = [uid for uid in wanted if uid in metas]
    # batches bounded in bytes too, so that the memory a sync holds does not grow with the mail's size
    sizes = fetch_sizes(client, wanted)
    too_large = {uid for uid, octets in sizes.items() if octets > bounds.IMPORT_MAX_MESSAGE_BYTES}
    store = _FolderStore(account, folder, counts, gmail_folders)
    # the next batch is fetched and parsed in a thread while this one is stored
    batches = _batched(wanted, sizes, too_large)
    with read_ahead(_fetched_batches(client, folder, batches, too_large, metas)) as fetched:
        for batch_uids, items, outcomes in fetched:
            store.batch_last_uid = batch_uids[-1]
            store.run_batch(items, outcomes)
    if store.flags_held_back:
        highest_modseq = since
    with transaction.atomic():
        folder.imap_last_uid = max([folder.imap_last_uid, *new])
        folder.imap_highestmodseq = highest_modseq
        # counted before the new ones were fetched: one expunged meanwhile shows up as missing next time
        folder.imap_uid_count = (present or 0) + len(new)
        folder.save(update_fields=["imap_last_uid", "imap_highestmodseq", "imap_uid_count"])
    counts.folders += 1


def _find_missing(account: MailAccount, client: IMAPClient, folder: Folder, known_last: int) -> int:
    """Mark the folder's held messages that the server has expunged as missing; returns how many."""
    held = Message.objects.for_tenant(account.tenant).filter(imap_folder=folder, imap_uid__lte=known_last)
    present = set(client.search(["UID", f"1:{known_last}"]))
    gone = [uid for uid in held.values_list("imap_uid", flat=True) if uid not in present]
    marked = 0
    for start in range(0, len(gone), 5000):
        with transaction.atomic():
            marked += _mark_missing(held.filter(imap_uid__in=gone[start : start + 5000]))
    return marked


def sync_account(account: MailAccount) -> SyncCounts:
    """One sync of every folder of an IMAP account; raises MailServerError (or IMAP/socket errors) on failure.

    Only once every folder was synced are missing messages looked for and, past the grace period, removed."""
    counts = SyncCounts()
    started = timezone.now()
    with imap_session(account) as client:
        condstore = client.has_capability("CONDSTORE")
        if condstore and client.has_capability("ENABLE"):
            client.enable("CONDSTORE")
        with_gmail = client.has_capability(gmail.CAPABILITY)
        folders = _sync_folder_list(account, client, with_gmail=with_gmail)
        # on a Gmail server without All Mail (hidden from IMAP in its settings), folders are synced as anywhere
        gmail_folders = GmailFolders.of(folders) if with_gmail else None
        synced = gmail_folders.synced if gmail_folders is not None else folders
        with long_lived_frozen():
            for folder in synced:
                sync_folder(account, client, folder, condstore=condstore, counts=counts, gmail_folders=gmail_folders)
        relocated, removed = settle_missing(account, client, synced, started)
        counts.relocated += relocated
        counts.removed += removed
    forget_empty_gone_folders(account, folders)
    repush_stale_flags(account=account, older_than=started - timedelta(seconds=bounds.SYNC_FLAGS_REPUSH_SECONDS))
    return counts


def account_lock(account_id: uuid.UUID) -> AbstractContextManager[bool]:
    """Whether this process holds the account's sync lock (held for the session, across transactions)."""
    return session_lock(f"imap-sync:{account_id}")


def backoff_seconds(failures: int) -> int:
    return int(min(bounds.SYNC_BACKOFF_BASE_SECONDS * 2 ** max(failures - 1, 0), bounds.SYNC_BACKOFF_MAX_SECONDS))


def _record_failure(account: MailAccount, reason: str) -> None:
    failures = account.sync_failures + 1
    account.sync_failures, account.sync_error = failures, reason
    account.sync_next_at = timezone.now() + timedelta(seconds=backoff_seconds(failures))
    account.save(update_fields=["sync_failures", "sync_error", "sync_next_at"])


def _record_success(account: MailAccount) -> None:
    account.sync_failures, account.sync_error, account.sync_next_at = 0, "", None
    account.synced_at = timezone.now()
    account.save(update_fields=["sync_failures", "sync_error", "sync_next_at", "synced_at"])


@dataclass
class SyncOutcome:
    state: str  # "synced" | "failed" | "busy" | "waiting" | "gone"
    counts: SyncCounts = field(default_factory=SyncCounts)
    reason: str = ""


def run_sync(account_id: uuid.UUID | str, *, force: bool = False) -> SyncOutcome:
    """Sync one account unless another worker is at it or it is backing off (`force`: sync anyway)."""
    account = (
        MailAccount.objects.unscoped().filter(pk=account_id, kind=AccountKind.IMAP).select_related("tenant").first()
    )
    if account is None:
        return SyncOutcome("gone")
    with account_lock(account.pk) as held:
        if not held:
            return SyncOutcome("busy")
        account.refresh_from_db()
        if not force and account.sync_next_at is not None and account.sync_next_at > timezone.now():
            return SyncOutcome("waiting")
        try:
            counts = sync_account(account)
        except MailServerError as exc:
            _record_failure(account, exc.reason)
            return SyncOutcome("failed", reason=exc.reason)
        except (OSError, IMAPClientError):
            # the connection broke or the server said no mid-sync: what was stored stays stored
            _record_failure(account, "connection_failed")
            return SyncOutcome("failed", reason="connection_failed")
        except Exception:
            _record_failure(account, "sync_failed")
            raise
        _record_success(account)
        return SyncOutcome("synced", counts)


def due_accounts() -> list[uuid.UUID]:
    """IMAP accounts of every tenant whose next sync is due (system work for the beat task)."""
    due = Q(sync_next_at__isnull=True) | Q(sync_next_at__lte=timezone.now())
    # a mailbox whose provider withdrew Oaken's access is not tried again until a person reconnects it
    due_imap = MailAccount.objects.unscoped().filter(due, kind=AccountKind.IMAP)
    return list(due_imap.exclude(oauth_state=OAuthState.NEEDS_RECONNECT).values_list("pk", flat=True))
