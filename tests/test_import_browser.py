"""/import in headless Chromium with a real Celery worker: a 2,000-message mbox (a few duplicates, one message
that cannot be parsed) uploaded through the page, its progress bar watched as the counts move to 100%, the
failure listed with its reason; another tenant sees none of it; a file over the bound is refused at once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from celery.contrib.testing.worker import start_worker

from apps.mail.models import ImportRun, Message
from apps.workspaces.models import Workspace
from config.celery import app
from tests.browser import look
from tests.conftest import Person
from tests.mailfactory import raw_message, write_mbox
from tests.test_console_browser import _sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page

GARBAGE = b"\x00\x01\x02\xff\xfe binary junk without headers \x00\x00"

# every value the bar is given, as the page sets it (recorded before the page's own scripts run)
_WATCH_BAR = """
window.__barValues = [];
new MutationObserver(() => {
  const bar = document.getElementById("import-bar");
  if (bar) window.__barValues.push(bar.value);
}).observe(document, {subtree: true, childList: true, characterData: true, attributes: true});
"""


def _mbox(tmp_path: Path) -> Path:
    unique = [
        raw_message(subject=f"Letter {i}", body=f"body of letter {i}\n", message_id=f"<letter-{i}@example.test>")
        for i in range(1995)
    ]
    duplicates = [unique[10], unique[500], unique[1000], unique[1994]]
    return write_mbox(tmp_path / "archive.mbox", [*unique[:1200], *duplicates, GARBAGE, *unique[1200:]])


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_mbox_uploaded_in_the_page_is_imported_by_a_worker_while_the_bar_moves(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, tmp_path: Path, settings: Any
) -> None:
    from playwright.sync_api import expect

    # small batches, so the counts move 400 times and the import outlasts several of the page's polls (every
    # 700 ms): with batches of 50 it took 0.7-0.9 s here and the page could see 0 and then 100, nothing between
    settings.OPERATIONS = {**settings.OPERATIONS, "IMPORT_BATCH_SIZE": 5}
    source = _mbox(tmp_path)
    Workspace.objects.create(tenant=alice.tenant, name="archive")
    Workspace.objects.create(tenant=mallory.tenant, name="mallory-only")
    page = browser_page
    page.add_init_script(_WATCH_BAR)
    _sign_in(page, alice, live_server.url)
    page.goto("/import")
    expect(page.locator("#imports-list")).to_contain_text("Nothing has been imported yet.")
    look(page, "import-empty")

    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        page.set_input_files("#import-file", str(source))
        page.fill("#import-account", "Archive")
        expect(page.locator("#import-workspace option")).to_have_text(["archive", "default"])
        page.select_option("#import-workspace", label="archive")
        page.click("#upload-form button[type=submit]")
        expect(page.locator("#progress-words")).to_contain_text("Done", timeout=180_000)

    expect(page.locator("#import-bar")).to_have_attribute("data-state", "done")
    assert page.eval_on_selector("#import-bar", "bar => bar.value") == 100
    seen = page.evaluate("window.__barValues")
    assert any(0 < value < 100 for value in seen), seen  # the page saw the counts move, not only the end
    assert seen == sorted(seen)  # and never go back
    counts = {
        key: page.locator(f'[data-count="{key}"]').inner_text() for key in ("read", "imported", "duplicates", "failed")
    }
    assert counts == {"read": "2000", "imported": "1995", "duplicates": "4", "failed": "1"}
    expect(page.locator("#progress-words")).to_contain_text("2000 of 2000 messages read, 100%")
    failure = page.locator("#import-failures tr[data-failure]")
    expect(failure).to_have_count(1)
    expect(failure).to_contain_text("mbox:#1205")
    assert failure.locator("td").nth(1).inner_text().strip()  # the reason is given
    # (lower case: the style sheet sets column headers in capitals, and inner_text is the text as drawn)
    assert page.locator("#import-failures").inner_text().lower().split() == [
        "messages", "that", "could", "not", "be", "imported", "where", "in", "the", "file", "why",
        *failure.inner_text().lower().split(),
    ]  # fmt: skip
    expect(page.locator("#imports-list tr[data-import]")).to_have_count(1)
    expect(page.locator("#imports-list")).to_contain_text("archive.mbox")
    look(page, "import-done")
    run = ImportRun.objects.for_tenant(alice.tenant).get()
    assert (run.state, run.total, run.imported, run.duplicates, run.failed) == ("done", 2000, 1995, 4, 1)
    assert run.account.workspace.name == "archive"
    assert Message.objects.for_tenant(alice.tenant).count() == 1995

    # mallory: no import listed, and alice's by its id is no such import
    page.context.clear_cookies()
    _sign_in(page, mallory, live_server.url)
    page.goto("/import")
    expect(page.locator("#imports-list")).to_contain_text("Nothing has been imported yet.")
    answer = page.evaluate(
        """async (id) => {
          const token = document.querySelector('meta[name="csrf-token"]').content;
          const r = await fetch("/api/v1/ops/get_import", {method: "POST", credentials: "same-origin",
            headers: {"Content-Type": "application/json", "X-CSRFToken": token},
            body: JSON.stringify({import_id: id})});
          return [r.status, await r.json()];
        }""",
        str(run.pk),
    )
    assert answer[0] == 404 and answer[1]["error"]["code"] == "NOT_FOUND"
    assert not ImportRun.objects.for_tenant(mallory.tenant).exists()
    assert not Message.objects.for_tenant(mallory.tenant).exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_file_over_the_bound_is_refused_at_once_in_plain_words(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, tmp_path: Path, settings: Any
) -> None:
    from playwright.sync_api import expect

    settings.OPERATIONS = {**settings.OPERATIONS, "IMPORT_UPLOAD_MAX_BYTES": 4096}
    big = write_mbox(
        tmp_path / "big.mbox", [raw_message(body="x" * 200 + "\n", message_id=f"<b{i}@x>") for i in range(60)]
    )
    assert big.stat().st_size > 4096
    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/import")
    expect(page.locator("#import-file-hint")).to_contain_text("4.0")
    page.set_input_files("#import-file", str(big))
    page.click("#upload-form button[type=submit]")
    notice = page.locator("#notice")
    expect(notice).to_have_class("errors")
    expect(notice).to_contain_text("larger than an import may be (4096 bytes at most)")
    expect(page.locator("#import-progress")).to_be_hidden()
    look(page, "import-refused")
    assert not ImportRun.objects.for_tenant(alice.tenant).exists()
    assert not ImportRun.objects.for_tenant(mallory.tenant).exists()


@pytest.mark.slow
def test_older_imports_are_shown_a_page_at_a_time(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person
) -> None:
    from playwright.sync_api import expect

    from tests.test_import_upload import _runs

    mine, hers = _runs(alice, 23, "Archive"), _runs(mallory, 2, "Hers")
    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/import")
    rows = page.locator("#imports-list tr[data-import]")
    expect(rows).to_have_count(20)
    more = page.locator("#imports-more")
    expect(more).to_be_visible()
    look(page, "import-older")
    more.click()
    expect(rows).to_have_count(23)
    expect(more).to_be_hidden()
    assert [rows.nth(i).get_attribute("data-import") for i in range(23)] == mine
    html = page.content()
    assert "Hers-" not in html and not any(pk in html for pk in hers)
