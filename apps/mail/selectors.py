"""Reads of the mail store, always within a tenant and within the caller's workspaces (SPEC §8: an agent's
granted ones that its person is given; a person's given ones, for a MEMBER limited to some).

Every access_<thing>_by_<key> function takes the caller's reach (tenant + workspace names or None) as a
keyword and raises the one domain error: an id of another tenant, or one that is malformed, is NOT_FOUND
exactly like an id that does not exist; an id in a workspace the caller was not granted is OUT_OF_SCOPE.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.db.models import Count, Q, QuerySet

from apps.core import words
from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.core.kinds import Role
from apps.mail.models import (
    Attachment,
    Folder,
    ImportFailure,
    ImportRun,
    Label,
    MailAccount,
    Message,
    MessageLabel,
    RawMessage,
    Thread,
)
from apps.workspaces.models import Tenant, Workspace

_Row = TypeVar("_Row", MailAccount, Message, Thread, Label)

NAME_AN_ACCOUNT = "this connection may only reach some workspaces: name an account_id in scope (see list_accounts)"


@dataclass(frozen=True)
class Reach:
    tenant: Tenant
    workspaces: tuple[str, ...] | None  # None: every workspace; empty: none
    # a read across every account is refused while some lie outside `workspaces` (agents, SPEC §8); when
    # False (persons), such a read is narrowed to the accounts in reach
    names_an_account: bool = True

    @classmethod
    def of(cls, caller: Caller) -> Reach:
        return cls(caller.tenant, caller.workspace_filter, caller.names_an_account)

    def accounts(self) -> QuerySet[MailAccount]:
        accounts = MailAccount.objects.for_tenant(self.tenant)
        if self.workspaces is not None:
            accounts = accounts.filter(workspace__name__in=self.workspaces)
        return accounts

    @property
    def restricted(self) -> bool:
        """Some of the tenant's accounts lie outside the granted workspaces."""
        if self.workspaces is None:
            return False
        every = MailAccount.objects.for_tenant(self.tenant)
        return every.exclude(workspace__name__in=self.workspaces).exists()

    def require_account(self, account_id: str | None) -> None:
        """A call across every account is refused when the reach is restricted (for those who must name one)."""
        if account_id is None and self.names_an_account and self.restricted:
            raise OakenError("OUT_OF_SCOPE", NAME_AN_ACCOUNT, field="account_id")


def in_reach(reach: Reach, workspace_name: str, field: str) -> None:
    if reach.workspaces is not None and workspace_name not in reach.workspaces:
        raise OakenError("OUT_OF_SCOPE", f"{field}: outside the workspaces this connection may reach", field=field)


def _account_workspace(row: Message | Thread | Label) -> str:
    return row.account.workspace.name


def _one(rows: QuerySet[_Row], value: str, *, reach: Reach, field: str, workspace: Callable[[_Row], str]) -> _Row:
    """One of the tenant's rows by id, in the caller's reach."""
    found = rows.filter(pk=parse_id(value, field)).first()
    if found is None:
        raise OakenError.not_found(field)
    in_reach(reach, workspace(found), field)
    return found


def _each(
    rows: QuerySet[_Row], values: Sequence[str], *, reach: Reach, field: str, workspace: Callable[[_Row], str]
) -> list[_Row]:
    """The tenant's rows by id, in the order asked, each in the caller's reach; duplicates collapse."""
    wanted = list(dict.fromkeys(parse_id(value, field) for value in values))
    found = {row.pk: row for row in rows.filter(pk__in=wanted)}
    if len(found) != len(wanted):
        raise OakenError.not_found(field)
    for row in found.values():
        in_reach(reach, workspace(row), field)
    return [found[pk] for pk in wanted]


def access_account_by_id(account_id: str, *, reach: Reach, field: str = "account_id") -> MailAccount:
    # its credentials stay deferred: decrypted only by what uses them (a sync, a delivery), not by every listing
    rows = MailAccount.objects.for_tenant(reach.tenant).select_related("workspace").defer("credentials")
    return _one(rows, account_id, reach=reach, field=field, workspace=lambda account: account.workspace.name)


