"""Writing mail on /mail in headless Chromium, walked as a person: a signature set for the account, a message's
summary asked for (first with no summary worker there, then with one), a reply with a file uploaded, saved as
they type, and sent through the person's send path (the gate's proposal confirmed). A real Celery worker delivers
it over SMTP into the loopback Dovecot, where it is read back over IMAP: threaded to the original, signed, the
file byte for byte; exactly one outbound request. A draft's own files are kept when another is added; a summary
slower than the call waits is shown pending and asked for again until it is there; a forward keeps the original's
files; a send cancelled in the proposal requests nothing. Another tenant's mail, drafts and requests never show."""

from __future__ import annotations

import time
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import TYPE_CHECKING, Any

import pytest

from apps.mail.models import Attachment
from apps.outbound.models import Draft, OutboundAttachment, OutboundRequest
from apps.summaries import services
from apps.summaries.models import Summary
from tests.browser import expect_unavailable, look
from tests.celeryworker import worker_process
from tests.conftest import Person
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user
from tests.test_console_browser import _sign_in
from tests.test_drafts import stored_message

if TYPE_CHECKING:
    from playwright.sync_api import FilePayload, Page

PLAN = bytes(range(256)) * 64 + b"\x00\xff end"  # every byte value, so a lossy encoding shows
SIGNATURE = "Alice Example\nHarbour Ltd"
REPORT = (
    "The harbour trip is on Friday and the budget is four hundred pounds. The boat leaves at nine from the north "
    "pier, and lunch is on the island. Please confirm by Wednesday whether the budget works for your team. "
    "The weather looks fine.\n"
)


def _file(name: str, mime: str, data: bytes) -> FilePayload:
    return {"name": name, "mimeType": mime, "buffer": data}


def _delivered(imap: ImapServer, user: str, timeout: float = 60) -> list[bytes]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [raw for _, raw, _ in imap.folder_messages(user, "INBOX")]
        if found:
            return found
        time.sleep(0.25)
    raise AssertionError(f"nothing reached {user}'s INBOX within {timeout} s")


