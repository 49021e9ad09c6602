"""Saved views and snippets on /mail in headless Chromium, walked as a person: a search saved as a view, listed
under the folders with its count and opened again; a view without words listed with list_messages; a view deleted
after the gate's proposal; a snippet added (one with an unknown placeholder refused in plain words), and inserted
into a reply, filled by the server from the message answered. At 1280 and 375 px, with the accessibility check.
Another tenant's views, snippets and mail never show."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from apps.search.models import SavedView
from tests.browser import look
from tests.callers import as_person, call
from tests.conftest import Person, give_mail
from tests.test_console_browser import _sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page


@pytest.mark.slow
def test_views_and_snippets_in_the_mailbox(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    give_mail(alice, tmp_path, "alice", n=5)
    give_mail(mallory, tmp_path, "mallory", n=3)
    theirs = as_person(mallory)
    call(theirs, "create_view", {"name": "Mallory secret view"})
    call(theirs, "create_snippet", {"name": "Mallory secret snippet", "text": "Hidden {first_name}"})
    call(as_person(alice), "create_view", {"name": "Everything", "tz": "Europe/Paris"})

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/mail")
    views = page.locator("#mail-views")
    expect(views.locator('li:has-text("Everything") .view-count')).to_have_text("5")

    # a search by words, saved as a view
    page.fill("#search-query", "note 3")
    page.click(".search-filters summary")
    page.select_option("#search-mode", "keyword")
    page.click("#mail-search button[type=submit]")
    expect(page.locator("#message-list li")).to_have_count(1)
    expect(page.locator("#view-save")).to_be_visible()
    page.fill("#view-name", "Note three")
    page.click("#view-save button[type=submit]")
    expect(page.locator("#notice")).to_have_text("Saved as the view Note three.")
    expect(views.locator('li:has-text("Note three") .view-count')).to_have_text("1")
    assert SavedView.objects.for_tenant(alice.tenant).get(name="Note three").mode == "keyword"

    # back to the inbox, then the view again: searched with view_id
    page.locator("#mail-accounts button.folder[data-folder=inbox]").click()
    expect(page.locator("#view-save")).to_be_hidden()
    views.locator('li:has-text("Note three") button.folder').click()
    expect(page.locator("#list-title")).to_have_text("View: Note three")
    expect(page.locator("#message-list li")).to_have_count(1)
    expect(page.locator("#message-list")).to_contain_text("alice note 3")
    # a view without words: listed (list_messages with view_id)
    views.locator('li:has-text("Everything") button.folder').click()
    expect(page.locator("#list-title")).to_have_text("View: Everything")
    expect(page.locator("#message-list li")).to_have_count(5)
    expect(views.locator('li:has-text("Everything") button.folder')).to_have_attribute("aria-current", "true")
    look(page, "mail-views")

    # deleted, after the gate's proposal
    views.locator('li:has-text("Note three") button.delete-view').click()
    expect(page.locator("#confirm-dialog")).to_be_visible()
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_have_text("The view Note three was deleted.")
    expect(views.locator("li")).to_have_count(1)

    # snippets: an unknown placeholder refused in plain words, then one added
    page.click("#snippets summary")
    new = page.locator("form.snippet:not([data-snippet-id])")
    new.locator("input").fill("Thanks")
    new.locator("textarea").fill("Hi {first_name}, thanks for {oops}.")
    new.locator("button[type=submit]").click()
    expect(page.locator("#notice")).to_contain_text("unknown placeholder")
    new.locator("textarea").fill("Hi {first_name}, thanks for {subject}.")
    new.locator("button[type=submit]").click()
    expect(page.locator("#notice")).to_have_text("Snippet Thanks saved.")
    expect(page.locator("form.snippet[data-snippet-id]")).to_have_count(1)

    # inserted into a reply: filled by the server from the message answered
    page.click("#view-messages")
    page.locator("#message-list li.message button.open").first.click()
    page.locator("#thread button.reply").first.click()
    expect(page.locator("#compose-snippet-row")).to_be_visible()
    page.click("#compose-snippet-insert")
    expect(page.locator("#compose-body")).to_have_value(re.compile(r"^Hi Sender, thanks for alice note \d\.\n\nOn "))
    look(page, "mail-snippets")

    content = page.content()
    assert "Mallory" not in content and "mallory note" not in content
