"""Forwarding rules (issue 40 items 3 and 4) against a real Dovecot and SMTP sink: a rule's `forward` action sends
nothing until a person approved exactly what the rule is, then each matching message once whatever re-syncs and
duplicate deliveries; an AI label feeding a forwarding rule is waited for on new mail; and what decides what a
forwarding rule sends (the rule, the labels it names, their descriptions and hand-labelled examples) changes only
with the send permission: a write-only agent is refused INSUFFICIENT_SCOPE naming the rule, a person's confirmation
names it, and an agent's change leaves the forward waiting for a person. Mallory's identical mailbox is untouched.
"""

from __future__ import annotations

from datetime import timedelta
from email import message_from_bytes
from typing import Any

from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.mail.models import Label, Message
from apps.outbound.models import Automation, OutboundRequest
from apps.rules.models import Rule, RuleApplication
from apps.search.indexing import enrich_pending
from apps.worker import ailabels
from apps.worker import rules as engine
from tests.callers import as_agent, as_person, call, refusal
from tests.conftest import Person
from tests.imapbox import sync
from tests.mailfactory import raw_message
from tests.mailservers import ImapServer, SmtpServer
from tests.test_auto_replies import boxes, deliver_all

__all__ = ["boxes"]  # the fixture: both mailboxes on the same real servers

SENDER = frozenset({"read", "write", "send"})
WRITER = frozenset({"read", "write"})
KEEPER = "keeper@example.test"
RECEIPTS = "invoices, receipts, payment confirmations and order confirmations for things I bought"
RECEIPT = (
    "Your receipt from Bluebird Books",
    "Thank you for your purchase. Receipt R-48213: two paperbacks, total paid 31.90 EUR by card. "
    "Keep this receipt for your records.",
)
LUNCH = ("Lunch on Friday?", "Hi, are you free for lunch on Friday? Ben suggested the new place near the office.")


def put(server: ImapServer, user: str, name: str, sender: str, *, subject: str = "", body: str = "", **kw: Any) -> None:
    raw = raw_message(
        subject=subject or f"About {name}",
        sender=sender,
        to=user,
        body=body or f"About {name}.\n",
        message_id=f"<{name}@example.test>",
        date=timezone.now(),
        **kw,
    )
    server.append(user, "INBOX", raw)


def forwarded(smtp: SmtpServer) -> list[str]:
    got = [message_from_bytes(r.data) for r in smtp.received if KEEPER in r.recipients]
    return sorted(str(m["Subject"]) for m in got)


def rule_body(account: str, *conditions: dict[str, Any], to: str = KEEPER) -> dict[str, Any]:
    return {
        "account_id": account,
        "name": "Partners to the keeper",
        "conditions": list(conditions) or [{"field": "from", "op": "domain", "value": "partner.test"}],
        "actions": [{"action": "add_label", "label": "Forwarded"}, {"action": "forward", "to": to}],
    }


def outcomes(p: Person, rule_id: str) -> dict[str, list[str]]:
    """Each Message-ID's forward outcomes (one per copy of it the rule acted on), sorted."""
    rows = RuleApplication.objects.for_tenant(p.tenant).filter(rule_id=rule_id).select_related("message")
    found: dict[str, list[str]] = {}
    for r in rows:
        found.setdefault(r.message.message_id, []).extend(
            a["outcome"] for a in r.actions if a["action"] == f"forward to {KEEPER}"
        )
    return {k: sorted(v) for k, v in found.items()}


