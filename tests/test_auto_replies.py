"""Automatic replies (issue 40 item 2) against a real Dovecot and SMTP sink: one reply per sender per window, even
when the same mail is synced twice and workers race; none to a list, automatic mail, a robot or a Bcc'd copy; an
agent's automatic reply is a request that sends nothing until a person approves it, and the agent can cancel one
but never change one; an approver who lost the mailbox ends it; budgets spent or unreachable make replies wait in
`queued` and go once, in order, when they allow. Mallory's identical mailbox on the same server is never touched.
"""

from __future__ import annotations

import threading
from email import message_from_bytes
from typing import Any

import pytest
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.core import redis_client as redis_module
from apps.core.errors import OakenError
from apps.mail.models import MailAccount, Message
from apps.outbound.models import Automation, AutoReplyDecision, OutboundRequest, OutboxEntry
from apps.worker import autoreplies, delivery
from apps.workspaces.models import Membership, Workspace
from tests.callers import as_agent, as_person, call, joined, refusal
from tests.concurrency import race
from tests.conftest import Person
from tests.imapbox import connect, sync
from tests.mailfactory import raw_message
from tests.mailservers import ImapServer, SmtpServer

TEXT = "I am away until Monday; I will answer then.\n"
SENDER = frozenset({"read", "write", "send"})


def auto_reply(p: Person, account_id: str, **extra: Any) -> dict[str, Any]:
    return call(as_person(p), "set_auto_reply", {"account_id": account_id, "text": TEXT, **extra}, confirm=True)


def put(server: ImapServer, user: str, name: str, sender: str, *, to: str | None = None, **kw: Any) -> None:
    raw = raw_message(subject=f"About {name}", sender=sender, to=to or user, message_id=f"<{name}@example.test>", **kw)
    server.append(user, "INBOX", raw)


def deliver_all() -> list[str]:
    """Every queued reply through the real worker steps (SMTP to the sink); the states they end in."""
    ids = OutboundRequest.objects.unscoped().filter(state="queued").order_by("created_at").values_list("pk", flat=True)
    return [delivery.deliver(pk) for pk in ids]


def replies(smtp: SmtpServer, to: str) -> list[Any]:
    found = [message_from_bytes(r.data) for r in smtp.received if to in r.recipients]
    return [m for m in found if m["Auto-Submitted"] == "auto-replied"]


@pytest.fixture
def boxes(alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer) -> dict[str, str]:
    account, user = connect(alice, imap_server, smtp_server)
    theirs, their_user = connect(mallory, imap_server, smtp_server)
    return {"alice": account, "alice_user": user, "mallory": theirs, "mallory_user": their_user}


