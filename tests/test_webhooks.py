"""Webhooks (issue 41 item 3): the feed's events POSTed to a person's https endpoint, signed by the Standard Webhooks
specification, in order, retried, recoverable from the feed.

A test consumer, a loopback HTTPS receiver with a self-signed certificate the client is told to trust (never by
turning verification off), verifies every delivery's signature with the standardwebhooks library, drops copies by
webhook-id and orders by seq; after an outage, a delivery answered after its timeout, arrivals out of order, a
forgery and a secret rotated mid-stream, what it holds is the feed, event for event. Time is driven by passing
`now` to the delivery pass. Mallory's tenant has a webhook and mail of its own: none of it ever reaches alice's
receiver, nor hers his.
"""

from __future__ import annotations

import http.server
import json
import ssl
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from standardwebhooks import Webhook as Verifier
from standardwebhooks import WebhookVerificationError

from apps.audit.models import AuditEvent
from apps.core.errors import NOT_AVAILABLE_MESSAGE, OakenError
from apps.core.kinds import Door
from apps.gate.dispatch import dispatch
from apps.operations.registry import Ceiling, registry
from apps.webhooks import delivery
from apps.webhooks.models import Webhook, WebhookDelivery
from apps.workspaces.models import Membership, Workspace
from tests.callers import as_agent, as_person, call, joined, refusal
from tests.conftest import Person
from tests.embeddings_server import self_signed
from tests.test_events import deliver, everything

OPS = (
    "create_webhook",
    "list_webhooks",
    "update_webhook",
    "delete_webhook",
    "rotate_webhook_secret",
    "list_webhook_deliveries",
    "redeliver_event",
)

# ---------------------------------------------------------------- the receiver and its consumer


class Receiver:
    """A loopback HTTPS endpoint that records every POST (path, headers, body) and answers 200; it can be stopped
    and started again on its port, and made to hold its answer past the client's timeout for chosen ids."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.received: list[dict[str, Any]] = []
        self.slow: dict[str, float] = {}  # webhook-id -> seconds its first arrival is held before the answer
        self.status = 200
        self.port = 0
        self.start()

    def start(self) -> None:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = dict(self.headers.items())
                owner.received.append({"path": self.path, "headers": headers, "body": body})
                hold = owner.slow.pop(headers.get("webhook-id", ""), 0.0)
                time.sleep(hold)
                try:
                    self.send_response(owner.status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the client gave up waiting

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.socket = self.context.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def url(self, path: str = "/hooks") -> str:
        return f"https://127.0.0.1:{self.port}{path}?token=consumer-own-token"

    def ids(self) -> list[str]:
        return [r["headers"]["webhook-id"] for r in self.received]


class Consumer:
    """What a consumer does with a delivery (docs/webhooks.md): verify it, drop a copy by webhook-id, order by
    seq."""

    def __init__(self, *secrets: str) -> None:
        self.secrets = list(secrets)
        self.events: dict[str, dict[str, Any]] = {}
        self.refused = 0

    def take(self, headers: dict[str, str], body: bytes) -> bool:
        for secret in self.secrets:
            try:
                payload = Verifier(secret).verify(body, headers)
            except WebhookVerificationError:
                continue
            self.events.setdefault(headers["webhook-id"], payload["data"])
            return True
        self.refused += 1
        return False

    def take_all(self, received: list[dict[str, Any]]) -> None:
        for r in received:
            assert self.take(r["headers"], r["body"]), "a delivery of Oaken's failed its signature"

    def history(self) -> list[tuple[int, str, str]]:
        return sorted((e["seq"], e["id"], e["type"]) for e in self.events.values())


def feed_history(p: Person, since: int) -> list[tuple[int, str, str]]:
    return [(e["seq"], e["id"], e["type"]) for e in everything(as_person(p)) if e["seq"] > since]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed("127.0.0.1", tmp_path_factory.mktemp("hooks-tls"))


@pytest.fixture
def receiver(certificate: tuple[Path, Path], settings: Any) -> Iterator[Receiver]:
    """Trusted through the setting, reachable on loopback only because the allowance is on."""
    settings.WEBHOOK_CA_FILE = str(certificate[0])
    settings.WEBHOOK_ALLOW_PRIVATE_HOSTS = True
    server = Receiver(*certificate)
    yield server
    server.stop()


@pytest.fixture
def theirs(certificate: tuple[Path, Path], receiver: Receiver) -> Iterator[Receiver]:
    """Mallory's own receiver."""
    server = Receiver(*certificate)
    yield server
    server.stop()


