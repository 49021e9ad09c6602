"""The mailbox page brings its first screen (apps.console.views.first_screen): the accounts, the labels and the
first page of the listing it opens on, read through the gate for the signed-in person exactly as the REST door
would answer them (audited, refused alike), embedded as JSON that no subject can break out of. The listing it
opens on comes from the address or the last one shown (a cookie), checked by the operation like any input; what is
refused is left out, never another tenant's mail in its place."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.console.views import LAST_LISTING_COOKIE, LIST_VIEW_COOKIE
from apps.mail.importing import import_mail
from apps.mail.models import Folder, MailAccount
from tests.callers import as_person, call
from tests.conftest import Person
from tests.mailfactory import BASE_DATE, raw_message, write_mbox

HOSTILE_SUBJECT = "</script><script>window.owned = 1</script><!-- &amp; '\"\\"
_EMBED = re.compile(r'<script id="mail-first" type="application/json">(.*?)</script>', re.S)


def _mailbox(p: Person, tmp: Path, name: str, subjects: list[str]) -> str:
    messages = [
        raw_message(subject=s, message_id=f"<{name}-{i}-{p.user.pk}@example.test>", date=BASE_DATE + timedelta(hours=i))
        for i, s in enumerate(subjects)
    ]
    tmp.mkdir(parents=True, exist_ok=True)
    counts = import_mail(
        tenant=p.tenant, workspace=p.workspace, account_name=name, path=write_mbox(tmp / f"{name}.mbox", messages)
    )
    return str(counts.account_id)


def _signed_in(p: Person, view: str = "messages") -> Client:
    """A signed-in client whose list shows `view` (these tests check the list of messages unless they say)."""
    client = Client()
    client.force_login(p.user)
    client.cookies[LIST_VIEW_COOKIE.format(tenant=p.tenant.pk)] = view
    return client


def _screen(client: Client, path: str = "/mail") -> tuple[str, dict[str, Any] | None]:
    response = client.get(path)
    assert response.status_code == 200
    page = response.content.decode()
    found = _EMBED.findall(page)
    assert len(found) <= 1
    return page, json.loads(found[0]) if found else None


def test_the_page_brings_what_the_operations_answer_and_audits_each_read(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    personal = _mailbox(alice, tmp_path / "a", "Personal", [f"Alice subject {i}" for i in range(3)])
    _mailbox(mallory, tmp_path / "m", "Theirs", ["Mallory secret subject"])
    events = AuditEvent.objects.for_tenant(alice.tenant)
    before = events.count()

    page, screen = _screen(_signed_in(alice))

    assert screen is not None
    me = as_person(alice)
    assert screen["accounts"] == call(me, "list_accounts")
    assert screen["labels"] == call(me, "list_labels")
    listing = screen["listing"]
    assert (listing["account_id"], listing["folder"]) == (personal, "inbox")
    assert listing["page"] == call(me, "list_messages", {"account_id": personal, "folder": "inbox"})
    assert [m["subject"] for m in listing["page"]["messages"]] == [f"Alice subject {i}" for i in (2, 1, 0)]
    # each read went through the gate, from the console's door, and was audited as the REST calls are
    read = list(events.order_by("seq").values_list("operation", "door", "outcome")[before : before + 3])
    assert read == [("list_accounts", "ui", "ok"), ("list_labels", "ui", "ok"), ("list_messages", "ui", "ok")]
    assert "Mallory" not in page and "Theirs" not in page
    assert AuditEvent.objects.for_tenant(mallory.tenant).filter(door="ui").count() == 0


def test_no_subject_breaks_out_of_the_embedded_json(alice: Person, mallory: Person, tmp_path: Path) -> None:
    _mailbox(alice, tmp_path / "a", "Personal", [HOSTILE_SUBJECT])
    _mailbox(mallory, tmp_path / "m", "Theirs", [HOSTILE_SUBJECT + " mallory"])
    page, screen = _screen(_signed_in(alice))
    assert screen is not None
    assert [m["subject"] for m in screen["listing"]["page"]["messages"]] == [HOSTILE_SUBJECT]
    assert "window.owned" not in html.unescape(page.replace(_EMBED.search(page).group(0), ""))  # type: ignore[union-attr]
    assert page.count("</script>") == page.count("<script")  # the subject closed no script of its own
    assert "mallory" not in page


def test_the_page_opens_on_the_asked_or_the_last_listing_and_only_in_reach(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    first = _mailbox(alice, tmp_path / "a", "Personal", ["In the first"])
    second = _mailbox(alice, tmp_path / "b", "Work", ["In the second"])
    theirs = _mailbox(mallory, tmp_path / "m", "Theirs", ["Mallory secret subject"])
    client = _signed_in(alice)
    cookie = LAST_LISTING_COOKIE.format(tenant=alice.tenant.pk)

    _, screen = _screen(client, f"/mail?account={second}&folder=inbox")
    assert screen is not None and screen["listing"]["account_id"] == second
    assert [m["subject"] for m in screen["listing"]["page"]["messages"]] == ["In the second"]

    archive = Folder.objects.for_tenant(alice.tenant).get(account_id=second, kind="archive")
    assert archive.kind == "archive"
    client.cookies[cookie] = f"{quote(second)}/{quote('archive')}"
    _, screen = _screen(client)
    assert screen is not None and (screen["listing"]["account_id"], screen["listing"]["folder"]) == (second, "archive")
    assert screen["listing"]["page"]["messages"] == []

    # another tenant's account, asked or remembered, is refused by the operation: no list comes, nothing of theirs
    for asked in (f"/mail?account={theirs}", "/mail"):
        client.cookies[cookie] = f"{theirs}/inbox"
        page, screen = _screen(client, asked)
        assert screen is not None and screen["listing"] is None and [a["id"] for a in screen["accounts"]["accounts"]]
        assert "Mallory" not in page and theirs not in page.replace(f"account={theirs}", "")
    refused = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="list_messages").exclude(outcome="ok")
    assert refused.count() == 2
    assert {a["id"] for a in screen["accounts"]["accounts"]} == {first, second}


@pytest.mark.parametrize(
    "value",
    ["", "/", "x" * 5000, "%ZZ/%", "../../etc/passwd/inbox", "\x00/\x00", "not-an-id/inbox", "%2F%2F/%00", "a/b/c"],
)
def test_any_remembered_value_opens_the_page(value: str, alice: Person, mallory: Person, tmp_path: Path) -> None:
    _mailbox(alice, tmp_path / "a", "Personal", ["Mine"])
    _mailbox(mallory, tmp_path / "m", "Theirs", ["Mallory secret subject"])
    client = _signed_in(alice)
    client.cookies[LAST_LISTING_COOKIE.format(tenant=alice.tenant.pk)] = value
    page, screen = _screen(client)
    assert screen is not None and screen["accounts"]["accounts"]
    if screen["listing"] is not None:
        assert [m["subject"] for m in screen["listing"]["page"]["messages"]] == ["Mine"]
    assert "Mallory" not in page


def test_a_tenant_without_mail_gets_its_empty_screen(alice: Person, mallory: Person, tmp_path: Path) -> None:
    _mailbox(mallory, tmp_path / "m", "Theirs", ["Mallory secret subject"])
    assert not MailAccount.objects.for_tenant(alice.tenant).exists()
    page, screen = _screen(_signed_in(alice))
    assert screen == {
        "accounts": {"accounts": []},
        "labels": call(as_person(alice), "list_labels"),
        "listing": None,
        "view": "messages",
        "thread": None,
    }
    assert "Mallory" not in page


@pytest.mark.slow
def test_the_browser_shows_the_brought_list_at_once_and_runs_none_of_it(
    browser_page: Any, live_server: Any, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    from tests.test_console_browser import _sign_in

    _mailbox(alice, tmp_path / "a", "Personal", ["An older one", HOSTILE_SUBJECT])
    _mailbox(mallory, tmp_path / "m", "Theirs", ["Mallory secret subject"])
    page = browser_page
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url.split("/api/v1/ops/")[-1]) if "/api/v1/ops/" in r.url else None)
    _sign_in(page, alice, live_server.url)
    cookie = LIST_VIEW_COOKIE.format(tenant=alice.tenant.pk)
    page.context.add_cookies([{"name": cookie, "value": "messages", "url": live_server.url + "/mail"}])
    page.goto("/mail")
    rows = page.locator("#message-list li.message")
    expect(rows).to_have_count(2)
    expect(rows.first.locator(".subject")).to_have_text(HOSTILE_SUBJECT)
    expect(page.locator('.mail-account button.folder[data-folder="inbox"]')).to_have_attribute("aria-current", "true")
    assert (
        page.evaluate("window.owned") is None
        and page.evaluate("performance.getEntriesByName('oaken:first-list').length") == 1
    )
    # the list, the accounts and the labels came with the page; the folders' counts and preferences are asked
    page.wait_for_load_state("networkidle")
    assert "list_messages" not in asked and "list_accounts" not in asked and "list_labels" not in asked
    assert "list_folders" in asked
    assert "Mallory" not in page.content()
    # opening another folder remembers it: the next visit opens there, brought by the page again
    page.locator('.mail-account button.folder[data-folder="archive"]').click()
    expect(page.locator("#message-list")).to_contain_text("No messages here.")
    asked.clear()
    page.goto("/mail")
    expect(page.locator('.mail-account button.folder[data-folder="archive"]')).to_have_attribute("aria-current", "true")
    expect(page.locator("#message-list")).to_contain_text("No messages here.")
    page.wait_for_load_state("networkidle")
    assert "list_messages" not in asked


def test_conversations_by_default_and_a_conversation_or_a_folder_by_its_address(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    personal = _mailbox(alice, tmp_path / "a", "Personal", ["First", "Second"])
    theirs = _mailbox(mallory, tmp_path / "m", "Theirs", ["Mallory secret subject"])
    me = as_person(alice)
    client = _signed_in(alice, view="conversations")
    _, screen = _screen(client)
    assert screen is not None and screen["view"] == "conversations" and screen["thread"] is None
    listing = screen["listing"]
    assert listing["view"] == "conversations"
    assert listing["page"] == call(me, "list_conversations", {"account_id": personal, "folder": "inbox"})
    assert [c["subject"] for c in listing["page"]["conversations"]] == ["Second", "First"]

    thread = listing["page"]["conversations"][0]["thread_id"]
    events = AuditEvent.objects.for_tenant(alice.tenant)
    _, screen = _screen(client, f"/mail/t/{thread}")
    # read through the gate, audited as the console's
    assert events.filter(operation="get_thread", door="ui", outcome="ok").count() == 1
    assert screen is not None and screen["thread"] == call(me, "get_thread", {"thread_id": thread})

    _, screen = _screen(client, f"/mail/{personal}/archive")
    assert screen is not None and (screen["listing"]["account_id"], screen["listing"]["folder"]) == (
        personal,
        "archive",
    )
    assert screen["listing"]["page"]["conversations"] == []

    # mallory's conversation and account behave as ids that do not exist: nothing of hers on the page
    hers = call(as_person(mallory), "list_conversations", {"account_id": theirs})["conversations"][0]["thread_id"]
    for path in (f"/mail/t/{hers}", f"/mail/{theirs}/inbox", "/mail/t/not-an-id"):
        page, screen = _screen(client, path)
        assert screen is not None and screen["accounts"]["accounts"]
        assert screen["thread"] is None
        assert "Mallory" not in page
    assert events.filter(operation="get_thread").exclude(outcome="ok").count() == 2


def test_a_folder_whose_name_holds_a_slash_has_an_address(alice: Person, mallory: Person, tmp_path: Path) -> None:
    personal = _mailbox(alice, tmp_path / "a", "Personal", ["Filed away", "Left in the inbox"])
    _mailbox(mallory, tmp_path / "m", "Theirs", ["Mallory secret subject"])
    Folder.objects.create(tenant=alice.tenant, account_id=personal, kind="custom", name="Projects/2026")
    me = as_person(alice)
    filed = [m["id"] for m in call(me, "list_messages", {"account_id": personal})["messages"]][1:]
    call(me, "move_messages", {"message_ids": filed, "folder": "Projects/2026"})
    client = _signed_in(alice)
    for path in (f"/mail/{personal}/Projects/2026", f"/mail/{personal}/{quote('Projects/2026', safe='')}"):
        page, screen = _screen(client, path)
        assert screen is not None
        assert (screen["listing"]["account_id"], screen["listing"]["folder"]) == (personal, "Projects/2026")
        assert [m["subject"] for m in screen["listing"]["page"]["messages"]] == ["Filed away"]
        assert "Mallory" not in page
