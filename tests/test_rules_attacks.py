"""Rules, attacked from outside (review 39b): ids of another tenant or workspace, an owner who lost authority, an
agent, a message waiting twice, a retried run, hostile input. Mallory, in another tenant, holds the same mail and
rules' names: nothing of hers is touched, found or used, and nothing of alice's reaches her.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from apps.mail.models import Message, MessageLabel
from apps.rules.models import Rule, RuleApplication, RulePending
from apps.workspaces.models import Membership, Workspace
from tests.callers import as_agent, as_person, call, joined, refusal
from tests.conftest import Person
from tests.test_rules import RECEIPTS, create, imported, labels_of, other_mail, run_rules, shop_mail

SHOP = [{"field": "from", "op": "domain", "value": "shop.example"}]


def _nothing_of_mallory_touched(mallory: Person) -> None:
    assert not MessageLabel.objects.for_tenant(mallory.tenant).exists()
    assert not RuleApplication.objects.for_tenant(mallory.tenant).exists()
    assert not Message.objects.for_tenant(mallory.tenant).filter(read=True).exists()
    assert not Message.objects.for_tenant(mallory.tenant).filter(pinned=True).exists()


def _team(alice: Person) -> tuple[Workspace, Person]:
    team = Workspace.objects.create(tenant=alice.tenant, name="team")
    return team, Person(alice.user, alice.tenant, team)


# ---------------------------------------------------------------- guessed ids: other tenants, other workspaces


def test_ids_of_another_tenant_or_an_unreached_workspace_find_nothing(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    team, in_team = _team(alice)
    team_account = imported(in_team, tmp_path, shop_mail("team", 2), name="Team mail")
    home_account = imported(alice, tmp_path, shop_mail("home", 2), name="Home mail")
    theirs = imported(mallory, tmp_path, shop_mail("team", 2), name="Team mail")
    team_rule = create(alice, RECEIPTS, account_id=team_account)
    their_rule = create(mallory, RECEIPTS, account_id=theirs)

    # mallory names alice's rule and mailbox in every rule operation: not found, never out of scope
    them = as_person(mallory)
    for name, data in [
        ("get_rule", {"rule_id": team_rule["id"]}),
        ("test_rule", {"rule_id": team_rule["id"]}),
        ("apply_rule", {"rule_id": team_rule["id"]}),
        ("update_rule", {"rule_id": team_rule["id"], "enabled": False}),
        ("delete_rule", {"rule_id": team_rule["id"]}),
        ("reorder_rules", {"rule_ids": [team_rule["id"], their_rule["id"]]}),
        ("create_rule", RECEIPTS | {"name": "Mine", "account_id": team_account}),
        ("test_rule", {"conditions": SHOP, "actions": [{"action": "pin"}], "account_id": team_account}),
    ]:
        assert refusal(them, name, data, confirm=True).code == "NOT_FOUND", name
    assert refusal(them, "test_rule", {"conditions": SHOP, "actions": [{"action": "pin"}], "workspace": "team"}).code

    # bob is given only the default workspace: the team's rule and mailbox are out of his scope, in every way
    bob = joined(alice, "bob@example.test")
    give = {"membership_id": str(Membership.objects.for_tenant(alice.tenant).get(user=bob.user).pk)}
    call(as_person(alice), "set_member_workspaces", give | {"workspace_ids": [str(alice.workspace.pk)]}, confirm=True)
    his = as_person(bob)
    for name, data in [
        ("get_rule", {"rule_id": team_rule["id"]}),
        ("test_rule", {"rule_id": team_rule["id"]}),
        ("apply_rule", {"rule_id": team_rule["id"]}),
        ("test_rule", {"conditions": SHOP, "actions": [{"action": "pin"}], "account_id": team_account}),
        ("test_rule", {"conditions": SHOP, "actions": [{"action": "pin"}], "workspace": "team"}),
        ("create_rule", RECEIPTS | {"name": "Mine", "workspace": "team"}),
        ("reorder_rules", {"workspace": "team", "rule_ids": [team_rule["id"]]}),
    ]:
        assert refusal(his, name, data, confirm=True).code == "OUT_OF_SCOPE", name
    # a team rule's id reordered in his own workspace is no rule of it; a mailbox of another workspace than named
    assert refusal(his, "reorder_rules", {"rule_ids": [team_rule["id"]]}, confirm=True).code == "NOT_FOUND"
    mixed = RECEIPTS | {"name": "Mixed", "workspace": "team", "account_id": home_account}
    assert refusal(as_person(alice), "create_rule", mixed, confirm=True).field == "account_id"
    assert [r["id"] for r in call(his, "list_rules")["rules"]] == []
    assert call(his, "list_rules", {"workspace": "team"})["rules"] == []
    assert team
    _nothing_of_mallory_touched(mallory)


# ---------------------------------------------------------------- the owner's authority, now


def test_an_admin_owner_demoted_to_a_member_of_other_workspaces_stops_the_rule(
    alice: Person, mallory: Person, tmp_path: Path, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    team, in_team = _team(alice)
    account = imported(in_team, tmp_path, other_mail("old", 1), name="Team mail")
    carol = joined(alice, "carol@example.test", role="ADMIN")
    membership = Membership.objects.for_tenant(alice.tenant).get(user=carol.user)
    membership.workspace_ids = [alice.workspace.pk]  # kept while she is an admin, applies once she is a member
    membership.save()
    rule = call(as_person(carol), "create_rule", RECEIPTS | {"account_id": account}, confirm=True)
    Membership.objects.for_tenant(alice.tenant).filter(user=carol.user).update(role="MEMBER")

    imported(in_team, tmp_path, shop_mail("after", 2), name="Team mail")
    imported(mallory, tmp_path, shop_mail("after", 2), name="Team mail")
    run_rules(django_capture_on_commit_callbacks)
    assert Rule.objects.for_tenant(alice.tenant).get(pk=rule["id"]).stopped_reason == "owner_lost_workspace"
    assert not MessageLabel.objects.for_tenant(alice.tenant).exists()
    assert not Message.objects.for_tenant(alice.tenant).filter(folder__kind="archive").exists()
    assert team
    _nothing_of_mallory_touched(mallory)


# ---------------------------------------------------------------- agents


def test_an_agent_proposes_every_change_and_never_sees_mail_text_unfenced(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    account = imported(alice, tmp_path, shop_mail("a", 3))
    imported(mallory, tmp_path, shop_mail("a", 3), name="Mallory's")
    rule = create(alice, RECEIPTS, account_id=account)
    agent = as_agent(alice, scopes={"read", "write"})
    for name, data in [
        ("create_rule", RECEIPTS | {"name": "Other", "account_id": account}),
        ("update_rule", {"rule_id": rule["id"], "name": "Renamed"}),
        ("delete_rule", {"rule_id": rule["id"]}),
        ("apply_rule", {"rule_id": rule["id"]}),
        ("reorder_rules", {"rule_ids": [rule["id"]]}),
    ]:
        asked = refusal(agent, name, data, confirm=True)  # `confirm` is a person's: an agent's is ignored
        assert asked.code == "CONFIRMATION_REQUIRED", name
        assert "Your order" not in str(asked.proposal), name
    assert not RulePending.objects.for_tenant(alice.tenant).exists()
    assert Rule.objects.for_tenant(alice.tenant).get(pk=rule["id"]).name == "Receipts"
    # the test's subjects reach it as untrusted mail text only (fenced by the gate's output), ids otherwise
    tested = call(agent, "test_rule", {"rule_id": rule["id"]})
    assert tested["matched"] == 3
    # an agent limited to another workspace reaches no rule of this one
    elsewhere = as_agent(alice, workspaces=("team",))
    assert refusal(elsewhere, "test_rule", {"rule_id": rule["id"]}).code == "OUT_OF_SCOPE"
    assert refusal(as_agent(mallory), "test_rule", {"rule_id": rule["id"]}).code == "NOT_FOUND"
    _nothing_of_mallory_touched(mallory)


# ---------------------------------------------------------------- once per rule version, and none forgotten


def test_a_message_waiting_as_new_mail_and_for_apply_rule_in_one_batch_gets_both(
    alice: Person, mallory: Person, tmp_path: Path, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    """New mail waits for every enabled rule; apply_rule queues it again for one (here a rule that is off). Both
    entries taken in one batch: each is served, neither forgotten."""
    account = imported(alice, tmp_path, other_mail("old", 1))
    create(alice, {"name": "Pin", "conditions": SHOP, "actions": [{"action": "pin"}]}, account_id=account)
    off = create(
        alice,
        {"name": "Label", "conditions": SHOP, "actions": [{"action": "add_label", "label": "L"}], "enabled": False},
        account_id=account,
    )
    also = create(
        alice,
        {"name": "Read", "conditions": SHOP, "actions": [{"action": "mark_read"}], "enabled": False},
        account_id=account,
    )
    imported(alice, tmp_path, shop_mail("new", 1))
    imported(mallory, tmp_path, shop_mail("new", 1), name="Mallory's")
    assert RulePending.objects.for_tenant(alice.tenant).filter(rule__isnull=True).count() == 1
    call(as_person(alice), "apply_rule", {"rule_id": off["id"]}, confirm=True)
    call(as_person(alice), "apply_rule", {"rule_id": also["id"]}, confirm=True)
    assert RulePending.objects.for_tenant(alice.tenant).count() == 3
    run_rules(django_capture_on_commit_callbacks)
    message = Message.objects.for_tenant(alice.tenant).get(message_id="new-0@example.test")
    assert message.pinned, "the new-mail entry was dropped"
    assert labels_of(alice, message) == {"L"} and message.read
    assert RuleApplication.objects.for_tenant(alice.tenant).filter(message=message).count() == 3
    assert not RulePending.objects.for_tenant(alice.tenant).exists()
    _nothing_of_mallory_touched(mallory)


def test_an_exception_rule_recorded_by_a_run_that_died_still_stops_the_rules_after_it(
    alice: Person, mallory: Person, tmp_path: Path, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    """A run commits the exception rule's record (one transaction per rule) and dies before the entry leaves the
    queue; the next run skips what is recorded, and must still not let the later rules act on the message."""
    account = imported(alice, tmp_path, other_mail("old", 1))
    keep = create(alice, {"name": "Keep", "conditions": SHOP, "actions": [{"action": "stop"}]}, account_id=account)
    create(alice, {"name": "Pin", "conditions": SHOP, "actions": [{"action": "pin"}]}, account_id=account)
    imported(alice, tmp_path, shop_mail("new", 1))
    imported(mallory, tmp_path, shop_mail("new", 1), name="Mallory's")
    message = Message.objects.for_tenant(alice.tenant).get(message_id="new-0@example.test")
    # what the dead run left: Keep's record committed, the entry still waiting (its lease over)
    RuleApplication.objects.create(
        tenant=alice.tenant, rule_id=keep["id"], rule_name="Keep", version=1, message=message, matched=["x"]
    )
    run_rules(django_capture_on_commit_callbacks)
    message.refresh_from_db()
    assert not message.pinned, "the exception was skipped as done, and the rule after it acted"
    assert not RulePending.objects.for_tenant(alice.tenant).exists()
    _nothing_of_mallory_touched(mallory)


# ---------------------------------------------------------------- hostile input


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"conditions": [{"field": "subject", "value": "s3cr3t" * 40}]}, "conditions.0"),
        ({"conditions": [{"field": "about", "text": "s3cr3t" * 40}]}, "conditions.0"),
        ({"conditions": [{"field": "about", "text": "s3cr3t", "threshold": 1.5}]}, "conditions.0"),
        ({"conditions": [{"field": "about", "text": "s3cr3t", "threshold": "NaN"}]}, "conditions.0"),
        ({"conditions": [{"field": "header", "name": "authorization", "value": "s3cr3t"}]}, "conditions.0"),
        ({"conditions": [{"field": "header", "name": "list-id", "value": "s3cr3t" * 40}]}, "conditions.0"),
        ({"conditions": [{"field": "s3cr3t", "value": "x"}]}, "conditions.0"),
        ({"conditions": [{"field": "subject", "value": "s3cr3t\x00"}]}, "conditions"),
        ({"conditions": [{"field": "age", "op": "older_than", "days": 10**30}]}, "conditions.0"),
        ({"conditions": [{"field": "from", "op": "is", "value": "x", "s3cr3t": 1}]}, "conditions.0"),
        ({"actions": [{"action": "add_label", "label": "s3cr3t" * 40}]}, "actions.0"),
        ({"actions": [{"action": "move", "folder": "s3cr3t\x00"}]}, "actions"),
        ({"actions": [{"action": "snooze", "days": 10**30}]}, "actions.0"),
        ({"conditions": SHOP * 21}, "conditions"),
        ({"name": "s3cr3t" * 40}, "name"),
        ({"match": "s3cr3t"}, "match"),
        ({"account_id": "s3cr3t"}, "account_id"),
    ],
)
def test_hostile_input_is_refused_naming_the_field_never_echoing_it(
    alice: Person, mallory: Person, change: dict[str, Any], field: str
) -> None:
    for name, data in [
        ("create_rule", RECEIPTS | change),
        ("test_rule", {k: v for k, v in (RECEIPTS | change).items() if k != "name"}),
    ]:
        if name == "test_rule" and "name" in change:
            continue
        refused = refusal(as_person(alice), name, data, confirm=True)
        # an id is opaque: one that names nothing is not found, like any unknown id
        expected = "NOT_FOUND" if field == "account_id" else "INVALID_INPUT"
        assert refused.code == expected, (name, refused.code, refused.message)
        assert (refused.field or "").startswith(field), (name, refused.field)
        assert "s3cr3t" not in refused.message and "s3cr3t" not in (refused.field or "")
    assert not Rule.objects.for_tenant(alice.tenant).exists()
    assert call(as_person(mallory), "list_rules")["rules"] == []


def test_regex_like_and_wildcard_values_are_plain_text(alice: Person, mallory: Person, tmp_path: Path) -> None:
    account = imported(alice, tmp_path, shop_mail("a", 2) + other_mail("a", 2))
    imported(mallory, tmp_path, shop_mail("a", 2), name="Mallory's")
    me = as_person(alice)
    for condition in [
        {"field": "subject", "value": ".*"},
        {"field": "subject", "value": "(a+)+$"},
        {"field": "from", "op": "domain", "value": "*"},
        {"field": "from", "op": "is", "value": "%"},
        {"field": "body", "value": "%_%"},
        {"field": "attachment", "type": "*/*"},
        {"field": "header", "name": "list-id", "op": "is", "value": ""},
    ]:
        given = {"conditions": [condition], "actions": [{"action": "pin"}], "account_id": account}
        tested = call(me, "test_rule", given)
        assert tested["matched"] == 0, condition
    _nothing_of_mallory_touched(mallory)


def test_a_rule_stopped_by_another_worker_meanwhile_does_not_break_the_batch(
    alice: Person,
    mallory: Person,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    """Two workers take two batches of one tenant; both find the rule of a departed owner running and stop it. The
    second's stop_rule is refused (stopped already): its batch goes on, its other rules act."""
    from apps.worker import rules as worker

    account = imported(alice, tmp_path, other_mail("old", 1))
    bob = joined(alice, "bob@example.test", role="ADMIN")
    left = call(as_person(bob), "create_rule", RECEIPTS | {"account_id": account}, confirm=True)
    create(alice, {"name": "Pin", "conditions": SHOP, "actions": [{"action": "pin"}]}, account_id=account)
    Membership.objects.for_tenant(alice.tenant).filter(user=bob.user).delete()
    imported(alice, tmp_path, shop_mail("new", 1))
    imported(mallory, tmp_path, shop_mail("new", 1), name="Mallory's")
    real = worker.call_internal

    def raced(tenant: Any, name: str, data: dict[str, Any]) -> Any:
        # the other worker stopped it first
        Rule.objects.for_tenant(tenant).filter(pk=data["rule_id"]).update(stopped_reason=data["reason"])
        return real(tenant, name, data)

    monkeypatch.setattr(worker, "call_internal", raced)
    run_rules(django_capture_on_commit_callbacks)
    assert Rule.objects.for_tenant(alice.tenant).get(pk=left["id"]).stopped_reason == "owner_left"
    assert Message.objects.for_tenant(alice.tenant).get(message_id="new-0@example.test").pinned
    assert not RulePending.objects.for_tenant(alice.tenant).exists()
    _nothing_of_mallory_touched(mallory)