@pytest.mark.slow
def test_a_person_replies_with_an_uploaded_file_and_the_mail_arrives_threaded_and_signed(
    browser_page: Page,
    live_server: Any,
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
    settings: Any,
    summaries_on_workers: None,
) -> None:
    from playwright.sync_api import expect

    settings.OPERATIONS = {**settings.OPERATIONS, "SUMMARY_WAIT_SECONDS": 1}
    me, bob = mail_user(imap_server, "alice"), mail_user(imap_server, "bob")
    account = imap_account(alice, imap_server, smtp_server, me, name="Work")
    original = stored_message(
        alice, account, sender=bob, subject="Harbour trip budget", message_id="budget@example.test", text=REPORT
    )
    theirs = imap_account(mallory, imap_server, smtp_server, mail_user(imap_server, "mallory"), name="Hers")
    secret = stored_message(
        mallory, theirs, sender=bob, subject="Mallory private plans", message_id="hers@example.test", text=REPORT
    )

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/mail")
    page.click("#view-messages")  # conversations are the default (issue 37): this walk opens a message's row
    rows = page.locator("#message-list li.message")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-message-id", str(original.pk))

    # the account's signature, set on the page (set_signature)
    page.click("#signatures summary")
    signature_form = page.locator(f'form.signature[data-account-id="{account.pk}"]')
    expect(signature_form.locator("label")).to_have_text("Signature for Work")
    signature_form.locator("textarea").fill(SIGNATURE)
    signature_form.locator("button[type=submit]").click()
    expect(page.locator("#notice")).to_have_text("Signature for Work saved.")

    # the message: no summary cached yet; with no summary worker there, the page says so in plain words
    rows.first.locator("button.open").click()
    opened = page.locator(f'#thread article[data-message-id="{original.pk}"]')
    expect(opened.locator("dl.headers")).to_contain_text(bob)
    expect(opened.locator(".summary-text")).to_have_count(0)
    expect_unavailable(page, "/api/v1/ops/summarize_messages")
    opened.locator("button.summarize").click()
    expect(opened.locator(".summary-state")).to_have_text(
        "No summary worker is available right now, so nothing was summarized. Try again in a few minutes.",
        timeout=30_000,
    )
    assert Summary.objects.for_tenant(alice.tenant).filter(state="done").count() == 0

    with worker_process("compose"):
        # with a worker: the summary arrives (asked again while it is pending), and the thread's too
        opened.locator("button.summarize").click()
        expect(opened.locator(".summary-text")).to_contain_text("budget", timeout=45_000)
        expect(opened.locator("button.summarize")).to_be_hidden()
        page.click("button.summarize-thread")
        expect(page.locator(".thread-summary .summary-text")).to_contain_text("budget", timeout=45_000)
        look(page, "mail-summary")

        # the reply: to bob, Re:, the signature above the quoted text
        opened.locator("button.reply").click()
        composer = page.locator("#composer")
        expect(composer).to_be_visible()
        expect(page.locator("#composer-title")).to_have_text("Reply")
        expect(page.locator("#compose-to")).to_have_value(bob)
        expect(page.locator("#compose-subject")).to_have_value("Re: Harbour trip budget")
        body = page.locator("#compose-body")
        written = body.input_value()
        assert written.startswith(f"\n\n-- \n{SIGNATURE}\n\n") and "> The harbour trip is on Friday" in written
        (draft,) = Draft.objects.for_tenant(alice.tenant)
        assert draft.in_reply_to == "budget@example.test"

        # typing is saved a moment later (update_draft), and the uploaded file with the next save
        body.fill("Yes, the budget works for us." + written)
        expect(page.locator("#compose-state")).to_contain_text("Draft saved at")
        draft.refresh_from_db()
        assert draft.body.startswith("Yes, the budget works for us.\n\n-- \n")
        page.set_input_files("#compose-files", files=[_file("plan.bin", "application/octet-stream", PLAN)])
        expect(page.locator("#compose-attachments li")).to_contain_text("plan.bin")
        expect(page.locator("#compose-state")).to_contain_text("Draft saved at")
        files = OutboundAttachment.objects.for_tenant(alice.tenant).filter(draft=draft)
        expect(page.locator("#compose-attachments li")).to_have_count(1)
        assert [bytes(f.content) for f in files] == [PLAN]
        look(page, "mail-compose")

        # Send: the gate's proposal, confirmed; one request, delivered by the worker into bob's INBOX
        page.click("#compose-send")
        dialog = page.locator("#confirm-dialog")
        expect(dialog).to_be_visible()
        page.click("#confirm-yes")
        expect(page.locator("#notice")).to_contain_text("Sending:")
        expect(composer).to_be_hidden()
        (raw,) = _delivered(imap_server, bob)

    mail = message_from_bytes(raw, policy=policy.default)
    assert isinstance(mail, EmailMessage)
    assert mail["In-Reply-To"] == "<budget@example.test>"
    assert "<budget@example.test>" in str(mail["References"])
    assert mail["Subject"] == "Re: Harbour trip budget"
    assert me in str(mail["From"])
    text = mail.get_body(preferencelist=("plain",))
    assert text is not None
    content = text.get_content()
    assert content.startswith("Yes, the budget works for us.")
    assert f"-- \n{SIGNATURE}\n" in content.replace("\r\n", "\n")
    (attached,) = list(mail.iter_attachments())
    assert attached.get_filename() == "plan.bin"
    assert attached.get_payload(decode=True) == PLAN

    sent = OutboundRequest.objects.for_tenant(alice.tenant)
    assert sent.count() == 1 and sent.get().state == "sent"
    assert [r.recipients for r in smtp_server.received if bob in r.recipients] == [[bob]]
    assert not Draft.objects.for_tenant(alice.tenant).exists()  # the sent draft goes

    # a new message kept as a draft, reopened from Drafts: its file stays when another is added
    page.click("#compose-new")
    expect(page.locator("#composer-title")).to_have_text("New message")
    expect(page.locator("#compose-body")).to_have_value(f"\n\n-- \n{SIGNATURE}")
    page.fill("#compose-to", bob)
    page.fill("#compose-subject", "Boat tickets")
    page.set_input_files("#compose-files", files=[_file("a.txt", "text/plain", b"first")])
    expect(page.locator("#compose-attachments li")).to_have_count(1)
    expect(page.locator("#compose-state")).to_contain_text("Draft saved at")
    page.click("#compose-close")
    expect(page.locator("#notice")).to_have_text("The draft is kept under Drafts.")
    page.click("#drafts-open")
    listed = page.locator("#drafts-list li.draft")
    expect(listed).to_have_count(1)
    expect(listed).to_contain_text("Boat tickets")
    look(page, "mail-drafts")
    listed.locator("button.open").click()
    expect(page.locator("#compose-subject")).to_have_value("Boat tickets")
    page.set_input_files("#compose-files", files=[_file("b.txt", "text/plain", b"second")])
    expect(page.locator("#compose-attachments li")).to_have_count(2)
    expect(page.locator("#compose-state")).to_contain_text("Draft saved at")
    (kept,) = Draft.objects.for_tenant(alice.tenant)
    held = OutboundAttachment.objects.for_tenant(alice.tenant).filter(draft=kept).order_by("position")
    assert [(f.filename, bytes(f.content)) for f in held] == [("a.txt", b"first"), ("b.txt", b"second")]
    page.locator('#compose-attachments li[data-filename="a.txt"] button.remove-file').click()
    expect(page.locator("#compose-attachments li")).to_have_count(1)
    expect(page.locator("#compose-state")).to_contain_text("Draft saved at")
    assert [bytes(f.content) for f in held.all()] == [b"second"]
    page.click("#compose-discard")
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_have_text("The draft was discarded.")
    assert not Draft.objects.for_tenant(alice.tenant).exists()

    # mallory's mail, drafts and requests: none of it showed, none of it changed
    html = page.content()
    assert "Mallory private plans" not in html and str(secret.pk) not in html
    assert OutboundRequest.objects.for_tenant(mallory.tenant).count() == 0
    assert Summary.objects.for_tenant(mallory.tenant).count() == 0


