"""The mail domain's changes that operations ask for: labels, pins, moves to and from the trash, and connected
mailboxes (SPEC §2, §6, §9). Read state has its own service (apps.mail.readstate); imports and sync theirs.

Each takes the call (`act`: the tenant, the clock, the changes recorded for its audit event) and keyword-only
arguments, runs inside the caller's transaction, and records what it changed. Where an operation previewed the
change, the previewed changes are passed in and recorded as they were shown; a change to a connected mailbox's
messages is mirrored to its server once the transaction commits (apps.mail.mirror).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from celery import current_app
from django.db import IntegrityError, transaction
from django.db.models import Q

from apps.core.acts import Act
from apps.core.changes import Change
from apps.core.encryption import CredentialsUnreadableError
from apps.core.errors import OakenError
from apps.core.kinds import CredentialKind
from apps.mail.mirror import mirror_flags, mirror_labels, mirror_moves, resume_pushes
from apps.mail.models import (
    FLAG_FLAGGED,
    AccountKind,
    Attachment,
    Folder,
    FolderKind,
    Label,
    LabelRefusal,
    MailAccount,
    Message,
    MessageLabel,
    OAuthState,
    RawMessage,
    Thread,
)
from apps.mail.oauth import client as oauth_client
from apps.mail.oauth import providers as oauth_providers
from apps.workspaces.models import Workspace

log = logging.getLogger("oaken.mail")

# the task that syncs one account (apps.mail.tasks), found by name: no service imports the task module
SYNC_ACCOUNT_TASK = "mail.sync_account"

_LABEL_TAKEN = "name: this account already has a label with this name"


def _record(act: Act, changes: Sequence[Change]) -> None:
    for change in changes:
        act.touch(change.id, change.before, change.after)


# ---------------------------------------------------------------- pins


def set_pinned(*, act: Act, changes: Sequence[Change], pinned: bool) -> list[str]:
    """Pin or unpin the messages the previewed changes name (on a connected mailbox, the server's \\Flagged)."""
    ids = [change.id for change in changes]
    rows = Message.objects.for_tenant(act.tenant)
    locked = rows.filter(pk__in=ids).select_for_update().order_by("pk")
    rows.filter(pk__in=list(locked.values_list("pk", flat=True))).update(pinned=pinned)
    mirror_flags(tenant=act.tenant, message_ids=ids, flags=FLAG_FLAGGED)
    _record(act, changes)
    return ids


# ---------------------------------------------------------------- labels on messages


def add_labels(*, act: Act, changes: Sequence[Change]) -> int:
    """Put labels on messages; each change names a message (its id) and a label (after["label_id"]). On a Gmail
    server the label goes on there too, once the transaction commits."""
    by_description = _by_description(act)
    MessageLabel.objects.bulk_create(
        [
            MessageLabel(
                tenant=act.tenant, message_id=c.id, label_id=c.after["label_id"], by_description=by_description
            )
            for c in changes
        ],
        ignore_conflicts=True,
    )
    if not by_description:  # put back by hand: the person's refusal of it is taken back
        LabelRefusal.objects.for_tenant(act.tenant).filter(_pairs(changes)).delete()
    _record(act, changes)
    _mirror_labels(act, changes)
    return len(changes)


def _mirror_labels(act: Act, changes: Sequence[Change]) -> None:
    if changes:
        labels = sorted({str(c.after["label_id"]) for c in changes})
        mirror_labels(tenant=act.tenant, message_ids=sorted({c.id for c in changes}), label_ids=labels)


def remove_labels(*, act: Act, changes: Sequence[Change]) -> int:
    """Take labels off messages; each change names a message (its id) and a label (after["label_id"]). A person
    taking off a label its description put on refuses it: a negative example for that AI label."""
    links = MessageLabel.objects.for_tenant(act.tenant).filter(_pairs(changes))
    if not _by_description(act):
        refused = links.filter(by_description=True).values_list("message_id", "label_id")
        LabelRefusal.objects.bulk_create(
            [LabelRefusal(tenant=act.tenant, message_id=m, label_id=lb, at=act.now) for m, lb in refused],
            ignore_conflicts=True,
        )
    links.delete()
    _record(act, changes)
    _mirror_labels(act, changes)
    return len(changes)


def _pairs(changes: Sequence[Change]) -> Q:
    """The (message, label) pairs the changes name, as one condition (a statement for a batch, not one a message)."""
    by_label: dict[Any, list[Any]] = {}
    for c in changes:
        by_label.setdefault(c.after["label_id"], []).append(c.id)
    found = Q(pk__in=[])
    for label_id, message_ids in by_label.items():
        found |= Q(label_id=label_id, message_id__in=message_ids)
    return found


def _by_description(act: Act) -> bool:
    """Whether an AI label acts (Caller.standing with the label as its credential), not a person or an agent."""
    return act.caller.credential_kind == CredentialKind.AILABEL


# ---------------------------------------------------------------- labels themselves


def create_label(*, act: Act, account: MailAccount, name: str, color: str) -> Label:
    """A new label of the account; a name the account already uses is a CONFLICT, even when a concurrent call
    took it between the check and the insert."""
    if Label.objects.for_tenant(act.tenant).filter(account=account, name=name).exists():
        raise OakenError("CONFLICT", _LABEL_TAKEN, field="name")
    try:
        with transaction.atomic():
            label = Label.objects.create(tenant=act.tenant, account=account, name=name, color=color)
    except IntegrityError:
        raise OakenError("CONFLICT", _LABEL_TAKEN, field="name") from None
    act.touch(label.pk, None, {"name": label.name, "color": label.color})
    return label


def rename_label(*, act: Act, label: Label, name: str) -> Label:
    taken = Label.objects.for_tenant(act.tenant).filter(account_id=label.account_id, name=name).exclude(pk=label.pk)
    if taken.exists():
        raise OakenError("CONFLICT", _LABEL_TAKEN, field="name")
    act.touch(label.pk, {"name": label.name}, {"name": name})
    label.name = name
    try:
        with transaction.atomic():
            label.save(update_fields=["name"])
    except IntegrityError:
        raise OakenError("CONFLICT", _LABEL_TAKEN, field="name") from None
    return label


def set_label_description(*, act: Act, label: Label, description: str) -> Label:
    """Set (or clear, with '') the label's description: a new version, set by the calling person (an agent's: its
    person), that decides mail stored from now on; a stopped AI label labels again. The audit records the version
    and the length, never the text."""
    before = {"description_version": label.description_version, "description_chars": len(label.description)}
    label.description = description
    label.description_by = act.caller.user if description else None
    label.description_at = act.now if description else None
    label.description_version += 1
    label.ai_stopped = ""
    label.save(update_fields=["description", "description_by", "description_at", "description_version", "ai_stopped"])
    act.touch(
        label.pk, before, {"description_version": label.description_version, "description_chars": len(description)}
    )
    return label


def stop_ai_label(*, tenant: Any, label_id: Any, reason: str) -> bool:
    """The AI label stops labelling, visibly (list_labels, the console), until its description is set again;
    whether it was labelling until now."""
    labels = Label.objects.for_tenant(tenant).filter(pk=label_id, ai_stopped="").exclude(description="")
    return labels.update(ai_stopped=reason[:200]) > 0


def delete_label(*, act: Act, label: Label) -> int:
    """Delete the label; the messages stay and only lose it. Returns how many messages had it."""
    links = MessageLabel.objects.for_tenant(act.tenant).filter(label=label)
    count = links.count()
    links.delete()
    act.touch(label.pk, {"name": label.name, "messages": count}, None)
    Label.objects.for_tenant(act.tenant).filter(pk=label.pk).delete()
    return count


# ---------------------------------------------------------------- folders and trash


def move_messages(
    *, act: Act, moves: Sequence[tuple[Message, Folder]], changes: Sequence[Change], trashing: bool
) -> list[str]:
    """Move each message to its folder. Trashing remembers where a message came from (restore_messages takes it
    back there); moving one out of the trash any other way forgets it. A snoozed message moved to the inbox, the
    trash or spam is snoozed no more."""
    for message, target in moves:
        update: dict[str, Any] = {"folder": target}
        if message.snoozed_until is not None and target.kind in SNOOZE_ENDING_FOLDERS:
            update["snoozed_until"] = None  # the person took it back, or threw it away: no return to come
        if trashing:
            update["trashed_from"] = message.folder
        elif message.folder.kind == FolderKind.TRASH:
            update["trashed_from"] = None
        Message.objects.for_tenant(act.tenant).filter(pk=message.pk).update(**update)
    _record(act, changes)
    ids = [change.id for change in changes]
    mirror_moves(tenant=act.tenant, message_ids=ids)
    return ids


def restore_messages(*, act: Act, folders: Mapping[str, Folder], changes: Sequence[Change]) -> list[str]:
    """Bring trashed messages (by id) back to the folders given."""
    for pk, folder in folders.items():
        Message.objects.for_tenant(act.tenant).filter(pk=pk).update(folder=folder, trashed_from=None)
    _record(act, changes)
    ids = list(folders)
    mirror_moves(tenant=act.tenant, message_ids=ids)
    return ids


# ---------------------------------------------------------------- connected mailboxes


def shown_settings(credentials: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """What the audit log, proposals and outputs show of a mailbox's server settings: never the passwords."""
    return {
        part: {key: credentials[part][key] for key in ("host", "port", "security", "username")}
        for part in ("imap", "smtp")
    }


def queue_sync(*, account: MailAccount, force: bool) -> None:
    """Sync the account in a worker once the caller's transaction commits."""
    account_id = str(account.pk)
    task = current_app.tasks[SYNC_ACCOUNT_TASK]
    transaction.on_commit(lambda: task.delay(account_id=account_id, force=force))


def connect_mailbox(
    *,
    act: Act,
    workspace: Workspace,
    name: str,
    email_address: str,
    credentials: dict[str, dict[str, Any]],
    sender_name: str = "",
) -> MailAccount:
    """Save a connected mailbox whose logins were tried, and sync it; `sender_name`: its From header's display
    name (the connecting person's name)."""
    account = MailAccount.objects.create(
        tenant=act.tenant,
        workspace=workspace,
        name=name,
        sender_name=sender_name,
        kind=AccountKind.IMAP,
        email_address=email_address,
        credentials=credentials,
        created_at=act.now,
    )
    shown = {"name": account.name, "sender_name": sender_name, "workspace": workspace.name, "kind": "imap"}
    shown |= shown_settings(credentials)
    act.touch(account.pk, None, shown)
    queue_sync(account=account, force=True)
    return account


def replace_credentials(*, act: Act, account: MailAccount, credentials: dict[str, dict[str, Any]]) -> MailAccount:
    """New server settings for a connected mailbox; they end its backoff, so the sync queued runs at once."""
    before = shown_settings(cast(dict[str, dict[str, Any]], account.credentials))
    account.credentials = credentials
    account.sync_failures, account.sync_error, account.sync_next_at = 0, "", None
    account.save(update_fields=["credentials", "sync_failures", "sync_error", "sync_next_at"])
    act.touch(account.pk, before, shown_settings(credentials))
    queue_sync(account=account, force=True)
    return account


def set_sender_name(*, act: Act, account: MailAccount, sender_name: str) -> MailAccount:
    """The display name of the From header of mail sent from this account from now on ('' for the bare address).
    A request made already keeps the name it was made with (it is part of what was approved)."""
    before = account.sender_name
    if sender_name != before:
        account.sender_name = sender_name
        account.save(update_fields=["sender_name"])
        act.touch(account.pk, {"sender_name": before}, {"sender_name": sender_name})
    return account


def remove_account(*, act: Act, account: MailAccount) -> int:
    """Remove a mail account and everything Oaken holds for it (a server keeps its own copy); returns how many
    messages went."""
    tenant = act.tenant
    messages = Message.objects.for_tenant(tenant).filter(account=account)
    count = messages.count()
    # children first: messages protect their folders and threads
    MessageLabel.objects.for_tenant(tenant).filter(message__account=account).delete()
    Attachment.objects.for_tenant(tenant).filter(message__account=account).delete()
    RawMessage.objects.for_tenant(tenant).filter(message__account=account).delete()
    messages.delete()
    Thread.objects.for_tenant(tenant).filter(account=account).delete()
    Label.objects.for_tenant(tenant).filter(account=account).delete()
    Folder.objects.for_tenant(tenant).filter(account=account).delete()
    act.touch(account.pk, {"name": account.name, "kind": account.kind, "messages": count}, None)
    revoke_on_commit(account)
    MailAccount.objects.for_tenant(tenant).filter(pk=account.pk).delete()
    return count


def revoke_on_commit(account: MailAccount) -> None:
    """Once the removal commits, ask the mailbox's OAuth provider to revoke its refresh token, where the provider
    has a revocation endpoint (best effort: the grant is Oaken's no more either way, and the person can withdraw it
    at the provider too). Nothing is said about the token; a failure is logged by the account's id only."""
    if not account.oauth_provider:
        return
    provider = oauth_providers.provider(account.oauth_provider)
    try:
        stored = account.oauth_tokens
    except CredentialsUnreadableError:
        return
    tokens: dict[str, Any] = stored if isinstance(stored, dict) else {}
    token = str(tokens.get("refresh_token") or tokens.get("access_token") or "")
    if provider is None or not provider.revoke_url or not token:
        return
    account_id = account.pk

    def revoke() -> None:
        if not oauth_client.revoke(provider, token=token):
            log.warning("the provider did not confirm revoking the tokens of removed mail account %s", account_id)

    transaction.on_commit(revoke)


# ---------------------------------------------------------------- mailboxes connected by OAuth


def connect_mailbox_oauth(
    *,
    act: Act,
    workspace: Workspace,
    name: str,
    email_address: str,
    provider: str,
    credentials: dict[str, dict[str, Any]],
    tokens: dict[str, str],
    expires_at: datetime | None,
    sender_name: str = "",
) -> MailAccount:
    """Save a mailbox connected by OAuth whose token both servers took, and sync it. The tokens are stored
    encrypted and recorded nowhere else: the audit event shows the provider and the server settings."""
    account = MailAccount.objects.create(
        tenant=act.tenant,
        workspace=workspace,
        name=name,
        sender_name=sender_name,
        kind=AccountKind.IMAP,
        email_address=email_address,
        credentials=credentials,
        oauth_provider=provider,
        oauth_tokens=tokens,
        oauth_expires_at=expires_at,
        oauth_state=OAuthState.OK,
        created_at=act.now,
    )
    shown = {"name": account.name, "sender_name": sender_name, "workspace": workspace.name, "kind": "imap"}
    shown["provider"] = provider
    act.touch(account.pk, None, shown | shown_settings(credentials))
    queue_sync(account=account, force=True)
    return account


def reconnect_mailbox_oauth(
    *, act: Act, account: MailAccount, tokens: dict[str, str], expires_at: datetime | None
) -> MailAccount:
    """New tokens for a mailbox connected by OAuth (the person connected it again): the account, its mail and its
    sync state stay; it is no longer waiting to be reconnected, and syncs at once."""
    before = {"connection": account.oauth_state}
    account.oauth_tokens = tokens
    account.oauth_expires_at = expires_at
    account.oauth_state = OAuthState.OK
    account.sync_failures, account.sync_error, account.sync_next_at = 0, "", None
    account.save(
        update_fields=["oauth_tokens", "oauth_expires_at", "oauth_state", "sync_failures", "sync_error", "sync_next_at"]
    )
    act.touch(account.pk, before, {"connection": OAuthState.OK.value})
    queue_sync(account=account, force=True)
    resume_pushes(tenant=act.tenant, account=account)  # the changes made in Oaken while it could not be reached
    return account


# ---------------------------------------------------------------- snooze

# a snoozed message a person moves here is snoozed no more (move_messages, trash_messages)
SNOOZE_ENDING_FOLDERS = (FolderKind.INBOX, FolderKind.TRASH, FolderKind.SPAM)

# Snoozing takes a message out of the inbox the way archiving does, here and on a connected mailbox's server (a
# MOVE to its archive, mirrored as any move), so the mailbox's other clients stop showing it in the inbox too; its
# time is Oaken's alone (the server has no notion of it), and the return is a move back to the inbox. A message
# snoozed from another folder than the inbox stays where it is until it comes back.


def snooze_messages(
    *, act: Act, moves: Sequence[tuple[Message, Folder | None]], until: datetime, changes: Sequence[Change]
) -> list[str]:
    """Snooze each message until `until`: to the folder given with it (its account's archive) or, for None, where it
    is. Snoozing again only moves the time."""
    for message, target in moves:
        update: dict[str, Any] = {"snoozed_until": until}
        if target is not None:
            update["folder"] = target
        Message.objects.for_tenant(act.tenant).filter(pk=message.pk).update(**update)
    _record(act, changes)
    ids = [change.id for change in changes]
    mirror_moves(tenant=act.tenant, message_ids=[str(m.pk) for m, target in moves if target is not None])
    return ids


def unsnooze_messages(
    *, act: Act, moves: Sequence[tuple[Message, Folder | None]], changes: Sequence[Change]
) -> list[str]:
    """End each message's snooze now: back to the folder given (its inbox) or, for None, left where it is. Its read
    state and its place in listings (its date) are its own."""
    for message, target in moves:
        update: dict[str, Any] = {"snoozed_until": None}
        if target is not None:
            update["folder"] = target
        Message.objects.for_tenant(act.tenant).filter(pk=message.pk, snoozed_until__isnull=False).update(**update)
    _record(act, changes)
    mirror_moves(tenant=act.tenant, message_ids=[str(m.pk) for m, target in moves if target is not None])
    return [change.id for change in changes]


def return_snoozed(*, act: Act, message: Message, until: datetime, inbox: Folder | None) -> bool:
    """A snoozed message's time has come: back to the inbox (None: left where it is, when the person has since put
    it in the trash or spam), listed from now. One guarded UPDATE on the row's own state (still snoozed until
    `until`, and due): of any number of workers returning it, one changes it and the others change nothing (False),
    and a worker that died before its transaction committed changed nothing either."""
    update: dict[str, Any] = {"snoozed_until": None, "returned_at": act.now}
    if inbox is not None:
        update["folder"] = inbox
    rows = Message.objects.for_tenant(act.tenant).filter(pk=message.pk, snoozed_until=until, snoozed_until__lte=act.now)
    if not rows.update(**update):
        return False
    after: dict[str, Any] = {"snoozed_until": None, "returned_at": act.now.isoformat()}
    if inbox is not None:
        after["folder"] = "inbox"
    folder = message.folder.kind if message.folder.kind != FolderKind.CUSTOM else message.folder.name
    act.touch(message.pk, {"snoozed_until": until.isoformat(), "folder": folder}, after)
    if inbox is not None:
        mirror_moves(tenant=act.tenant, message_ids=[str(message.pk)])
    return True


# ---------------------------------------------------------------- waiting for reply: the nudge


def nudge_awaiting(
    *, act: Act, thread: Thread, message_id: str, received: Message | None, inbox: Folder | None
) -> bool:
    """The thread waits on the mailbox's own last message `message_id`: mark it nudged for that message and bring
    `received` (its newest message from the other side in the inbox or archive, None when it has none) to the top
    of the inbox (listed from now, as a snooze's return; from the archive back to `inbox`). One guarded UPDATE on
    the thread's own state (not yet nudged for that message): of any number of workers, one nudges and the others
    change nothing (False)."""
    rows = Thread.objects.for_tenant(act.tenant).filter(pk=thread.pk).exclude(awaiting_nudged_for=message_id)
    if not rows.update(awaiting_nudged_for=message_id, awaiting_nudged_at=act.now):
        return False
    before_for = str(thread.awaiting_nudged_for) if thread.awaiting_nudged_for else None
    act.touch(
        thread.pk,
        {"awaiting_nudged_for": before_for},
        {"awaiting_nudged_for": message_id, "awaiting_nudged_at": act.now.isoformat()},
    )
    if received is not None:
        update: dict[str, Any] = {"returned_at": act.now}
        moved = inbox is not None and received.folder_id != inbox.pk
        if moved:
            update["folder"] = inbox
        Message.objects.for_tenant(act.tenant).filter(pk=received.pk).update(**update)
        folder = received.folder.kind if received.folder.kind != FolderKind.CUSTOM else received.folder.name
        after: dict[str, Any] = {"returned_at": act.now.isoformat()}
        if moved:
            after["folder"] = "inbox"
        act.touch(received.pk, {"returned_at": _iso(received.returned_at), "folder": folder}, after)
        if moved:
            mirror_moves(tenant=act.tenant, message_ids=[str(received.pk)])
    return True


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
