"""Every confirmation a person or an agent can meet says what will happen in plain words (issue 37).

For each operation whose confirmation can be asked for, a proposal is built through the gate from realistic inputs,
and its sentence, its short list, its question and its verb are checked: no snake_case identifier, no raw field
name of the operation's input, no "—" placeholder, no empty value. A new operation that can ask for confirmation
fails here until it has a case below (and words of its own).
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from oauth2_provider.models import Application

from apps.agents.models import Connection
from apps.mail.models import STANDARD_FOLDERS, AccountKind, Folder, MailAccount, Message, RawMessage, Thread
from apps.operations import plugins
from apps.operations.registry import Ceiling, Operation, registry
from apps.outbound.models import OutboundRequest, State
from tests.callers import as_agent, as_person, call, joined, refusal
from tests.conftest import Mailbox, Person, give_mail
from tests.mailfactory import raw_message

PLUGINS_DIR = Path(__file__).parent / "plugins" / "test-plugins"

SNAKE = re.compile(r"\b[a-z][a-z0-9]*_[a-z0-9_]+\b")
# an API key's prefix, shown as /keys lists it so a person knows which key: the one identifier-like word allowed
KEY_PREFIX = re.compile(r"\(prefix oak_[0-9a-f]+\)")
EMPTY = re.compile(r"\u201c\s*\u201d|:\s*[;,.]|:\s*$|\(\s*\)|\[\s*\]|\{\s*\}|\bNone\b|\bnull\b|\bundefined\b")


class World:
    """One tenant's worth of things to change: 11 messages (past the free threshold), a label, a mailbox that can
    send, a draft, a key, a connection, a member, an invitation, a workspace, a policy, an undecided request."""

    def __init__(self, alice: Person, tmp_path: Path) -> None:
        self.alice = alice
        self.me = as_person(alice)
        self.mail: Mailbox = give_mail(alice, tmp_path, "quarter", n=11)
        self.ids = self.mail.message_ids
        self.label = call(self.me, "create_label", {"account_id": self.mail.account_id, "name": "Receipts"})["label"]
        self.sender = MailAccount.objects.create(
            tenant=alice.tenant,
            workspace=alice.workspace,
            name="Alice at work",
            kind=AccountKind.IMAP,
            email_address="alice@work.example.org",
            credentials={
                "imap": {"host": "imap.invalid", "port": 993, "security": "tls", "username": "a", "password": "p"},
                "smtp": {"host": "smtp.invalid", "port": 465, "security": "tls", "username": "a", "password": "p"},
            },
        )
        Folder.objects.bulk_create(
            Folder(tenant=alice.tenant, account=self.sender, kind=kind, name=kind.label) for kind in STANDARD_FOLDERS
        )
        self.bob = joined(alice, "bob@example.test")

    def confirmed(self, op: str, data: dict[str, Any]) -> dict[str, Any]:
        return call(self.me, op, data, confirm=True)

    def tool_set(self, name: str, *, used: bool = False) -> str:
        """A tool set of alice's (and, when `used`, a key limited to it); its name."""
        self.confirmed("create_tool_set", {"name": name, "operations": ["search"]})
        if used:
            self.confirmed("create_api_key", {"scopes": ["read"], "tool_set": name})
        return name

    def draft(self) -> str:
        made = call(
            self.me,
            "create_draft",
            {"account_id": str(self.sender.pk), "to": ["boss@example.org"], "subject": "Quarterly numbers"},
        )
        return str(made["id"] if "id" in made else made["draft_id"])

    def email(self, key: str = "send-1") -> dict[str, Any]:
        report = base64.b64encode(b"%PDF-1.4 numbers").decode()
        return {
            "account_id": str(self.sender.pk),
            "to": ["boss@example.org", "team@example.org"],
            "cc": ["carol@example.org"],
            "subject": "Quarterly numbers",
            "body": "The numbers are attached.",
            "attachments": [{"filename": "report.pdf", "content_base64": report}],
            "idempotency_key": key,
        }

    def connection(self) -> Connection:
        return Connection.objects.create(
            tenant=self.alice.tenant,
            user=self.alice.user,
            application=self.application(),
            client_name="Calendar helper",
            redirect_uri="http://127.0.0.1:5555/cb",
            scopes=["read"],
            activated_at=timezone.now(),
        )

    def application(self) -> Application:
        found = Application.objects.filter(name="Calendar helper").first()
        return found or Application.objects.create(
            name="Calendar helper",
            client_type="public",
            authorization_grant_type="authorization-code",
            redirect_uris="http://127.0.0.1:5555/cb",
        )

    def policy(self) -> str:
        made = self.confirmed(
            "create_send_policy",
            {"name": "Accounts team", "allowed_addresses": ["boss@example.org"], "recipients_per_hour": 30},
        )
        return str(made["id"])

    def undecided(self) -> str:
        made = self.confirmed("send_email", self.email("settle-1"))
        OutboundRequest.objects.for_tenant(self.alice.tenant).filter(pk=made["request_id"]).update(state=State.UNKNOWN)
        return str(made["request_id"])

    def list_message(self, list_unsubscribe: str) -> str:
        """A newsletter in the sending mailbox, its bytes kept as received, offering this List-Unsubscribe."""
        account = self.sender
        raw = raw_message(
            subject="Weekly news",
            sender="News <news@list.example.org>",
            message_id=f"<{uuid.uuid4().hex}@list.example.org>",
            extra_headers=[("List-Unsubscribe", list_unsubscribe)],
        )
        inbox = Folder.objects.for_tenant(self.alice.tenant).get(account=account, kind="inbox")
        thread = Thread.objects.create(tenant=self.alice.tenant, account=account, subject="Weekly news")
        message = Message.objects.create(
            tenant=self.alice.tenant,
            account=account,
            folder=inbox,
            thread=thread,
            message_id=uuid.uuid4().hex,
            subject="Weekly news",
            sender_address="news@list.example.org",
            content_hash=uuid.uuid4().hex,
        )
        RawMessage.objects.create(tenant=self.alice.tenant, message=message, data=raw)
        return str(message.pk)

    def webhook(self) -> str:
        """A webhook to an endpoint that is never contacted (nothing is delivered in these tests)."""
        made = self.confirmed("create_webhook", {"url": "https://hooks.example.org/oaken?t=1", "types": ["message."]})
        return str(made["webhook"]["id"])

    def redelivery(self) -> dict[str, str]:
        """A webhook, and an event it carries (a message marked read after it was made)."""
        hook = self.webhook()
        call(self.me, "mark_read", {"message_ids": self.ids[:1]})
        event = call(self.me, "list_events", {"types": ["message.changed"]})["events"][-1]["id"]
        return {"webhook_id": hook, "event_id": event}

    def undoable(self) -> dict[str, Any]:
        """An API key whose assistant labelled, archived, marked read and asked to send mail; alice since changed one
        of those messages herself."""
        made = self.confirmed("create_api_key", {"name": "helper", "scopes": ["read", "write", "send"]})
        key = str(made["api_key"]["id"])
        agent = as_agent(self.alice, scopes={"read", "write", "send"}, credential_id=key)
        call(agent, "add_labels", {"message_ids": self.ids[:2], "label_ids": [self.label["id"]]})
        call(agent, "move_messages", {"message_ids": self.ids[2:3], "folder": "archive"})
        call(agent, "mark_read", {"message_ids": self.ids[3:5]})
        call(agent, "create_label", {"account_id": self.mail.account_id, "name": "Assistant"})
        asked = refusal(agent, "send_email", self.email("undo-1"))
        assert asked.proposal is not None
        call(agent, "send_email", self.email("undo-1"), confirmation_token=asked.proposal["token"])
        call(self.me, "mark_unread", {"message_ids": self.ids[3:4]})
        return {"credential_id": key, "since": (timezone.now() - timedelta(minutes=5)).isoformat()}

    def membership(self, p: Person) -> str:
        members = call(self.me, "list_members")["members"]
        return next(m["membership_id"] for m in members if m["email"] == p.user.email)