@pytest.mark.slow
def test_a_pending_summary_is_awaited_a_forward_keeps_its_files_and_a_cancelled_send_sends_nothing(
    browser_page: Page,
    live_server: Any,
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from celery import group
    from playwright.sync_api import expect

    me, bob = mail_user(imap_server, "alice"), mail_user(imap_server, "bob")
    account = imap_account(alice, imap_server, smtp_server, me, name="Work")
    original = stored_message(
        alice,
        account,
        sender=bob,
        subject="Invoice",
        message_id="invoice@example.test",
        text="See the invoice.\n",
        cc=["carol@example.test"],
    )
    Attachment.objects.create(
        tenant=alice.tenant, message=original, filename="invoice.pdf", content_type="application/pdf", size=9,
        content=b"%PDF-1.4\n",
    )  # fmt: skip
    theirs = imap_account(mallory, imap_server, smtp_server, mail_user(imap_server, "mallory"), name="Hers")
    stored_message(mallory, theirs, sender=bob, subject="Mallory invoice", message_id="m@example.test")

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/mail")
    page.click("#view-messages")  # conversations are the default (issue 37): this walk opens a message's row
    page.locator(f'li.message[data-message-id="{original.pk}"] button.open').click()
    opened = page.locator(f'#thread article[data-message-id="{original.pk}"]')

    # a summary slower than the call waits: the page says it is pending and asks again until it is there
    settings.OPERATIONS = {**settings.OPERATIONS, "SUMMARY_WAIT_SECONDS": 1}
    held: list[Any] = []
    monkeypatch.setattr(services, "publish", held.extend)  # queued, not yet run
    monkeypatch.setattr(services, "_workers_answer", lambda: True)  # a worker is there, busy
    opened.locator("button.summarize").click()
    expect(opened.locator(".summary-state")).to_contain_text("has not finished yet", timeout=20_000)
    assert len(held) == 1
    group(held).apply()  # the worker gets to it
    expect(opened.locator(".summary-text")).to_have_text("See the invoice.", timeout=20_000)
    assert Summary.objects.for_tenant(mallory.tenant).count() == 0

    # reply all: bob, and carol in Cc (never alice herself); no signature set, so none is added
    opened.locator("button.reply-all").click()
    expect(page.locator("#composer-title")).to_have_text("Reply to all")
    expect(page.locator("#compose-to")).to_have_value(bob)
    expect(page.locator("#compose-cc")).to_have_value("carol@example.test")
    assert "-- \n" not in page.locator("#compose-body").input_value()
    page.click("#compose-discard")
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_have_text("The draft was discarded.")
    expect(page.locator("#reader")).to_be_visible()  # back where the person was

    # a forward: the original's file is the draft's; one uploaded beside it keeps it, byte for byte
    opened.locator("button.forward").click()
    expect(page.locator("#composer-title")).to_have_text("Forward")
    expect(page.locator("#compose-subject")).to_have_value("Fwd: Invoice")
    expect(page.locator("#compose-attachments li")).to_have_count(1)
    expect(page.locator("#compose-attachments li")).to_contain_text("invoice.pdf")
    assert page.locator("#compose-body").input_value().startswith("---------- Forwarded message")
    page.fill("#compose-to", "dave@example.test")
    expect(page.locator("#compose-state")).to_contain_text("Draft saved at")
    page.set_input_files("#compose-files", files=[_file("notes.txt", "text/plain", b"my notes\n")])
    expect(page.locator("#compose-attachments li")).to_have_count(2)
    expect(page.locator("#compose-state")).to_contain_text("Draft saved at")
    (draft,) = Draft.objects.for_tenant(alice.tenant)
    assert draft.to == ["dave@example.test"]
    files = OutboundAttachment.objects.for_tenant(alice.tenant).filter(draft=draft).order_by("position")
    assert [(f.filename, bytes(f.content)) for f in files] == [
        ("invoice.pdf", b"%PDF-1.4\n"),
        ("notes.txt", b"my notes\n"),
    ]

    # Send, then Cancel in the gate's proposal: nothing is requested, the draft stays
    page.click("#compose-send")
    expect(page.locator("#confirm-dialog")).to_be_visible()
    page.click("#confirm-dialog button[value=cancel]")
    expect(page.locator("#notice")).to_have_text("Nothing was changed.")
    expect(page.locator("#composer")).to_be_visible()
    assert not OutboundRequest.objects.for_tenant(alice.tenant).exists()
    assert Draft.objects.for_tenant(alice.tenant).count() == 1
    html = page.content()
    assert "Mallory invoice" not in html
    assert not Draft.objects.for_tenant(mallory.tenant).exists()