def create(p: Person, url: str, **fields: Any) -> dict[str, Any]:
    return call(as_person(p), "create_webhook", {"url": url, **fields}, confirm=True)


def drain(
    start: datetime, *, until: timedelta = timedelta(hours=2), step: timedelta = timedelta(seconds=30)
) -> datetime:
    """Delivery passes from `start`, a step of simulated time apart, until nothing is pending; the time reached."""
    now = start
    while now - start <= until:
        delivery.run(now=now)
        if not WebhookDelivery.objects.unscoped().filter(state="pending").exists() and not delivery.due(now):
            return now
        now += step
    raise AssertionError("deliveries still pending")


def _events_since(p: Person) -> int:
    return int(call(as_person(p), "list_events", {"limit": 1})["latest"])


# ---------------------------------------------------------------- signed, complete, ordered


def test_every_delivery_is_signed_and_the_consumer_holds_the_feed(
    alice: Person, mallory: Person, receiver: Receiver, theirs: Receiver, tmp_path: Path
) -> None:
    start = _events_since(alice)
    made = create(alice, receiver.url(), description="integration")
    assert made["secret"].startswith("whsec_") and made["webhook"]["state"] == "active"
    mine = create(mallory, theirs.url())
    deliver(alice, tmp_path, "Personal", 3)
    deliver(mallory, tmp_path, "Personal", 2)
    me = as_person(alice)
    ids = [e["subject_id"] for e in everything(me) if e["type"] == "message.received"]
    call(me, "mark_read", {"message_ids": ids[:2]})
    drain(timezone.now())

    consumer = Consumer(made["secret"])
    consumer.take_all(receiver.received)
    assert consumer.history() == feed_history(alice, start) and len(consumer.history()) == 5
    first = receiver.received[0]
    assert first["path"] == "/hooks?token=consumer-own-token"
    assert {"webhook-id", "webhook-timestamp", "webhook-signature"} <= {k.lower() for k in first["headers"]}
    assert first["headers"]["Content-Type"] == "application/json"
    body = json.loads(first["body"])
    assert set(body) == {"type", "timestamp", "data"} and body["data"]["seq"] == start + 1
    assert body["data"]["workspace"] == "default" and body["data"]["subject_id"] == ids[0]
    assert b"Quarterly" not in b"".join(r["body"] for r in receiver.received)  # ids only, never mail text
    # in order, each once: the endpoint saw its events by seq
    assert [json.loads(r["body"])["data"]["seq"] for r in receiver.received] == [s for s, _, _ in consumer.history()]
    # the other tenant: its own events only, on its own receiver; neither sees the other's
    their_consumer = Consumer(mine["secret"])
    their_consumer.take_all(theirs.received)
    assert [t for _, _, t in their_consumer.history()] == ["message.received"] * 2
    assert not set(receiver.ids()) & set(theirs.ids())
    assert consumer.refused == 0 and not Consumer(mine["secret"]).take(first["headers"], first["body"])

    # a forgery: the body changed under a real signature, or signed with a secret that is not the webhook's
    forged = first["body"].replace(ids[0].encode(), ids[1].encode())
    assert not consumer.take(first["headers"], forged)
    stranger = Verifier("whsec_" + "c2VjcmV0LWZvcmdlZC1ieS1zb21lb25lLWVsc2UhIQ==")
    stamp = first["headers"]["webhook-timestamp"]
    signed = stranger.sign("forged-1", datetime.fromtimestamp(int(stamp), tz=UTC), "{}")
    assert not consumer.take({"webhook-id": "forged-1", "webhook-timestamp": stamp, "webhook-signature": signed}, b"{}")
    assert consumer.refused == 2 and "forged-1" not in consumer.events

    listed = call(me, "list_webhook_deliveries", {"webhook_id": made["webhook"]["id"]})
    assert [d["state"] for d in listed["deliveries"]] == ["delivered"] * 5
    assert [d["seq"] for d in listed["deliveries"]] == sorted((d["seq"] for d in listed["deliveries"]), reverse=True)
    assert all(d["last_status"] == 200 and d["attempts"] == 1 for d in listed["deliveries"])