def access_messages_by_ids(message_ids: Sequence[str], *, reach: Reach, field: str = "message_ids") -> list[Message]:
    rows = (
        Message.objects.for_tenant(reach.tenant)
        .select_related("account__workspace", "folder")
        .defer("text_body", "html_body")
    )
    return _each(rows, message_ids, reach=reach, field=field, workspace=_account_workspace)


def access_message_by_id(message_id: str, *, reach: Reach, field: str = "message_id") -> Message:
    rows = Message.objects.for_tenant(reach.tenant).select_related("account__workspace", "folder")
    return _one(rows, message_id, reach=reach, field=field, workspace=_account_workspace)


def access_thread_by_id(thread_id: str, *, reach: Reach, field: str = "thread_id") -> Thread:
    rows = Thread.objects.for_tenant(reach.tenant).select_related("account__workspace")
    return _one(rows, thread_id, reach=reach, field=field, workspace=_account_workspace)


def access_labels_by_ids(label_ids: Sequence[str], *, reach: Reach, field: str = "label_ids") -> list[Label]:
    rows = Label.objects.for_tenant(reach.tenant).select_related("account__workspace")
    return _each(rows, label_ids, reach=reach, field=field, workspace=_account_workspace)


def access_folder_by_name(folder: str, *, account: MailAccount, field: str = "folder") -> Folder:
    """A folder of the account by kind (inbox, archive, …) or by its name."""
    folders = Folder.objects.for_tenant(account.tenant).filter(account=account)
    found = folders.filter(kind=folder).exclude(kind="custom").first() or folders.filter(name=folder).first()
    if found is None:
        raise OakenError.not_found(field)
    return found


def folder_by_id(*, tenant: Tenant, folder_id: uuid.UUID) -> Folder:
    """A folder the store itself points at (a trashed message's former folder): always there."""
    return Folder.objects.for_tenant(tenant).get(pk=folder_id)


def labelled_pairs(*, tenant: Tenant, messages: Sequence[Message], labels: Sequence[Label]) -> set[tuple[Any, Any]]:
    """(message id, label id) of each of these labels already on each of these messages."""
    links = MessageLabel.objects.for_tenant(tenant)
    links = links.filter(message__in=[m.pk for m in messages], label__in=[label.pk for label in labels])
    return set(links.values_list("message_id", "label_id"))


def labelled_count(*, tenant: Tenant, label: Label) -> int:
    """How many messages carry the label."""
    return MessageLabel.objects.for_tenant(tenant).filter(label=label).count()


def account_name_taken(*, tenant: Tenant, workspace: Workspace, name: str, except_kind: str | None = None) -> bool:
    """The workspace already has a mail account of this name (one of `except_kind` aside)."""
    named = MailAccount.objects.for_tenant(tenant).filter(workspace=workspace, name=name)
    if except_kind is not None:
        named = named.exclude(kind=except_kind)
    return named.exists()


def message_count(*, tenant: Tenant, account: MailAccount) -> int:
    return Message.objects.for_tenant(tenant).filter(account=account).count()


def access_import_by_id(import_id: str, *, tenant: Tenant, field: str = "import_id") -> ImportRun:
    """One of the tenant's imports, with its account and the account's workspace."""
    rows = ImportRun.objects.for_tenant(tenant).select_related("account__workspace")
    found = rows.filter(pk=parse_id(import_id, field)).first()
    if found is None:
        raise OakenError.not_found(field)
    return found


def imports_page(*, tenant: Tenant, after: Q | None, limit: int) -> list[ImportRun]:
    """The tenant's imports newest first, after a position (a condition on started_at and id), with accounts."""
    rows = ImportRun.objects.for_tenant(tenant).filter(after or Q()).select_related("account")
    return list(rows.order_by("-started_at", "-pk")[:limit])


def import_failures(*, tenant: Tenant, run: ImportRun, limit: int) -> list[dict[str, Any]]:
    """An import's failures in the order they happened: where each message was and why (never its content)."""
    rows = ImportFailure.objects.for_tenant(tenant).filter(run=run).order_by("pk")
    return list(rows.values("position", "reason")[:limit])


@dataclass(frozen=True)
class StoredFile:
    """A file handed out whole: a message's attachment, or an outbound request's file."""

    id: uuid.UUID
    filename: str
    content_type: str
    content: bytes


