"""undo_agent_actions (issue 42 item 4): a person undoes what an assistant changed, as the audit recorded it.

Alice's API key labels, archives, trashes, marks read and writes a draft; alice undoes it. What she changed herself
since is left and said why; mail the key asked to send is listed as beyond undoing, with where it went; each
reversal is its own audit event naming the event it reverses. Mallory, in another tenant, cannot name alice's key
(NOT_FOUND) and her mail stays as it was; an agent is never offered the operation.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.core.callers import Caller
from apps.mail.models import Message, MessageLabel
from apps.operations.defs.undo import AGAIN
from apps.outbound.models import Draft
from tests.callers import as_agent, as_person, call, refusal
from tests.conftest import Mailbox, Person
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user, request


@pytest.fixture
def key_id(alice: Person) -> str:
    made = call(
        as_person(alice), "create_api_key", {"name": "helper", "scopes": ["read", "write", "send"]}, confirm=True
    )
    return str(made["api_key"]["id"])


@pytest.fixture
def agent(alice: Person, key_id: str) -> Caller:
    return as_agent(alice, scopes={"read", "write", "send"}, credential_id=key_id)


def _state(p: Person, ids: list[str]) -> dict[str, tuple[str, bool, set[str]]]:
    rows = Message.objects.for_tenant(p.tenant).filter(pk__in=ids).select_related("folder")
    found = {str(m.pk): m for m in rows}
    labels: dict[str, set[str]] = {i: set() for i in ids}
    links = MessageLabel.objects.for_tenant(p.tenant).filter(message_id__in=ids)
    for message_id, label_id in links.values_list("message_id", "label_id"):
        labels[str(message_id)].add(str(label_id))
    return {i: (found[i].folder.kind, found[i].read, labels[i]) for i in ids}


def _label(p: Person, box: Mailbox, name: str) -> str:
    made = call(as_person(p), "create_label", {"account_id": box.account_id, "name": name})
    return str(made["label"]["id"])


def _undo(alice: Person, key_id: str, since: Any, **kw: Any) -> dict[str, Any]:
    return call(as_person(alice), "undo_agent_actions", {"credential_id": key_id, "since": since.isoformat()}, **kw)


def _proposal(alice: Person, key_id: str, since: Any) -> dict[str, Any]:
    refused = refusal(as_person(alice), "undo_agent_actions", {"credential_id": key_id, "since": since.isoformat()})
    assert refused.code == "CONFIRMATION_REQUIRED"
    assert refused.proposal is not None
    return refused.proposal


def test_it_restores_labels_folders_and_read_state(alice: Person, alice_mail: Mailbox, agent: Caller, key_id: str):
    one, two, three = alice_mail.message_ids
    label = _label(alice, alice_mail, "Later")
    before = _state(alice, alice_mail.message_ids)
    since = timezone.now() - timedelta(seconds=1)

    call(agent, "add_labels", {"message_ids": [one, two], "label_ids": [label]})
    call(agent, "move_messages", {"message_ids": [one], "folder": "archive"})
    call(agent, "trash_messages", {"message_ids": [one, three]})  # archived, then trashed: unwinds to the inbox
    call(agent, "mark_read", {"message_ids": [two, three]})
    assert _state(alice, alice_mail.message_ids) != before

    proposal = _proposal(alice, key_id, since)
    assert proposal["title"] == "Undo what this assistant did?"
    assert any("Take the label “Later” off 2 messages" in line for line in proposal["lines"]), proposal["lines"]
    assert _state(alice, alice_mail.message_ids) != before  # nothing changed by asking

    out = _undo(alice, key_id, since, confirm=True)
    assert _state(alice, alice_mail.message_ids) == before
    assert out["skipped"] == [] and len(out["undone"]) == 7


def test_what_a_person_changed_since_is_skipped_with_why(
    alice: Person, alice_mail: Mailbox, agent: Caller, key_id: str
):
    one, two, _ = alice_mail.message_ids
    since = timezone.now() - timedelta(seconds=1)
    call(agent, "mark_read", {"message_ids": [one, two]})
    call(agent, "move_messages", {"message_ids": [one], "folder": "archive"})
    call(as_person(alice), "move_messages", {"message_ids": [one], "folder": "inbox"})  # she took it back herself
    call(as_person(alice), "mark_unread", {"message_ids": [one]})
    call(as_person(alice), "mark_read", {"message_ids": [one]})  # and read it again: the same as the agent left it

    out = _undo(alice, key_id, since, confirm=True)
    assert {(s["target"], s["why"]) for s in out["skipped"]} == {(one, "a person changed it since")}
    undone = {(u["target"], u["operation"]) for u in out["undone"]}
    assert undone == {(two, "mark_unread"), (one, "mark_unread")}
    state = _state(alice, [one, two])
    assert state[one][0] == "inbox" and state[two][1] is False


def test_it_deletes_the_drafts_the_agent_wrote(alice: Person, alice_mail: Mailbox, agent: Caller, key_id: str):
    since = timezone.now() - timedelta(seconds=1)
    made = call(agent, "create_draft", {"account_id": alice_mail.account_id, "to": ["bob@example.test"]})
    mine = call(as_person(alice), "create_draft", {"account_id": alice_mail.account_id})
    draft_id = made["id"]
    out = _undo(alice, key_id, since, confirm=True)
    assert [(u["target"], u["operation"]) for u in out["undone"]] == [(draft_id, "delete_draft")]
    assert not Draft.objects.for_tenant(alice.tenant).filter(pk=draft_id).exists()
    assert Draft.objects.for_tenant(alice.tenant).filter(pk=mine["id"]).exists()


def test_the_preview_lists_sent_mail_as_not_undoable(
    alice: Person, agent: Caller, key_id: str, imap_server: ImapServer, smtp_server: SmtpServer
):
    account = imap_account(alice, imap_server, smtp_server, mail_user(imap_server, "alice"))
    since = timezone.now() - timedelta(seconds=1)
    request(
        agent,
        "send_email",
        {"account_id": str(account.pk), "to": ["carol@example.test"], "subject": "hi", "idempotency_key": "k1"},
    )
    proposal = _proposal(alice, key_id, since)
    assert any(line.startswith("Cannot be undone: mail to carol@example.test") for line in proposal["lines"]), proposal[
        "lines"
    ]
    out = _undo(alice, key_id, since, confirm=True)
    assert out["undone"] == [] and out["sent"][0].startswith("mail to carol@example.test")


def test_each_reversal_names_the_event_it_reverses(alice: Person, alice_mail: Mailbox, agent: Caller, key_id: str):
    one = alice_mail.message_ids[0]
    since = timezone.now() - timedelta(seconds=1)
    call(agent, "mark_read", {"message_ids": [one]})
    marked = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="mark_read", outcome="ok").latest("seq")
    assert marked.credential_id == key_id

    _undo(alice, key_id, since, confirm=True)
    reversal = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="mark_unread").latest("seq")
    assert reversal.principal == "person" and reversal.person_id == alice.user.pk
    assert reversal.targets[0] == {"id": "reverses", "before": None, "after": {"event": marked.seq}}
    assert reversal.targets[1] == {"id": one, "before": {"read": True}, "after": {"read": False}}
    undo = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="undo_agent_actions", outcome="ok").get()
    assert undo.seq > reversal.seq and undo.targets[0]["after"]["events"] == [marked.seq]

    again = _undo(alice, key_id, since, confirm=True)  # undone already: nothing is as the agent left it
    assert again["undone"] == [] and again["skipped"][0]["why"] == "a person changed it since"


def test_undo_of_given_events(alice: Person, alice_mail: Mailbox, agent: Caller):
    one, two, _ = alice_mail.message_ids
    call(agent, "mark_read", {"message_ids": [one]})
    first = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="mark_read").latest("seq").seq
    call(agent, "mark_read", {"message_ids": [two]})
    call(as_person(alice), "undo_agent_actions", {"event_seqs": [first]}, confirm=True)
    state = _state(alice, [one, two])
    assert state[one][1] is False and state[two][1] is True


def test_another_tenant_cannot_undo_alices_assistant(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox, agent: Caller, key_id: str
):
    since = timezone.now() - timedelta(seconds=1)
    call(agent, "mark_read", {"message_ids": alice_mail.message_ids})
    theirs = _state(mallory, mallory_mail.message_ids)
    seqs = list(AuditEvent.objects.for_tenant(alice.tenant).filter().values_list("seq", flat=True))

    refused = refusal(
        as_person(mallory), "undo_agent_actions", {"credential_id": key_id, "since": since.isoformat()}, confirm=True
    )
    assert refused.code == "NOT_FOUND" and refused.field == "credential_id"
    refused = refusal(as_person(mallory), "undo_agent_actions", {"event_seqs": seqs}, confirm=True)
    assert refused.code == "NOT_FOUND"
    assert _state(mallory, mallory_mail.message_ids) == theirs
    assert all(read for _, read, _ in _state(alice, alice_mail.message_ids).values())


def test_an_agent_is_never_offered_undo(alice: Person, agent: Caller, key_id: str):
    refused = refusal(agent, "undo_agent_actions", {"credential_id": key_id, "since": timezone.now().isoformat()})
    assert refused.code == "NOT_AVAILABLE"


def test_it_needs_a_credential_and_a_time_or_events(alice: Person):
    refused = refusal(as_person(alice), "undo_agent_actions", {"until": timezone.now().isoformat()})
    assert refused.code == "INVALID_INPUT"


RULE: dict[str, Any] = {
    "name": "Receipts",
    "conditions": [{"field": "from", "op": "domain", "value": "shop.example"}],
    "actions": [{"action": "mark_read"}],
}


def test_rules_it_made_are_deleted_and_rules_it_switched_are_put_back(alice: Person, agent: Caller, key_id: str):
    since = timezone.now() - timedelta(seconds=1)
    made = request(agent, "create_rule", RULE)
    mine = call(as_person(alice), "create_rule", {**RULE, "name": "Mine"}, confirm=True)
    request(agent, "update_rule", {"rule_id": mine["id"], "enabled": False})
    request(agent, "update_rule", {"rule_id": mine["id"], "actions": [{"action": "pin"}]})  # what it does: no way back

    proposal = _proposal(alice, key_id, since)
    assert "Delete the rule “Receipts” it made." in proposal["lines"]
    assert "Put the rule “Mine” back as it was." not in proposal["lines"]  # changed again since: its body
    out = _undo(alice, key_id, since, confirm=True)
    assert [(u["target"], u["operation"]) for u in out["undone"]] == [(made["id"], "delete_rule")]
    assert {n["why"] for n in out["not_undoable"]} == {"a rule's earlier conditions and actions are not recorded"}
    assert {s["why"] for s in out["skipped"]} == {AGAIN}
    assert [r["name"] for r in call(as_person(alice), "list_rules")["rules"]] == ["Mine"]


def test_a_rule_switched_off_is_switched_on_again(alice: Person, agent: Caller, key_id: str):
    mine = call(as_person(alice), "create_rule", {**RULE, "name": "Mine"}, confirm=True)
    since = timezone.now() - timedelta(seconds=1)
    request(agent, "update_rule", {"rule_id": mine["id"], "enabled": False, "name": "Switched off"})
    proposal = _proposal(alice, key_id, since)
    assert "Put the rule “Mine” back as it was." in proposal["lines"]
    _undo(alice, key_id, since, confirm=True)
    (rule,) = call(as_person(alice), "list_rules")["rules"]
    assert (rule["name"], rule["enabled"]) == ("Mine", True)


def test_only_an_operation_for_persons_may_run_other_operations() -> None:
    from apps.operations.defs.shapes import Empty
    from apps.operations.registry import Ceiling, DefinitionError, OpClass, Registry, operation

    with pytest.raises(DefinitionError, match="only an operation for persons may run other operations"):
        operation(
            name="runs_others",
            summary="x",
            input=Empty,
            output=Empty,
            op_class=OpClass.MUTATE,
            ceiling=Ceiling.NEVER,
            composes=True,
            target=Registry(),
        )(lambda ctx, data: Empty())