def test_a_name_longer_than_the_column_is_refused_not_a_failure(alice: Person, mallory: Person) -> None:
    long_name = "n" * 150  # within Text's 200, past the column's 100
    refused = refusal(as_person(alice), "create_rule", RECEIPTS | {"name": long_name}, confirm=True)
    assert (refused.code, refused.field) == ("INVALID_INPUT", "name")
    assert long_name not in refused.message
    made = create(alice, RECEIPTS)
    refused = refusal(as_person(alice), "update_rule", {"rule_id": made["id"], "name": long_name}, confirm=True)
    assert (refused.code, refused.field) == ("INVALID_INPUT", "name")
    assert Rule.objects.for_tenant(alice.tenant).get().name == "Receipts"
    assert call(as_person(mallory), "list_rules")["rules"] == []


def test_stop_rule_is_the_engines_alone(alice: Person, mallory: Person) -> None:
    made = create(alice, RECEIPTS)
    stop = {"rule_id": made["id"], "reason": "owner_left"}
    for caller in (as_person(alice), as_agent(alice), as_person(mallory)):
        assert refusal(caller, "stop_rule", stop, confirm=True).code == "NOT_AVAILABLE"
    assert Rule.objects.for_tenant(alice.tenant).get().stopped_reason == ""
    assert call(as_person(mallory), "list_rules")["rules"] == []
