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
from tests.callers import as_agent, call, joined
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

    # the whole log, filtered and paged
    settings.OPERATIONS = {**settings.OPERATIONS, "PAGE_SIZE_DEFAULT": 5}
    page.goto("/audit")
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
    look(page, "audit")

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
