"""IMAP sync: bring an IMAP account's folders, messages and \\Seen flags into the store, incrementally.

Per folder, the store keeps the server's UIDVALIDITY, the highest UID stored and the HIGHESTMODSEQ
seen (CONDSTORE). A sync fetches only UIDs above the highest stored, in batches; each batch is stored
in one transaction together with the new highest UID, so an interrupted sync resumes where the last
stored batch ended, and a message is stored at most once (the store drops a message whose Message-ID
and content it already holds). When UIDVALIDITY changes, the folder is listed again from the start:
messages already held get their new UID instead of a second copy. Flags of known messages come back
with CHANGEDSINCE where the server offers CONDSTORE, else all at once.

One account is synced by one worker at a time (a PostgreSQL session advisory lock, released even when
the worker dies, since its connection closes). A failing account backs off exponentially up to a cap,
and its last error is a fixed reason (apps.mail.imap.REASONS), never the server's text.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientError
from imapclient.response_parser import parse_fetch_response

from apps.mail import readstate
from apps.mail.imap import MailServerError, imap_session
from apps.mail.importing import MessageStore, parse_pool
from apps.mail.models import AccountKind, Folder, FolderKind, MailAccount, Message
from apps.mail.parsing import ParsedMessage
from apps.mail.sources import RawItem

log = logging.getLogger("oaken.mail.sync")

_SPECIAL_USE = {
    b"\\sent": FolderKind.SENT,
    b"\\drafts": FolderKind.DRAFTS,
    b"\\trash": FolderKind.TRASH,
    b"\\junk": FolderKind.SPAM,
    b"\\archive": FolderKind.ARCHIVE,
}
_UNSELECTABLE = {b"\\noselect", b"\\nonexistent"}
_SEEN = b"\\Seen"
_ID_MAX = 900


@dataclass(frozen=True, slots=True)
class ImapItem(RawItem):
    uid: int
    seen: bool


@dataclass
class SyncCounts:
    folders: int = 0
    stored: int = 0
    relocated: int = 0
    failed: int = 0
    flags_changed: int = 0


def folder_kind(name: str, flags: Sequence[bytes]) -> FolderKind:
    """The Folder kind of a server folder: INBOX, a special-use flag (RFC 6154), or custom."""
    if name.upper() == "INBOX":
        return FolderKind.INBOX
    for flag in flags:
        kind = _SPECIAL_USE.get(flag.lower())
        if kind is not None:
            return kind
    return FolderKind.CUSTOM


class _FolderStore(MessageStore):
    """Stores one folder's fetched messages; advances the folder's highest UID with each batch."""

    def __init__(self, account: MailAccount, folder: Folder, counts: SyncCounts) -> None:
        super().__init__(account)
        self.folder = folder
        self.counts = counts
        self.batch_last_uid = 0

    def _placement(self, item: RawItem) -> tuple[uuid.UUID, bool, uuid.UUID | None, int | None]:
        assert isinstance(item, ImapItem)
        return self.folder.pk, item.seen, self.folder.pk, item.uid

    def _after_batch(
        self,
        items: list[RawItem],
        fresh: list[tuple[RawItem, ParsedMessage]],
        duplicates: list[tuple[RawItem, ParsedMessage]],
        failures: list[tuple[RawItem, str]],
    ) -> None:
        self._relocate(duplicates)
        for item, reason in failures:
            log.warning("message %s of an IMAP account could not be stored: %s", item.position, reason)
        self.counts.stored += len(fresh)
        self.counts.failed += len(failures)
        self.folder.imap_last_uid = max(self.folder.imap_last_uid, self.batch_last_uid)
        Folder.objects.for_tenant(self.tenant).filter(pk=self.folder.pk).update(imap_last_uid=self.folder.imap_last_uid)

    def _relocate(self, duplicates: list[tuple[RawItem, ParsedMessage]]) -> None:
        """A message already held turned up at a new UID: record where it lives now, never a second copy.

        That is the same folder after a UIDVALIDITY change or a move mirrored from Oaken, or another
        folder when a move was made on the server by another client (the message follows it there).
        """
        if not duplicates:
            return
        hashes = list({p.content_hash for _, p in duplicates})
        held = {
            (message_id, content_hash): (pk, folder_id, imap_folder_id)
            for pk, message_id, content_hash, folder_id, imap_folder_id in Message.objects.for_tenant(self.tenant)
            .filter(account=self.account, content_hash__in=hashes)
            .values_list("pk", "message_id", "content_hash", "folder_id", "imap_folder_id")
        }
        read: dict[uuid.UUID, bool] = {}
        for item, p in duplicates:
            assert isinstance(item, ImapItem)
            key = (p.message_id.replace("\x00", "\ufffd")[:_ID_MAX], p.content_hash)
            if key not in held:
                continue
            pk, folder_id, imap_folder_id = held[key]
            update: dict[str, Any] = {"imap_folder": self.folder, "imap_uid": item.uid}
            if imap_folder_id != self.folder.pk and folder_id != self.folder.pk:
                update |= {"folder": self.folder, "trashed_from": None}
                if self.folder.kind == FolderKind.TRASH:
                    update["trashed_from"] = folder_id
            Message.objects.for_tenant(self.tenant).filter(pk=pk).update(**update)
            held[key] = (pk, self.folder.pk if "folder" in update else folder_id, self.folder.pk)
            read[pk] = item.seen
            self.counts.relocated += 1
        self.counts.flags_changed += len(readstate.record_server_read(tenant=self.tenant, seen=read))


def _sync_folder_list(account: MailAccount, client: IMAPClient) -> list[Folder]:
    """The account's selectable server folders as Folders, created when new (special-use mapped to kinds)."""
    existing = {f.name: f for f in Folder.objects.for_tenant(account.tenant).filter(account=account)}
    taken = {f.kind for f in existing.values() if f.kind != FolderKind.CUSTOM}
    folders = []
    for flags, _delimiter, name in client.list_folders():
        if any(flag.lower() in _UNSELECTABLE for flag in flags) or len(name) > 500:
            continue
        folder = existing.get(name)
        if folder is None:
            kind = folder_kind(name, flags)
            if kind != FolderKind.CUSTOM and kind in taken:
                kind = FolderKind.CUSTOM
            taken.add(kind)
            folder = Folder.objects.create(tenant=account.tenant, account=account, kind=kind, name=name)
        folders.append(folder)
    # INBOX first: new mail is what people wait for
    return sorted(folders, key=lambda f: f.kind != FolderKind.INBOX)


