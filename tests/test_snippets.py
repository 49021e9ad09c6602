"""Snippets: a person's reusable texts, their placeholders filled as plain text (never evaluated) into the drafts
create_draft, reply_to_message and forward_message write; another person's or tenant's snippet is NOT_FOUND."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from apps.mail.models import MailAccount, Message
from apps.outbound.models import Snippet
from apps.outbound.snippets import fill, values_for
from apps.workspaces.models import Workspace
from tests.callers import as_agent, as_person, call, joined, membership, refusal
from tests.conftest import Mailbox, Person, give_mail

GREETING = (
    "Hi {first_name},\nthanks for {subject} ({date}).\n{my_name} <{my_address}> to {sender_name} <{sender_address}>"
)


@pytest.fixture
def mail(alice: Person, tmp_path: Path) -> Mailbox:
    box = give_mail(alice, tmp_path, "alice", n=2)
    account = MailAccount.objects.for_tenant(alice.tenant).get(pk=box.account_id)
    # {my_name}: the name the mailbox sends under (since the sender name exists; its label was used before)
    account.sender_name, account.email_address = "Alice Liddell", "alice@example.test"
    account.save(update_fields=["sender_name", "email_address"])
    Message.objects.for_tenant(alice.tenant).filter(pk=box.message_ids[0]).update(
        sender_name="Bob  Builder", sender_address="bob@example.org"
    )
    return box


def _snippet(caller: Any, text: str = GREETING, name: str = "Thanks") -> dict[str, Any]:
    return call(caller, "create_snippet", {"name": name, "text": text})


def test_a_reply_from_a_snippet_is_filled_from_the_message_and_the_mailbox(alice: Person, mail: Mailbox) -> None:
    me = as_person(alice)
    made = _snippet(me)
    message = Message.objects.for_tenant(alice.tenant).get(pk=mail.message_ids[0])
    day = message.date.date().isoformat()
    draft = call(me, "reply_to_message", {"message_id": mail.message_ids[0], "snippet_id": made["id"], "quote": False})
    assert draft["body"] == (
        f"Hi Bob,\nthanks for {message.subject} ({day}).\n"
        "Alice Liddell <alice@example.test> to Bob Builder <bob@example.org>"
    )
    # with a body too: the snippet first, then the body (the console's signature), then the quote
    draft = call(
        me,
        "reply_to_message",
        {"message_id": mail.message_ids[0], "snippet_id": made["id"], "body": "\n\n-- \nAlice"},
    )
    assert draft["body"].startswith("Hi Bob,") and "\n\n-- \nAlice" in draft["body"]
    assert draft["body"].index("-- \nAlice") < draft["body"].index("\n> alice body")
    forwarded = call(me, "forward_message", {"message_id": mail.message_ids[0], "snippet_id": made["id"]})
    assert forwarded["body"].startswith("Hi Bob,") and "Forwarded message" in forwarded["body"]
    new = call(me, "create_draft", {"account_id": mail.account_id, "subject": "Plans", "snippet_id": made["id"]})
    assert new["body"].startswith("Hi ,\nthanks for Plans (")
    filled = call(
        me, "fill_snippet", {"snippet_id": made["id"], "account_id": mail.account_id, "message_id": mail.message_ids[0]}
    )
    assert filled["text"].startswith("Hi Bob,")


@pytest.mark.parametrize(
    "text", ["{0.__class__}", "{sender_name.__init__}", "{sender_name!r}", "{first_name:>10}", "{unknown}", "{}"]
)
def test_an_unknown_placeholder_is_refused_at_creation(alice: Person, text: str) -> None:
    refused = refusal(as_person(alice), "create_snippet", {"name": "x", "text": f"Hello {text} there"})
    assert (refused.code, refused.field) == ("INVALID_INPUT", "text")
    assert "unknown placeholder" in refused.message and "{first_name}" in refused.message


def test_a_stored_text_is_never_evaluated(alice: Person, mail: Mailbox) -> None:
    """A snippet that reached the table some other way comes out as written: only known names are replaced."""
    Snippet.objects.create(
        tenant=alice.tenant,
        user=alice.user,
        name="odd",
        text="{0.__class__} {sender_name.__init__} {{x}} {sender_name}",
    )
    odd = Snippet.objects.for_tenant(alice.tenant).get(name="odd")
    me = as_person(alice)
    draft = call(me, "reply_to_message", {"message_id": mail.message_ids[0], "snippet_id": str(odd.pk), "quote": False})
    assert draft["body"] == "{0.__class__} {sender_name.__init__} {{x}} Bob Builder"
    # values holding braces are not filled again
    assert fill("{sender_name} {subject}", {"sender_name": "{subject}", "subject": "S"}) == "{subject} S"


def test_values_without_a_message(alice: Person, mail: Mailbox) -> None:
    account = MailAccount.objects.for_tenant(alice.tenant).get(pk=mail.account_id)
    account.name, account.sender_name = "Walker IMAP", ""  # a label is never a name
    from django.utils import timezone

    values = values_for(account=account, message=None, subject="S", now=timezone.now())
    assert values["my_name"] == "alice@example.test" and values["first_name"] == "" and values["subject"] == "S"
    account.sender_name = "Alice Walker"  # the name the mailbox sends under
    assert values_for(account=account, message=None, subject="S", now=timezone.now())["my_name"] == "Alice Walker"
    mine = values_for(account=account, message=None, subject="S", now=timezone.now(), person_name="Alice W.")
    assert mine["my_name"] == "Alice W."  # the writing person's own name first


def test_crud_bounds_and_confirmation(alice: Person, mail: Mailbox) -> None:
    me = as_person(alice)
    made = _snippet(me, "Hello {first_name}")
    assert refusal(me, "create_snippet", {"name": "Thanks", "text": "again"}).code == "CONFLICT"
    changed = call(me, "update_snippet", {"snippet_id": made["id"], "text": "Bye {first_name}"})
    assert changed["text"] == "Bye {first_name}" and changed["name"] == "Thanks"
    assert refusal(me, "update_snippet", {"snippet_id": made["id"], "text": "{nope}"}).field == "text"
    listed = call(me, "list_snippets")
    assert [s["name"] for s in listed["snippets"]] == ["Thanks"] and "first_name" in listed["placeholders"]
    with override_settings(OPERATIONS={**settings.OPERATIONS, "SNIPPETS_MAX": 1, "SNIPPET_MAX_CHARS": 10}):
        assert refusal(me, "create_snippet", {"name": "Two", "text": "short"}).code == "LIMIT_EXCEEDED"
        assert refusal(me, "update_snippet", {"snippet_id": made["id"], "text": "x" * 11}).code == "LIMIT_EXCEEDED"
    assert refusal(me, "delete_snippet", {"snippet_id": made["id"]}).code == "CONFIRMATION_REQUIRED"
    assert call(me, "delete_snippet", {"snippet_id": made["id"]}, confirm=True)["deleted"] is True
    assert call(me, "list_snippets")["snippets"] == []


def test_another_tenant_and_another_person_never_find_a_snippet(
    alice: Person, mallory: Person, mail: Mailbox, tmp_path: Path
) -> None:
    made = _snippet(as_person(alice))
    mallory_box = give_mail(mallory, tmp_path, "mallory")
    bob = joined(alice, "bob@example.test", role="ADMIN")
    for caller, box in ((as_person(mallory), mallory_box), (as_agent(mallory), mallory_box), (as_person(bob), mail)):
        assert call(caller, "list_snippets")["snippets"] == []
        for op, data in [
            ("update_snippet", {"snippet_id": made["id"], "name": "x"}),
            ("delete_snippet", {"snippet_id": made["id"]}),
            ("create_draft", {"account_id": box.account_id, "snippet_id": made["id"]}),
            ("reply_to_message", {"message_id": box.message_ids[0], "snippet_id": made["id"]}),
            ("forward_message", {"message_id": box.message_ids[0], "snippet_id": made["id"]}),
            ("fill_snippet", {"snippet_id": made["id"], "account_id": box.account_id}),
        ]:
            refused = refusal(caller, op, data, confirm=True)
            assert (refused.code, refused.field) == ("NOT_FOUND", "snippet_id"), (op, refused.code)


def test_an_agent_uses_its_persons_snippets_within_its_reach(alice: Person, mail: Mailbox, tmp_path: Path) -> None:
    made = _snippet(as_person(alice))
    agent = as_agent(alice, scopes={"read", "write"})
    assert call(agent, "list_snippets")["snippets"][0]["id"] == made["id"]
    draft = call(agent, "reply_to_message", {"message_id": mail.message_ids[0], "snippet_id": made["id"]})
    assert "Hi Bob," in draft["body"]
    assert refusal(as_agent(alice, scopes={"read"}), "create_snippet", {"name": "n", "text": "t"}).code == (
        "INSUFFICIENT_SCOPE"
    )
    # a limited MEMBER's snippet fills nothing outside the workspaces given to him
    team = Workspace.objects.create(tenant=alice.tenant, name="team")
    bob = joined(alice, "bob@example.test")
    body = {"membership_id": str(membership(bob).pk), "workspace_ids": [str(team.pk)]}
    call(as_person(alice), "set_member_workspaces", body, confirm=True)
    his = _snippet(as_person(bob), "Hello {sender_name}")
    refused = refusal(as_person(bob), "reply_to_message", {"message_id": mail.message_ids[0], "snippet_id": his["id"]})
    assert refused.code == "OUT_OF_SCOPE"
    team_mail = give_mail(Person(alice.user, alice.tenant, team), tmp_path, "team")
    draft = call(as_person(bob), "reply_to_message", {"message_id": team_mail.message_ids[0], "snippet_id": his["id"]})
    assert draft["body"].startswith("Hello Sender")


def test_the_published_pattern_says_what_creation_refuses() -> None:
    """The schemas publish the placeholder rule as a pattern (no lookaround: ECMA and Python read it alike)."""
    import random
    import re

    from apps.outbound.snippets import TEXT_PATTERN, unknown_placeholders

    pattern = re.compile(TEXT_PATTERN)
    pieces = ["{", "}", "a", "\n", "first_name", "{first_name}", "{date}", "_", ".", "{0.__class__}"]
    chosen = random.Random(39)
    for _ in range(20_000):
        text = "".join(chosen.choice(pieces) for _ in range(chosen.randint(0, 8)))
        assert bool(pattern.fullmatch(text)) == (not unknown_placeholders(text)), repr(text)