def stored_file(rows: QuerySet[Any], pk: Any) -> StoredFile:
    """The name, type and bytes of one file among the tenant's rows of a file model (a message's attachments, an
    outbound request's files), read only once the caller's access to it was checked."""
    filename, content_type, content = rows.values_list("filename", "content_type", "content").get(pk=pk)
    return StoredFile(pk, filename, content_type, bytes(content))


def access_attachment_by_id(attachment_id: str, *, reach: Reach, field: str = "attachment_id") -> Attachment:
    """An attachment of a message in reach, its id, message and size only (the bytes are read when needed):
    another tenant's is NOT_FOUND, another workspace's OUT_OF_SCOPE, exactly as for the message itself."""
    rows = Attachment.objects.for_tenant(reach.tenant).filter(pk=parse_id(attachment_id, field))
    found = rows.only("id", "message_id", "size").first()
    if found is None:
        raise OakenError.not_found(field)
    access_message_by_id(str(found.message_id), reach=reach, field=field)
    return found


def attachment_file(*, tenant: Tenant, attachment: Attachment) -> StoredFile:
    return stored_file(Attachment.objects.for_tenant(tenant), attachment.pk)


def raw_message_bytes(*, tenant: Tenant, message: Message) -> bytes:
    """The message's bytes as received (none held: empty)."""
    rows = RawMessage.objects.for_tenant(tenant).filter(message=message)
    return bytes(rows.values_list("data", flat=True).first() or b"")


def labels_in_reach(*, reach: Reach, account: MailAccount | None) -> QuerySet[Label]:
    """Labels of the accounts in reach (of one account when named), by account and name."""
    labels = Label.objects.for_tenant(reach.tenant).filter(account__in=reach.accounts())
    if account is not None:
        labels = labels.filter(account=account)
    return labels.order_by("account_id", "name")


def accounts_listed(*, reach: Reach) -> list[tuple[Any, ...]]:
    """The accounts in reach by workspace and name: (id, name, kind, address, workspace, synced_at, sync_error,
    oauth_provider, oauth_state, sender_name)."""
    accounts = reach.accounts().order_by("workspace__name", "name")
    fields: tuple[str, ...] = ("id", "name", "kind", "email_address", "workspace__name", "synced_at", "sync_error")
    fields += ("oauth_provider", "oauth_state", "sender_name")
    return list(accounts.values_list(*fields))


def account_names(*, reach: Reach, account: MailAccount | None = None) -> list[tuple[Any, str]]:
    """(id, name) of the accounts in reach (only the one named, when one is), by name."""
    accounts = reach.accounts().order_by("name")
    if account is not None:
        accounts = accounts.filter(pk=account.pk)
    return list(accounts.values_list("id", "name"))


def mailboxes_in(*, tenant: Tenant, workspace_ids: Collection[uuid.UUID] | None) -> list[tuple[str, str]]:
    """(name, address) of the tenant's mailboxes in these workspaces (None: every one), by name."""
    accounts = MailAccount.objects.for_tenant(tenant)
    if workspace_ids is not None:
        accounts = accounts.filter(workspace_id__in=list(workspace_ids))
    return list(accounts.order_by("name", "id").values_list("name", "email_address"))


def reached_in_words(*, tenant: Tenant, who: str, role: str, workspace_ids: Collection[uuid.UUID] | None) -> str:
    """The mailboxes a person with this role and these workspaces (None: every one) reads and sends as, in a
    sentence for `who` ("You", "They"): an invitation's page and mail, a change of workspaces."""
    every = workspace_ids is None or Role(role).covers(Role.ADMIN)
    found = mailboxes_in(tenant=tenant, workspace_ids=None if every else workspace_ids)
    return words.mailboxes_reached(who, found, every=every)


def account_count(*, tenant: Tenant, workspace: Workspace) -> int:
    """How many mail accounts the workspace holds."""
    return MailAccount.objects.for_tenant(tenant).filter(workspace=workspace).count()


def account_counts_by_workspace(*, tenant: Tenant) -> dict[uuid.UUID, int]:
    """How many mail accounts each of the tenant's workspaces holds (those with none are left out)."""
    accounts = MailAccount.objects.for_tenant(tenant).values_list("workspace_id").annotate(n=Count("pk"))
    return dict(accounts.order_by())