def test_one_reply_per_sender_none_to_lists_robots_automatic_mail_or_bcc_copies(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    user, theirs = boxes["alice_user"], boxes["mallory_user"]
    put(imap_server, user, "before", "Bob <bob@example.test>")  # before it was on: never answered
    sync(boxes["alice"])
    made = auto_reply(alice, boxes["alice"], subject="Away")
    assert (made["state"], made["approved_by"], made["approval_url"]) == ("active", "alice@example.test", None)

    for box in (user, theirs):  # identical mail in mallory's mailbox, on the same server
        put(imap_server, box, "bob-1", "Bob <bob@example.test>")
        put(imap_server, box, "bob-2", "Bob <BOB@example.test>")  # the same sender, however spelt
        put(imap_server, box, "carol", "Carol <carol@example.test>", to=f"Someone <x@example.test>, {box}")
        put(imap_server, box, "list", "News <news@example.test>", extra_headers=[("List-Id", "<news.example.test>")])
        put(imap_server, box, "bulk", "Shop <shop@example.test>", extra_headers=[("Precedence", "bulk")])
        put(imap_server, box, "auto", "Dan <dan@example.test>", extra_headers=[("Auto-Submitted", "auto-replied")])
        put(imap_server, box, "robot", "No reply <no-reply@example.test>")
        put(imap_server, box, "daemon", "MAILER-DAEMON@example.test")
        put(imap_server, box, "bcc", "Erin <erin@example.test>", to="others@example.test")  # a Bcc'd copy
        put(imap_server, box, "self", box)
    sync(boxes["alice"])
    sync(boxes["alice"])  # synced twice: the same mail, once

    assert autoreplies.run() == 10
    assert autoreplies.run() == 0  # all decided
    assert deliver_all() == ["sent", "sent"]
    to_bob, to_carol = replies(smtp_server, "bob@example.test"), replies(smtp_server, "carol@example.test")
    assert (len(to_bob), len(to_carol)) == (1, 1)
    reply = to_bob[0]
    first = reply["In-Reply-To"]  # bob's first, or his second: stored in the same moment
    assert reply["Subject"] == "Away" and first in ("<bob-1@example.test>", "<bob-2@example.test>")
    assert reply["References"] == first and reply.get_payload(decode=True).decode() == TEXT.replace("\n", "\r\n")
    assert {r.recipients[0] for r in smtp_server.received} == {"bob@example.test", "carol@example.test"}

    detail = call(as_person(alice), "get_automation", {"automation_id": made["automation_id"]})
    mine = Message.objects.for_tenant(alice.tenant)
    why = {mine.get(pk=h["message_id"]).message_id: h["outcome"] for h in detail["history"]}
    assert {why.pop("bob-1@example.test"), why.pop("bob-2@example.test")} == {"replied", "replied_recently"}
    assert why == {
        "carol@example.test": "replied",
        "list@example.test": "mailing_list",
        "bulk@example.test": "bulk",
        "auto@example.test": "automatic",
        "robot@example.test": "robot",
        "daemon@example.test": "robot",
        "bcc@example.test": "not_addressed",
        "self@example.test": "own_address",
    }
    assert (detail["replied"], detail["waiting"]) == (2, 0)
    # each reply is on record as the automatic reply of its approver
    sent = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="send_automatically", outcome="ok")
    assert {(e.principal, e.credential_kind, e.credential_id) for e in sent} == {
        ("person", "autoreply", made["automation_id"])
    }
    assert not Automation.objects.for_tenant(mallory.tenant).exists()
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()
    assert call(as_person(mallory), "list_automations")["automations"] == []
    assert refusal(as_person(mallory), "get_automation", {"automation_id": made["automation_id"]}).code == "NOT_FOUND"