def test_a_receiver_down_for_ten_minutes_is_retried_then_caught_up_in_order(
    alice: Person, mallory: Person, receiver: Receiver, theirs: Receiver, tmp_path: Path
) -> None:
    start = _events_since(alice)
    made = create(alice, receiver.url())
    create(mallory, theirs.url())
    deliver(alice, tmp_path, "Before", 2)
    now = drain(timezone.now())
    receiver.stop()
    deliver(alice, tmp_path, "During", 3)
    deliver(mallory, tmp_path, "During", 2)
    down_until = now + timedelta(minutes=10)
    while now < down_until:
        delivery.run(now=now)
        now += timedelta(seconds=20)
    head = WebhookDelivery.objects.for_tenant(alice.tenant).filter(state="pending").order_by("seq").first()
    assert head is not None and head.attempts >= 4 and head.last_error == "unreachable" and head.last_status is None
    # the head failing holds the ones after it: none was tried
    later = WebhookDelivery.objects.for_tenant(alice.tenant).filter(state="pending").exclude(pk=head.pk)
    assert later.count() == 2 and not later.filter(attempts__gt=0).exists()
    row = call(as_person(alice), "list_webhooks")["webhooks"][0]
    assert row["failing_since"] is not None and row["state"] == "active" and row["pending"] == 3
    receiver.start()
    deliver(alice, tmp_path, "After", 2)
    drain(now)

    consumer = Consumer(made["secret"])
    consumer.take_all(receiver.received)
    assert consumer.history() == feed_history(alice, start) and len(consumer.history()) == 7
    assert [json.loads(r["body"])["data"]["seq"] for r in receiver.received] == [s for s, _, _ in consumer.history()]
    assert call(as_person(alice), "list_webhooks")["webhooks"][0]["failing_since"] is None


def test_a_delivery_answered_after_its_timeout_arrives_twice_and_is_kept_once(
    alice: Person, mallory: Person, receiver: Receiver, tmp_path: Path, settings: Any
) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "WEBHOOK_TIMEOUT_SECONDS": 1}
    start = _events_since(alice)
    made = create(alice, receiver.url())
    deliver(mallory, tmp_path, "Personal", 1)
    deliver(alice, tmp_path, "Personal", 3)
    slow = feed_history(alice, start)[1][1]
    receiver.slow[slow] = 2.5  # taken, then answered 200 after the client gave up
    now = timezone.now()
    delivery.run(now=now)
    row = WebhookDelivery.objects.for_tenant(alice.tenant).get(event_id=slow)
    assert (row.state, row.last_error, row.attempts) == ("pending", "timeout", 1)
    drain(now + timedelta(minutes=1))
    assert receiver.ids().count(slow) == 2
    consumer = Consumer(made["secret"])
    consumer.take_all(receiver.received)
    assert consumer.history() == feed_history(alice, start) and len(consumer.history()) == 3
    row.refresh_from_db()
    assert (row.state, row.attempts, row.last_status, row.last_error) == ("delivered", 2, 200, "")


def test_arrivals_out_of_order_are_put_in_order_by_seq(
    alice: Person, mallory: Person, receiver: Receiver, tmp_path: Path
) -> None:
    start = _events_since(alice)
    made = create(alice, receiver.url())
    deliver(alice, tmp_path, "Personal", 4)
    deliver(mallory, tmp_path, "Personal", 1)
    now = drain(timezone.now())
    history = feed_history(alice, start)
    # a person asks for the second event again: it arrives after the fourth, under its own webhook-id
    again = call(
        as_person(alice),
        "redeliver_event",
        {"webhook_id": made["webhook"]["id"], "event_id": history[1][1]},
        confirm=True,
    )
    assert again["state"] == "pending"
    drain(now + timedelta(seconds=30))
    arrived = [json.loads(r["body"])["data"]["seq"] for r in receiver.received]
    assert arrived == [s for s, _, _ in history] + [history[1][0]]
    # and the network may reorder what it carries: the consumer's history is the same whatever the order
    for order in (receiver.received, receiver.received[::-1]):
        consumer = Consumer(made["secret"])
        consumer.take_all(order)
        assert consumer.history() == history
    # another tenant's event is never redelivered, nor is a missing one
    theirs = everything(as_person(mallory))[0]["id"]
    for event_id in (theirs, "00000000-0000-0000-0000-000000000000"):
        assert (
            refusal(
                as_person(alice),
                "redeliver_event",
                {"webhook_id": made["webhook"]["id"], "event_id": event_id},
                confirm=True,
            ).code
            == "NOT_FOUND"
        )


