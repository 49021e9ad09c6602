"""list_send_budgets: what each key, connection, policy and person has spent (live, or rolled up when Redis is away),
seen by a MEMBER for their own, an ADMIN for the tenant; never by an agent, never across tenants."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from oauth2_provider.models import Application
from pydantic import TypeAdapter

from apps.agents.keys import caller_for_key, issue_key
from apps.agents.models import ApiKey, Connection
from apps.core import redis_client as redis_module
from apps.core.redis_client import redis_client
from apps.outbound import budget, rollup
from apps.outbound.models import BudgetUsage, SendPolicy
from tests.callers import as_agent, as_person, call, joined, membership, refusal
from tests.conftest import Person
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user, request

# every test here spends or reads the hourly budgets: within one clock hour
pytestmark = pytest.mark.usefixtures("one_budget_hour")


@pytest.fixture(autouse=True)
def _fresh_pass() -> None:
    redis_client().delete(rollup.CURSOR_KEY)


def _key(p: Person, name: str) -> tuple[ApiKey, str]:
    return issue_key(
        membership=membership(p),
        scopes=["read", "write", "send"],
        workspaces=["default"],
        allow_list=None,
        expires_at=None,
        name=name,
    )


def _connection(p: Person) -> Connection:
    app = Application.objects.create(
        name="Desk assistant",
        client_type="public",
        redirect_uris="http://127.0.0.1/cb",
        authorization_grant_type="authorization-code",
    )
    return Connection.objects.create(
        tenant=p.tenant,
        user=p.user,
        application=app,
        client_name="Desk assistant",
        redirect_uri="http://127.0.0.1/cb",
        scopes=["read"],
        activated_at=datetime.now(UTC),
    )


def _policy(p: Person, name: str, per_hour: int) -> SendPolicy:
    return SendPolicy.objects.create(
        tenant=p.tenant, created_by=p.user, name=name, allowed_domains=["example.test"], recipients_per_hour=per_hour
    )


def _spend(p: Person, kind: str, budget_id: Any, amount: int, now: float | None = None) -> None:
    assert (
        budget.take(budget.BudgetName(str(p.tenant.pk), kind, str(budget_id)), amount, 10_000, now or time.time())
        is not None
    )


def _budgets(p: Person, **input: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {(b["kind"], b["id"]): b for b in call(as_person(p), "list_send_budgets", input)["budgets"]}


def _hour(offset: int = 0) -> datetime:
    return datetime.fromtimestamp(int(time.time()) // 3600 * 3600, UTC) + timedelta(hours=offset)


def _json(moment: datetime) -> str:
    """A time as the operations' answers spell it."""
    return TypeAdapter(datetime).dump_python(moment, mode="json")


@pytest.fixture
def team(alice: Person, mallory: Person) -> dict[str, Any]:
    """Alice (OWNER) and bob (MEMBER) in one tenant, each with a key; bob with a connection and a policy; mallory
    with a key of her own in hers."""
    bob = joined(alice, "bob@example.test")
    alices, _ = _key(alice, "alice's script")
    bobs, _ = _key(bob, "bob's laptop")
    mallorys, _ = _key(mallory, "mallory's")
    return {
        "bob": bob,
        "alices": alices,
        "bobs": bobs,
        "connection": _connection(bob),
        "policy": _policy(bob, "Colleagues", 20),
        "mallorys": mallorys,
    }