def newest_messages_of(*, tenant: Tenant, found: Message | MailAccount, limit: int) -> QuerySet[Message]:
    """The message itself, or the account's messages, newest first, at most `limit`."""
    messages = Message.objects.for_tenant(tenant)
    messages = messages.filter(pk=found.pk) if isinstance(found, Message) else messages.filter(account=found)
    return messages.order_by("-date", "-id")[:limit]


def newest_attachments_of(
    *, tenant: Tenant, found: Message | MailAccount, content_types: Sequence[str], limit: int
) -> QuerySet[Attachment]:
    """The attachments of these types of the message, or of the account's messages, newest message first, each
    with its message, at most `limit`."""
    rows = Attachment.objects.for_tenant(tenant).filter(content_type__in=content_types).select_related("message")
    rows = rows.filter(message=found) if isinstance(found, Message) else rows.filter(message__account=found)
    return rows.order_by("-message__date", "-message_id", "id")[:limit]


def thread_messages(*, tenant: Tenant, thread: Thread, limit: int) -> list[Message]:
    """The thread's first messages, oldest first, at most `limit` (their id, content hash and date only)."""
    return list(
        Message.objects.for_tenant(tenant)
        .filter(thread=thread)
        .only("id", "content_hash", "date")
        .order_by("date", "id")[:limit]
    )


def names_by_ids(*, tenant: Tenant, ids: Collection[uuid.UUID]) -> dict[uuid.UUID, tuple[str, str | None]]:
    """What each of these ids is in the tenant's mail store: (kind, name). Only an account is named; a message,
    thread or label is not, as its subject or name is a stranger's text."""
    found: dict[uuid.UUID, tuple[str, str | None]] = {}
    for pk, name in MailAccount.objects.for_tenant(tenant).filter(pk__in=ids).values_list("pk", "name"):
        found[pk] = ("account", name)
    unnamed: tuple[tuple[str, Any], ...] = (("message", Message), ("thread", Thread), ("label", Label))
    for kind, model in unnamed:
        for pk in model.objects.for_tenant(tenant).filter(pk__in=ids).values_list("pk", flat=True):
            found[pk] = (kind, None)
    return found


def due_snoozes(now: datetime, limit: int) -> list[tuple[uuid.UUID, uuid.UUID, datetime]]:
    """System work (the snooze beat): (tenant id, message id, snoozed until) of snoozed messages whose time has
    come, in every tenant, the longest due first; read off the partial index of snoozed messages."""
    rows = Message.objects.unscoped().filter(snoozed_until__lte=now).order_by("snoozed_until", "pk")
    return list(rows.values_list("tenant_id", "pk", "snoozed_until")[:limit])


@dataclass(frozen=True)
class MessageState:
    """What the organizing operations change on a message, as their audit events record it."""

    folder: str
    trashed_from: str | None
    read: bool
    pinned: bool
    labels: frozenset[str]


def _folder_label(folder: Folder) -> str:
    return folder.kind if folder.kind != "custom" else folder.name


def message_states(*, tenant: Tenant, ids: Collection[uuid.UUID]) -> dict[str, MessageState]:
    """These messages' folders, read state, pins and labels, by id (the tenant's only; no text)."""
    if not ids:
        return {}
    rows = (
        Message.objects.for_tenant(tenant)
        .filter(pk__in=ids)
        .select_related("folder", "trashed_from")
        .only("id", "read", "pinned", "folder__kind", "folder__name", "trashed_from__kind", "trashed_from__name")
    )
    labels: dict[Any, set[str]] = {}
    for message_id, label_id in (
        MessageLabel.objects.for_tenant(tenant).filter(message_id__in=ids).values_list("message_id", "label_id")
    ):
        labels.setdefault(message_id, set()).add(str(label_id))
    return {
        str(m.pk): MessageState(
            folder=_folder_label(m.folder),
            trashed_from=_folder_label(m.trashed_from) if m.trashed_from is not None else None,
            read=m.read,
            pinned=m.pinned,
            labels=frozenset(labels.get(m.pk, ())),
        )
        for m in rows
    }


def label_names(*, tenant: Tenant, ids: Collection[uuid.UUID]) -> dict[str, str]:
    """The names of these labels of the tenant, by id (for a person's own confirmation dialog, as add_labels says)."""
    return {str(pk): name for pk, name in Label.objects.for_tenant(tenant).filter(pk__in=ids).values_list("pk", "name")}