def test_a_secret_rotated_mid_stream_signs_beside_the_old_one_for_the_grace_period(
    alice: Person, mallory: Person, receiver: Receiver, tmp_path: Path
) -> None:
    start = _events_since(alice)
    made = create(alice, receiver.url())
    hook = made["webhook"]["id"]
    deliver(alice, tmp_path, "One", 2)
    drain(timezone.now())
    rotated = call(as_person(alice), "rotate_webhook_secret", {"webhook_id": hook}, confirm=True)
    new = rotated["secret"]
    assert new != made["secret"] and rotated["previous_secret_valid_until"] is not None
    during = len(receiver.received)
    deliver(alice, tmp_path, "Two", 2)
    drain(timezone.now())
    # during the grace both sign: a consumer that has not moved yet and one that has both verify
    for r in receiver.received[during:]:
        assert len(r["headers"]["webhook-signature"].split(" ")) == 2
        assert Consumer(made["secret"]).take(r["headers"], r["body"]) and Consumer(new).take(r["headers"], r["body"])
    after = len(receiver.received)
    deliver(alice, tmp_path, "Three", 1)
    drain(timezone.now() + timedelta(hours=25))  # past WEBHOOK_SECRET_GRACE_HOURS
    last = receiver.received[after]
    assert len(last["headers"]["webhook-signature"].split(" ")) == 1
    assert not Consumer(made["secret"]).take(last["headers"], last["body"])
    consumer = Consumer(made["secret"], new)  # a consumer moving from the old secret to the new one
    consumer.take_all(receiver.received)
    assert consumer.history() == feed_history(alice, start) and len(consumer.history()) == 5
    # only the webhook's own person rotates it
    assert refusal(as_person(mallory), "rotate_webhook_secret", {"webhook_id": hook}, confirm=True).code == "NOT_FOUND"


# ---------------------------------------------------------------- scope


def test_a_webhook_carries_only_its_workspaces_that_its_person_still_reaches(
    alice: Person, mallory: Person, receiver: Receiver, theirs: Receiver, tmp_path: Path
) -> None:
    team = Workspace.objects.create(tenant=alice.tenant, name="Team")
    bob = joined(alice, "bob@example.test")
    start = _events_since(alice)
    a_only = create(alice, receiver.url("/default"), workspaces=["default"])
    bobs = create(bob, receiver.url("/bob"))  # every workspace bob reaches
    create(mallory, theirs.url())
    deliver(alice, tmp_path, "Personal", 2)
    deliver(alice, tmp_path, "Team", 2, workspace=team)
    deliver(mallory, tmp_path, "Personal", 2)
    now = drain(timezone.now())
    paths = {r["path"].split("?")[0] for r in receiver.received}
    assert paths == {"/default", "/bob"}
    seen_a = Consumer(a_only["secret"])
    seen_a.take_all([r for r in receiver.received if r["path"].startswith("/default")])
    workspaces = {e["workspace"] for e in seen_a.events.values()}
    assert workspaces == {"default"} and len(seen_a.events) == 2
    assert len(feed_history(alice, start)) == 4
    seen_b = Consumer(bobs["secret"])
    seen_b.take_all([r for r in receiver.received if r["path"].startswith("/bob")])
    assert {e["workspace"] for e in seen_b.events.values()} == {"default", "Team"} and len(seen_b.events) == 4

    # bob is given only the default workspace: nothing more of Team reaches him, even what was queued for it
    Membership.objects.for_tenant(alice.tenant).filter(user=bob.user).update(workspace_ids=[alice.workspace.pk])
    deliver(alice, tmp_path, "Team later", 1, workspace=team)
    deliver(alice, tmp_path, "Personal later", 1)
    now = drain(now + timedelta(seconds=30))
    seen_b.take_all([r for r in receiver.received if r["path"].startswith("/bob")])
    assert {e["workspace"] for e in seen_b.events.values()} == {"default", "Team"} and len(seen_b.events) == 5
    # he leaves the tenant: nothing at all
    Membership.objects.for_tenant(alice.tenant).filter(user=bob.user).delete()
    before = len(receiver.received)
    deliver(alice, tmp_path, "Personal last", 1)
    drain(now + timedelta(seconds=30))
    assert [r["path"].split("?")[0] for r in receiver.received[before:]] == ["/default"]
    # mallory's events never reached alice's receiver; hers only hers
    mallory_ids = {e["id"] for e in everything(as_person(mallory))}
    assert not mallory_ids & set(receiver.ids()) and set(theirs.ids()) == mallory_ids