def test_a_member_sees_their_own_budgets_and_an_admin_the_tenants(
    alice: Person, mallory: Person, team: dict[str, Any]
) -> None:
    bob, bobs, alices = team["bob"], team["bobs"], team["alices"]
    _spend(alice, "apikey", bobs.pk, 7)
    _spend(alice, "oauth", team["connection"].pk, 2)
    _spend(alice, "policy", team["policy"].pk, 3)
    _spend(alice, "apikey", alices.pk, 11)
    _spend(mallory, "apikey", team["mallorys"].pk, 5)

    mine = _budgets(bob)
    assert set(mine) == {
        ("apikey", str(bobs.pk)),
        ("oauth", str(team["connection"].pk)),
        ("policy", str(team["policy"].pk)),
        ("person", str(bob.user.pk)),
    }
    key = mine["apikey", str(bobs.pk)]
    assert (key["name"], key["prefix"], key["person"], key["active"]) == (
        "bob's laptop",
        bobs.prefix,
        "bob@example.test",
        True,
    )
    assert key["limit_per_hour"] == 200
    now = {"starts_at": _json(_hour()), "used": 7, "left": 193, "live": True, "rolled_up_at": None}
    assert key["current_hour"] == now
    assert mine["oauth", str(team["connection"].pk)]["name"] == "Desk assistant"
    policy = mine["policy", str(team["policy"].pk)]
    assert (policy["name"], policy["limit_per_hour"], policy["current_hour"]["left"]) == ("Colleagues", 20, 17)
    assert mine["person", str(bob.user.pk)]["current_hour"]["used"] == 0

    everyone = _budgets(alice)
    assert set(everyone) == {*mine, ("apikey", str(alices.pk)), ("person", str(alice.user.pk))}
    assert everyone["apikey", str(alices.pk)]["current_hour"]["used"] == 11

    # another tenant: only its own, and none of alice's ids
    theirs = _budgets(mallory)
    assert set(theirs) == {("apikey", str(team["mallorys"].pk)), ("person", str(mallory.user.pk))}
    assert theirs["apikey", str(team["mallorys"].pk)]["current_hour"]["used"] == 5
    # no secret and no hash anywhere in the answer
    text = str(call(as_person(alice), "list_send_budgets"))
    assert bobs.key_hash not in text and alices.key_hash not in text


def test_an_agent_cannot_see_budgets(alice: Person, mallory: Person, team: dict[str, Any]) -> None:
    _, secret = _key(alice, "agent")
    caller = caller_for_key(secret)
    assert caller is not None
    for agent in (caller, as_agent(alice, scopes={"read", "write", "send"}, credential_kind="oauth")):
        assert refusal(agent, "list_send_budgets").code == "NOT_AVAILABLE"


def test_the_last_24_hours_come_from_the_roll_up(alice: Person, mallory: Person, team: dict[str, Any]) -> None:
    bobs = team["bobs"]
    for hours_ago, used in ((1, 4), (3, 6), (24, 8), (25, 100)):
        BudgetUsage.objects.create(
            tenant=alice.tenant,
            kind="apikey",
            budget_id=str(bobs.pk),
            used=used,
            window_start=_hour(-hours_ago),
            rolled_up_at=_hour(-hours_ago),
        )
    # the same id in another tenant's roll-up counts nowhere here
    BudgetUsage.objects.create(
        tenant=mallory.tenant,
        kind="apikey",
        budget_id=str(bobs.pk),
        used=50,
        window_start=_hour(-2),
        rolled_up_at=_hour(-2),
    )
    _spend(alice, "apikey", bobs.pk, 2)
    key = _budgets(team["bob"])["apikey", str(bobs.pk)]
    assert key["last_24_hours"] == [
        {"starts_at": _json(_hour(-24)), "used": 8},
        {"starts_at": _json(_hour(-3)), "used": 6},
        {"starts_at": _json(_hour(-1)), "used": 4},
    ]
    assert key["used_last_24_hours"] == 18 and key["current_hour"]["used"] == 2


def test_a_revoked_key_is_listed_while_it_has_used_something_lately(
    alice: Person, mallory: Person, team: dict[str, Any]
) -> None:
    quiet, _ = _key(alice, "quiet")
    busy = team["alices"]
    ApiKey.objects.for_tenant(alice.tenant).filter(pk__in=[quiet.pk, busy.pk]).update(revoked_at=datetime.now(UTC))
    BudgetUsage.objects.create(
        tenant=alice.tenant,
        kind="apikey",
        budget_id=str(busy.pk),
        used=3,
        window_start=_hour(-2),
        rolled_up_at=_hour(-2),
    )
    listed = _budgets(alice)
    assert ("apikey", str(quiet.pk)) not in listed
    assert listed["apikey", str(busy.pk)]["active"] is False
    assert listed["apikey", str(busy.pk)]["used_last_24_hours"] == 3
    assert ("apikey", str(team["mallorys"].pk)) not in listed