def _apply_server_flags(account: MailAccount, folder: Folder, data: dict[int, dict[bytes, Any]]) -> int:
    """Set Oaken's read state from the server's \\Seen for these UIDs of the folder; returns how many changed."""
    seen_by_uid = {uid: _SEEN in tuple(item.get(b"FLAGS", ())) for uid, item in data.items() if b"FLAGS" in item}
    changed = 0
    uids = list(seen_by_uid)
    for start in range(0, len(uids), 5000):
        chunk = uids[start : start + 5000]
        rows = (
            Message.objects.for_tenant(account.tenant)
            .filter(imap_folder=folder, imap_uid__in=chunk)
            .values_list("pk", "imap_uid", "read")
        )
        wanted = {pk: seen_by_uid[uid] for pk, uid, read in rows if read != seen_by_uid[uid]}
        if wanted:
            with transaction.atomic():
                changed += len(readstate.record_server_read(tenant=account.tenant, seen=wanted))
    return changed


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


def _fetch(client: IMAPClient, folder: Folder, uids: list[int]) -> list[RawItem]:
    data = client.fetch(uids, ["BODY.PEEK[]", "FLAGS"])
    items: list[RawItem] = []
    for uid in uids:  # a message expunged meanwhile is simply absent
        entry = data.get(uid)
        if entry is None or b"BODY[]" not in entry:
            continue
        items.append(
            ImapItem(
                position=f"{folder.pk}:{uid}", data=bytes(entry[b"BODY[]"]), uid=uid, seen=_SEEN in entry[b"FLAGS"]
            )
        )
    return items


