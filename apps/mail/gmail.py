"""Gmail's labels are not folders: what IMAP sync (apps.mail.sync) does differently on a server that offers Gmail's
extensions (the `X-GM-EXT-1` capability).

Gmail shows one message in as many IMAP folders as it has labels (INBOX, each user label, Sent Mail, Starred...),
and every message but those in Trash and Spam in `[Gmail]/All Mail` (the folder with the \\All special-use flag).
Synced as folders, each message would be fetched once per label and its labels lost. On such a server Oaken syncs
All Mail as the store of messages, and Trash and Spam beside it, and nothing else; with each message it fetches
`X-GM-MSGID` (Gmail's id of the message, the same in every folder: stored as Message.gmail_msgid, one row per id
and account) and `X-GM-LABELS`:

- the user's labels become the account's Oaken labels (MessageLabel.from_server: a sync takes off what the server
  took off, and leaves labels put on in Oaken alone);
- \\Inbox, \\Draft and \\Sent say which Oaken folder the message shows in (INBOX, Drafts, Sent, in that order);
  a message with none of them is archived: it shows in All Mail (its Folder kind is ARCHIVE);
- \\Starred is the \\Flagged flag (pinned), which comes with the flags; \\Important has no Oaken notion: skipped.

A message whose id Oaken holds already (it came back from Trash, or was in Trash when Trash was synced first) is
followed to its new place without fetching it again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from imapclient.imap_utf7 import decode as utf7_decode

from apps.core.changes import Change
from apps.mail.models import Folder, FolderKind, Label, MailAccount, Message, MessageLabel
from apps.workspaces.models import Tenant

CAPABILITY = "X-GM-EXT-1"
ALL = b"\\all"
INBOX, SENT, DRAFT = "\\Inbox", "\\Sent", "\\Draft"
META = ["UID", "FLAGS", "X-GM-MSGID", "X-GM-LABELS"]
_LABEL_MAX = 200


@dataclass(frozen=True, slots=True)
class Meta:
    """What Gmail says of one message: its id (signed 64-bit), its labels, its flags."""

    msgid: int
    labels: tuple[str, ...]
    flags: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class GmailFolders:
    """The Oaken folders of a Gmail account: All Mail (the store), and where labels place messages."""

    all_mail: Folder
    inbox: Folder | None
    sent: Folder | None
    drafts: Folder | None
    trash: Folder | None
    spam: Folder | None

    @classmethod
    def of(cls, folders: Sequence[Folder]) -> GmailFolders | None:
        """From the account's listed folders (All Mail has kind ARCHIVE on such a server); None without one."""
        kinds = {f.kind: f for f in folders if f.kind != FolderKind.CUSTOM}
        all_mail = kinds.get(FolderKind.ARCHIVE)
        if all_mail is None:
            return None
        return cls(
            all_mail,
            kinds.get(FolderKind.INBOX),
            kinds.get(FolderKind.SENT),
            kinds.get(FolderKind.DRAFTS),
            kinds.get(FolderKind.TRASH),
            kinds.get(FolderKind.SPAM),
        )

    @property
    def synced(self) -> list[Folder]:
        """The folders a sync reads, All Mail first."""
        return [f for f in (self.all_mail, self.trash, self.spam) if f is not None]

    @property
    def placed_by_labels(self) -> set[uuid.UUID]:
        """The folders a message of All Mail shows in, by its labels."""
        return {f.pk for f in (self.all_mail, self.inbox, self.sent, self.drafts) if f is not None}

    def folder_for(self, labels: Iterable[str]) -> Folder:
        """Where a message of All Mail with these labels shows in Oaken."""
        held = {label.lower() for label in labels}
        for name, folder in ((INBOX, self.inbox), (DRAFT, self.drafts), (SENT, self.sent)):
            if folder is not None and name.lower() in held:
                return folder
        return self.all_mail


