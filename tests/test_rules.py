"""Rules (issue 39, items 1-2): rules through the gate, and the engine acting on new mail (apps.worker.rules).

A rule acts later, by itself, as its owner (Caller.standing: never more than the owner may do now), each action a
gate call on the internal door audited with the rule as its credential, each message once per rule version. Mallory,
in another tenant, holds identical mail and rules' names: nothing of hers is touched, found or used.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.mail.importing import import_mail
from apps.mail.models import FolderKind, MailAccount, Message, MessageLabel
from apps.rules.conditions import Facts, RuleBody, decide
from apps.rules.models import Rule, RuleApplication, RulePending
from apps.search.indexing import enrich_pending
from apps.worker.rules import run
from apps.workspaces.models import Membership, Workspace
from tests.callers import as_agent, as_person, call, joined, refusal
from tests.conftest import Person
from tests.imapbox import by_message_id, connect, eager, sync  # noqa: F401 (eager: a fixture)
from tests.mailfactory import raw_message, write_mbox
from tests.mailservers import ImapServer, SmtpServer

RECEIPTS: dict[str, Any] = {
    "name": "Receipts",
    "conditions": [{"field": "from", "op": "domain", "value": "shop.example"}],
    "actions": [{"action": "add_label", "label": "Receipts"}, {"action": "skip_inbox"}],
}


def recent(days: float) -> Any:
    return timezone.now() - timedelta(days=days)


def mbox_of(tmp: Path, name: str, messages: list[bytes]) -> Path:
    """A new mbox file of its own (an mbox written again would add to what it holds)."""
    return write_mbox(tmp / f"{name}-{uuid.uuid4().hex}.mbox", messages)


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
        raw_message(subject=f"Lunch {i}", message_id=f"<{prefix}-other-{i}@example.test>", date=recent(days + i / 100))
        for i in range(n)
    ]


def on_server(server: ImapServer, user: str, name: str) -> list[bytes]:
    return sorted(raw.split(b"Message-ID: ")[1].split(b"\r\n")[0] for _, raw, _ in server.folder_messages(user, name))


def rule_events(p: Person, rule_id: str) -> list[AuditEvent]:
    rows = AuditEvent.objects.for_tenant(p.tenant).filter(credential_kind="rule", credential_id=rule_id)
    return list(rows.order_by("seq"))


def run_rules(capture: Callable[..., Any]) -> int:
    """The engine's run, its commit hooks (the pushes to the server) run as a worker's would."""
    with capture(execute=True):
        return run()


# ---------------------------------------------------------------- new mail, on a real server


@pytest.mark.usefixtures("eager")
def test_a_rule_labels_and_archives_new_mail_once_across_syncs_and_duplicate_deliveries(
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    account, user = connect(alice, imap_server, smtp_server)
    theirs, their_user = connect(mallory, imap_server, smtp_server)
    for who in (user, their_user):
        with imap_server.client(who) as c:
            c.create_folder("Archive")
    sync(account)
    sync(theirs)
    with django_capture_on_commit_callbacks(execute=True):
        rule = create(alice, RECEIPTS, account_id=account)
    # her rule's name and conditions are Mallory's too: nothing of one tenant's rules reaches the other's mail
    create(mallory, RECEIPTS | {"conditions": [{"field": "from", "op": "domain", "value": "elsewhere.example"}]})

    order, lunch = shop_mail("new", 1)[0], other_mail("new", 1)[0]
    for who in (user, their_user):
        imap_server.append(who, "INBOX", order)
        imap_server.append(who, "INBOX", order)  # delivered twice
        imap_server.append(who, "INBOX", lunch)
    sync(account)
    sync(theirs)
    run_rules(django_capture_on_commit_callbacks)
    sync(account)  # synced again, and the engine run again: nothing more happens
    imap_server.append(user, "INBOX", order)  # and a third delivery of the same message
    sync(account)
    run_rules(django_capture_on_commit_callbacks)

    held = by_message_id(alice, account)
    assert sorted(held) == ["new-0@example.test", "new-other-0@example.test"]
    acted = held["new-0@example.test"]
    assert acted.folder.kind == FolderKind.ARCHIVE and labels_of(alice, acted) == {"Receipts"}
    assert held["new-other-0@example.test"].folder.kind == FolderKind.INBOX
    assert not labels_of(alice, held["new-other-0@example.test"])
    assert on_server(imap_server, user, "Archive") == [b"<new-0@example.test>"]
    # the server's extra copies of a message delivered again are one message in Oaken (the store keeps one of the
    # same Message-ID and content): the rule moved the copy Oaken holds, the others stay where they were delivered
    assert on_server(imap_server, user, "INBOX") == [b"<new-0@example.test>"] * 2 + [b"<new-other-0@example.test>"]
    applied = RuleApplication.objects.for_tenant(alice.tenant).filter(rule_id=rule["id"])
    assert [(a.message_id, a.matched) for a in applied] == [(acted.pk, ["from: domain shop.example"])]

    # each action a gate call on the internal door, as alice, naming the rule; once each
    events = rule_events(alice, rule["id"])
    assert [(e.operation, e.outcome, e.door, e.person_id) for e in events] == [
        ("create_label", "ok", "internal", alice.user.pk),
        ("add_labels", "ok", "internal", alice.user.pk),
        ("move_messages", "ok", "internal", alice.user.pk),
    ]
    assert all(e.principal == "person" for e in events)
    # the audit log says so in words: the rule, and whose it is
    log = call(as_person(alice), "list_audit_events", {"operation": "add_labels"})["events"]
    assert [e["description"] for e in log] == ["rule Receipts of alice@example.test add labels on 1 message"]
    # the message says why, in get_message and its audit trail holds no mail text
    why = call(as_person(alice), "get_message", {"message_id": str(acted.pk)})["message"]["applied_rules"]
    assert [(w["rule_id"], w["rule"], w["matched"], w["actions"]) for w in why] == [
        (
            rule["id"],
            "Receipts",
            ["from: domain shop.example"],
            [{"action": "add label Receipts", "outcome": "ok"}, {"action": "skip inbox", "outcome": "ok"}],
        )
    ]
    assert "Your order" not in str([e.targets for e in events])
    listed = call(as_person(alice), "get_rule", {"rule_id": rule["id"]})
    assert listed["applied_count"] == 1 and [h["message_id"] for h in listed["history"]] == [str(acted.pk)]

    # mallory's identical mail: untouched, on her server too; alice's rule is not hers to see
    for m in by_message_id(mallory, theirs).values():
        assert m.folder.kind == FolderKind.INBOX and not labels_of(mallory, m)
    assert on_server(imap_server, their_user, "Archive") == []
    assert refusal(as_person(mallory), "get_rule", {"rule_id": rule["id"]}).code == "NOT_FOUND"
    assert [r["name"] for r in call(as_person(mallory), "list_rules")["rules"]] == ["Receipts"]
    assert not RuleApplication.objects.for_tenant(mallory.tenant).exists()
    assert not RulePending.objects.for_tenant(alice.tenant).exists()


# ---------------------------------------------------------------- test_rule and apply_rule


def _five_hundred(prefix: str) -> list[bytes]:
    shop = [
        raw_message(
            subject=f"Order {i} shipped",
            sender="Shop <orders@shop.example>",
            message_id=f"<{prefix}-shop-{i}@example.test>",
            date=recent(1 + i / 20),
            extra_headers=[("List-Id", "Shop news <news.shop.example>")] if i % 3 == 0 else [],
        )
        for i in range(200)
    ]
    others = [
        raw_message(
            subject=f"Minutes {i}",
            sender="Bob <bob@team.example>",
            message_id=f"<{prefix}-team-{i}@example.test>",
            date=recent(1 + i / 20),
            body="The shop.example order went out.\n",  # the domain in the body is no sender
        )
        for i in range(300)
    ]
    return shop + others


def test_test_rule_on_500_imported_messages_reports_the_set_apply_rule_then_changes(
    alice: Person, mallory: Person, tmp_path: Path, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    account = imported(alice, tmp_path, _five_hundred("a"))
    theirs = imported(mallory, tmp_path, _five_hundred("a"), name="Mallory's")
    body = {
        "name": "Shop news",
        "match": "any",
        "conditions": [
            {"field": "from", "op": "domain", "value": "shop.example"},
            {"field": "list_id", "value": "news.shop.example"},
        ],
        "actions": [{"action": "add_label", "label": "Shop"}, {"action": "mark_read"}],
    }
    rule = create(alice, body, account_id=account)
    me = as_person(alice)
    tested = call(me, "test_rule", {"rule_id": rule["id"], "days": 30, "limit": 5})
    assert (tested["scanned"], tested["complete"], tested["matched"]) == (500, True, 200)
    assert next(m["why"] for m in tested["matches"]) == ["from: domain shop.example"]
    assert not MessageLabel.objects.for_tenant(alice.tenant).exists()  # a test changes nothing
    # the same rule given whole, unsaved, finds the same
    unsaved = {k: v for k, v in body.items() if k != "name"} | {"account_id": account}
    assert sorted(call(me, "test_rule", unsaved)["message_ids"]) == sorted(tested["message_ids"])

    asked = refusal(me, "apply_rule", {"rule_id": rule["id"], "days": 30})
    assert asked.code == "CONFIRMATION_REQUIRED" and asked.proposal is not None
    assert asked.proposal["count"] == 200
    assert not RulePending.objects.for_tenant(alice.tenant).exists()
    assert call(me, "apply_rule", {"rule_id": rule["id"], "days": 30}, confirm=True)["queued"] == 200
    run_rules(django_capture_on_commit_callbacks)

    labelled = MessageLabel.objects.for_tenant(alice.tenant).filter(label__name="Shop")
    assert sorted(str(m) for m in labelled.values_list("message_id", flat=True)) == sorted(tested["message_ids"])
    read = Message.objects.for_tenant(alice.tenant).filter(account_id=account, read=True)
    assert sorted(str(m) for m in read.values_list("pk", flat=True)) == sorted(tested["message_ids"])
    # applied again, it queues them again, and the engine does nothing twice at the same version
    call(me, "apply_rule", {"rule_id": rule["id"], "days": 30}, confirm=True)
    run_rules(django_capture_on_commit_callbacks)
    assert RuleApplication.objects.for_tenant(alice.tenant).count() == 200
    marked = [e for e in rule_events(alice, rule["id"]) if e.operation == "mark_read"]
    assert sorted(t["id"] for e in marked for t in e.targets) == sorted(tested["message_ids"])  # each once
    assert not Message.objects.for_tenant(mallory.tenant).filter(account_id=theirs, read=True).exists()
    assert not MessageLabel.objects.for_tenant(mallory.tenant).exists()
    assert refusal(as_person(mallory), "test_rule", {"rule_id": rule["id"]}).code == "NOT_FOUND"


# ---------------------------------------------------------------- agents propose


def test_an_agents_rule_is_a_proposal_and_changes_nothing_until_a_person_confirms(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    account = imported(alice, tmp_path, shop_mail("a", 5) + other_mail("a", 4))
    agent = as_agent(alice, scopes={"read", "write"})
    asked = refusal(agent, "create_rule", RECEIPTS | {"account_id": account})
    assert asked.code == "CONFIRMATION_REQUIRED"
    proposal = asked.proposal
    assert proposal is not None
    assert "would have acted on 5 messages" in proposal["summary"]
    assert len(proposal["changes"]) == 3  # three examples, by message id: an agent's answer holds no mail text
    assert "Your order" not in str(proposal)
    assert not Rule.objects.for_tenant(alice.tenant).exists()
    made = call(agent, "create_rule", RECEIPTS | {"account_id": account}, confirmation_token=proposal["token"])
    assert made["owner"] == alice.user.email

    # changing or enabling it again asks, however small the change; a person is shown subjects as examples
    assert refusal(agent, "update_rule", {"rule_id": made["id"], "enabled": False}).code == "CONFIRMATION_REQUIRED"
    mine = refusal(as_person(alice), "update_rule", {"rule_id": made["id"], "name": "Shop"})
    assert (
        mine.code == "CONFIRMATION_REQUIRED"
        and mine.proposal is not None
        and any("Your order" in line for line in mine.proposal["lines"])
    )
    reader = as_agent(alice, scopes={"read"})
    assert refusal(reader, "create_rule", RECEIPTS | {"account_id": account}).code == "INSUFFICIENT_SCOPE"
    assert [r["id"] for r in call(reader, "list_rules")["rules"]] == [made["id"]]
    assert call(as_person(mallory), "list_rules")["rules"] == []


# ---------------------------------------------------------------- the owner's authority


def test_a_rule_whose_owner_lost_its_workspace_stops_and_says_so(
    alice: Person, mallory: Person, tmp_path: Path, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    team = Workspace.objects.create(tenant=alice.tenant, name="team")
    in_team = Person(alice.user, alice.tenant, team)
    account = imported(in_team, tmp_path, other_mail("old", 1), name="Team mail")
    bob = joined(alice, "bob@example.test")
    give = {"membership_id": str(Membership.objects.for_tenant(alice.tenant).get(user=bob.user).pk)}
    call(as_person(alice), "set_member_workspaces", give | {"workspace_ids": [str(team.pk)]}, confirm=True)
    rule = call(as_person(bob), "create_rule", RECEIPTS | {"workspace": "team"}, confirm=True)
    assert rule["owner"] == "bob@example.test"

    call(as_person(alice), "set_member_workspaces", give | {"workspace_ids": []}, confirm=True)
    imported(in_team, tmp_path, shop_mail("after", 2), name="Team mail")
    run_rules(django_capture_on_commit_callbacks)
    stopped = call(as_person(alice), "get_rule", {"rule_id": rule["id"]})
    assert (stopped["stopped"], stopped["applied_count"]) == ("owner_lost_workspace", 0)
    assert not MessageLabel.objects.for_tenant(alice.tenant).exists()
    assert [e.outcome for e in AuditEvent.objects.for_tenant(alice.tenant).filter(operation="stop_rule")] == ["ok"]
    assert not rule_events(alice, rule["id"])  # nothing done as bob
    assert refusal(as_person(alice), "apply_rule", {"rule_id": rule["id"]}, confirm=True).code == "CONFLICT"

    # alice confirms it again: it acts as her from then on
    again = call(as_person(alice), "update_rule", {"rule_id": rule["id"], "enabled": True}, confirm=True)
    assert (again["stopped"], again["owner"], again["version"]) == (None, "alice@example.test", 2)
    imported(in_team, tmp_path, shop_mail("later", 1), name="Team mail")
    run_rules(django_capture_on_commit_callbacks)
    assert {e.person_id for e in rule_events(alice, rule["id"])} == {alice.user.pk}
    assert call(as_person(alice), "get_rule", {"rule_id": rule["id"]})["applied_count"] == 1
    assert account

    # an owner who leaves the tenant stops it too
    again = call(as_person(alice), "update_rule", {"rule_id": rule["id"], "enabled": True}, confirm=True)
    Membership.objects.for_tenant(alice.tenant).filter(user=alice.user).update(role="MEMBER")
    Rule.objects.for_tenant(alice.tenant).filter(pk=rule["id"]).update(owner=bob.user)
    Membership.objects.for_tenant(alice.tenant).filter(user=bob.user).delete()
    imported(in_team, tmp_path, shop_mail("gone", 1), name="Team mail")
    run_rules(django_capture_on_commit_callbacks)
    assert Rule.objects.for_tenant(alice.tenant).get(pk=rule["id"]).stopped_reason == "owner_left"

    # and so does an owner who is still a member but deactivated (their keys and connections stopped with them)
    Membership.objects.for_tenant(alice.tenant).filter(user=alice.user).update(role="ADMIN")
    again = call(as_person(alice), "update_rule", {"rule_id": rule["id"], "enabled": True}, confirm=True)
    assert again["owner"] == "alice@example.test"
    type(alice.user).objects.filter(pk=alice.user.pk).update(is_active=False)
    imported(in_team, tmp_path, shop_mail("inactive", 1), name="Team mail")
    run_rules(django_capture_on_commit_callbacks)
    assert Rule.objects.for_tenant(alice.tenant).get(pk=rule["id"]).stopped_reason == "owner_left"
    assert not MessageLabel.objects.for_tenant(alice.tenant).filter(message__message_id="inactive-0@example.test")
    assert not RuleApplication.objects.for_tenant(mallory.tenant).exists()


# ---------------------------------------------------------------- order, stop, failures


def test_rules_run_in_order_stop_ends_them_and_a_failing_action_blocks_nothing_else(
    alice: Person, mallory: Person, tmp_path: Path, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    account = imported(alice, tmp_path, other_mail("old", 1))
    shop = [{"field": "from", "op": "domain", "value": "shop.example"}]
    broken = create(
        alice,
        {"name": "Broken", "conditions": shop, "actions": [{"action": "move", "folder": "Nowhere"}]},
        account_id=account,
    )
    first = create(
        alice,
        {"name": "First", "conditions": shop, "actions": [{"action": "add_label", "label": "One"}, {"action": "stop"}]},
        account_id=account,
    )
    second = create(alice, {"name": "Second", "conditions": shop, "actions": [{"action": "pin"}]}, account_id=account)
    imported(alice, tmp_path, shop_mail("a", 2))
    run_rules(django_capture_on_commit_callbacks)
    shop_rows = Message.objects.for_tenant(alice.tenant).filter(sender_address__endswith="shop.example")
    assert all(labels_of(alice, m) == {"One"} and not m.pinned for m in shop_rows)
    failed = call(as_person(alice), "get_rule", {"rule_id": broken["id"]})
    assert failed["last_error"] == "NOT_FOUND" and failed["applied_count"] == 2
    assert {h["actions"][0]["outcome"] for h in failed["history"]} == {"NOT_FOUND"}

    # second before first: both act on the next mail (first's stop comes after second)
    order = [broken["id"], second["id"], first["id"]]
    call(as_person(alice), "reorder_rules", {"rule_ids": order}, confirm=True)
    assert [r["id"] for r in call(as_person(alice), "list_rules")["rules"]] == order
    imported(alice, tmp_path, shop_mail("b", 1))
    run_rules(django_capture_on_commit_callbacks)
    latest = Message.objects.for_tenant(alice.tenant).get(message_id="b-0@example.test")
    assert latest.pinned and labels_of(alice, latest) == {"One"}
    refused = refusal(as_person(alice), "reorder_rules", {"rule_ids": [first["id"], first["id"]]}, confirm=True)
    assert (refused.code, refused.field) == ("INVALID_INPUT", "rule_ids")
    other = refusal(as_person(mallory), "reorder_rules", {"rule_ids": [first["id"]]}, confirm=True)
    assert (other.code, other.field) == ("NOT_FOUND", "rule_ids")

    # an exception: a rule that only stops, put first (the others keep their order after it), leaves the mail alone
    keep = create(alice, {"name": "Keep", "conditions": shop, "actions": [{"action": "stop"}]}, account_id=account)
    call(as_person(alice), "reorder_rules", {"rule_ids": [keep["id"]]}, confirm=True)
    assert [r["id"] for r in call(as_person(alice), "list_rules")["rules"]] == [keep["id"], *order]
    imported(alice, tmp_path, shop_mail("c", 1))
    run_rules(django_capture_on_commit_callbacks)
    untouched = Message.objects.for_tenant(alice.tenant).get(message_id="c-0@example.test")
    assert not untouched.pinned and labels_of(alice, untouched) == set()
    assert not Message.objects.for_tenant(mallory.tenant).exists()


# ---------------------------------------------------------------- input


def test_a_bad_rule_is_refused_naming_the_field_and_never_echoing_it(alice: Person, mallory: Person) -> None:
    me = as_person(alice)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"conditions": [{"field": "from", "op": "regex", "value": "x"}]}, "conditions.0"),
        ({"conditions": []}, "conditions"),
        ({"actions": [{"action": "snooze", "days": 0}]}, "actions.0"),
        ({"conditions": [{"field": "header", "name": "x-evil-secret-999", "value": "v"}]}, "conditions.0"),
        ({"name": ""}, "name"),
    ]
    for change, field in cases:
        refused = refusal(me, "create_rule", RECEIPTS | change, confirm=True)
        assert refused.code == "INVALID_INPUT", (change, refused.code)
        assert (refused.field or "").startswith(field) and refused.field, (change, refused.field)
        assert "evil-secret" not in refused.message
    call(me, "create_rule", RECEIPTS, confirm=True)
    again = refusal(me, "create_rule", RECEIPTS, confirm=True)
    assert (again.code, again.field) == ("CONFLICT", "name")
    assert refusal(as_person(mallory), "reorder_rules", {"rule_ids": ["not-a-rule"]}, confirm=True).code == "NOT_FOUND"
    assert refusal(me, "test_rule", {"days": 30}).field == "conditions"


# ---------------------------------------------------------------- about: by meaning


def test_an_about_condition_waits_for_the_embedding_then_matches_by_meaning(
    alice: Person, mallory: Person, tmp_path: Path, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    account = imported(alice, tmp_path, other_mail("old", 1))
    rule = create(
        alice,
        {
            "name": "Bills",
            "conditions": [{"field": "about", "text": "invoices and payment reminders"}],
            "actions": [{"action": "add_label", "label": "Bills"}],
        },
        account_id=account,
    )
    texts = [
        ("Invoice 4411 is due", "Your invoice for November is attached. Payment is due within 14 days.\n"),
        ("Payment reminder", "We have not received payment for the bill we sent last month. Please pay it.\n"),
        ("Hiking on Saturday", "Shall we walk up the hill on Saturday morning? Bring boots and a sandwich.\n"),
        ("Team lunch", "Lunch is at noon in the canteen, see you there.\n"),
    ]
    mail = [
        raw_message(subject=s, body=b, message_id=f"<about-{i}@example.test>", date=recent(0.5))
        for i, (s, b) in enumerate(texts)
    ]
    imported(alice, tmp_path, mail)
    imported(mallory, tmp_path, mail, name="Mallory's")
    assert run_rules(django_capture_on_commit_callbacks) == 4
    waiting = RulePending.objects.for_tenant(alice.tenant)
    assert waiting.count() == 4 and all(w.not_before is not None for w in waiting)  # put off: not embedded yet
    assert not RuleApplication.objects.for_tenant(alice.tenant).exists()

    enrich_pending(seconds=60)
    waiting.update(not_before=None)
    run_rules(django_capture_on_commit_callbacks)
    labelled = MessageLabel.objects.for_tenant(alice.tenant).filter(label__name="Bills").select_related("message")
    assert sorted(m.message.subject for m in labelled) == ["Invoice 4411 is due", "Payment reminder"]
    why = RuleApplication.objects.for_tenant(alice.tenant).filter(rule_id=rule["id"]).values_list("matched", flat=True)
    assert all(w[0].startswith("about 'invoices and payment reminders': 0.") for w in why)
    assert not MessageLabel.objects.for_tenant(mallory.tenant).exists()
    assert not RulePending.objects.for_tenant(alice.tenant).exists()


# ---------------------------------------------------------------- each condition, in its own words


def facts(**given: Any) -> Facts:
    base: dict[str, Any] = {
        "id": 1,
        "account_id": 1,
        "workspace_id": 1,
        "sender_address": "news@mail.shop.example",
        "sender_name": "Shop News",
        "recipients": [("alice@example.test", "Alice"), ("team@corp.example", "")],
        "subject": "Your weekly deals",
        "body": "Fifty percent off boots.",
        "headers": {"list-id": "Deals <deals.shop.example>", "precedence": "bulk"},
        "folder_kind": "inbox",
        "folder_name": "INBOX",
        "date": timezone.now() - timedelta(days=10),
        "attachments": [("application/pdf", "deals.PDF"), ("image/png", "logo.png")],
    }
    return Facts(**base | given)


@pytest.mark.parametrize(
    ("condition", "why"),
    [
        ({"field": "from", "op": "domain", "value": "shop.example"}, "from: domain shop.example"),
        ({"field": "from", "op": "domain", "value": "@SHOP.example"}, "from: domain @SHOP.example"),
        ({"field": "from", "op": "domain", "value": "hop.example"}, None),  # a domain is whole, not a suffix
        ({"field": "from", "op": "is", "value": "News@Mail.Shop.Example"}, "from: is News@Mail.Shop.Example"),
        ({"field": "from", "op": "contains", "value": "shop news"}, "from: contains shop news"),
        ({"field": "to", "op": "domain", "value": "corp.example"}, "to: domain corp.example"),
        ({"field": "to", "op": "is", "value": "bob@example.test"}, None),
        ({"field": "subject", "value": "WEEKLY"}, "subject: contains WEEKLY"),
        ({"field": "subject", "op": "is", "value": "weekly"}, None),
        ({"field": "body", "value": "boots"}, "body: contains boots"),
        ({"field": "list_id", "value": "deals.shop"}, "list_id: contains deals.shop"),
        ({"field": "header", "name": "precedence", "op": "is", "value": "Bulk"}, "header precedence: is Bulk"),
        ({"field": "header", "name": "auto-submitted", "op": "present"}, None),
        ({"field": "attachment", "type": ".pdf"}, "attachment: .pdf"),
        ({"field": "attachment", "type": "image/*"}, "attachment: image/*"),
        ({"field": "attachment", "type": "application/zip"}, None),
        ({"field": "folder", "value": "inbox"}, "folder: inbox"),
        ({"field": "folder", "value": "archive"}, None),
        ({"field": "age", "op": "older_than", "days": 7}, "age: older than 7 days"),
        ({"field": "age", "op": "newer_than", "days": 7}, None),
        ({"field": "about", "text": "shoes on sale"}, None),  # not embedded: no score, no match
    ],
)
def test_each_condition_says_why_it_holds(condition: dict[str, Any], why: str | None) -> None:
    body = RuleBody.model_validate({"conditions": [condition], "actions": [{"action": "pin"}]})
    assert decide(body, facts(), timezone.now()) == (None if why is None else [why])


def test_all_needs_every_condition_and_any_the_first_that_holds() -> None:
    held = {"field": "subject", "value": "deals"}
    missed = {"field": "subject", "value": "invoice"}
    about = {"field": "about", "text": "shoes on sale", "threshold": 0.4}
    for match, conditions, expected in [
        ("all", [held, missed], None),
        ("all", [held, about], ["subject: contains deals", "about 'shoes on sale': 0.41 (at least 0.40)"]),
        ("any", [missed, held, about], ["subject: contains deals"]),
        ("any", [missed], None),
    ]:
        body = RuleBody.model_validate({"match": match, "conditions": conditions, "actions": [{"action": "pin"}]})
        assert decide(body, facts(nearness={"shoes on sale": 0.41}), timezone.now()) == expected