_RULE = {
    "name": "Newsletters",
    "conditions": [{"field": "list_id", "value": "news"}, {"field": "from", "op": "domain", "value": "example.org"}],
    "match": "any",
    "actions": [{"action": "add_label", "label": "News"}, {"action": "skip_inbox"}],
}

# op -> inputs (each built from the world), every one of which must ask for confirmation
CASES: dict[str, Callable[[World], list[dict[str, Any]]]] = {
    "add_labels": lambda w: [{"message_ids": w.ids, "label_ids": [w.label["id"]]}],
    "remove_labels": lambda w: [
        w.confirmed("add_labels", {"message_ids": w.ids, "label_ids": [w.label["id"]]})
        and {"message_ids": w.ids, "label_ids": [w.label["id"]]}
    ],
    "delete_label": lambda w: [{"label_id": w.label["id"]}],
    "set_label_description": lambda w: [
        {"label_id": w.label["id"], "description": "invoices, receipts and order confirmations"},
        {"label_id": w.label["id"], "description": ""},
    ],
    "mark_read": lambda w: [{"message_ids": w.ids}],
    "mark_unread": lambda w: [w.confirmed("mark_read", {"message_ids": w.ids}) and {"message_ids": w.ids}],
    "set_pinned": lambda w: [{"message_ids": w.ids, "pinned": True}],
    "move_messages": lambda w: [{"message_ids": w.ids, "folder": "archive"}],
    "trash_messages": lambda w: [{"message_ids": w.ids}],
    "restore_messages": lambda w: [w.confirmed("trash_messages", {"message_ids": w.ids}) and {"message_ids": w.ids}],
    "snooze_messages": lambda w: [
        {"message_ids": w.ids, "until": (timezone.now() + timedelta(days=1)).isoformat()},
        {
            "message_ids": w.ids,
            "until": (timezone.now() + timedelta(days=2)).replace(tzinfo=None, hour=9, minute=0).isoformat(),
            "tz": "Europe/Paris",
        },
    ],
    "unsnooze_messages": lambda w: [
        w.confirmed(
            "snooze_messages", {"message_ids": w.ids, "until": (timezone.now() + timedelta(days=1)).isoformat()}
        )
        and {"message_ids": w.ids}
    ],
    "summarize_messages": lambda w: [{"message_ids": w.ids[:2], "mark_read": True}],
    "delete_draft": lambda w: [{"draft_id": w.draft()}],
    "send_email": lambda w: [w.email()],
    "set_auto_reply": lambda w: [{"account_id": str(w.sender.pk), "subject": "Away", "text": "Away until Monday."}],
    "set_forwarding": lambda w: [{"account_id": str(w.sender.pk), "to": "keeper@example.org"}],
    "send_draft": lambda w: [{"draft_id": w.draft(), "idempotency_key": "draft-1"}],
    "unsubscribe": lambda w: [
        {"message_id": w.list_message("<mailto:leave@list.example.org?subject=stop>"), "idempotency_key": "u-1"},
        {"message_id": w.list_message("<https://list.example.org/leave?t=1>"), "idempotency_key": "u-2"},
    ],
    "schedule_draft": lambda w: [
        {
            "draft_id": w.draft(),
            "idempotency_key": "later-1",
            "send_at": (timezone.now() + timedelta(days=1)).isoformat(),
        }
    ],
    "settle_outbound_request": lambda w: [
        {"request_id": (rid := w.undecided()), "outcome": "sent"},
        {"request_id": rid, "outcome": "not_sent"},
    ],
    "create_api_key": lambda w: [
        {"name": "ci-bot", "scopes": ["read", "write"], "workspaces": ["default"], "expires_in_days": 30},
        {"scopes": ["send"], "workspaces": [], "operations": ["search", "get_message"]},
        {"scopes": ["write"], "tool_set": "mail-organize"},
        {"name": "careful", "scopes": ["read", "send"], "lockdown": True},
    ],
    "create_tool_set": lambda w: [{"name": "triage", "operations": ["list_messages", "get_message", "mark_read"]}],
    "delete_tool_set": lambda w: [{"name": w.tool_set("triage")}, {"name": w.tool_set("in-use", used=True)}],
    "undo_agent_actions": lambda w: [w.undoable()],
    "revoke_api_key": lambda w: [
        {"api_key_id": w.confirmed("create_api_key", {"name": "ci-bot", "scopes": ["read"]})["api_key"]["id"]}
    ],
    "grant_connection": lambda w: [
        {
            "client_id": w.application().client_id,
            "redirect_uri": "http://127.0.0.1:5555/cb",
            "scopes": ["read", "send"],
            "workspaces": ["default"],
            "lifetime": "until_revoked",
        }
    ],
    "revoke_connection": lambda w: [{"connection_id": str(w.connection().pk)}],
    "set_api_key_lockdown": lambda w: [
        {
            "api_key_id": w.confirmed("create_api_key", {"name": "ci-bot", "scopes": ["read"]})["api_key"]["id"],
            "lockdown": on,
        }
        for on in (True, False)
    ],
    "set_connection_lockdown": lambda w: [
        {"connection_id": str(w.connection().pk), "lockdown": on} for on in (True, False)
    ],
    "create_send_policy": lambda w: [
        {
            "name": "Accounts team",
            "account_id": str(w.sender.pk),
            "allowed_addresses": ["boss@example.org"],
            "allowed_domains": ["example.com"],
            "recipients_per_hour": 30,
        }
    ],
    "delete_send_policy": lambda w: [{"policy_id": w.policy()}],
    "create_workspace": lambda w: [{"name": "clients"}],
    "rename_workspace": lambda w: [
        {"workspace_id": w.confirmed("create_workspace", {"name": "work"})["id"], "name": "clients"}
    ],
    "cancel_invitation": lambda w: [
        {"invitation_id": w.confirmed("invite_member", {"email": "dave@example.test"})["id"]}
    ],
    "change_member_role": lambda w: [{"membership_id": w.membership(w.bob), "role": "ADMIN"}],
    "set_member_workspaces": lambda w: [
        {"membership_id": w.membership(w.bob), "workspace_ids": [str(w.alice.workspace.pk)]},
        {"membership_id": w.membership(w.bob), "workspace_ids": []},
        {"membership_id": w.membership(w.bob), "workspace_ids": None},
    ],
    "invite_member": lambda w: [
        {"email": "dave@example.test", "role": "ADMIN"},
        {"email": "erin@example.test", "workspace_ids": [str(w.alice.workspace.pk)]},
    ],
    "remove_member": lambda w: [
        {"membership_id": w.membership(w.bob)},
        # leaving: someone else is an OWNER too
        w.confirmed("change_member_role", {"membership_id": w.membership(w.bob), "role": "OWNER"})
        and {"membership_id": w.membership(w.alice)},
    ],
    "remove_mailbox": lambda w: [{"account_id": w.mail.account_id}],
    "set_operation_exposure": lambda w: [
        {"operation": "search", "level": "off"},
        {"operation": "group:read", "level": "off"},
        {"operation": "group:send", "level": "on"},
        {"operation": "plugin:keyed", "level": "on"},
    ],
    "set_plugin_settings": lambda w: [{"plugin": "keyed", "settings": {"region": "us", "api_key": "sk-0123456789ab"}}],
    "delete_view": lambda w: [{"view_id": call(w.me, "create_view", {"name": "Unread mail", "unread": True})["id"]}],
    "create_rule": lambda w: [_RULE, _RULE | {"name": "Quiet", "account_id": w.mail.account_id, "enabled": False}],
    "update_rule": lambda w: [{"rule_id": w.confirmed("create_rule", _RULE)["id"], "enabled": False}],
    "delete_rule": lambda w: [{"rule_id": w.confirmed("create_rule", _RULE)["id"]}],
    "apply_rule": lambda w: [{"rule_id": w.confirmed("create_rule", _RULE)["id"], "days": 30}],
    "reorder_rules": lambda w: [
        {"rule_ids": [w.confirmed("create_rule", _RULE | {"name": n})["id"] for n in ("First", "Second")][::-1]}
    ],
    "create_webhook": lambda w: [
        {"url": "https://hooks.example.org/oaken", "types": ["message.received", "outbound."]},
        {"url": "https://hooks.example.org:8443/in", "workspaces": ["default"], "description": "CRM sync"},
    ],
    "update_webhook": lambda w: [
        {"webhook_id": (hook := w.webhook()), "types": ["outbound."], "enabled": False},
        {"webhook_id": hook, "url": "https://other.example.org/in", "workspaces": ["default"], "description": "CRM"},
    ],
    "delete_webhook": lambda w: [{"webhook_id": w.webhook()}],
    "rotate_webhook_secret": lambda w: [{"webhook_id": w.webhook()}],
    "redeliver_event": lambda w: [w.redelivery()],
    "delete_snippet": lambda w: [
        {"snippet_id": call(w.me, "create_snippet", {"name": "Thanks", "text": "Thanks, {first_name}."})["id"]}
    ],
}