def signed64(value: int) -> int:
    """X-GM-MSGID is an unsigned 64-bit number; PostgreSQL's bigint is signed: the upper half wraps around."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return utf7_decode(value)
    return str(value)


def meta_of(data: Mapping[int, Mapping[bytes, Any]]) -> dict[int, Meta]:
    """The Gmail id, labels and flags of each UID of a FETCH response (those without an id are left out)."""
    found: dict[int, Meta] = {}
    for uid, item in data.items():
        msgid = item.get(b"X-GM-MSGID")
        if isinstance(msgid, bytes):
            msgid = msgid.decode("ascii", "replace")
        if not isinstance(msgid, (int, str)) or not str(msgid).isdigit():
            continue
        number = int(msgid)
        labels = item.get(b"X-GM-LABELS") or ()
        if not isinstance(labels, (tuple, list)):
            labels = (labels,)
        flags = tuple(f for f in item.get(b"FLAGS", ()) if isinstance(f, bytes))
        found[uid] = Meta(signed64(number), tuple(_text(label) for label in labels if label is not None), flags)
    return found


def user_labels(labels: Iterable[str]) -> set[str]:
    """The user's own labels (Gmail's system labels start with a backslash)."""
    return {label for label in labels if label and not label.startswith("\\") and len(label) <= _LABEL_MAX}


def take_server_labels(account: MailAccount, wanted: Mapping[uuid.UUID, Iterable[str]]) -> list[Change]:
    """Give these messages the server's user labels, inside the caller's transaction: labels the server has that
    the message lacks are put on (creating the account's Label where new), labels that came from the server and it
    no longer has are taken off; labels put on in Oaken stay. Returns the changes, by label id, of messages whose
    labels changed."""
    if not wanted:
        return []
    tenant = account.tenant
    names = {pk: user_labels(labels) for pk, labels in wanted.items()}
    every = set().union(*names.values())
    labels = dict(Label.objects.for_tenant(tenant).filter(account=account, name__in=every).values_list("name", "pk"))
    missing = sorted(every - set(labels))
    if missing:
        Label.objects.bulk_create(
            [Label(tenant=tenant, account=account, name=name) for name in missing], ignore_conflicts=True
        )
        labels = dict(
            Label.objects.for_tenant(tenant).filter(account=account, name__in=every).values_list("name", "pk")
        )
    links = MessageLabel.objects.for_tenant(tenant).filter(message_id__in=list(wanted))
    before: dict[uuid.UUID, set[uuid.UUID]] = {pk: set() for pk in wanted}
    from_server: dict[uuid.UUID, set[uuid.UUID]] = {pk: set() for pk in wanted}
    for message_id, label_id, server in links.values_list("message_id", "label_id", "from_server"):
        before[message_id].add(label_id)
        if server:
            from_server[message_id].add(label_id)
    added: list[MessageLabel] = []
    changes: list[Change] = []
    for pk, wanted_names in names.items():
        want = {labels[name] for name in wanted_names if name in labels}
        gone = from_server[pk] - want
        new = want - before[pk]
        if gone:
            links.filter(message_id=pk, label_id__in=list(gone)).delete()
        added += [MessageLabel(tenant=tenant, message_id=pk, label_id=label, from_server=True) for label in new]
        if gone or new:
            after = (before[pk] - gone) | new
            changes.append(
                Change(
                    str(pk),
                    {"label_ids": sorted(str(i) for i in before[pk])},
                    {"label_ids": sorted(str(i) for i in after)},
                )
            )
    MessageLabel.objects.bulk_create(added, ignore_conflicts=True)
    return changes


def held_msgids(account: MailAccount, msgids: Iterable[int]) -> dict[int, tuple[uuid.UUID, uuid.UUID]]:
    """{msgid: (message id, Oaken folder id)} of the messages of the account that have these Gmail ids."""
    ids = list(set(msgids))
    held: dict[int, tuple[uuid.UUID, uuid.UUID]] = {}
    for start in range(0, len(ids), 5000):
        rows = (
            Message.objects.for_tenant(account.tenant)
            .filter(account=account, gmail_msgid__in=ids[start : start + 5000])
            .values_list("gmail_msgid", "pk", "folder_id")
        )
        held.update({msgid: (pk, folder_id) for msgid, pk, folder_id in rows})
    return held


def give_msgids(tenant: Tenant, msgids: Mapping[uuid.UUID, int]) -> None:
    """Store the Gmail ids of new messages (a batch's, in one statement)."""
    if not msgids:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE mail_message AS m SET gmail_msgid = v.msgid
              FROM unnest(%s::uuid[], %s::bigint[]) AS v(id, msgid)
             WHERE m.id = v.id AND m.tenant_id = %s
            """,
            [list(msgids), list(msgids.values()), tenant.pk],
        )
