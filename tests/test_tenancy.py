"""Tenants, memberships, workspaces, `oaken user create`, and the tenant guard on querysets."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from django.core.management import call_command
from django.test import Client

from apps.accounts.models import User
from apps.core.ids import new_id
from apps.core.kinds import Role
from apps.core.tenancy import UnscopedQueryError
from apps.mail.models import MailAccount, Message
from apps.workspaces.models import Membership, Workspace
from apps.workspaces.selectors import NotAMemberError, access_membership
from tests.callers import joined
from tests.commands import run_json
from tests.conftest import Person


def test_user_create_makes_person_tenant_and_default_workspace(db: None) -> None:
    code, data = run_json(
        "user",
        "create",
        "--email",
        "Bob@Example.test",
        "--password",
        "a long enough secret 1",
        "--tenant",
        "Bob Co",
    )
    assert code == 0
    user = User.objects.get(pk=data["user_id"])
    assert user.email == "bob@example.test"
    assert user.check_password("a long enough secret 1")
    assert user.password.startswith("argon2$")
    membership = Membership.objects.get(user=user)
    assert str(membership.tenant_id) == data["tenant_id"]
    assert membership.role == Role.OWNER == data["role"]
    assert membership.tenant.name == "Bob Co"
    workspaces = list(Workspace.objects.for_tenant(membership.tenant).values_list("id", "name"))
    assert workspaces == [(uuid.UUID(data["workspace_id"]), "default")]


def test_a_person_the_operator_creates_can_sign_in_at_once(db: None, mallory: Person, mailoutbox: list) -> None:
    code, data = run_json("user", "create", "--email", "bob@example.test", "--password", "a long enough secret 1")
    assert code == 0 and data["email_confirmed"] is True
    assert User.objects.get(pk=data["user_id"]).email_verified_at is not None
    assert mailoutbox == []  # the operator vouched for the address: nothing to confirm
    form = {"username": "bob@example.test", "password": "a long enough secret 1"}
    signed_in = Client().post("/accounts/sign-in", form)
    assert signed_in.status_code == 302 and signed_in["Location"] == "/"
    assert User.objects.get(pk=mallory.user.pk).email_verified_at is None  # nobody else is touched


def test_user_create_can_mail_the_confirmation_link_instead(db: None, mailoutbox: list, settings) -> None:
    settings.PUBLIC_URL = ""
    settings.SERVE_BIND, settings.SERVE_PORT = "0.0.0.0", 8765  # noqa: S104 (as `oaken serve --bind 0.0.0.0`)
    code, data = run_json(
        "user", "create", "--email", "carol@example.test", "--password", "a long enough secret 1", "--send-confirmation"
    )
    assert code == 0 and data["email_confirmed"] is False
    assert User.objects.get(pk=data["user_id"]).email_verified_at is None
    [sent] = mailoutbox
    assert sent.to == ["carol@example.test"] and "a long enough secret 1" not in sent.body
    link = re.search(r"http://127\.0\.0\.1:8765(/accounts/verify/\S+)", sent.body)
    assert link is not None, sent.body  # no request to follow: where `oaken serve` listens
    browser = Client()
    form = {"username": "carol@example.test", "password": "a long enough secret 1"}
    refused = browser.post("/accounts/sign-in", form)
    assert "Confirm your e-mail address" in refused.content.decode()
    # the link confirms; it signs in only the browser that signed up, and this person signed up at the command line
    assert browser.get(link.group(1))["Location"] == "/accounts/sign-in?confirmed=1"
    assert browser.post("/accounts/sign-in", form)["Location"] == "/"
    assert User.objects.get(pk=data["user_id"]).email_verified_at is not None


def test_user_create_help_says_what_happens_to_the_address(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        call_command("user", "create", "--help")
    text = " ".join(capsys.readouterr().out.split())
    assert "--send-confirmation" in text and "marked confirmed" in text


def test_user_create_refuses_a_second_signup_with_the_same_address(alice: Person) -> None:
    code, data = run_json("user", "create", "--email", "ALICE@example.test", "--password", "another long secret 2")
    assert code == 1
    assert data["error"]["code"] == "CONFLICT"
    assert data["error"]["field"] == "email"
    assert User.objects.filter(email="alice@example.test").count() == 1


def test_user_create_names_the_bad_field_without_echoing_it(db: None) -> None:
    code, data = run_json("user", "create", "--email", "not-an-address-zq", "--password", "a long enough secret 1")
    assert code == 1
    assert data["error"] == {"code": "INVALID_INPUT", "field": "email", "message": data["error"]["message"]}
    assert "not-an-address-zq" not in json.dumps(data)

    code, data = run_json("user", "create", "--email", "ok@example.test", "--password", "short")
    assert code == 1
    assert data["error"]["field"] == "password"
    assert "short" not in data["error"]["message"].replace("too short", "")
    assert not User.objects.filter(email="ok@example.test").exists()


def test_tenant_querysets_require_the_tenant(alice: Person, mallory: Person) -> None:
    for attempt in (
        lambda: list(Workspace.objects.all()),
        lambda: Workspace.objects.filter(name="default").count(),
        lambda: Workspace.objects.get(name="default"),
        lambda: Message.objects.count(),
        lambda: MailAccount.objects.exists(),
    ):
        with pytest.raises(UnscopedQueryError):
            attempt()


def test_each_tenant_sees_only_its_own_rows(alice: Person, mallory: Person) -> None:
    extra = Workspace.objects.create(tenant=alice.tenant, name="work")
    alice_sees = set(Workspace.objects.for_tenant(alice.tenant).values_list("id", flat=True))
    mallory_sees = set(Workspace.objects.for_tenant(mallory.tenant).values_list("id", flat=True))
    assert alice_sees == {alice.workspace.id, extra.id}
    assert mallory_sees == {mallory.workspace.id}
    # Mallory naming Alice's workspace id finds nothing, exactly like an id that does not exist.
    assert not Workspace.objects.for_tenant(mallory.tenant).filter(pk=extra.pk).exists()
    assert not Workspace.objects.for_tenant(mallory.tenant).filter(pk=new_id()).exists()


def test_a_person_reaches_only_tenants_they_belong_to(alice: Person, mallory: Person) -> None:
    assert access_membership(user=alice.user).tenant == alice.tenant
    assert access_membership(user=alice.user, tenant_id=str(alice.tenant.pk)).role == Role.OWNER
    for foreign in (str(mallory.tenant.pk), str(new_id()), "not-a-uuid"):
        with pytest.raises(NotAMemberError):
            access_membership(user=alice.user, tenant_id=foreign)
    first = access_membership(user=alice.user)
    assert first.user == alice.user and first.user_id == alice.user.pk and first.tenant.name == alice.tenant.name
    # in two tenants: the first joined when none is named, either one when named, and never mallory's
    bob = joined(alice, "bob@example.test")
    own = access_membership(user=bob.user)
    assert own.tenant != alice.tenant and own.role == Role.OWNER
    assert access_membership(user=bob.user, tenant_id=str(alice.tenant.pk)).role == Role.MEMBER
    with pytest.raises(NotAMemberError):
        access_membership(user=bob.user, tenant_id=str(mallory.tenant.pk))


def test_roles_are_ordered() -> None:
    assert Role(Role.OWNER).covers(Role.ADMIN)
    assert Role(Role.ADMIN).covers(Role.ADMIN)
    assert not Role(Role.MEMBER).covers(Role.ADMIN)


def test_new_ids_are_unique_and_time_ordered() -> None:
    ids = [new_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert all(i.version == 7 for i in ids)
    # the leading 48 bits are milliseconds, so later ids never sort before earlier ones' milliseconds
    millis = [i.int >> 80 for i in ids]
    assert millis == sorted(millis)


def test_a_forked_child_never_repeats_its_parents_ids() -> None:
    import os

    new_id()  # fill the parent's randomness block
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave at once
        os.write(write, new_id().bytes)
        os._exit(0)
    os.waitpid(pid, 0)
    child_id = os.read(read, 16)
    assert child_id != new_id().bytes
    os.close(read)
    os.close(write)
