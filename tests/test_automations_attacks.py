"""An outside attacker's review of issue 40's standing send behaviours (automatic replies) and unsubscribing.

Each attack ends with a second tenant (mallory) untouched. Automatic replies: agents and people never reach the
engine's operations on any door; ids of other tenants and workspaces behave as absent; an agent can neither change
nor approve what is sent by itself; forged headers, address tricks, loops and floods get no reply beyond the rules
and the hourly budget; the stored content is what is sent. Unsubscribe: the one-click client never reaches a
private address however it is spelt, never follows a redirect, and ends a slow answer by its deadline.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from datetime import timedelta
from email import message_from_bytes
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.core.callers import Caller
from apps.core.kinds import CredentialKind, Door
from apps.gate.dispatch import dispatch
from apps.mail.models import MailAccount, Message
from apps.outbound import oneclick
from apps.outbound.models import Automation, AutoReplyDecision, OutboundRequest
from apps.outbound.unsubscribe import offer_of, usable_https
from apps.worker import autoreplies
from apps.workspaces.models import Workspace
from tests.callers import as_agent, as_person, call, membership, refusal
from tests.conftest import Person, make_person
from tests.imapbox import connect, sync
from tests.mailfactory import raw_message
from tests.mailservers import ImapServer, SmtpServer
from tests.test_auto_replies import TEXT, auto_reply, deliver_all, put, replies

SENDER = frozenset({"read", "write", "send"})
WRITER = frozenset({"read", "write"})


def _untouched(mallory: Person) -> None:
    assert not Automation.objects.for_tenant(mallory.tenant).exists()
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()
    assert not AutoReplyDecision.objects.for_tenant(mallory.tenant).exists()


def _decisions(p: Person, automation_id: str) -> dict[str, str]:
    """message-id header -> outcome, for every message the automation decided."""
    rows = AutoReplyDecision.objects.for_tenant(p.tenant).filter(automation_id=automation_id).select_related("message")
    return {d.message.message_id: d.outcome for d in rows}


@pytest.fixture
def boxes(alice: Person, imap_server: ImapServer, smtp_server: SmtpServer) -> dict[str, str]:
    account, user = connect(alice, imap_server, smtp_server)
    return {"alice": account, "alice_user": user}


# ---------------------------------------------------------------- who may reach what


def test_nobody_but_the_engine_reaches_send_automatically_or_stop_automation_on_any_door(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    made = auto_reply(alice, boxes["alice"])
    put(imap_server, boxes["alice_user"], "q", "Bob <bob@example.test>")
    sync(boxes["alice"])
    message = str(Message.objects.for_tenant(alice.tenant).get().pk)
    answer = {"automation_id": made["automation_id"], "message_id": message}
    stop = {"automation_id": made["automation_id"], "reason": "approver_left"}
    decide = {"automation_id": made["automation_id"], "content_hash": made["content_hash"]}

    agents = [
        as_agent(alice, scopes=SENDER),
        as_agent(alice, scopes=SENDER, credential_kind="oauth", credential_id="conn-1"),
        as_agent(alice, scopes=WRITER),
        as_agent(alice, scopes=SENDER, allow_list={"send_automatically", "stop_automation", "approve_automation"}),
    ]
    for agent in agents:
        for name, data in (
            ("send_automatically", answer),
            ("stop_automation", stop),
            ("approve_automation", decide),
            ("reject_automation", {"automation_id": made["automation_id"]}),
        ):
            assert refusal(agent, name, data).code == "NOT_AVAILABLE", (agent.credential_kind, name)
    person = as_person(alice)
    internal = Caller.internal(alice.tenant)
    for caller, door in ((person, Door.UI), (person, Door.CLI), (internal, Door.INTERNAL)):
        for name, data in (("send_automatically", answer), ("stop_automation", stop)):
            if caller is internal and name == "stop_automation":
                continue  # the engine's own
            with pytest.raises(Exception) as info:
                dispatch(caller, door, name, data, confirm=True)
            assert getattr(info.value, "code", None) == "NOT_AVAILABLE", (door, name)

    # a rule's or an AI label's standing authority, or another automation's, does not answer for this one
    me = membership(alice)
    for kind, source in (
        (CredentialKind.RULE, made["automation_id"]),
        (CredentialKind.AILABEL, made["automation_id"]),
        (CredentialKind.AUTOREPLY, "01900000-0000-7000-8000-000000000000"),
    ):
        other = Caller.standing(me, kind=kind, source_id=source)
        with pytest.raises(Exception) as info:
            dispatch(other, Door.INTERNAL, "send_automatically", answer)
        assert getattr(info.value, "code", None) == "NOT_AVAILABLE", kind

    # the REST door has no path for them, and answers NOT_AVAILABLE to a person's session and an agent's key
    for name in ("send_automatically", "stop_automation"):
        with pytest.raises(NoReverseMatch):
            reverse(f"op-{name}")
    key = call(person, "create_api_key", {"scopes": ["read", "write", "send"]}, confirm=True)["key"]
    session = Client()
    session.force_login(alice.user)
    session.cookies[settings.CSRF_COOKIE_NAME] = csrf = "c" * 32
    by_session = {"X-CSRFToken": csrf, "Accept": "application/json"}
    for name, data in (("send_automatically", answer), ("stop_automation", stop)):
        response = session.post(f"/api/v1/ops/{name}", data, content_type="application/json", headers=by_session)
        assert (response.status_code, response.json()["error"]["code"]) == (404, "NOT_AVAILABLE"), name
        # an agent's key is no REST credential at all (the REST door is the console's: persons only)
        bearer = {"Authorization": f"Bearer {key}"}
        response = Client().post(f"/api/v1/ops/{name}", data, content_type="application/json", headers=bearer)
        assert response.status_code in (401, 404), (name, response.content)

    assert not OutboundRequest.objects.for_tenant(alice.tenant).exists()
    assert not AutoReplyDecision.objects.for_tenant(alice.tenant).exists()
    assert Automation.objects.for_tenant(alice.tenant).get().state == "active"
    _untouched(mallory)


def test_other_tenants_and_workspaces_ids_behave_as_absent(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    mine = auto_reply(alice, boxes["alice"])
    team = Workspace.objects.create(tenant=alice.tenant, name="team")
    team_account, _ = connect(alice, imap_server, smtp_server, name="Team")
    MailAccount.objects.for_tenant(alice.tenant).filter(pk=team_account).update(workspace=team)
    in_team = auto_reply(alice, team_account)

    # mallory, person or agent, meets alice's ids as ids that do not exist
    for caller in (as_person(mallory), as_agent(mallory, scopes=SENDER)):
        for name, data in (
            ("get_automation", {"automation_id": mine["automation_id"]}),
            ("cancel_auto_reply", {"automation_id": mine["automation_id"]}),
            ("set_auto_reply", {"account_id": boxes["alice"], "text": "Mine now.\n"}),
        ):
            assert refusal(caller, name, data, confirm=True).code == "NOT_FOUND", name
        assert call(caller, "list_automations", {})["automations"] == []
    refused = refusal(as_person(mallory), "reject_automation", {"automation_id": mine["automation_id"]})
    assert refused.code == "NOT_FOUND"

    # alice's agent given the default workspace only: the team mailbox's automation is out of its scope
    agent = as_agent(alice, scopes=SENDER)
    for name, data in (
        ("get_automation", {"automation_id": in_team["automation_id"]}),
        ("cancel_auto_reply", {"automation_id": in_team["automation_id"]}),
        ("set_auto_reply", {"account_id": team_account, "text": "Hijack.\n"}),
    ):
        assert refusal(agent, name, data).code == "OUT_OF_SCOPE", name
    listed = call(agent, "list_automations", {"account_id": boxes["alice"]})["automations"]
    assert [a["automation_id"] for a in listed] == [mine["automation_id"]]
    states = set(Automation.objects.for_tenant(alice.tenant).values_list("state", flat=True))
    assert states == {"active"}
    _untouched(mallory)


def test_an_agent_cannot_change_or_approve_what_is_sent_by_itself(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    active = auto_reply(alice, boxes["alice"], subject="Away")
    agent = as_agent(alice, scopes=SENDER)
    data = {"account_id": boxes["alice"], "text": "Wire the money to IBAN X.\n"}
    token = refusal(agent, "set_auto_reply", data).proposal["token"]  # type: ignore[index]
    # the token is for exactly what it was shown: other text with it is refused, and it is burnt
    other = data | {"text": "Something else.\n"}
    assert refusal(agent, "set_auto_reply", other, confirmation_token=token).code != "OK"
    assert not Automation.objects.for_tenant(alice.tenant).filter(state="awaiting_approval").exists()
    token = refusal(agent, "set_auto_reply", data).proposal["token"]  # type: ignore[index]
    asked = call(agent, "set_auto_reply", data, confirmation_token=token)
    assert asked["state"] == "awaiting_approval"
    # nothing changes until a person approves: the person's one is still the one that answers
    states = {a["automation_id"]: a["state"] for a in call(agent, "list_automations", {})["automations"]}
    assert states == {active["automation_id"]: "active", asked["automation_id"]: "awaiting_approval"}
    for name in ("approve_automation", "reject_automation"):
        assert refusal(agent, name, {"automation_id": asked["automation_id"]}).code == "NOT_AVAILABLE"
    # a write-only agent can neither ask nor cancel
    writer = as_agent(alice, scopes=WRITER)
    assert refusal(writer, "set_auto_reply", data).code == "INSUFFICIENT_SCOPE"
    assert refusal(writer, "cancel_auto_reply", {"automation_id": active["automation_id"]}).code == (
        "INSUFFICIENT_SCOPE"
    )
    # there is no operation an agent could edit one with
    from apps.operations.exposure import offered_operations

    offered = {op.name for op in offered_operations(agent, door=Door.MCP)}
    assert {n for n in offered if "auto" in n} == {"set_auto_reply", "cancel_auto_reply", "list_automations",
                                                   "get_automation"}  # fmt: skip

    put(imap_server, boxes["alice_user"], "q", "Bob <bob@example.test>")
    sync(boxes["alice"])
    autoreplies.run()
    assert deliver_all() == ["sent"]
    sent = replies(smtp_server, "bob@example.test")
    assert len(sent) == 1 and sent[0]["Subject"] == "Away"
    assert sent[0].get_payload(decode=True).decode() == TEXT.replace("\n", "\r\n")
    _untouched(mallory)


def test_a_stored_automation_edited_behind_its_hash_never_sends(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    made = auto_reply(alice, boxes["alice"])
    # the database row's text changed behind the gate: nothing goes
    Automation.objects.for_tenant(alice.tenant).filter(pk=made["automation_id"]).update(body="Send me your password")
    put(imap_server, boxes["alice_user"], "q", "Bob <bob@example.test>")
    sync(boxes["alice"])
    autoreplies.run()
    assert deliver_all() == [] and smtp_server.received == []
    assert set(_decisions(alice, made["automation_id"]).values()) == {"refused_conflict"}

    # an agent's, edited before a person approves it: the approval is refused, whatever hash is given
    agent = as_agent(alice, scopes=SENDER)
    data = {"account_id": boxes["alice"], "text": "Out.\n"}
    token = refusal(agent, "set_auto_reply", data).proposal["token"]  # type: ignore[index]
    asked = call(agent, "set_auto_reply", data, confirmation_token=token)
    Automation.objects.for_tenant(alice.tenant).filter(pk=asked["automation_id"]).update(audience="known", body="X")
    for shown in (asked["content_hash"], None):
        approve = {"automation_id": asked["automation_id"], "content_hash": shown}
        assert refusal(as_person(alice), "approve_automation", approve).code == "CONFLICT"

    # a reply request whose stored text moved after it was made is never sent
    fresh = auto_reply(alice, boxes["alice"])
    put(imap_server, boxes["alice_user"], "r", "Carol <carol@example.test>")
    sync(boxes["alice"])
    autoreplies.run()
    request = OutboundRequest.objects.for_tenant(alice.tenant).get(automation_id=fresh["automation_id"])
    assert request.body == TEXT and request.to == ["carol@example.test"]
    OutboundRequest.objects.for_tenant(alice.tenant).filter(pk=request.pk).update(body="Evil")
    assert deliver_all() == ["failed"]
    assert OutboundRequest.objects.for_tenant(alice.tenant).get(pk=request.pk).error == "content_changed"
    assert smtp_server.received == []
    _untouched(mallory)


def test_a_start_in_another_time_zone_still_answers_and_can_be_approved(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    """The approved hash is of the moments, not of how their offset was written: the database gives them back in
    UTC, and the same automation must still match what was approved."""
    started = (timezone.now() - timedelta(hours=1)).astimezone(timezone.get_fixed_timezone(120))
    made = auto_reply(alice, boxes["alice"], starts_at=started.isoformat())
    put(imap_server, boxes["alice_user"], "q", "Bob <bob@example.test>")
    sync(boxes["alice"])
    autoreplies.run()
    assert _decisions(alice, made["automation_id"]) == {"q@example.test": "replied"}

    agent = as_agent(alice, scopes=SENDER)
    local = (timezone.now() + timedelta(days=1)).replace(tzinfo=None, microsecond=0)
    data = {"account_id": boxes["alice"], "text": "Out.\n", "starts_at": local.isoformat(), "tz": "Europe/Paris"}
    token = refusal(agent, "set_auto_reply", data).proposal["token"]  # type: ignore[index]
    asked = call(agent, "set_auto_reply", data, confirmation_token=token)
    decide = {"automation_id": asked["automation_id"], "content_hash": asked["content_hash"]}
    assert call(as_person(alice), "approve_automation", decide)["state"] == "active"
    _untouched(mallory)


# ---------------------------------------------------------------- what gets a reply


def test_forged_headers_and_address_tricks_get_no_reply_beyond_the_rules(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    user = boxes["alice_user"]
    made = auto_reply(alice, boxes["alice"])
    me = MailAccount.objects.for_tenant(alice.tenant).get(pk=boxes["alice"]).email_address
    huge_refs = " ".join(f"<r{i}-{'x' * 60}@example.test>" for i in range(400))
    cases: list[tuple[str, str, str | None, list[tuple[str, str]], str]] = [
        ("lid", "A <a@example.test>", None, [("LIST-ID", "<x.example.test>")], "mailing_list"),
        ("lun", "B <b@example.test>", None, [("list-unsubscribe", "<mailto:u@example.test>")], "mailing_list"),
        ("prec", "C <c@example.test>", None, [("Precedence", "   Bulk  ")], "bulk"),
        ("junk", "D <d@example.test>", None, [("PRECEDENCE", "junk")], "bulk"),
        ("gen", "E <e@example.test>", None, [("auto-submitted", "Auto-Generated")], "automatic"),
        ("comm", "F <f@example.test>", None, [("Auto-Submitted", "auto-replied (vacation)")], "automatic"),
        ("noc", "G <g@example.test>", None, [("Auto-Submitted", "No")], "replied"),
        ("nop", "H <h@example.test>", None, [("Auto-Submitted", "nothing")], "automatic"),
        # alice's address only as a display name in To: not addressed to her
        ("disp", "I <i@example.test>", f'"{me}" <other@example.test>', [], "not_addressed"),
        # her own address in another case, behind a display name of someone else
        ("own", f'"Boss <boss@example.test>" <{me.upper()}>', None, [], "own_address"),
        # an encoded display name carrying a line break and a header: the reply goes to the address alone
        ("crlf", "=?utf-8?q?Jo=0D=0ABcc=3A_evil=40example=2Etest?= <jo@example.test>", None, [], "replied"),
        ("robot", "Bounce <Bounces+123@example.test>", None, [], "robot"),
        ("huge", "K <k@example.test>", None, [("References", huge_refs)], "replied"),
    ]
    for name, sender, to, headers, _ in cases:
        put(imap_server, user, name, sender, to=to, extra_headers=headers)
    # and mallory's identical mailbox gets the same mail, with no automatic reply of her own
    theirs, their_user = connect(mallory, imap_server, smtp_server)
    for name, sender, to, headers, _ in cases:
        put(imap_server, their_user, name, sender, to=to, extra_headers=headers)
    sync(boxes["alice"])
    sync(theirs)
    autoreplies.run()
    assert _decisions(alice, made["automation_id"]) == {f"{n}@example.test": why for n, _, _, _, why in cases}
    assert sorted(deliver_all()) == ["sent"] * 3
    assert sorted(r.recipients[0] for r in smtp_server.received) == [
        "g@example.test", "jo@example.test", "k@example.test"
    ]  # fmt: skip
    for received in smtp_server.received:
        assert len(received.recipients) == 1
        sent = message_from_bytes(received.data)
        assert sent["Bcc"] is None and sent["Auto-Submitted"] == "auto-replied"
        assert len(str(sent["References"] or "").split()) <= 20
    _untouched(mallory)


def test_two_oaken_mailboxes_with_automatic_replies_never_ping_pong(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    bob = make_person("bob@example.test", "Bob's")
    a_account, a_user = connect(alice, imap_server, smtp_server)
    b_account, b_user = connect(bob, imap_server, smtp_server)
    auto_reply(alice, a_account)
    auto_reply(bob, b_account)
    second, second_user = connect(alice, imap_server, smtp_server, name="Second")
    auto_reply(alice, second)
    put(imap_server, a_user, "start", f"Bob <{b_user}>")  # bob writes to alice
    put(imap_server, a_user, "sibling", f"Me <{second_user}>")  # and her own other mailbox does
    for _ in range(4):
        for account in (a_account, b_account, second):
            sync(account)
        autoreplies.run()
        deliver_all()
    assert [r.recipients for r in smtp_server.received] == [[b_user]]  # alice's one reply to bob; no answer
    outcomes = AutoReplyDecision.objects.for_tenant(bob.tenant).values_list("outcome", flat=True)
    assert list(outcomes) == ["automatic"]
    _untouched(mallory)


def test_a_flood_from_many_senders_is_bounded_by_the_hourly_budget(
    alice: Person, mallory: Person, boxes: dict[str, str], imap_server: ImapServer, smtp_server: SmtpServer,
    settings: Any,
) -> None:  # fmt: skip
    settings.OPERATIONS = {**settings.OPERATIONS, "AUTO_SENDS_PER_HOUR": 3}
    auto_reply(alice, boxes["alice"])
    for i in range(12):
        put(imap_server, boxes["alice_user"], f"f{i}", f"F{i} <flood{i}@example.test>")
    sync(boxes["alice"])
    autoreplies.run()
    assert sorted(deliver_all()) == ["queued"] * 9 + ["sent"] * 3
    assert deliver_all() == ["not claimed"] * 9  # tried again at once: they wait for the next hour
    assert len(smtp_server.received) == 3
    queued = OutboundRequest.objects.for_tenant(alice.tenant).filter(state="queued")
    waiting = set(queued.values_list("waiting", flat=True))
    assert waiting == {"budget_spent"}
    _untouched(mallory)


# ---------------------------------------------------------------- unsubscribe: where the one-click POST may go


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/u",
        "https://127.1/u",
        "https://2130706433/u",
        "https://0x7f000001/u",
        "https://0.0.0.0/u",
        "https://localhost/u",
        "https://[::1]/u",
        "https://[::]/u",
        "https://[::ffff:127.0.0.1]/u",
        "https://[::ffff:a9fe:a9fe]/u",
        "https://169.254.169.254/latest/meta-data",
        "https://10.1.2.3/u",
        "https://172.16.0.1/u",
        "https://192.168.1.1:8443/u",
        "https://100.64.0.1/u",
        "https://224.0.0.1/u",
        "https://[fc00::1]/u",
        "https://[fe80::1%25lo]/u",
        "https://[64:ff9b::a9fe:a9fe]/u",  # NAT64: 169.254.169.254
        "https://[64:ff9b::7f00:1]/u",  # NAT64: 127.0.0.1
        "https://[2002:7f00:1::]/u",  # 6to4 of 127.0.0.1
    ],
)
def test_one_click_never_reaches_a_private_address(url: str, settings: Any) -> None:
    settings.UNSUBSCRIBE_ALLOW_PRIVATE_HOSTS = False
    begun: list[bool] = []

    def begin() -> bool:
        begun.append(True)
        return True

    outcome = oneclick.post_one_click(url, timeout=2, begin=begin)
    assert outcome is not None and (outcome.kind, outcome.error) in (
        ("refused", "unsubscribe_host_private"),
        ("temporary", "unsubscribe_host_unresolved"),
    )
    assert begun == []


@pytest.mark.parametrize(
    "url",
    [
        "http://list.example.org/u",
        "https://list.example.org@127.0.0.1/u",
        "https://user:pw@list.example.org/u",
        "https://list.example.org/u\r\nX-Evil: 1",
        "https://list.example.org/u\nHost: evil",
        "https://list.example.org/u x",
        "https://list.example.org:99999/u",
        "https://list.example.org:port/u",
        "https://lïst.example.org/u",
        "https:///u",
        "javascript:alert(1)",
        "https://list.example.org/" + "a" * 2100,
    ],
)
def test_urls_the_client_would_not_post_to(url: str) -> None:
    assert not usable_https(url)


def test_many_or_repeated_list_unsubscribe_entries_are_no_one_click() -> None:
    many = ", ".join(f"<https://h{i}.example.org/u>" for i in range(500))
    raw = raw_message(
        extra_headers=[
            ("List-Unsubscribe", "<https://evil@127.0.0.1/>, " + many),
            ("List-Unsubscribe-Post", "List-Unsubscribe=One-Click"),
        ]
    )
    offer = offer_of(raw)
    assert offer.https == "https://h0.example.org/u" and offer.one_click_asked  # the first usable one
    twice = raw_message(
        extra_headers=[
            ("List-Unsubscribe", "<https://a.example.org/u>"),
            ("List-Unsubscribe", "<https://b.example.org/u>"),
            ("List-Unsubscribe-Post", "List-Unsubscribe=One-Click"),
        ]
    )
    assert not offer_of(twice).one_click_asked


class _DripServer:
    """A TLS server that takes the POST and answers one header byte at a time, slower than nothing but never
    silent for a whole timeout: a client bounded only per read would wait for it as long as it drips."""

    def __init__(self, cert: Path, key: Path, *, for_seconds: float) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.for_seconds = for_seconds
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def serve(self) -> None:
        conn, _ = self.listener.accept()
        try:
            tls = self.context.wrap_socket(conn, server_side=True)
            tls.recv(65536)
            tls.sendall(b"HTTP/1.1 200 OK\r\n")
            end = time.monotonic() + self.for_seconds
            while time.monotonic() < end and not self.stop.is_set():
                tls.sendall(b"X")
                time.sleep(0.3)
        except OSError:
            pass
        finally:
            conn.close()


def test_a_slow_list_server_is_given_up_by_the_deadline(settings: Any, tmp_path: Path) -> None:
    from tests.embeddings_server import self_signed

    cert, key = self_signed("127.0.0.1", tmp_path)
    settings.UNSUBSCRIBE_CA_FILE = str(cert)
    settings.UNSUBSCRIBE_ALLOW_PRIVATE_HOSTS = True
    server = _DripServer(cert, key, for_seconds=12)
    try:
        started = time.monotonic()
        outcome = oneclick.post_one_click(f"https://127.0.0.1:{server.port}/u?t=1", timeout=1, begin=lambda: True)
        took = time.monotonic() - started
    finally:
        server.stop.set()
        server.listener.close()
    assert outcome is not None and (outcome.kind, outcome.error) == ("unknown", "unsubscribe_answer_lost")
    assert took < 4, took


def test_the_list_token_is_never_audited_nor_logged(
    alice: Person, mallory: Person, caplog: pytest.LogCaptureFixture, settings: Any
) -> None:
    from tests.test_unsubscribe import _mailbox, stored

    settings.UNSUBSCRIBE_ALLOW_PRIVATE_HOSTS = False
    secret = "tok-TOPSECRET-91"
    raw = raw_message(
        extra_headers=[
            ("List-Unsubscribe", f"<https://127.0.0.1:9/u?token={secret}>"),
            ("List-Unsubscribe-Post", "List-Unsubscribe=One-Click"),
        ]
    )
    mine = stored(alice, _mailbox(alice, "alice@example.test"), raw)
    agent = as_agent(alice, scopes=SENDER)
    with caplog.at_level("DEBUG"):
        asked = refusal(agent, "unsubscribe", {"message_id": mine, "idempotency_key": "k"})
        answer = call(agent, "unsubscribe", {"message_id": mine, "idempotency_key": "k"},
                      confirmation_token=asked.proposal["token"])  # type: ignore[index]  # fmt: skip
    assert answer["method"] == "link"  # unsigned: handed back, never fetched
    assert secret not in str(asked.proposal) and secret not in asked.message
    events = AuditEvent.objects.for_tenant(alice.tenant)
    assert secret not in str([(e.targets, e.operation, e.outcome) for e in events])
    assert secret not in caplog.text
    _untouched(mallory)


def test_a_reply_to_a_long_message_id_keeps_it_readable() -> None:
    from datetime import UTC, datetime

    from apps.outbound.compose import build_mime

    long_id = "AM0PR04MB1234567890ABCDEF1234567890ABCDEF@AM0PR04MB1234.eurprd04.prod.outlook.com"
    raw = build_mime(
        sender="alice@example.test",
        sender_name="",
        to=["bob@example.test"],
        cc=[],
        subject="Re: x",
        body="hi\n",
        message_id="m1@example.test",
        in_reply_to=long_id,
        references=[f"r{i}-{long_id}" for i in range(20)] + [long_id],
        date=datetime(2026, 1, 1, tzinfo=UTC),
    )
    sent = message_from_bytes(raw)
    assert sent["In-Reply-To"] == f"<{long_id}>"
    assert " ".join(str(sent["References"]).split()).endswith(f"<r19-{long_id}> <{long_id}>")
    assert b"=?utf-8?" not in raw and max(len(line) for line in raw.split(b"\r\n")) <= 998


@pytest.mark.parametrize(
    "sender", ["a\x00b@example.test", "a\x7f@example.test", "moc.\u202elive@example.test", "a\u200b@example.test"]
)
def test_a_sender_address_with_hidden_characters_is_never_a_recipient(sender: str) -> None:
    from apps.core.errors import OakenError
    from apps.outbound.compose import recipients

    with pytest.raises(OakenError) as info:
        recipients([sender], [], [])
    assert (info.value.code, info.value.field) == ("INVALID_INPUT", "to")
    assert recipients(["\u0430lice@example.test"], [], []).to == ["\u0430lice@example.test"]  # a look-alike: itself
