"""IMAP/SMTP accounts on the loopback test servers, and the calls an agent or a person makes to send."""

from __future__ import annotations

import itertools
from typing import Any

from apps.core.callers import Caller
from apps.core.kinds import Principal
from apps.mail.models import STANDARD_FOLDERS, AccountKind, Folder, MailAccount
from tests.callers import call, refusal
from tests.conftest import Person
from tests.mailservers import PASSWORD, ImapServer, SmtpServer

_numbers = itertools.count(1)


def mail_user(imap: ImapServer, name: str) -> str:
    """A new Dovecot user (an address of its own, so tests never share mailboxes)."""
    return imap.add_user(f"{name}.{next(_numbers)}@example.test")


def imap_account(
    p: Person, imap: ImapServer, smtp: SmtpServer, address: str, name: str = "Mail", sender_name: str = ""
) -> MailAccount:
    """An IMAP account in p's default workspace, with credentials of exactly the stored shape; `sender_name`: its
    From header's display name (none by default: the bare address)."""
    account = MailAccount.objects.create(
        tenant=p.tenant,
        workspace=p.workspace,
        name=name,
        sender_name=sender_name,
        kind=AccountKind.IMAP,
        email_address=address,
        credentials={
            "imap": {
                "host": imap.host,
                "port": imap.port,
                "security": "none",
                "username": address,
                "password": PASSWORD,
            },
            "smtp": {"host": smtp.host, "port": smtp.port, "security": "none", "username": "", "password": ""},
        },
    )
    Folder.objects.bulk_create(
        Folder(tenant=p.tenant, account=account, kind=kind, name=kind.label) for kind in STANDARD_FOLDERS
    )
    return account


def request(caller: Caller, name: str, input: dict[str, Any]) -> dict[str, Any]:
    """A confirmed call: a person passes confirm; an agent shows the proposal and repeats with its token."""
    if caller.principal == Principal.PERSON:
        return call(caller, name, input, confirm=True)
    proposal = refusal(caller, name, input)
    assert proposal.code == "CONFIRMATION_REQUIRED", proposal.code
    assert proposal.proposal is not None
    return call(caller, name, input, confirmation_token=proposal.proposal["token"])