def test_an_agents_forwarding_rule_forwards_nothing_until_approved_then_each_match_once(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    user = boxes["alice_user"]
    for box in (user, boxes["mallory_user"]):
        put(imap_server, box, "old-1", "Pat <pat@partner.test>")
        put(imap_server, box, "old-2", "Bob <bob@example.test>")
    sync(boxes["alice"])
    sync(boxes["mallory"])
    theirs = call(as_person(mallory), "create_rule", rule_body(boxes["mallory"], to="keep@mallory.test"), confirm=True)

    agent = as_agent(alice, scopes=SENDER)
    data = rule_body(boxes["alice"])
    proposal = refusal(agent, "create_rule", data).proposal
    assert proposal is not None
    summary = proposal["summary"]
    assert KEEPER in summary and "acted on 1 message" in summary and "once a person approves it" in summary
    assert "About old" not in str(proposal)  # an agent reads ids, never mail text, in a proposal
    made = call(agent, "create_rule", data, confirmation_token=proposal["token"])
    assert made["forward_state"] == "awaiting_approval" and made["approval_url"]

    put(imap_server, user, "early", "Pam <pam@partner.test>")
    sync(boxes["alice"])
    engine.run()
    assert deliver_all() == [] and smtp_server.received == []
    assert outcomes(alice, made["id"]) == {"early@example.test": ["awaiting_approval"]}

    waiting = call(as_person(alice), "get_automation", {"automation_id": made["forward_automation_id"]})
    assert (waiting["kind"], waiting["forward_to"], waiting["rule_id"]) == ("forward", KEEPER, made["id"])
    assert waiting["conditions"] == data["conditions"] and waiting["match"] == "all"
    call(
        as_person(alice),
        "approve_automation",
        {"automation_id": waiting["automation_id"], "content_hash": waiting["content_hash"]},
    )
    assert call(as_person(alice), "get_rule", {"rule_id": made["id"]})["forward_state"] == "active"

    put(imap_server, user, "new-1", "Pat <pat@partner.test>")
    put(imap_server, user, "new-2", "Sam <sam@sales.partner.test>")
    put(imap_server, user, "other", "Bob <bob@example.test>")
    # the same message delivered again (another copy, the same Message-ID), and one Oaken forwarded already
    put(imap_server, user, "new-1", "Pat <pat@partner.test>", body="Again.\n")
    put(imap_server, user, "loop", "Pia <pia@partner.test>", extra_headers=[("X-Oaken-Forwarded", "0123abcd")])
    sync(boxes["alice"])
    engine.run()
    sync(boxes["alice"])
    engine.run()
    assert deliver_all() == ["sent", "sent"]
    assert forwarded(smtp_server) == ["Fwd: About new-1", "Fwd: About new-2"]
    got = outcomes(alice, made["id"])
    # the second copy of new-1 is skipped: that message went already
    assert got["new-1@example.test"] == ["ok", "skipped"] and got["new-2@example.test"] == ["ok"]
    assert got["loop@example.test"] == ["skipped"] and "other@example.test" not in got
    # what matched before the approval stays unsent: approving is for what comes after
    assert got["early@example.test"] == ["awaiting_approval"]
    # each forward is audited as sent on the approver's standing authority, through the gate
    sends = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="send_automatically", outcome="ok")
    assert sends.count() == 4 and {e.credential_kind for e in sends} == {"autoreply"}  # the 4 matched after approval

    # mallory's identical mailbox and her own rule: nothing forwarded, her rule's mail never alice's
    assert OutboundRequest.objects.for_tenant(mallory.tenant).count() == 0
    assert not RuleApplication.objects.for_tenant(mallory.tenant).exclude(rule_id=theirs["id"]).exists()
    assert all(KEEPER not in r.recipients and "keep@mallory.test" not in r.recipients for r in smtp_server.received[2:])


def _ai_label(p: Person, account: str) -> str:
    label = call(as_person(p), "create_label", {"account_id": account, "name": "Receipts"})["label"]["id"]
    call(as_person(p), "set_label_description", {"label_id": label, "description": RECEIPTS}, confirm=True)
    return label