def test_webhooks_are_for_persons_and_each_sees_and_changes_only_their_own(
    alice: Person, mallory: Person, receiver: Receiver
) -> None:
    made = create(alice, receiver.url())
    hook = made["webhook"]["id"]
    bob = joined(alice, "bob@example.test")
    assert call(as_person(bob), "list_webhooks")["webhooks"] == []
    assert call(as_person(mallory), "list_webhooks")["webhooks"] == []
    for who in (mallory, bob):
        for name, data in (
            ("update_webhook", {"webhook_id": hook, "enabled": False}),
            ("delete_webhook", {"webhook_id": hook}),
            ("list_webhook_deliveries", {"webhook_id": hook}),
        ):
            kw = {} if name.startswith("list") else {"confirm": True}
            assert refusal(as_person(who), name, data, **kw).code == "NOT_FOUND"
    # a mutation asks its person first
    asked = refusal(as_person(alice), "update_webhook", {"webhook_id": hook, "types": ["outbound."]})
    assert asked.code == "CONFIRMATION_REQUIRED"
    changed = call(as_person(alice), "update_webhook", {"webhook_id": hook, "types": ["outbound."]}, confirm=True)
    assert changed["types"] == ["outbound."]
    off = call(as_person(alice), "update_webhook", {"webhook_id": hook, "enabled": False}, confirm=True)
    assert (off["state"], off["disabled_reason"]) == ("disabled", "by_person")
    assert call(as_person(alice), "delete_webhook", {"webhook_id": hook}, confirm=True)["deleted"] == hook
    assert call(as_person(alice), "list_webhooks")["webhooks"] == []


def test_agents_cannot_reach_any_webhook_operation_on_any_door(alice: Person, mallory: Person) -> None:
    for name in OPS:
        op = registry.get(name)
        assert op is not None and op.ceiling == Ceiling.NEVER
    admin_agent = as_agent(alice, scopes={"read", "write", "send"}, workspaces=())
    for name in OPS:
        with pytest.raises(OakenError) as refused:
            dispatch(admin_agent, Door.MCP, name, {"webhook_id": "x", "url": "https://hooks.example.org/"})
        assert (refused.value.code, refused.value.message) == ("NOT_AVAILABLE", NOT_AVAILABLE_MESSAGE)
        # nor can a tenant offer it
        assert (
            refusal(as_person(alice), "set_operation_exposure", {"operation": name, "level": "on"}, confirm=True).field
            == "level"
        )


def test_the_mcp_door_lists_and_calls_no_webhook_operation(client: Any, alice: Person, mallory: Person) -> None:
    from tests.test_mcp_door import LEGACY, key_for, post, rpc

    key = key_for(alice, ["read", "write", "send"], [])
    listed = post(client, rpc("tools/list"), token=key, **{"MCP-Protocol-Version": LEGACY}).json()
    assert not {t["name"] for t in listed["result"]["tools"]} & set(OPS)
    for name in OPS:
        answer = post(
            client,
            rpc("tools/call", {"name": name, "arguments": {}}),
            token=key,
            **{"MCP-Protocol-Version": LEGACY},
        ).json()
        assert json.loads(answer["result"]["content"][0]["text"])["error"]["code"] == "NOT_AVAILABLE"