def sync_folder(
    account: MailAccount,
    client: IMAPClient,
    folder: Folder,
    *,
    condstore: bool,
    counts: SyncCounts,
    start_parsing: Callable[[list[RawItem]], Callable[[], list[ParsedMessage | str]]],
) -> None:
    """Bring one folder up to date: UIDVALIDITY, flags of known messages, then new messages in batches."""
    info = client.select_folder(folder.name, readonly=True)
    uidvalidity = int(info[b"UIDVALIDITY"])
    highest_modseq = int(info.get(b"HIGHESTMODSEQ", 0)) if condstore else 0
    if folder.imap_uidvalidity != uidvalidity:
        with transaction.atomic():
            # The old UIDs mean nothing now: list the folder again; held messages get their new UIDs.
            Message.objects.for_tenant(account.tenant).filter(imap_folder=folder).update(imap_uid=None)
            folder.imap_uidvalidity, folder.imap_last_uid, folder.imap_highestmodseq = uidvalidity, 0, 0
            folder.save(update_fields=["imap_uidvalidity", "imap_last_uid", "imap_highestmodseq"])
    known_last, since = folder.imap_last_uid, folder.imap_highestmodseq
    # flags of held messages: those changed since the MODSEQ stored, else (no CONDSTORE, or no MODSEQ
    # stored yet, as after an interrupted first sync) all of them
    if known_last > 0 and (not condstore or not since or highest_modseq != since):
        modifiers = [f"CHANGEDSINCE {since}"] if condstore and since else None
        changed = _fetch_range(client, f"1:{known_last}", ["FLAGS"], modifiers)
        counts.flags_changed += _apply_server_flags(account, folder, changed)
    # "n:*" always matches the highest UID, even below n
    new = sorted(uid for uid in client.search(["UID", f"{known_last + 1}:*"]) if uid > known_last)
    held = set(
        Message.objects.for_tenant(account.tenant)
        .filter(imap_folder=folder, imap_uid__in=new)
        .values_list("imap_uid", flat=True)
    )
    wanted = [uid for uid in new if uid not in held]
    size = settings.OPERATIONS["SYNC_BATCH_SIZE"]
    store = _FolderStore(account, folder, counts)

    def store_batch(batch_uids: list[int], items: list[RawItem], parsed: Callable[[], list[ParsedMessage | str]]):
        store.batch_last_uid = batch_uids[-1]
        store.run_batch(items, parsed())

    previous: tuple[list[int], list[RawItem], Callable[[], list[ParsedMessage | str]]] | None = None
    for start in range(0, len(wanted), size):
        batch = wanted[start : start + size]
        items = _fetch(client, folder, batch)
        pending = (batch, items, start_parsing(items))
        if previous is not None:
            store_batch(*previous)
        previous = pending
    if previous is not None:
        store_batch(*previous)
    with transaction.atomic():
        folder.imap_last_uid = max([folder.imap_last_uid, *new])
        folder.imap_highestmodseq = highest_modseq
        folder.save(update_fields=["imap_last_uid", "imap_highestmodseq"])
    counts.folders += 1


def sync_account(account: MailAccount) -> SyncCounts:
    """One sync of every folder of an IMAP account; raises MailServerError (or IMAP/socket errors) on failure."""
    counts = SyncCounts()
    with imap_session(account) as client:
        condstore = client.has_capability("CONDSTORE")
        if condstore and client.has_capability("ENABLE"):
            client.enable("CONDSTORE")
        folders = _sync_folder_list(account, client)
        with parse_pool(settings.OPERATIONS["IMPORT_MAX_MESSAGE_BYTES"]) as start_parsing:
            for folder in folders:
                sync_folder(account, client, folder, condstore=condstore, counts=counts, start_parsing=start_parsing)
    return counts


@contextmanager
def account_lock(account_id: uuid.UUID) -> Iterator[bool]:
    """Whether this process holds the account's sync lock (held for the session, across transactions)."""
    key = f"imap-sync:{account_id}"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [key])
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [key])


def backoff_seconds(failures: int) -> int:
    bounds = settings.OPERATIONS
    return int(min(bounds["SYNC_BACKOFF_BASE_SECONDS"] * 2 ** max(failures - 1, 0), bounds["SYNC_BACKOFF_MAX_SECONDS"]))


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
    return list(MailAccount.objects.unscoped().filter(due, kind=AccountKind.IMAP).values_list("pk", flat=True))
