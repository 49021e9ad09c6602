"""The Rules page (/rules) and why rules acted on a message (/mail), in headless Chromium, walked as a person: a rule
built in the editor, a refusal said beside the condition it names, Test showing the matches of imported mail and why
before anything is saved, saved through the gate's proposal (its 30-day count and examples); the engine acting on
new mail and the message saying "Rules applied"; the rule's history; turned off, moved, deleted, each through the
confirmation. At 1280 and 375 px, with the accessibility check. Another tenant's identical mail and rule never show,
and nothing of hers changes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from apps.mail.models import Message, MessageLabel
from apps.rules.models import Rule, RuleApplication
from apps.worker.rules import run
from tests.browser import look
from tests.callers import as_person, call
from tests.conftest import Person
from tests.mailfactory import raw_message
from tests.test_console_browser import _sign_in
from tests.test_rules import RECEIPTS, imported, labels_of, other_mail, shop_mail

if TYPE_CHECKING:
    from playwright.sync_api import Page


@pytest.mark.slow
def test_a_rule_is_built_tested_saved_applied_and_explained(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    imported(alice, tmp_path, shop_mail("a", 3) + other_mail("a", 2))
    imported(mallory, tmp_path, shop_mail("a", 3) + other_mail("a", 2), name="Mallory's")
    call(as_person(mallory), "create_rule", RECEIPTS | {"name": "Mallory secret rule"}, confirm=True)
    theirs = Message.objects.for_tenant(mallory.tenant)

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/rules")
    expect(page.locator('a[href="/rules"][aria-current="page"]')).to_have_text("Rules")
    expect(page.locator("#rules-list")).to_contain_text("No rule yet")
    expect(page.locator("#rule-scope option")).to_have_count(2)  # her workspace, and her one mailbox

    # the editor: a condition left empty is refused beside it, in words, by the operation itself
    page.fill("#rule-name", "Receipts")
    condition = page.locator(".rule-condition").first
    # each kind shows the inputs it takes ("about": what, and the least likeness, left to the server's default)
    condition.locator("select[data-kind]").select_option("about")
    expect(condition.locator(".rule-inputs [data-key]")).to_have_count(2)
    expect(condition.locator('[data-key="threshold"]')).to_have_value("")
    condition.locator("select[data-kind]").select_option("from")
    condition.locator('[data-key="op"]').select_option("domain")
    action = page.locator(".rule-action").first
    action.locator("select[data-kind]").select_option("add_label")
    action.locator('[data-key="label"]').fill("Receipts")
    page.click("#rule-test")
    expect(condition.locator(".errors")).to_be_visible()
    expect(condition.locator(".errors")).to_contain_text("Condition 1")
    condition.locator('[data-key="value"]').fill("shop.example")
    page.click("#rule-add-action")
    second = page.locator(".rule-action").nth(1)
    second.locator("select[data-kind]").select_option("skip_inbox")
    expect(second.locator(".rule-inputs [data-key]")).to_have_count(0)

    # Test: the matches of her past mail and why, before anything is saved
    page.click("#rule-test")
    result = page.locator("#rule-test-result")
    expect(result.locator(".rule-test-summary")).to_contain_text("3 match")
    expect(result.locator("tbody tr")).to_have_count(3)
    expect(result.locator("tbody tr").first).to_contain_text("from: domain shop.example")
    expect(result).to_contain_text("Your order")
    assert not Rule.objects.for_tenant(alice.tenant).exists()
    look(page, "rules-test")

    # saved through the proposal: what it would have done to the last 30 days, with examples by subject
    page.click("#rule-save")
    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator("[data-summary]")).to_contain_text("would have acted on 3 messages")
    expect(dialog.locator("[data-changes] li").first).to_contain_text("For example: Your order")
    look(page, "rules-confirm")
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_have_text("The rule Receipts is saved.")
    listed = page.locator("#rules-list tbody tr")
    expect(listed).to_have_count(1)
    expect(listed.first).to_contain_text("the sender is in the domain “shop.example”")
    expect(listed.first).to_contain_text("skip the inbox")
    expect(listed.first.locator('td[data-label="State"]')).to_have_text("On")
    look(page, "rules-list")

    # new mail: the engine acts on it as her, and the message says why
    imported(alice, tmp_path, shop_mail("new", 1))
    run()
    new = Message.objects.for_tenant(alice.tenant).select_related("folder").get(message_id="new-0@example.test")
    assert labels_of(alice, new) == {"Receipts"} and new.folder.kind == "archive"
    page.goto(f"/mail/t/{new.thread_id}")
    article = page.locator(f'article.thread-message[data-message-id="{new.pk}"]')
    applied = article.locator(".applied-rules")
    expect(applied).to_contain_text("Rules applied")
    expect(applied).to_contain_text("Receipts")
    expect(applied).to_contain_text("from: domain shop.example")
    expect(applied).to_contain_text("add label Receipts (done)")
    look(page, "mail-rules-applied")

    # the list counts it, and its history says what it did to which message
    page.goto("/rules")
    expect(listed.first).to_contain_text("1 message")
    listed.first.locator("button.rule-history-open").click()
    history = page.locator("#rule-history")
    expect(history).to_be_visible()
    expect(history).to_contain_text("Your order 0")
    expect(history).to_contain_text("Because from: domain shop.example")
    expect(history).to_contain_text("skip inbox (done)")
    look(page, "rules-history")

    # a second rule; then turned off, moved, deleted, each through the confirmation
    lunch = {"name": "Lunch", "conditions": [{"field": "subject", "op": "contains", "value": "lunch"}]}
    call(as_person(alice), "create_rule", lunch | {"actions": [{"action": "pin"}]}, confirm=True)
    page.goto("/rules")
    expect(listed).to_have_count(2)
    receipts = page.locator("#rules-list tbody tr", has_text="Receipts")
    receipts.locator("button.toggle-rule").click()
    expect(dialog).to_be_visible()
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_contain_text("The rule Receipts is off")
    expect(receipts.locator('td[data-label="State"]')).to_have_text("Off")
    assert not Rule.objects.for_tenant(alice.tenant).get(name="Receipts").enabled

    page.locator("#rules-list tbody tr", has_text="Lunch").locator("button.rule-up").click()
    expect(dialog).to_be_visible()
    expect(dialog.locator("[data-summary]")).to_contain_text("in this order")
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_have_text("The rules run in the new order.")
    expect(listed.first).to_contain_text("Lunch")
    order = Rule.objects.for_tenant(alice.tenant).order_by("position").values_list("name", flat=True)
    assert list(order) == ["Lunch", "Receipts"]
    look(page, "rules-reordered")

    # changed in the editor, then applied to existing mail: the two lunches are pinned and labelled
    lunch_row = page.locator("#rules-list tbody tr", has_text="Lunch")
    lunch_row.locator("button.edit-rule").click()
    expect(page.locator("#rule-editor-title")).to_have_text("Change the rule Lunch")
    expect(page.locator("#rule-name")).to_have_value("Lunch")
    expect(page.locator('.rule-condition [data-key="value"]')).to_have_value("lunch")
    page.click("#rule-add-action")
    added = page.locator(".rule-action").nth(1)
    added.locator("select[data-kind]").select_option("add_label")
    added.locator('[data-key="label"]').fill("Food")
    page.click("#rule-test")
    expect(page.locator("#rule-test-result .rule-test-summary")).to_contain_text("2 match")
    page.click("#rule-save")
    expect(dialog.locator("#confirm-title")).to_have_text("Change this rule?")
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_have_text("The rule Lunch is changed.")
    expect(lunch_row).to_contain_text("add the label “Food”")
    lunch_row.locator("button.apply-open").click()
    lunch_row.locator("form.apply-rule button[type=submit]").click()
    expect(dialog.locator("[data-summary]")).to_contain_text("2 messages")
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_contain_text("2 messages wait for the rule Lunch")
    run()
    lunches = Message.objects.for_tenant(alice.tenant).filter(subject__startswith="Lunch")
    assert all(m.pinned and labels_of(alice, m) == {"Food"} for m in lunches) and len(lunches) == 2

    receipts.locator('button[data-action="delete"]').click()
    expect(dialog).to_be_visible()
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_have_text("The rule Receipts is deleted.")
    expect(listed).to_have_count(1)
    assert list(Rule.objects.for_tenant(alice.tenant).values_list("name", flat=True)) == ["Lunch"]

    # a failing action shows on the rule; a stopped rule says why, and a person turns it on again
    broken = {"name": "Broken", "conditions": [{"field": "subject", "op": "contains", "value": "late"}]}
    nowhere = {"actions": [{"action": "move", "folder": "Nowhere"}]}
    made = call(as_person(alice), "create_rule", broken | nowhere, confirm=True)
    imported(alice, tmp_path, [raw_message(subject="late order", message_id="<late@example.test>")])
    run()
    Rule.objects.for_tenant(alice.tenant).filter(pk=made["id"]).update(stopped_reason="owner_lost_workspace")
    page.goto("/rules")
    broken_row = page.locator("#rules-list tbody tr", has_text="Broken")
    state = broken_row.locator('td[data-label="State"]')
    expect(state).to_contain_text("Stopped: its owner no longer reaches this workspace. Turn it on again to run it as")
    expect(state).to_contain_text("Last error: refused: the folder or label it names was not found")
    look(page, "rules-stopped")
    broken_row.locator("button.toggle-rule").click()
    page.click("#confirm-yes")
    expect(state).to_contain_text("On")
    assert Rule.objects.for_tenant(alice.tenant).get(pk=made["id"]).stopped_reason == ""

    # the message keeps its reason after the rule is gone
    page.goto(f"/mail/t/{new.thread_id}")
    expect(article.locator(".applied-rules")).to_contain_text("Receipts")

    content = page.content()
    assert "Mallory" not in content and "mallory" not in content
    page.goto("/rules")
    expect(listed).to_have_count(2)
    assert "Mallory" not in page.content()
    assert not MessageLabel.objects.for_tenant(mallory.tenant).exists()
    assert not RuleApplication.objects.for_tenant(mallory.tenant).exists()
    assert theirs.filter(folder__kind="inbox").count() == 5