# ---------------------------------------------------------------- where deliveries may go


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/h",
        "https://localhost/h",
        "https://[::1]/h",
        "https://10.1.2.3/h",
        "https://169.254.169.254/latest/meta-data",
        "https://192.168.1.1:8443/h",
        "https://[fc00::1]/h",
        "https://[64:ff9b::7f00:1]/h",
    ],
)
def test_a_private_or_loopback_url_is_refused_when_it_is_made(url: str, alice: Person, settings: Any) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_HOSTS = False
    refused = refusal(as_person(alice), "create_webhook", {"url": url}, confirm=True)
    assert (refused.code, refused.field) == ("INVALID_INPUT", "url") and url not in refused.message
    assert not Webhook.objects.for_tenant(alice.tenant).exists()


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.org/h",
        "https://user:pw@hooks.example.org/h",
        "https://hooks.example.org/h#frag",
        "https://hooks.example.org/h x",
        "https://hooks.example.org:99999/h",
        "javascript:alert(1)",
    ],
)
def test_a_url_that_is_no_https_endpoint_is_refused(url: str, alice: Person) -> None:
    refused = refusal(as_person(alice), "create_webhook", {"url": url}, confirm=True)
    assert (refused.code, refused.field) == ("INVALID_INPUT", "url")


@pytest.mark.parametrize(
    "url",
    [
        "https://127.1/h",
        "https://2130706433/h",
        "https://0x7f000001/h",
        "https://0.0.0.0/h",
        "https://[::ffff:127.0.0.1]/h",
        "https://[2002:7f00:1::]/h",
    ],
)
def test_a_name_that_resolves_to_a_private_address_is_never_connected(url: str, settings: Any) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_HOSTS = False
    answer = delivery.post(url, b"{}", {}, timeout=2)
    assert answer.error in ("host_private", "host_unresolved") and answer.status is None


def test_loopback_is_delivered_to_only_when_the_operator_allows_it(
    alice: Person, mallory: Person, receiver: Receiver, tmp_path: Path, settings: Any
) -> None:
    made = create(alice, receiver.url())  # made while the allowance is on; checked again at each delivery
    settings.WEBHOOK_ALLOW_PRIVATE_HOSTS = False
    deliver(alice, tmp_path, "Personal", 1)
    delivery.run(now=timezone.now())
    row = WebhookDelivery.objects.for_tenant(alice.tenant).get()
    assert (row.state, row.last_error) == ("pending", "host_private") and receiver.received == []
    settings.WEBHOOK_ALLOW_PRIVATE_HOSTS = True
    drain(timezone.now() + timedelta(minutes=5))
    assert len(receiver.received) == 1 and Consumer(made["secret"]).take(**_parts(receiver.received[0]))


def _parts(r: dict[str, Any]) -> dict[str, Any]:
    return {"headers": r["headers"], "body": r["body"]}


def test_an_untrusted_certificate_is_a_failure_never_a_delivery(
    alice: Person, receiver: Receiver, tmp_path: Path, settings: Any
) -> None:
    create(alice, receiver.url())
    settings.WEBHOOK_CA_FILE = ""  # the system's trust store, which does not know the receiver's certificate
    deliver(alice, tmp_path, "Personal", 1)
    delivery.run(now=timezone.now())
    row = WebhookDelivery.objects.for_tenant(alice.tenant).get()
    assert (row.state, row.last_error) == ("pending", "tls_failed") and receiver.received == []


# ---------------------------------------------------------------- failing for a day, claims, secrets