def test_without_redis_the_rolled_up_figure_is_shown_as_such(
    alice: Person, mallory: Person, team: dict[str, Any], settings: Any
) -> None:
    bobs = team["bobs"]
    _spend(alice, "apikey", bobs.pk, 9)
    rollup.roll_up()
    rolled = BudgetUsage.objects.for_tenant(alice.tenant).get(budget_id=str(bobs.pk)).rolled_up_at
    _spend(alice, "apikey", bobs.pk, 1)  # spent after the roll-up: only Redis knows it
    working, settings.REDIS_URL = settings.REDIS_URL, "unix:///nonexistent/redis.sock"
    redis_module.redis_client.cache_clear()
    try:
        out = call(as_person(team["bob"]), "list_send_budgets")
    finally:
        settings.REDIS_URL = working
        redis_module.redis_client.cache_clear()
    assert out["live"] is False
    found = {(b["kind"], b["id"]): b for b in out["budgets"]}
    assert found["apikey", str(bobs.pk)]["current_hour"] == {
        "starts_at": _json(_hour()),
        "used": 9,
        "left": 191,
        "live": False,
        "rolled_up_at": _json(rolled),
    }
    assert found["person", str(team["bob"].user.pk)]["current_hour"]["rolled_up_at"] is None
    # back with Redis: live again, with what was spent since
    assert _budgets(team["bob"])["apikey", str(bobs.pk)]["current_hour"]["used"] == 10


def test_pages_are_bounded_and_follow_each_other(
    alice: Person, mallory: Person, team: dict[str, Any], settings: Any
) -> None:
    for i in range(4):
        _key(alice, f"extra {i}")
    everything = list(_budgets(alice))
    assert len(everything) == 2 + 4 + 1 + 1 + 2  # keys, extra keys, connection, policy, persons
    seen: list[tuple[str, str]] = []
    cursor = None
    while True:
        out = call(as_person(alice), "list_send_budgets", {"limit": 3, **({"cursor": cursor} if cursor else {})})
        assert len(out["budgets"]) <= 3
        seen += [(b["kind"], b["id"]) for b in out["budgets"]]
        cursor = out["next_cursor"]
        if cursor is None:
            break
    assert seen == everything and len(set(seen)) == len(seen)
    assert seen == sorted(seen, key=lambda k: (k[0], uuid.UUID(k[1])))
    over = refusal(as_person(alice), "list_send_budgets", {"limit": settings.OPERATIONS["PAGE_SIZE_MAX"] + 1})
    assert (over.code, over.field) == ("LIMIT_EXCEEDED", "limit")
    bad = refusal(as_person(alice), "list_send_budgets", {"cursor": "bm90IGEgY3Vyc29y"})
    assert (bad.code, bad.field) == ("INVALID_INPUT", "cursor")
    # a cursor from alice's pages shows mallory only her own
    alices_cursor = call(as_person(alice), "list_send_budgets", {"limit": 1})["next_cursor"]
    theirs = call(as_person(mallory), "list_send_budgets", {"cursor": alices_cursor})
    assert {b["id"] for b in theirs["budgets"]} <= {str(team["mallorys"].pk), str(mallory.user.pk)}


def test_a_request_spends_from_the_keys_budget(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    account = imap_account(alice, imap_server, smtp_server, mail_user(imap_server, "alice"))
    row, secret = _key(alice, "sender")
    agent = caller_for_key(secret)
    assert agent is not None
    made = request(
        agent,
        "send_email",
        {
            "account_id": str(account.pk),
            "to": ["a@example.test", "b@example.test"],
            "cc": ["c@example.test"],
            "subject": "Figures",
            "body": "Attached.\n",
            "idempotency_key": "k1",
        },
    )
    assert made["state"] == "awaiting_approval"
    call(
        as_person(alice),
        "send_email",
        {
            "account_id": str(account.pk),
            "to": ["d@example.test"],
            "subject": "Hi",
            "body": "Hello.\n",
            "idempotency_key": "p1",
        },
        confirm=True,
    )
    listed = _budgets(alice)
    assert listed["apikey", str(row.pk)]["current_hour"]["used"] == 3
    assert listed["person", str(alice.user.pk)]["current_hour"]["used"] == 1
    rollup.roll_up()
    assert set(BudgetUsage.objects.for_tenant(alice.tenant).values_list("kind", "budget_id", "used")) == {
        ("apikey", str(row.pk), 3),
        ("person", str(alice.user.pk), 1),
    }
    assert not BudgetUsage.objects.for_tenant(mallory.tenant).exists()
    assert all(b["current_hour"]["used"] == 0 for b in _budgets(mallory).values())