def test_known_correspondents_only_and_a_new_one_replaces_the_old(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    user = boxes["alice_user"]
    imap_server.append(user, "Sent", raw_message(sender=user, to="Bob <bob@example.test>", message_id="<s1@x.test>"))
    sync(boxes["alice"])
    first = auto_reply(alice, boxes["alice"], audience="known")
    put(imap_server, user, "bob", "Bob <bob@example.test>")
    put(imap_server, user, "stranger", "Zed <zed@example.test>")
    sync(boxes["alice"])
    autoreplies.run()
    assert deliver_all() == ["sent"]
    assert [r.recipients for r in smtp_server.received] == [["bob@example.test"]]

    second = auto_reply(alice, boxes["alice"], text="Back soon.\n")
    states = {a["automation_id"]: a["state"] for a in call(as_person(alice), "list_automations")["automations"]}
    assert states == {first["automation_id"]: "cancelled", second["automation_id"]: "active"}
    assert not Automation.objects.for_tenant(mallory.tenant).exists()


def test_an_agents_automatic_reply_sends_nothing_until_approved_and_can_be_cancelled_never_changed(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    agent = as_agent(alice, scopes=SENDER)
    data = {"account_id": boxes["alice"], "text": "Out of office.\n"}
    token = refusal(agent, "set_auto_reply", data).proposal["token"]  # type: ignore[index]
    asked = call(agent, "set_auto_reply", data, confirmation_token=token)
    assert asked["state"] == "awaiting_approval" and asked["approval_url"].endswith(asked["automation_id"])
    put(imap_server, boxes["alice_user"], "early", "Bob <bob@example.test>")
    sync(boxes["alice"])
    assert autoreplies.run() == 0 and deliver_all() == []

    # a write-only agent cannot ask for one; nor can an agent approve one, or anyone approve other content
    writer = as_agent(alice, scopes=frozenset({"read", "write"}))
    assert refusal(writer, "set_auto_reply", data).code == "INSUFFICIENT_SCOPE"
    assert refusal(agent, "approve_automation", {"automation_id": asked["automation_id"]}).code == "NOT_AVAILABLE"
    wrong = {"automation_id": asked["automation_id"], "content_hash": "0" * 64}
    assert refusal(as_person(alice), "approve_automation", wrong, confirm=True).code == "CONFLICT"
    assert refusal(as_person(mallory), "approve_automation", wrong | {"content_hash": asked["content_hash"]},
                   confirm=True).code == "NOT_FOUND"  # fmt: skip

    approved = call(
        as_person(alice),
        "approve_automation",
        {"automation_id": asked["automation_id"], "content_hash": asked["content_hash"]},
        confirm=True,
    )
    assert (approved["state"], approved["approved_by"]) == ("active", "alice@example.test")
    put(imap_server, boxes["alice_user"], "later", "Carol <carol@example.test>")
    sync(boxes["alice"])
    autoreplies.run()
    assert deliver_all() == ["sent"]
    assert [r.recipients for r in smtp_server.received] == [["carol@example.test"]]  # mail before approval: none

    # the agent may stop it, and has no operation that changes it
    cancelled = call(agent, "cancel_auto_reply", {"automation_id": asked["automation_id"]})
    assert cancelled["state"] == "cancelled"
    put(imap_server, boxes["alice_user"], "after", "Dan <dan@example.test>")
    sync(boxes["alice"])
    assert autoreplies.run() == 0 and deliver_all() == []
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


def test_an_approver_who_lost_the_mailbox_ends_it_visibly(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    team = Workspace.objects.create(tenant=alice.tenant, name="team")
    bob = joined(alice, "bob@example.test")
    membership = Membership.objects.for_tenant(alice.tenant).get(user=bob.user)
    give = {"membership_id": str(membership.pk)}
    call(as_person(alice), "set_member_workspaces", give | {"workspace_ids": [str(team.pk)]}, confirm=True)
    account, user = connect(alice, imap_server, smtp_server, name="Team")
    MailAccount.objects.for_tenant(alice.tenant).filter(pk=account).update(workspace=team)
    made = auto_reply(Person(bob.user, alice.tenant, team), account)
    assert made["approved_by"] == "bob@example.test"

    call(as_person(alice), "set_member_workspaces", give | {"workspace_ids": []}, confirm=True)
    put(imap_server, user, "q", "Carol <carol@example.test>")
    sync(account)
    assert autoreplies.run() == 0 and deliver_all() == []
    ended = call(as_person(alice), "get_automation", {"automation_id": made["automation_id"]})
    assert (ended["state"], ended["stopped_reason"]) == ("cancelled", "approver_lost_mailbox")
    assert smtp_server.received == []
    assert not Automation.objects.for_tenant(mallory.tenant).exists()


def test_bad_input_names_the_field_and_never_echoes_it(alice: Person, mallory: Person, boxes: dict[str, str]) -> None:
    me = as_person(alice)
    base = {"account_id": boxes["alice"], "text": TEXT}
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"text": ""}, "text", "INVALID_INPUT"),
        ({"subject": "evil-secret\r\nBcc: x@example.test"}, "subject", "INVALID_INPUT"),
        ({"once_per_days": 0}, "once_per_days", "INVALID_INPUT"),
        ({"audience": "evil-secret"}, "audience", "INVALID_INPUT"),
        ({"tz": "Evil/Secret"}, "tz", "INVALID_INPUT"),
        ({"ends_at": "2020-01-01T00:00:00Z"}, "ends_at", "INVALID_INPUT"),
        ({"account_id": boxes["mallory"]}, "account_id", "NOT_FOUND"),
    ]
    for change, field, code in cases:
        refused = refusal(me, "set_auto_reply", base | change, confirm=True)
        assert (refused.code, refused.field) == (code, field), change
        assert "evil" not in refused.message.lower() and "secret" not in refused.message.lower()
    assert not Automation.objects.unscoped().exists()


# ---------------------------------------------------------------- races and budgets (these commit: threads)