@pytest.fixture
def installed() -> Iterator[None]:
    loaded = plugins.load_plugins([PLUGINS_DIR])
    yield
    for name in loaded:
        plugins.unload_plugin(name)


def _asking() -> list[Operation]:
    return sorted((op for op in registry if op.confirm.kind != "never"), key=lambda op: op.name)


def _field_names(op: Operation) -> set[str]:
    return set(op.input_model.model_json_schema().get("properties", {}))


def _problems(op: Operation, proposal: dict[str, Any]) -> list[str]:
    said = {"summary": proposal.get("summary"), "title": proposal.get("title"), "verb": proposal.get("verb")}
    said |= {f"line {i}": line for i, line in enumerate(proposal.get("lines") or [])}
    found = []
    for where, text in said.items():
        if not isinstance(text, str) or not text.strip():
            found.append(f"{where} is empty")
            continue
        if SNAKE.search(KEY_PREFIX.sub("", text)):
            found.append(f"{where} names an identifier: {text!r}")
        for field in _field_names(op):
            if ("_" in field and field in text) or re.search(rf"\b{re.escape(field)}\s*[:=]", text):
                found.append(f"{where} names the field {field}: {text!r}")
        if "\u2014" in text or EMPTY.search(text):
            found.append(f"{where} holds an empty value: {text!r}")
    summary = proposal.get("summary") or ""
    if summary == op.summary:
        found.append("the summary is the operation's description, not what this call will do")
    if summary and not (summary[0].isupper() and summary.rstrip().endswith(".")):
        found.append(f"the summary is not a sentence: {summary!r}")
    if not str(proposal.get("title") or "").endswith("?"):
        found.append(f"the title is not a question: {proposal.get('title')!r}")
    return found