def test_an_ai_label_feeds_a_forwarding_rule_and_is_waited_for_on_new_mail(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    label = _ai_label(alice, boxes["alice"])
    their_label = _ai_label(mallory, boxes["mallory"])
    condition = {"field": "label", "label_id": label}
    rule = call(as_person(alice), "create_rule", rule_body(boxes["alice"], condition), confirm=True)
    assert rule["forward_state"] == "active"  # a person's confirmation is the approval
    # a label of another tenant is as absent as one that never existed
    other = rule_body(boxes["alice"], {"field": "label", "label_id": their_label}) | {"name": "Theirs"}
    assert refusal(as_person(alice), "create_rule", other, confirm=True).code == "NOT_FOUND"

    for box in (boxes["alice_user"], boxes["mallory_user"]):
        put(imap_server, box, "receipt", "Shop <shop@books.test>", subject=RECEIPT[0], body=RECEIPT[1])
        put(imap_server, box, "lunch", "Ben <ben@example.test>", subject=LUNCH[0], body=LUNCH[1])
    sync(boxes["alice"])
    sync(boxes["mallory"])
    # the label has not decided yet: the rule waits rather than judge the mail without it
    engine.run()
    assert not RuleApplication.objects.for_tenant(alice.tenant).exists()
    enrich_pending()
    ailabels.label_new_mail()
    engine.run_batch(timezone.now() + timedelta(seconds=20))  # once the put-off has passed
    assert outcomes(alice, rule["id"]) == {"receipt@example.test": ["ok"]}
    assert deliver_all() == ["sent"]
    assert forwarded(smtp_server) == [f"Fwd: {RECEIPT[0]}"]
    why = call(as_person(alice), "get_rule", {"rule_id": rule["id"]})["history"][0]["matched"]
    assert why == ["label: Receipts"]
    assert OutboundRequest.objects.for_tenant(mallory.tenant).count() == 0


def test_a_write_only_agent_cannot_change_what_a_forwarding_rule_sends(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer
) -> None:
    account = boxes["alice"]
    label = _ai_label(alice, account)
    plain = call(as_person(alice), "create_label", {"account_id": account, "name": "Plain"})["label"]["id"]
    rule = call(
        as_person(alice), "create_rule", rule_body(account, {"field": "label", "label_id": label}), confirm=True
    )
    _ai_label(mallory, boxes["mallory"])
    put(imap_server, boxes["alice_user"], "one", "Ann <ann@example.test>")
    sync(account)
    message = str(Message.objects.for_tenant(alice.tenant).get(message_id="one@example.test").pk)
    before = Automation.objects.for_tenant(alice.tenant).get(rule_id=rule["id"], state="active").content_hash

    writer = as_agent(alice, scopes=WRITER)
    attempts = [
        ("set_label_description", {"label_id": label, "description": "everything, really"}),
        ("rename_label", {"label_id": label, "name": "Anything"}),
        ("delete_label", {"label_id": label}),
        ("add_labels", {"message_ids": [message], "label_ids": [label]}),
        ("remove_labels", {"message_ids": [message], "label_ids": [label]}),
        ("update_rule", {"rule_id": rule["id"], "name": "Renamed"}),
        ("update_rule", {"rule_id": rule["id"], "conditions": [{"field": "from", "op": "contains", "value": "@"}]}),
        ("delete_rule", {"rule_id": rule["id"]}),
        ("apply_rule", {"rule_id": rule["id"]}),
        ("reorder_rules", {"rule_ids": [rule["id"]]}),
        ("create_rule", rule_body(account) | {"name": "Another forward"}),
    ]
    for name, data in attempts:
        refused = refusal(writer, name, data, confirm=True)
        assert refused.code == "INSUFFICIENT_SCOPE", name
        assert refused.missing_scope == "send" and "forward" in refused.message, name
        assert "everything" not in refused.message
    # labelling by hand with a label no forwarding rule names is the writer's as before
    assert call(writer, "add_labels", {"message_ids": [message], "label_ids": [plain]})["changed"] == 1
    refused_events = AuditEvent.objects.for_tenant(alice.tenant).filter(outcome="INSUFFICIENT_SCOPE")
    assert refused_events.count() == len(attempts)
    stored = Label.objects.for_tenant(alice.tenant).get(pk=label)
    assert (stored.name, stored.description) == ("Receipts", RECEIPTS)
    assert Automation.objects.for_tenant(alice.tenant).get(state="active").content_hash == before

    # a person's change names the forwarding rule, and is approved as they confirm it
    proposal = refusal(as_person(alice), "set_label_description", {"label_id": label, "description": "bills"}).proposal
    assert proposal is not None and "forwarding rule" in proposal["summary"] and KEEPER in proposal["summary"]
    call(as_person(alice), "set_label_description", {"label_id": label, "description": "bills"}, confirm=True)
    live = Automation.objects.for_tenant(alice.tenant).filter(rule_id=rule["id"])
    assert sorted(live.values_list("state", flat=True)) == ["active", "cancelled"]
    assert live.get(state="active").content_hash != before

    # an agent with send: its change is a proposal for a person; the forward it replaces ends at once
    sender = as_agent(alice, scopes=SENDER)
    asked = {"label_id": label, "description": "receipts"}
    token = refusal(sender, "set_label_description", asked).proposal["token"]  # type: ignore[index]
    call(sender, "set_label_description", asked, confirmation_token=token)
    assert sorted(live.values_list("state", flat=True)) == ["awaiting_approval", "cancelled", "cancelled"]
    got = call(as_person(alice), "get_rule", {"rule_id": rule["id"]})
    assert got["forward_state"] == "awaiting_approval"
    # mallory's label, rule-less, is hers alone: nothing of hers changed or was refused
    assert not Automation.objects.for_tenant(mallory.tenant).exists()
    assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(outcome="INSUFFICIENT_SCOPE").exists()


def test_a_forward_is_checked_and_refusals_name_the_field_never_the_value(
    alice: Person, mallory: Person, boxes: dict[str, str]
) -> None:
    account = boxes["alice"]
    me = as_person(alice)
    workspace_wide = rule_body(account)
    del workspace_wide["account_id"]
    cases = [
        (workspace_wide, "account_id"),
        (rule_body(account, to="not an <address"), "actions.1.to"),
        (rule_body(account, to="x@evil.test\u202e"), "actions.1.to"),
    ]
    for data, field in cases:
        refused = refusal(me, "create_rule", data, confirm=True)
        assert (refused.code, refused.field) == ("INVALID_INPUT", field)
        assert "address" not in refused.message.split(":")[0] or "<" not in refused.message
        assert "evil" not in refused.message
    # another tenant's mailbox is absent
    assert refusal(me, "create_rule", rule_body(boxes["mallory"]), confirm=True).code == "NOT_FOUND"
    assert not Rule.objects.for_tenant(alice.tenant).exists()
    assert not Rule.objects.for_tenant(mallory.tenant).exists()
