"""get_message lists at most MESSAGE_ATTACHMENTS_MAX of a message's attachments (by file name), and says so beside
the cut list (attachments_truncated, attachment_count), as every list does (SPEC §11): a message of five thousand
attachments answered all of them (1.38 MB) before. The same through the REST and the MCP doors; mallory's tenant
neither sees alice's message nor has its count. /mail, in Chromium, says how many there are beside the cut list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.test import Client

from apps.mail.models import Attachment, Message
from tests.callers import as_person, call, refusal
from tests.conftest import Mailbox, Person, give_mail
from tests.test_mcp_door import key_for, rpc
from tests.test_mcp_door import post as mcp_post
from tests.test_rest_door import api_client, post

if TYPE_CHECKING:
    from playwright.sync_api import Page


def _attach(person: Person, message_id: str, count: int) -> list[str]:
    """`count` small attachments on the message; their file names, in the order get_message lists them."""
    message = Message.objects.for_tenant(person.tenant).get(pk=message_id)
    names = [f"part-{i:05d}.txt" for i in range(count)]
    Attachment.objects.bulk_create(
        Attachment(tenant=person.tenant, message=message, filename=n, content_type="text/plain", size=2, content=b"ok")
        for n in reversed(names)
    )
    return names


def test_get_message_lists_the_first_attachments_up_to_the_bound_and_says_how_many_there_are(
    client: Client, alice: Person, mallory: Person, alice_mail: Mailbox, mallory_mail: Mailbox, settings: Any
) -> None:
    many, few = alice_mail.message_ids[0], alice_mail.message_ids[1]
    names = _attach(alice, many, 5000)
    two = _attach(alice, few, 2)
    _attach(mallory, mallory_mail.message_ids[0], 3)
    bound = settings.OPERATIONS["MESSAGE_ATTACHMENTS_MAX"]
    assert bound == 100

    # the console's door
    response = post(api_client(alice.user), "get_message", {"message_id": many})
    assert response.status_code == 200
    message = response.json()["message"]
    assert [a["filename"] for a in message["attachments"]] == names[:bound]
    assert (message["attachments_truncated"], message["attachment_count"]) == (True, 5000)
    assert len(response.content) < 100_000
    print(f"\nget_message of a message with 5000 attachments: {len(response.content)} bytes")

    # an agent's door: the same cut, the same count
    key = key_for(alice, ["read"])
    answer = mcp_post(client, rpc("tools/call", {"name": "get_message", "arguments": {"message_id": many}}), token=key)
    listed = answer.json()["result"]["structuredContent"]["message"]
    assert len(listed["attachments"]) == bound and listed["attachment_count"] == 5000
    assert listed["attachments_truncated"] is True

    # within the bound nothing is cut; the bound is a setting
    me = as_person(alice)
    whole = call(me, "get_message", {"message_id": few})["message"]
    assert [a["filename"] for a in whole["attachments"]] == two
    assert (whole["attachments_truncated"], whole["attachment_count"]) == (False, 2)
    settings.OPERATIONS = {**settings.OPERATIONS, "MESSAGE_ATTACHMENTS_MAX": 1}
    cut = call(me, "get_message", {"message_id": few})["message"]
    assert [a["filename"] for a in cut["attachments"]] == two[:1] and cut["attachments_truncated"] is True

    # mallory: alice's message does not exist for her, and her own counts only her own files
    assert refusal(as_person(mallory), "get_message", {"message_id": many}).code == "NOT_FOUND"
    hers = call(as_person(mallory), "get_message", {"message_id": mallory_mail.message_ids[0]})["message"]
    assert hers["attachment_count"] == 3 and "part-00004.txt" not in json.dumps(hers)


@pytest.mark.slow
def test_mail_shows_the_first_attachments_and_says_how_many_there_are(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    from tests.test_console_browser import _sign_in

    mine = give_mail(alice, tmp_path, "alice", n=1)
    theirs = give_mail(mallory, tmp_path, "mallory", n=1)
    names = _attach(alice, mine.message_ids[0], 250)
    _attach(mallory, theirs.message_ids[0], 3)

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/mail")
    page.click("#view-messages")  # conversations are the default (issue 37): this opens one message's row
    page.locator(f'li.message[data-message-id="{mine.message_ids[0]}"] button.open').click()
    opened = page.locator("#thread article.thread-message").first
    listed = opened.locator("ul.attachments li")
    expect(listed).to_have_count(100)
    expect(listed.first).to_contain_text(names[0])
    expect(opened.locator(".attachments-cut")).to_have_text("The first 100 of 250 attachments.")
    assert theirs.message_ids[0] not in page.content() and "mallory note" not in page.content()