def test_every_operation_that_asks_has_a_case(installed: None) -> None:
    missing = [op.name for op in _asking() if op.name not in CASES]
    assert not missing, f"give these a case (and words) in this test: {missing}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_confirmation_is_a_sentence(
    name: str, alice: Person, mallory: Person, tmp_path: Path, installed: None
) -> None:
    op = registry.get(name)
    assert op is not None and op.confirm.kind != "never"
    world = World(alice, tmp_path)
    give_mail(mallory, tmp_path, "mallory", n=2)  # another tenant's mail, never counted nor named
    callers = [as_person(alice)]
    if op.ceiling != Ceiling.NEVER:
        callers.append(as_agent(alice, scopes={"read", "write", "send"}))
    for data in CASES[name](world):
        for caller in callers:
            asked = refusal(caller, name, data)
            assert asked.code == "CONFIRMATION_REQUIRED", (name, asked.code, asked.message)
            proposal = asked.proposal
            assert proposal is not None
            assert not _problems(op, proposal), (name, _problems(op, proposal), proposal)
            assert "mallory" not in str(proposal)


def test_a_raw_proposal_is_caught(installed: None) -> None:
    """The checks above catch what the console used to print."""
    op = registry.get("send_email")
    assert op is not None
    raw = {"summary": "attachment_names: ; attachment_bytes: 0; send_at: —", "title": "Confirm this change"}
    assert len(_problems(op, raw)) >= 4