def test_a_day_of_failures_disables_the_webhook_and_tells_its_person(
    alice: Person, mallory: Person, receiver: Receiver, tmp_path: Path
) -> None:
    made = create(alice, receiver.url())
    hook = made["webhook"]["id"]
    receiver.status = 503
    deliver(alice, tmp_path, "Personal", 2)
    deliver(mallory, tmp_path, "Personal", 1)
    now = timezone.now()
    end = now + timedelta(hours=25)
    while now < end and Webhook.objects.for_tenant(alice.tenant).get(pk=hook).state == "active":
        delivery.run(now=now)
        now += timedelta(minutes=10)
    shown = call(as_person(alice), "list_webhooks")["webhooks"][0]
    assert (shown["state"], shown["disabled_reason"]) == ("disabled", "failing") and shown["pending"] == 0
    attempts = WebhookDelivery.objects.for_tenant(alice.tenant).order_by("seq").first()
    assert attempts is not None and attempts.state == "failed" and attempts.last_status == 503
    # the backoff is exponential with a cap: about a day of tries, not one per pass
    assert 10 <= attempts.attempts <= 60
    told = [e for e in everything(as_person(alice)) if e["type"] == "webhook.disabled"]
    assert len(told) == 1 and told[0]["subject_id"] == hook and told[0]["data"] == {"reason": "failing"}
    assert told[0]["seq"] == _events_since(alice)  # numbered from the tenant's chain head like every event
    assert AuditEvent.objects.for_tenant(alice.tenant).filter(operation="webhook_disabled").count() == 1
    # an agent reading the feed never sees it; mallory's feed has none
    agent = as_agent(alice, workspaces=())
    assert not [e for e in everything(agent) if e["type"].startswith("webhook.")]
    assert not [e for e in everything(as_person(mallory)) if e["type"].startswith("webhook.")]
    # nothing more is sent; enabled again, it delivers from the newest event on
    count = len(receiver.received)
    delivery.run(now=now + timedelta(hours=1))
    assert len(receiver.received) == count
    receiver.status = 200
    call(as_person(alice), "update_webhook", {"webhook_id": hook, "enabled": True}, confirm=True)
    deliver(alice, tmp_path, "Later", 1)
    drain(timezone.now())
    assert len(receiver.received) == count + 1


def test_two_workers_never_hold_one_endpoint_at_once(alice: Person, mallory: Person, receiver: Receiver) -> None:
    made = create(alice, receiver.url())
    hook = Webhook.objects.for_tenant(alice.tenant).get(pk=made["webhook"]["id"])
    now = timezone.now()
    first = delivery.claim(hook.pk, now)
    assert first is not None and delivery.claim(hook.pk, now) is None
    # a claim that lapsed (its worker died) is taken over
    later = now + timedelta(minutes=5)
    second = delivery.claim(hook.pk, later)
    assert second is not None and not delivery._holds(first, later)  # the first worker stops at its next step
    delivery.release(second)


@pytest.mark.django_db(transaction=True)
def test_racing_claims_hand_an_endpoint_to_one_worker(alice: Person, mallory: Person, receiver: Receiver) -> None:
    from tests.concurrency import race

    made = create(alice, receiver.url())
    hook_id = Webhook.objects.for_tenant(alice.tenant).get(pk=made["webhook"]["id"]).pk
    now = timezone.now()
    held = race(6, lambda: delivery.claim(hook_id, now))
    assert sum(h is not None for h in held) == 1


def test_the_secret_is_never_audited_logged_or_in_an_error(
    alice: Person, mallory: Person, receiver: Receiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("DEBUG"):
        made = create(alice, receiver.url())
        rotated = call(as_person(alice), "rotate_webhook_secret", {"webhook_id": made["webhook"]["id"]}, confirm=True)
        receiver.status = 500
        deliver(alice, tmp_path, "Personal", 1)
        delivery.run(now=timezone.now())
        error = refusal(as_person(alice), "create_webhook", {"url": "http://x.example.org/"}, confirm=True)
    secrets = (made["secret"], rotated["secret"], made["secret"].removeprefix("whsec_"))
    audited = json.dumps(list(AuditEvent.objects.for_tenant(alice.tenant).values("targets", "input_digest")))
    for secret in secrets:
        assert secret not in caplog.text and secret not in audited and secret not in str(error.as_dict())
    assert "consumer-own-token" not in audited and "consumer-own-token" not in caplog.text
    # stored encrypted: the column holds no secret in the clear
    with connection.cursor() as cursor:
        cursor.execute("SELECT secrets FROM webhooks_webhook WHERE id = %s", [made["webhook"]["id"]])
        stored = bytes(cursor.fetchone()[0])
    assert made["secret"].encode() not in stored and rotated["secret"].encode() not in stored
    # and the list never shows one
    assert made["secret"] not in json.dumps(call(as_person(alice), "list_webhooks"), default=str)


def test_the_console_lists_webhooks_with_their_state_on_the_keys_page(alice: Person, mallory: Person) -> None:
    from tests.test_console import _signed_in

    html = _signed_in(alice).get("/keys").content.decode()
    assert 'id="webhooks-list"' in html and "<h2>Webhooks</h2>" in html
