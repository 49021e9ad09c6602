"""The audit log page in headless Chromium, walked as a person: what one key did (from the Keys page), filters,
paging, Verify ("intact, N events, head hash …", then the first broken event named), Export, and the exported
file verified offline before and after one byte of it is edited. Another tenant's events never show."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from apps.audit import chainfile
from apps.audit.models import AuditEvent
from tests.browser import look
from tests.callers import as_agent, as_person, call, joined
from tests.commands import run_json
from tests.conftest import Person
from tests.mailbox import build_mailbox
from tests.test_audit import _triggers_off
from tests.test_audit_ops import _key
from tests.test_console_browser import _sign_in
from tests.test_send_budgets import _connection

if TYPE_CHECKING:
    from playwright.sync_api import Page


@pytest.mark.slow
def test_a_person_reads_verifies_and_exports_the_audit_log(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, tmp_path: Path, settings: Any
) -> None:
    from playwright.sync_api import expect

    box = build_mailbox(alice, tmp_path / "a", prefix="alice", with_work=False)
    theirs = build_mailbox(mallory, tmp_path / "m", prefix="mallory", with_work=False)
    key, agent = _key(alice, "laptop script")
    call(agent, "get_message", {"message_id": box.messages["zeppelin"]})
    call(agent, "mark_read", {"message_ids": box.ids("trip-0", "trip-1")})
    connection = _connection(alice)
    assistant = as_agent(alice, credential_id=str(connection.pk), credential_kind="oauth")
    call(assistant, "list_accounts")
    _, their_agent = _key(mallory, "mallory's secret bot")
    call(their_agent, "mark_read", {"message_ids": theirs.ids("trip-0")})
    page = browser_page
    _sign_in(page, alice, live_server.url)

    # from the Keys page: what this key did
    page.goto("/keys")
    page.locator(f'#keys-list tr[data-key-id="{key.pk}"] a[data-action=audit]').click()
    page.wait_for_url("**/audit?*")
    expect(page.locator("#audit-title")).to_have_text(f"What API key laptop script ({key.prefix}_…) did")
    rows = page.locator("#audit-list tr[data-seq]")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text(f"API key laptop script ({key.prefix}_…) for alice@example.test")
    expect(rows.first).to_contain_text("mark read on 2 messages over MCP")
    expect(rows.nth(1)).to_contain_text("get message over MCP")
    look(page, "audit-credential")

    # from the Connections page: what this assistant did
    page.goto("/connections")
    page.locator(f'#connections-list tr[data-connection-id="{connection.pk}"] a[data-action=audit]').click()
    expect(page.locator("#audit-title")).to_have_text("What connection Desk assistant did")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("connection Desk assistant for alice@example.test list accounts over MCP")

    # the whole log, filtered and paged (with the console's own reads shown, as the default view folds them)
    settings.OPERATIONS = {**settings.OPERATIONS, "PAGE_SIZE_DEFAULT": 5}
    page.goto("/audit?console_reads=show")
    expect(page.locator("#filter-reads")).to_be_checked()
    expect(rows).to_have_count(5)
    page.click("#audit-more")
    expect(rows).to_have_count(10)
    seqs = [int(s) for s in rows.evaluate_all("rows => rows.map(r => r.dataset.seq)")]
    assert seqs == sorted(seqs, reverse=True) and len(set(seqs)) == 10  # newest first, nothing twice
    page.select_option("#filter-principal", "agent")
    page.click("#audit-filters button[type=submit]")
    expect(rows).to_have_count(3)
    page.select_option("#filter-principal", "")
    page.fill("#filter-operation", "create_label")
    page.click("#audit-filters button[type=submit]")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("alice@example.test create label on 1 label in the console")
    page.fill("#filter-operation", "")
    page.fill("#filter-since", "2999-01-01T00:00")
    page.click("#audit-filters button[type=submit]")
    expect(page.locator("#audit-list")).to_contain_text("No events match.")
    page.click("#filter-clear")
    expect(rows).to_have_count(5)
    html = page.content()
    assert "mallory" not in html.lower() and str(mallory.tenant.pk) not in html
    for text in box.mail_strings():
        assert text not in html

    # verify: intact, with the head's hash
    page.click("#verify-chain")
    result = page.locator("#verify-result")
    expect(result).to_contain_text("Intact, ")
    found = re.fullmatch(r"Intact, (\d+) events, head hash ([0-9a-f]{64})\.", result.inner_text())
    assert found is not None
    head = AuditEvent.objects.for_tenant(alice.tenant).get(seq=int(found.group(1)))
    assert head.hash == found.group(2)
    expect(page.locator("#verify-head")).to_contain_text(f"Checked up to event #{head.seq} (hash {head.hash}).")
    look(page, "audit")

    # "Export up to this point": the export ends at the head Verify checked, though Verify's own event came after
    with page.expect_download() as verified_download:
        page.click("#export-verified")
    upto = tmp_path / "verified.jsonl"
    verified_download.value.save_as(upto)
    assert verified_download.value.suggested_filename == f"audit-{alice.tenant.pk}-to-{head.seq}.jsonl"
    upto_report = chainfile.verify_file(str(upto))
    assert upto_report.ok and upto_report.events == head.seq and upto_report.head_hash == head.hash

    # export: the file verifies offline, and one edited byte is found at its row
    with page.expect_download() as download:
        page.click("#export-chain")
    path = tmp_path / "chain.jsonl"
    download.value.save_as(path)
    assert download.value.suggested_filename == f"audit-{alice.tenant.pk}.jsonl"
    expect(page.locator("#notice")).to_contain_text("Exported ")
    report = chainfile.verify_file(str(path))
    assert report.ok and report.events >= int(found.group(1))
    assert str(mallory.tenant.pk) not in path.read_text()
    ran = subprocess.run([sys.executable, "-I", chainfile.__file__, str(path)], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.startswith(f"intact, {report.events} events, head hash ")
    data = bytearray(path.read_bytes())
    start = data.index(b"\n", data.index(b"\n") + 1) + 1  # row 3
    at = data.index(b'"door":"', start) + len(b'"door":"')
    data[at] = ord("x")
    path.write_bytes(bytes(data))
    code, out = run_json("audit", "verify", "--file", str(path))
    assert code == 1 and (out["row"], out["seq"], out["reason"]) == (3, 3, "hash mismatch")

    # someone edits the log in the database: Verify names the first broken event
    with _triggers_off() as cursor:
        cursor.execute(
            "UPDATE audit_auditevent SET outcome = 'ok2' WHERE tenant_id = %s AND seq = 4", [alice.tenant.pk]
        )
    page.click("#verify-chain")
    expect(result).to_contain_text("Broken at event #4 (")
    expect(result).to_contain_text("hash mismatch")
    assert AuditEvent.objects.for_tenant(mallory.tenant).filter(outcome="ok2").count() == 0


@pytest.mark.slow
def test_a_member_sees_only_their_own_and_their_agents_events(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person
) -> None:
    from playwright.sync_api import expect

    bob = joined(alice, "bob@example.test")
    _, bobs_agent = _key(bob, "bob's bot")
    call(bobs_agent, "list_accounts")
    _, alices_agent = _key(alice, "alice's bot")
    call(alices_agent, "list_accounts")
    page = browser_page
    _sign_in(page, bob, live_server.url)
    page.goto("/audit")
    page.select_option("#tenant-switch", str(alice.tenant.pk))  # bob's own tenant comes first
    expect(page.locator(".tenant-switch option:checked")).to_contain_text("Alice's tenant")
    rows = page.locator("#audit-list tr[data-seq]")
    expect(rows.first).to_be_visible()
    assert all("bob@example.test" in text for text in rows.all_inner_texts())
    expect(page.locator("#audit-list")).to_contain_text("bob's bot")
    expect(page.locator("#audit-list")).not_to_contain_text("alice")
    expect(page.locator("#verify-chain")).to_have_count(0)  # the whole chain is an ADMIN's to verify
    expect(page.locator("#filter-credential option")).to_have_count(2)  # any, and bob's own key
    look(page, "audit-member")


def _shown_seqs(page: Page) -> list[int]:
    from playwright.sync_api import expect

    expect(page.locator("#audit-list table, #audit-list p.hint:not(:has-text('Loading'))").first).to_be_visible()
    page.wait_for_load_state("networkidle")
    return [
        int(s) for s in page.locator("#audit-list tr[data-seq]").evaluate_all("rows => rows.map(r => r.dataset.seq)")
    ]


@pytest.mark.slow
def test_an_idle_console_tab_adds_nothing_to_the_default_view_and_an_event_opens_by_its_address(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person
) -> None:
    from playwright.sync_api import expect

    _, agent = _key(alice, "laptop script")
    call(as_person(alice), "create_workspace", {"name": "ops"}, confirm=True)  # a person's change: shown
    call(agent, "list_accounts")  # what an assistant read: shown by default too
    _, their_agent = _key(mallory, "mallory's bot")
    call(their_agent, "list_accounts")
    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/audit")
    before = _shown_seqs(page)
    agents_read = AuditEvent.objects.for_tenant(alice.tenant).get(principal="agent", operation="list_accounts")
    assert agents_read.seq in before

    # an /outbound tab left open: it refreshes every 5 s (driven here by the page's clock), each refresh a read
    chain = AuditEvent.objects.for_tenant(alice.tenant)
    page.clock.install()
    page.goto("/outbound")
    page.wait_for_load_state("networkidle")
    polled = chain.filter(operation="list_outbound").count()
    for _ in range(4):
        page.clock.run_for(5_000)
        page.wait_for_load_state("networkidle")
    deadline = 50
    while chain.filter(operation="list_outbound").count() < polled + 4 and deadline:
        page.wait_for_timeout(200)
        deadline -= 1
    refreshed = chain.filter(operation="list_outbound").count() - polled
    assert refreshed >= 4  # the chain records every refresh

    page.goto("/audit")
    assert _shown_seqs(page) == before  # and the default view gains no row from them
    folded = page.locator("#audit-list tr.folded")
    expect(folded.first).to_contain_text("You looked at ")
    expect(folded.first).to_contain_text("outbound mail")
    expect(page.locator("#audit-summary")).to_contain_text("console reads folded")
    look(page, "audit-folded")
    folded.first.locator("[data-action=show-reads]").click()
    expect(page.locator("#filter-reads")).to_be_checked()
    expect(page.locator("#audit-list tr[data-operation=list_outbound]").first).to_be_visible()
    assert "console_reads=show" in page.url

    # one event in full, by its address: who, door, changes, digest, hashes linking its neighbours
    page.goto(f"/audit#event-{agents_read.seq}")
    dialog = page.locator("#audit-event")
    expect(dialog).to_be_visible()
    expect(page.locator("#audit-event-title")).to_have_text(f"Event #{agents_read.seq}")
    expect(dialog).to_contain_text("API key laptop script")
    expect(dialog).to_contain_text("On behalf ofalice@example.test")
    expect(dialog).to_contain_text("MCP")
    expect(dialog).to_contain_text(agents_read.hash)
    expect(dialog).to_contain_text(agents_read.prev_hash)
    expect(dialog).to_contain_text(agents_read.input_digest or "none")
    look(page, "audit-event")
    dialog.locator(f'a[href="#event-{agents_read.seq - 1}"]').click()  # the previous hash is the event before
    expect(page.locator("#audit-event-title")).to_have_text(f"Event #{agents_read.seq - 1}")
    page.go_back()
    expect(page.locator("#audit-event-title")).to_have_text(f"Event #{agents_read.seq}")
    page.click("#audit-event-close")
    expect(dialog).to_be_hidden()
    expect(page).not_to_have_url(re.compile("#event-"))
    # from the list: the row's link opens it, Back closes it
    page.locator(f'#audit-list a[href="#event-{agents_read.seq}"]').click()
    expect(dialog).to_be_visible()
    page.go_back()
    expect(dialog).to_be_hidden()
    expect(page).not_to_have_url(re.compile("#event-"))
    # another tenant's event is not reached by its number
    theirs = AuditEvent.objects.for_tenant(mallory.tenant).order_by("-seq").first()
    assert theirs is not None
    page.goto(f"/audit#event-{theirs.seq + 1000}")
    expect(dialog).to_contain_text("This event was not found")
    html = page.content()
    assert "mallory" not in html.lower() and str(mallory.tenant.pk) not in html
