"""The feed's persons' own events (issue 41): `budget.exhausted` once per send budget and clock hour, written with the
refusal's audit event; `connection.expiring` once per credential and deadline, from the beat. Persons read them,
each only in their own tenant and in the workspaces they reach; no agent reads them, whatever its grant, and no
webhook carries them. Mallory's tenant, with the same kinds of credentials and budgets, never shows in Alice's."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.utils import timezone
from oauth2_provider.models import Application

from apps.agents.keys import issue_key
from apps.agents.models import ApiKey, Connection
from apps.agents.services import notice_expiring
from apps.audit.models import AuditEvent
from apps.core.callers import Caller
from apps.events.models import Event
from apps.gate import dispatch as gate
from apps.mail.models import MailAccount
from apps.outbound import requests as outbound_requests
from apps.outbound.models import BudgetExhaustion
from apps.worker.tasks import notice_expiring_task
from apps.workspaces.models import Membership, Workspace
from tests.callers import as_agent, as_person, call, joined, membership, refusal
from tests.concurrency import race
from tests.conftest import Person
from tests.test_events import everything
from tests.test_unsubscribe import _mailbox

SENDER = frozenset({"read", "write", "send"})
SECRET = "Quarterly numbers for the board"


def _email(account: MailAccount, to: list[str]) -> dict[str, Any]:
    return {"account_id": str(account.pk), "to": to, "subject": SECRET, "body": SECRET,
            "idempotency_key": uuid.uuid4().hex}  # fmt: skip


def _token(agent: Caller, data: dict[str, Any]) -> str:
    asked = refusal(agent, "send_email", data)
    assert asked.code == "CONFIRMATION_REQUIRED" and asked.proposal is not None
    return str(asked.proposal["token"])


def _send(agent: Caller, account: MailAccount, to: list[str]) -> str:
    """The request's state, or the refusal's code."""
    data = _email(account, to)
    token = _token(agent, data)
    try:
        return str(call(agent, "send_email", data, confirmation_token=token)["state"])
    except Exception as error:
        return str(getattr(error, "code", type(error).__name__))


def _of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def _recipients(n: int, tag: str = "r") -> list[str]:
    return [f"{tag}{i}@example.test" for i in range(n)]


@pytest.fixture
def three_an_hour(settings: Any) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "SEND_RECIPIENTS_PER_HOUR": 3, "CONFIRMATION_TOKENS_PER_CALLER": 50}


# ------------------------------------------------------------------------------------------------ budget.exhausted


@pytest.mark.usefixtures("one_budget_hour", "three_an_hour")
def test_a_spent_budget_is_reported_once_an_hour_to_persons_only(
    alice: Person, mallory: Person, monkeypatch: pytest.MonkeyPatch
) -> None:
    mailbox = _mailbox(alice, "alice@example.test")
    key = str(uuid.uuid4())
    agent = as_agent(alice, scopes=SENDER, credential_id=key)
    assert _send(agent, mailbox, _recipients(2)) == "awaiting_approval"
    assert _send(agent, mailbox, _recipients(2)) == "RATE_LIMITED"
    assert _send(agent, mailbox, _recipients(1, "s")) == "awaiting_approval"  # the one left still fits
    assert _send(agent, mailbox, _recipients(1, "t")) == "RATE_LIMITED"
    theirs = _mailbox(mallory, "mallory@example.test")
    their_key = str(uuid.uuid4())
    assert _send(as_agent(mallory, scopes=SENDER, credential_id=their_key), theirs, _recipients(4)) == "RATE_LIMITED"

    events = everything(as_person(alice))
    [spent] = _of(events, "budget.exhausted")  # two refusals, one event
    assert spent["subject_id"] == key and spent["account_id"] == str(mailbox.pk)
    assert spent["workspace"] == alice.workspace.name
    hour = datetime.fromtimestamp(outbound_requests.time.time() // 3600 * 3600 + 3600, UTC)
    until = f"{hour:%Y-%m-%dT%H:%M:%SZ}"
    assert spent["data"] == {"budget": "apikey", "credential_id": key, "limit": 3, "until": until}
    assert SECRET not in json.dumps(events) and "example.test" not in json.dumps(spent)
    # each refusal is audited; the event was written with the first one's
    refused = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="send_email", outcome="RATE_LIMITED")
    assert refused.count() == 2

    # the next hour, the budget is whole again, and spent again: reported again, once
    later = outbound_requests.time.time() + 3600
    monkeypatch.setattr(outbound_requests.time, "time", lambda: later)
    assert _send(agent, mailbox, _recipients(3, "u")) == "awaiting_approval"
    assert _send(agent, mailbox, _recipients(1, "v")) == "RATE_LIMITED"
    assert _send(agent, mailbox, _recipients(1, "w")) == "RATE_LIMITED"
    assert len(_of(everything(as_person(alice)), "budget.exhausted")) == 2

    # agents never read it, whatever their grant or filter (its own refusal told this one)
    for reader in (agent, as_agent(alice, workspaces=())):
        assert _of(everything(reader, account_id=str(mailbox.pk)), "budget.exhausted") == []
        assert call(reader, "list_events", {"types": ["budget."], "account_id": str(mailbox.pk)})["events"] == []
    # the other tenant: its own event, none of alice's; hers has none of its
    [their_spent] = _of(everything(as_person(mallory)), "budget.exhausted")
    assert their_spent["subject_id"] == their_key
    assert their_key not in json.dumps(everything(as_person(alice)))


@pytest.mark.usefixtures("one_budget_hour", "three_an_hour")
def test_a_member_given_one_workspace_never_reads_another_s_spent_budget(alice: Person, mallory: Person) -> None:
    team = Workspace.objects.create(tenant=alice.tenant, name="Secret team")
    mine = _mailbox(alice, "alice@example.test")
    hidden = MailAccount.objects.for_tenant(alice.tenant).create(
        tenant=alice.tenant, workspace=team, name="Team", kind=mine.kind, email_address="team@example.test",
        credentials=mine.credentials,
    )  # fmt: skip
    from apps.mail.models import STANDARD_FOLDERS, Folder

    Folder.objects.bulk_create(
        Folder(tenant=alice.tenant, account=hidden, kind=kind, name=kind.label) for kind in STANDARD_FOLDERS
    )
    on_a, on_b = str(uuid.uuid4()), str(uuid.uuid4())
    assert _send(as_agent(alice, scopes=SENDER, credential_id=on_a), mine, _recipients(4)) == "RATE_LIMITED"
    team_agent = as_agent(alice, scopes=SENDER, workspaces=("Secret team",), credential_id=on_b)
    assert _send(team_agent, hidden, _recipients(4)) == "RATE_LIMITED"
    _send(as_agent(mallory, scopes=SENDER, credential_id=str(uuid.uuid4())), _mailbox(mallory, "m@example.test"),
          _recipients(4))  # fmt: skip

    bob = joined(alice, "bob@example.test")
    Membership.objects.filter(tenant=alice.tenant, user=bob.user).update(workspace_ids=[alice.workspace.pk])
    seen = _of(everything(as_person(bob)), "budget.exhausted")
    assert [(e["subject_id"], e["workspace"]) for e in seen] == [(on_a, alice.workspace.name)]
    everyone = _of(everything(as_person(alice)), "budget.exhausted")
    assert {(e["subject_id"], e["workspace"]) for e in everyone} == {(on_a, alice.workspace.name), (on_b, team.name)}
    # the agent granted workspace A reads nothing of B (nor of A: persons only)
    agent_a = as_agent(alice, scopes=SENDER, credential_id=on_a)
    assert _of(everything(agent_a, account_id=str(mine.pk)), "budget.exhausted") == []
    assert refusal(agent_a, "list_events", {"account_id": str(hidden.pk)}).code == "OUT_OF_SCOPE"


@pytest.mark.usefixtures("one_budget_hour", "three_an_hour")
def test_a_refusal_whose_audit_fails_records_no_exhaustion(alice: Person, monkeypatch: pytest.MonkeyPatch) -> None:
    mailbox = _mailbox(alice, "alice@example.test")
    agent = as_agent(alice, scopes=SENDER, credential_id=str(uuid.uuid4()))
    real = gate._append

    def failing(*args: Any, **kwargs: Any) -> None:
        if args[3] == "RATE_LIMITED":
            raise OperationalError("the database went away")
        real(*args, **kwargs)

    monkeypatch.setattr(gate, "_append", failing)
    assert _send(agent, mailbox, _recipients(4)) == "RATE_LIMITED"  # answered all the same
    assert not BudgetExhaustion.objects.for_tenant(alice.tenant).exists()
    assert _of(everything(as_person(alice)), "budget.exhausted") == []
    monkeypatch.setattr(gate, "_append", real)
    assert _send(agent, mailbox, _recipients(4)) == "RATE_LIMITED"
    assert len(_of(everything(as_person(alice)), "budget.exhausted")) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("one_budget_hour", "three_an_hour")
def test_racing_refusals_report_a_spent_budget_once(alice: Person, mallory: Person) -> None:
    mailbox = _mailbox(alice, "alice@example.test")
    agent = as_agent(alice, scopes=SENDER, credential_id=str(uuid.uuid4()))
    asked = [_email(mailbox, _recipients(4, f"r{i}-")) for i in range(6)]
    tokens = iter([(data, _token(agent, data)) for data in asked])

    def send() -> str:
        data, token = next(tokens)
        try:
            call(agent, "send_email", data, confirmation_token=token)
        except Exception as error:
            return str(getattr(error, "code", type(error).__name__))
        return "sent"

    assert race(6, send) == ["RATE_LIMITED"] * 6
    assert Event.objects.for_tenant(alice.tenant).filter(type="budget.exhausted").count() == 1
    assert not Event.objects.for_tenant(mallory.tenant).filter(type="budget.exhausted").exists()


# --------------------------------------------------------------------------------------------- connection.expiring


def _key(p: Person, *, expires_in: timedelta | None, age: timedelta = timedelta(days=30)) -> ApiKey:
    now = timezone.now()
    key, _ = issue_key(
        membership=membership(p),
        scopes=["read"],
        workspaces=[],
        allow_list=None,
        expires_at=None if expires_in is None else now + expires_in,
    )
    ApiKey.objects.for_tenant(p.tenant).filter(pk=key.pk).update(created_at=now - age)
    return key


def _connection(p: Person, *, expires_in: timedelta, activated: bool = True) -> Connection:
    app = Application.objects.create(
        name="Desk assistant",
        client_type="public",
        redirect_uris="http://127.0.0.1/cb",
        authorization_grant_type="authorization-code",
    )
    now = timezone.now()
    return Connection.objects.create(
        tenant=p.tenant,
        user=p.user,
        application=app,
        client_name="Desk assistant",
        redirect_uri="http://127.0.0.1/cb",
        scopes=["read"],
        workspaces=["default"],
        created_at=now - timedelta(days=20),
        expires_at=now + expires_in,
        activated_at=now - timedelta(days=20) if activated else None,
    )


def test_a_credential_nearing_its_deadline_is_reported_once(alice: Person, mallory: Person) -> None:
    soon = _key(alice, expires_in=timedelta(days=3))
    granted = _connection(alice, expires_in=timedelta(days=6))
    _key(alice, expires_in=None)  # no deadline
    later = _key(alice, expires_in=timedelta(days=20))  # not yet in the window
    _key(alice, expires_in=timedelta(days=2), age=timedelta(days=1))  # made to last three days: never warned
    revoked = _key(alice, expires_in=timedelta(days=3))
    ApiKey.objects.for_tenant(alice.tenant).filter(pk=revoked.pk).update(revoked_at=timezone.now())
    _key(alice, expires_in=-timedelta(hours=1))  # past its deadline
    _connection(alice, expires_in=timedelta(days=3), activated=False)  # its code was never redeemed
    theirs = _key(mallory, expires_in=timedelta(days=1))

    assert notice_expiring_task() == 3  # the beat's task: alice's two, mallory's one
    assert notice_expiring(now=timezone.now(), days=7) == 0  # never twice for the same deadline
    events = _of(everything(as_person(alice)), "connection.expiring")
    assert {e["subject_id"]: e["data"] for e in events} == {
        str(soon.pk): {"credential": "apikey", "person_id": str(alice.user.pk), "expires_at": _iso(soon)},
        str(granted.pk): {"credential": "oauth", "person_id": str(alice.user.pk), "expires_at": _iso(granted)},
    }
    assert {(e["workspace"], e["account_id"]) for e in events} == {(None, None)}  # the tenant's, no mailbox's

    # the later key enters its window: its own event, once; the others are not said again
    moment = timezone.now() + timedelta(days=14)
    assert notice_expiring(now=moment, days=7) == 1
    assert notice_expiring(now=moment, days=7) == 0
    events = _of(everything(as_person(alice)), "connection.expiring")
    assert [e["subject_id"] for e in events] == [str(soon.pk), str(granted.pk), str(later.pk)]
    # a new deadline is a new expiry: said once more
    ApiKey.objects.for_tenant(alice.tenant).filter(pk=soon.pk).update(expires_at=timezone.now() + timedelta(days=5))
    assert notice_expiring(now=timezone.now(), days=7) == 1
    assert len(_of(everything(as_person(alice)), "connection.expiring")) == 4

    # agents never read it, even one granted every workspace (which reads the tenant's own events)
    assert _of(everything(as_agent(alice, workspaces=())), "connection.expiring") == []
    assert call(as_agent(alice, workspaces=()), "list_events", {"types": ["connection."]})["events"] == []
    # nor does another tenant's person; mallory reads hers alone
    [their_event] = _of(everything(as_person(mallory)), "connection.expiring")
    assert their_event["subject_id"] == str(theirs.pk)
    assert str(theirs.pk) not in json.dumps(everything(as_person(alice)))


def test_a_member_given_some_workspaces_does_not_read_the_tenant_s_credentials(alice: Person) -> None:
    bob = joined(alice, "bob@example.test")
    _key(bob, expires_in=timedelta(days=3))
    Membership.objects.filter(tenant=alice.tenant, user=bob.user).update(workspace_ids=[alice.workspace.pk])
    assert notice_expiring(now=timezone.now(), days=7) == 1
    assert _of(everything(as_person(bob)), "connection.expiring") == []  # the tenant's as a whole: not a workspace's
    assert len(_of(everything(as_person(alice)), "connection.expiring")) == 1


@pytest.mark.django_db(transaction=True)
def test_racing_runs_report_each_credential_once(alice: Person, mallory: Person) -> None:
    keys = [_key(alice, expires_in=timedelta(days=d)) for d in (1, 2, 3)]
    keys.append(_key(mallory, expires_in=timedelta(days=1)))
    assert sum(race(4, lambda: notice_expiring(now=timezone.now(), days=7))) == len(keys)
    rows = Event.objects.for_tenant(alice.tenant).filter(type="connection.expiring")
    assert sorted(str(s) for s in rows.values_list("subject_id", flat=True)) == sorted(str(k.pk) for k in keys[:3])
    assert Event.objects.for_tenant(mallory.tenant).filter(type="connection.expiring").count() == 1
    connection.close()


def _iso(credential: ApiKey | Connection) -> str:
    deadline = credential.expires_at
    assert deadline is not None
    return f"{deadline.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"


def test_webhooks_cannot_ask_for_them(alice: Person) -> None:
    for kind in ("budget.exhausted", "connection.", "budget."):
        made = refusal(
            as_person(alice), "create_webhook", {"url": "https://hooks.example.test/in", "types": [kind]}, confirm=True
        )
        assert (made.code, made.field) == ("INVALID_INPUT", "types.0")