@pytest.mark.django_db(transaction=True)
def test_racing_workers_reply_once_per_sender(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    account, user = connect(alice, imap_server, smtp_server)
    theirs, their_user = connect(mallory, imap_server, smtp_server)
    made = auto_reply(alice, account)
    other = auto_reply(mallory, theirs)
    for box in (user, their_user):
        for i in range(3):
            put(imap_server, box, f"bob-{i}", "Bob <bob@example.test>")
        put(imap_server, box, "carol", "Carol <carol@example.test>")
    sync(account)
    sync(theirs)
    race(4, autoreplies.run)
    # and the calls themselves, raced: the same message twice, and two messages of one sender at once
    automation = Automation.objects.for_tenant(alice.tenant).get(pk=made["automation_id"])
    assert AutoReplyDecision.objects.for_tenant(alice.tenant).filter(automation=automation).count() == 4
    replied = OutboundRequest.objects.for_tenant(alice.tenant).filter(automation=automation)
    assert sorted(r.to[0] for r in replied) == ["bob@example.test", "carol@example.test"]
    theirs_replied = OutboundRequest.objects.for_tenant(mallory.tenant).filter(automation_id=other["automation_id"])
    assert theirs_replied.count() == 2

    put(imap_server, user, "dan-1", "Dan <dan@example.test>")
    put(imap_server, user, "dan-2", "Dan <dan@example.test>")
    sync(account)
    dans = list(Message.objects.for_tenant(alice.tenant).filter(sender_address="dan@example.test"))
    caller = autoreplies.approver(automation)
    assert caller is not None

    def answer(message: Message) -> Any:
        from apps.core.kinds import Door
        from apps.gate.dispatch import dispatch

        data = {"automation_id": str(automation.pk), "message_id": str(message.pk)}
        return dispatch(caller, Door.INTERNAL, "send_automatically", data).output["outcome"]

    twice = [dans[0], dans[0], dans[1], dans[1]]
    order = iter(twice)
    lock = threading.Lock()

    def next_answer() -> Any:
        with lock:
            message = next(order)
        return answer(message)

    outcomes = race(4, next_answer)
    assert sorted(outcomes) == ["already_decided", "already_decided", "replied", "replied_recently"]
    assert OutboundRequest.objects.for_tenant(alice.tenant).filter(to=["dan@example.test"]).count() == 1


def test_replies_wait_while_budgets_are_spent_or_unreachable_and_go_once_in_order(
    alice: Person,
    mallory: Person,
    boxes: dict[str, str],
    imap_server: ImapServer,
    smtp_server: SmtpServer,
    settings: Any,
) -> None:
    made = auto_reply(alice, boxes["alice"])
    for name in ("ann", "ben", "cat"):
        put(imap_server, boxes["alice_user"], name, f"{name} <{name}@example.test>")
    sync(boxes["alice"])
    autoreplies.run()
    queued = [r.to for r in OutboundRequest.objects.for_tenant(alice.tenant).order_by("created_at")]
    assert sorted(queued) == [["ann@example.test"], ["ben@example.test"], ["cat@example.test"]]

    # Redis is away: nothing is sent, nothing is lost, each says why and waits
    settings.REDIS_URL, real = "unix:///nonexistent/redis.sock", settings.REDIS_URL
    redis_module.redis_client.cache_clear()
    try:
        assert deliver_all() == ["queued", "queued", "queued"]
        assert smtp_server.received == []
        waiting = call(as_person(alice), "get_automation", {"automation_id": made["automation_id"]})
        assert (waiting["replied"], waiting["waiting"]) == (3, 3)
        assert {r.waiting for r in OutboundRequest.objects.for_tenant(alice.tenant)} == {"budget_unavailable"}
    finally:
        settings.REDIS_URL = real
        redis_module.redis_client.cache_clear()

    # back, with room for two an hour: two go, in order; the third waits for the next hour
    settings.OPERATIONS = {**settings.OPERATIONS, "AUTO_SENDS_PER_HOUR": 2}
    OutboxEntry.objects.for_tenant(alice.tenant).update(available_at=timezone.now())
    assert deliver_all() == ["sent", "sent", "queued"]
    assert [r.recipients for r in smtp_server.received] == queued[:2]  # the first two made
    third = OutboundRequest.objects.for_tenant(alice.tenant).get(to=queued[2])
    assert third.waiting == "budget_spent"
    assert OutboxEntry.objects.for_tenant(alice.tenant).get(request=third).available_at > timezone.now()

    # the next hour: it goes, once
    settings.OPERATIONS = {**settings.OPERATIONS, "AUTO_SENDS_PER_HOUR": 50}
    OutboxEntry.objects.for_tenant(alice.tenant).update(available_at=timezone.now())
    assert deliver_all() == ["sent"]
    assert deliver_all() == []
    assert [r.recipients for r in smtp_server.received] == queued
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()
    with pytest.raises(OakenError):
        call(as_person(mallory), "cancel_auto_reply", {"automation_id": made["automation_id"]})


# ---------------------------------------------------------------- forwarding (issue 40 item 3)


def test_an_agents_forwarding_forwards_nothing_until_approved_then_each_message_once(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    user = boxes["alice_user"]
    for box in (user, boxes["mallory_user"]):
        for name in ("old-1", "old-2"):
            put(imap_server, box, name, "Bob <bob@example.test>")
    sync(boxes["alice"])
    sync(boxes["mallory"])
    agent = as_agent(alice, scopes=SENDER)
    data = {"account_id": boxes["alice"], "to": "Keeper <keeper@example.test>"}
    proposal = refusal(agent, "set_forwarding", data).proposal
    assert proposal is not None and "keeper@example.test" in proposal["summary"]
    assert "would have forwarded 2 messages" in proposal["summary"] and "About old" not in str(proposal)
    asked = call(agent, "set_forwarding", data, confirmation_token=proposal["token"])
    assert (asked["state"], asked["forward_to"]) == ("awaiting_approval", "keeper@example.test")
    put(imap_server, user, "early", "Carol <carol@example.test>")
    sync(boxes["alice"])
    assert autoreplies.run() == 0 and deliver_all() == [] and smtp_server.received == []
    # a write-only agent can neither ask for one nor change this one
    writer = as_agent(alice, scopes=frozenset({"read", "write"}))
    assert refusal(writer, "set_forwarding", data).code == "INSUFFICIENT_SCOPE"

    call(
        as_person(alice),
        "approve_automation",
        {"automation_id": asked["automation_id"], "content_hash": asked["content_hash"]},
    )
    put(imap_server, user, "new-1", "Dan <dan@example.test>")
    put(imap_server, user, "new-2", "Erin <erin@example.test>")
    # the same message delivered again (another copy, the same Message-ID), and one Oaken forwarded already
    again = raw_message(
        sender="Dan <dan@example.test>",
        to=user,
        body="Again.\n",
        subject="About new-1",
        message_id="<new-1@example.test>",
    )
    imap_server.append(user, "INBOX", again)
    put(imap_server, user, "loop", "Fay <fay@example.test>", extra_headers=[("X-Oaken-Forwarded", "0123abcd")])
    sync(boxes["alice"])
    sync(boxes["alice"])
    assert autoreplies.run() == 4
    assert deliver_all() == ["sent", "sent"]
    got = [message_from_bytes(r.data) for r in smtp_server.received]
    assert {r.recipients[0] for r in smtp_server.received} == {"keeper@example.test"}
    assert sorted(m["Subject"] for m in got) == ["Fwd: About new-1", "Fwd: About new-2"]
    assert {(m["Auto-Submitted"], len(m["X-Oaken-Forwarded"])) for m in got} == {("auto-generated", 32)}
    detail = call(as_person(alice), "get_automation", {"automation_id": asked["automation_id"]})
    assert sorted(h["outcome"] for h in detail["history"]) == [
        "forwarded",
        "forwarded",
        "forwarded_already",
        "forwarded_by_oaken",
    ]
    assert not Automation.objects.for_tenant(mallory.tenant).exists()
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()


def test_cancelling_withdraws_what_waits_to_be_sent(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    made = auto_reply(alice, boxes["alice"])
    for name in ("ann", "ben"):
        put(imap_server, boxes["alice_user"], name, f"{name} <{name}@example.test>")
    sync(boxes["alice"])
    autoreplies.run()
    assert OutboundRequest.objects.for_tenant(alice.tenant).filter(state="queued").count() == 2
    call(as_agent(alice, scopes=SENDER), "cancel_auto_reply", {"automation_id": made["automation_id"]})
    assert {r.state for r in OutboundRequest.objects.for_tenant(alice.tenant)} == {"cancelled"}
    assert deliver_all() == [] and smtp_server.received == []
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()
