"""Rules (issue 39, items 1-2): rules through the gate, and the engine acting on new mail (apps.worker.rules).

A rule acts later, by itself, as its owner (Caller.standing: never more than the owner may do now), each action a
gate call on the internal door audited with the rule as its credential, each message once per rule version. Mallory,
in another tenant, holds identical mail and rules' names: nothing of hers is touched, found or used.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.mail.importing import import_mail
from apps.mail.models import FolderKind, MailAccount, Message, MessageLabel
from apps.rules.models import Rule, RuleApplication, RulePending
from apps.worker.rules import run
from apps.workspaces.models import Membership, Workspace
from tests.callers import as_agent, as_person, call, joined, refusal
from tests.conftest import Person
from tests.imapbox import by_message_id, connect, eager, sync  # noqa: F401 (eager: a fixture)
from tests.mailfactory import raw_message, write_mbox
from tests.mailservers import ImapServer, SmtpServer

RECEIPTS = {
    "name": "Receipts",
    "conditions": [{"field": "from", "op": "domain", "value": "shop.example"}],
    "actions": [{"action": "add_label", "label": "Receipts"}, {"action": "skip_inbox"}],
}


def recent(days: float) -> Any:
    return timezone.now() - timedelta(days=days)


def mbox_of(tmp: Path, name: str, messages: list[bytes]) -> Path:
    return write_mbox(tmp / f"{name}.mbox", messages)


def imported(p: Person, tmp: Path, messages: list[bytes], name: str = "Imported") -> str:
    import_mail(tenant=p.tenant, workspace=p.workspace, account_name=name, path=mbox_of(tmp, name, messages))
    return str(MailAccount.objects.for_tenant(p.tenant).get(name=name).pk)


def create(p: Person, rule: dict[str, Any], **scope: Any) -> dict[str, Any]:
    return call(as_person(p), "create_rule", rule | scope, confirm=True)


def labels_of(p: Person, message: Message) -> set[str]:
    rows = MessageLabel.objects.for_tenant(p.tenant).filter(message=message).select_related("label")
    return {r.label.name for r in rows}


def shop_mail(prefix: str, n: int, *, days: float = 1) -> list[bytes]:
    return [
        raw_message(
            subject=f"Your order {i}",
            sender="Shop <orders@mail.shop.example>",
            message_id=f"<{prefix}-{i}@example.test>",
            date=recent(days + i / 100),
        )
        for i in range(n)
    ]


def other_mail(prefix: str, n: int, *, days: float = 1) -> list[bytes]:
    return [
        raw_message(
            subject=f"Lunch {i}", message_id=f"<{prefix}-other-{i}@example.test>", date=recent(days + i / 100)
        )
        for i in range(n)
    ]
