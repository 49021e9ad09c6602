"""Reads of the mail store, always within a tenant and, for agents, within granted workspaces (SPEC §8).

Every access function takes the caller's reach (tenant + workspace names or None) and raises
the gate's errors: an id of another tenant, or one that is malformed, is NOT_FOUND exactly like
an id that does not exist; an id in a workspace the caller was not granted is OUT_OF_SCOPE.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import QuerySet

from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.mail.models import Folder, Label, MailAccount, Message, Thread
from apps.workspaces.models import Tenant

NAME_AN_ACCOUNT = "this connection may only reach some workspaces: name an account_id in scope (see list_accounts)"


@dataclass(frozen=True)
class Reach:
    tenant: Tenant
    workspaces: tuple[str, ...] | None  # None: every workspace

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
        """A call across every account is refused when the reach is restricted."""
        if account_id is None and self.restricted:
            raise OakenError("OUT_OF_SCOPE", NAME_AN_ACCOUNT, field="account_id")


def _in_reach(reach: Reach, workspace_name: str, field: str) -> None:
    if reach.workspaces is not None and workspace_name not in reach.workspaces:
        raise OakenError("OUT_OF_SCOPE", f"{field}: outside the workspaces this connection may reach", field=field)


def access_account(reach: Reach, account_id: str, field: str = "account_id") -> MailAccount:
    account = (
        MailAccount.objects.for_tenant(reach.tenant)
        .filter(pk=parse_id(account_id, field))
        .select_related("workspace")
        .first()
    )
    if account is None:
        raise OakenError.not_found(field)
    _in_reach(reach, account.workspace.name, field)
    return account


def access_messages(reach: Reach, message_ids: Sequence[str], field: str = "message_ids") -> list[Message]:
    """The messages, in the order asked, each checked; duplicates collapse."""
    wanted = list(dict.fromkeys(parse_id(m, field) for m in message_ids))
    found = {
        m.pk: m
        for m in Message.objects.for_tenant(reach.tenant)
        .filter(pk__in=wanted)
        .select_related("account__workspace", "folder")
        .defer("text_body", "html_body")
    }
    if len(found) != len(wanted):
        raise OakenError.not_found(field)
    for message in found.values():
        _in_reach(reach, message.account.workspace.name, field)
    return [found[pk] for pk in wanted]


def access_message(reach: Reach, message_id: str, field: str = "message_id") -> Message:
    message = (
        Message.objects.for_tenant(reach.tenant)
        .filter(pk=parse_id(message_id, field))
        .select_related("account__workspace", "folder")
        .first()
    )
    if message is None:
        raise OakenError.not_found(field)
    _in_reach(reach, message.account.workspace.name, field)
    return message


def access_thread(reach: Reach, thread_id: str, field: str = "thread_id") -> Thread:
    thread = (
        Thread.objects.for_tenant(reach.tenant)
        .filter(pk=parse_id(thread_id, field))
        .select_related("account__workspace")
        .first()
    )
    if thread is None:
        raise OakenError.not_found(field)
    _in_reach(reach, thread.account.workspace.name, field)
    return thread


def access_labels(reach: Reach, label_ids: Sequence[str], field: str = "label_ids") -> list[Label]:
    wanted = list(dict.fromkeys(parse_id(x, field) for x in label_ids))
    found = {
        label.pk: label
        for label in Label.objects.for_tenant(reach.tenant).filter(pk__in=wanted).select_related("account__workspace")
    }
    if len(found) != len(wanted):
        raise OakenError.not_found(field)
    for label in found.values():
        _in_reach(reach, label.account.workspace.name, field)
    return [found[pk] for pk in wanted]


def access_folder(account: MailAccount, folder: str, field: str = "folder") -> Folder:
    """A folder of the account by kind (inbox, archive, …) or by its name."""
    folders = Folder.objects.for_tenant(account.tenant).filter(account=account)
    found = folders.filter(kind=folder).exclude(kind="custom").first() or folders.filter(name=folder).first()
    if found is None:
        raise OakenError.not_found(field)
    return found
