"""Invitations (SPEC §2): an ADMIN invites by e-mail; the link works once, for its address only, until it expires.

The invitation is mailed once its transaction commits, so these tests commit for real.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from apps.accounts import mailbound
from apps.accounts.models import User
from apps.audit.models import AuditEvent
from apps.console.views import INVITATION_PAGE_KEY
from apps.core.links import absolute_url
from apps.core.redis_client import redis_client
from apps.workspaces.models import Invitation, Membership
from apps.workspaces.selectors import (
    SESSION_INVITATION_KEY,
    SESSION_TENANT_KEY,
    invitation_reference,
    invitation_token_hash,
    open_invitation_by_reference,
)
from tests.callers import as_person, call, joined, refusal
from tests.conftest import PASSWORD, Person, make_person

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_bounds_left() -> None:
    """The counts a test before left in Redis (invitation pages, sign-in failures, account mail)."""
    for pattern in (INVITATION_PAGE_KEY + "*", "signin-failures:*", mailbound.KEY_PREFIX + "*"):
        for key in redis_client().scan_iter(pattern):
            redis_client().delete(key)


@pytest.fixture
def carol(db: None) -> Person:
    """Someone with an account (and a tenant) of their own, whose address was verified, not yet in alice's tenant."""
    carol = make_person("carol@example.test", "Carol's tenant")
    carol.user.email_verified_at = timezone.now()
    carol.user.save()
    return carol


def _invite(by: Person, email: str = "carol@example.test", role: str = "MEMBER") -> str:
    """Invite, and return the path of the link in the one mail it sent."""
    sent = len(mail.outbox)
    call(as_person(by), "invite_member", {"email": email, "role": role}, confirm=True)
    assert len(mail.outbox) == sent + 1 and mail.outbox[-1].to == [email]
    found = re.search(r"https?://\S+", str(mail.outbox[-1].body))
    assert found is not None
    return urlsplit(found.group(0)).path


def _browser(p: Person) -> Client:
    client = Client()
    client.force_login(p.user)
    return client


def _in_alices(p: Person, alice: Person) -> str | None:
    row = Membership.objects.for_tenant(alice.tenant).filter(user=p.user).first()
    return row.role if row is not None else None


def test_an_invitation_is_mailed_and_stored_only_as_a_hash(alice: Person, mallory: Person) -> None:
    asked = refusal(as_person(alice), "invite_member", {"email": "Carol@Example.test"})
    assert asked.code == "CONFIRMATION_REQUIRED" and not mail.outbox
    assert asked.proposal is not None and asked.proposal["changes"][0]["after"]["email"] == "carol@example.test"

    link = _invite(alice, email="carol@example.test")
    assert link.startswith("/invitations/")
    token = link.removeprefix("/invitations/")
    row = Invitation.objects.for_tenant(alice.tenant).get()
    assert row.token_hash == invitation_token_hash(token) and token not in row.token_hash
    assert (row.email, row.role, row.invited_by) == ("carol@example.test", "MEMBER", alice.user)
    assert timedelta(days=6, hours=23) < row.expires_at - row.created_at <= timedelta(days=7)
    assert absolute_url(f"/invitations/{token}") + "\n" in mail.outbox[-1].body  # no request: where it serves
    assert "Alice's tenant" in mail.outbox[-1].body and mail.outbox[-1].body.startswith("alice@example.test invited")
    listed = call(as_person(alice), "list_members")
    assert token not in json.dumps(listed)
    assert all(token not in json.dumps(e.targets) for e in AuditEvent.objects.for_tenant(alice.tenant))
    assert not Invitation.objects.for_tenant(mallory.tenant).exists()


def test_the_invited_person_accepts_once(alice: Person, carol: Person, mallory: Person) -> None:
    link = _invite(alice, role="ADMIN")
    browser = _browser(carol)
    shown = browser.get(link)
    assert shown.status_code == 200 and "Alice&#x27;s tenant" in shown.content.decode()
    assert _in_alices(carol, alice) is None  # looking does not accept

    accepted = browser.post(link)
    assert accepted.status_code == 200 and "Welcome to Alice&#x27;s tenant" in accepted.content.decode()
    assert _in_alices(carol, alice) == "ADMIN"
    assert browser.session[SESSION_TENANT_KEY] == str(alice.tenant.pk)  # the console now acts there
    row = Invitation.objects.for_tenant(alice.tenant).get()
    assert row.accepted_at is not None and row.accepted_by == carol.user
    event = AuditEvent.objects.for_tenant(alice.tenant).get(operation="accept_invitation")
    assert (event.principal, event.door, event.person_id, event.outcome) == ("person", "ui", carol.user.pk, "ok")
    assert list(call(as_person(alice), "list_members")["invitations"]) == []

    again = browser.post(link)
    assert again.status_code == 410 and "already been used" in again.content.decode()
    assert Membership.objects.for_tenant(alice.tenant).count() == 2
    assert not Membership.objects.for_tenant(mallory.tenant).filter(user=carol.user).exists()


def test_someone_else_learns_nothing_from_the_link(alice: Person, carol: Person, mallory: Person) -> None:
    link = _invite(alice)
    mallory.user.email_verified_at = timezone.now()
    mallory.user.save()
    for method in ("get", "post"):
        answer = getattr(_browser(mallory), method)(link)
        page = answer.content.decode()
        assert answer.status_code == 403 and "sent to another e-mail address" in page
        assert "Alice" not in page and "carol" not in page
    assert _in_alices(mallory, alice) is None
    assert _browser(carol).post(link).status_code == 200  # still good for the person it was sent to
    assert _in_alices(carol, alice) == "MEMBER"


def test_expired_cancelled_unknown_and_unverified_links_are_refused(alice: Person, carol: Person) -> None:
    link = _invite(alice)
    Invitation.objects.for_tenant(alice.tenant).update(expires_at=timezone.now() - timedelta(seconds=1))
    answer = _browser(carol).post(link)
    assert answer.status_code == 410 and "expired" in answer.content.decode()

    link = _invite(alice)  # a new one replaces it
    row = Invitation.objects.for_tenant(alice.tenant).get(accepted_at__isnull=True, revoked_at__isnull=True)
    call(as_person(alice), "cancel_invitation", {"invitation_id": str(row.pk)}, confirm=True)
    answer = _browser(carol).post(link)
    assert answer.status_code == 410 and "cancelled" in answer.content.decode()

    answer = _browser(carol).post("/invitations/not-a-real-token")
    assert answer.status_code == 404 and "not a valid invitation" in answer.content.decode()

    link = _invite(alice)
    carol.user.email_verified_at = None
    carol.user.save()
    answer = _browser(carol).post(link)
    assert answer.status_code == 403 and "Confirm your e-mail address" in answer.content.decode()
    assert _in_alices(carol, alice) is None


def test_a_stranger_sees_who_invited_them_to_what_and_nothing_more(alice: Person, mallory: Person) -> None:
    """Not signed in: the link shows the inviter, the tenant, the role and what it allows, and nothing else (no
    member, not even the address invited); the session keeps a reference to the invitation, never its token."""
    joined(alice, "bob@example.test", "ADMIN")
    link = _invite(alice, role="ADMIN")
    theirs = _invite(mallory, email="dave@example.test")
    stranger = Client()
    answer = stranger.get(link)
    page = answer.content.decode()
    assert answer.status_code == 200
    assert "<strong>alice@example.test</strong> invited you to join <strong>Alice&#x27;s tenant</strong>" in page
    assert "as <strong>Admin</strong>" in page and "An admin does what a member does" in page
    assert "Create an account to join" in page and "I already have an account" in page
    assert "bob@" not in page and "carol" not in page and "Mallory" not in page and "dave" not in page
    assert answer["Cache-Control"] == "no-store" and answer["Referrer-Policy"] == "no-referrer"
    token = link.removeprefix("/invitations/")
    kept = dict(stranger.session.items())
    assert token not in str(kept) and kept[SESSION_INVITATION_KEY]
    assert _in_alices_count(alice) == 2  # looking joins no one
    other = Client().get(theirs).content.decode()
    assert "Mallory&#x27;s tenant" in other and "Alice" not in other and "alice@" not in other
    assert stranger.post(link).status_code == 405  # nothing to do here without an account


def _in_alices_count(alice: Person) -> int:
    return Membership.objects.for_tenant(alice.tenant).count()


def test_a_stranger_is_told_the_same_for_any_link_that_cannot_be_used(alice: Person, carol: Person) -> None:
    expired = _invite(alice, email="e@example.test")
    Invitation.objects.for_tenant(alice.tenant).filter(email="e@example.test").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    cancelled = _invite(alice, email="c@example.test")
    row = Invitation.objects.for_tenant(alice.tenant).get(email="c@example.test")
    call(as_person(alice), "cancel_invitation", {"invitation_id": str(row.pk)}, confirm=True)
    used = _invite(alice)
    assert _browser(carol).post(used).status_code == 200
    pages = [Client().get(link) for link in (expired, cancelled, used, "/invitations/not-a-real-token")]
    assert {p.status_code for p in pages} == {404}
    assert len({p.content for p in pages}) == 1  # never which
    assert "cannot be used" in pages[0].content.decode() and "Alice" not in pages[0].content.decode()


def test_a_stranger_opening_many_links_is_bounded(alice: Person, settings) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "INVITATION_PAGE_PER_CLIENT": 3}
    link = _invite(alice)
    assert [Client().get(link).status_code for _ in range(4)] == [200, 200, 200, 429]
    assert Client(REMOTE_ADDR="198.51.100.7").get(link).status_code == 200  # another client is not held back


def test_a_forged_or_foreign_reference_accepts_nothing(alice: Person, carol: Person, mallory: Person) -> None:
    link = _invite(alice)
    row = Invitation.objects.for_tenant(alice.tenant).get()
    reference = invitation_reference(row.pk)
    assert open_invitation_by_reference(reference=reference + "x", now=timezone.now()) is None
    assert open_invitation_by_reference(reference=reference, now=timezone.now()) is not None
    # mallory's tenant is not the invitation's: the operation refuses it as unknown there
    mallory.user.email_verified_at = timezone.now()
    mallory.user.save()
    refused = refusal(as_person(mallory), "accept_invitation", {"reference": reference})
    assert (refused.code, refused.field) == ("NOT_FOUND", "reference")
    refused = refusal(as_person(mallory), "accept_invitation", {"reference": reference, "token": "x"})
    assert refused.code == "INVALID_INPUT"
    assert _in_alices(carol, alice) is None and _in_alices(mallory, alice) is None
    assert _browser(carol).post(link).status_code == 200


def test_inviting_again_replaces_the_open_invitation(alice: Person, carol: Person) -> None:
    first = _invite(alice)
    asked = refusal(as_person(alice), "invite_member", {"email": "carol@example.test"})
    assert asked.proposal is not None and asked.proposal["count"] == 2  # the new invitation, the old one closed
    second = _invite(alice)
    assert _browser(carol).post(first).status_code == 410
    assert _browser(carol).post(second).status_code == 200
    assert _in_alices(carol, alice) == "MEMBER"


def test_only_an_owner_invites_an_owner(alice: Person, mallory: Person) -> None:
    admin = joined(alice, "ada@example.test", "ADMIN")
    refused = refusal(as_person(admin), "invite_member", {"email": "eve@example.test", "role": "OWNER"}, confirm=True)
    assert (refused.code, refused.field) == ("FORBIDDEN", "role")
    _invite(admin, email="eve@example.test", role="ADMIN")
    _invite(alice, email="fred@example.test", role="OWNER")
    assert sorted(Invitation.objects.for_tenant(alice.tenant).values_list("email", "role")) == [
        ("eve@example.test", "ADMIN"),
        ("fred@example.test", "OWNER"),
    ]
    assert not Invitation.objects.for_tenant(mallory.tenant).exists()


def test_invitations_are_refused_to_members_for_members_and_for_bad_addresses(alice: Person) -> None:
    bob = joined(alice, "bob@example.test")
    assert refusal(as_person(bob), "invite_member", {"email": "x@example.test"}, confirm=True).code == "FORBIDDEN"
    refused = refusal(as_person(alice), "invite_member", {"email": "BOB@example.test"}, confirm=True)
    assert (refused.code, refused.field) == ("CONFLICT", "email")
    refused = refusal(as_person(alice), "invite_member", {"email": "zq-secret no address"}, confirm=True)
    assert (refused.code, refused.field) == ("INVALID_INPUT", "email")
    assert "zq-secret" not in json.dumps(refused.as_dict())
    assert not Invitation.objects.for_tenant(alice.tenant).exists()


def test_another_tenants_invitation_is_not_found(alice: Person, mallory: Person) -> None:
    _invite(alice)
    row = Invitation.objects.for_tenant(alice.tenant).get()
    refused = refusal(as_person(mallory), "cancel_invitation", {"invitation_id": str(row.pk)}, confirm=True)
    assert (refused.code, refused.field) == ("NOT_FOUND", "invitation_id")
    assert Invitation.objects.for_tenant(alice.tenant).get().revoked_at is None


def _mailed_link(to: str) -> str:
    """The path of the link in the last mail sent to `to`."""
    sent = [m for m in mail.outbox if m.to == [to]]
    assert sent
    found = re.search(r"https?://\S+", str(sent[-1].body))
    assert found is not None
    return urlsplit(found.group(0)).path


def test_an_invitee_signs_up_confirms_and_lands_in_the_inviting_tenant(alice: Person, mallory: Person) -> None:
    link = _invite(alice, email="newbie@example.test", role="ADMIN")
    token = link.removeprefix("/invitations/")
    browser = Client()
    browser.get(link)
    form = browser.get("/accounts/sign-up").content.decode()
    assert "Create your account to join Alice&#x27;s tenant" in form
    assert 'value="newbie@example.test"' in form and "readonly" in form
    assert 'name="tenant"' not in form and "Create my own tenant too" in form

    other = browser.post("/accounts/sign-up", {"email": "someone@example.test", "password": PASSWORD})
    assert other.status_code == 400 and "the address the invitation was sent to" in other.content.decode()
    assert not User.objects.filter(email="someone@example.test").exists()

    signed_up = browser.post("/accounts/sign-up", {"email": "newbie@example.test", "password": PASSWORD})
    assert signed_up.status_code == 302 and signed_up["Location"] == "/accounts/check-mail"
    newbie = User.objects.get(email="newbie@example.test")
    assert not Membership.objects.for_user(newbie).exists()  # no tenant of their own, not a member yet

    confirm = _mailed_link("newbie@example.test")
    assert token not in confirm and token not in mail.outbox[-1].body  # the token went out once, in the invitation
    elsewhere = Client()  # the mail may well be opened in another browser: it joins there, then asks to sign in
    landed = elsewhere.get(confirm)
    assert landed.status_code == 302 and landed["Location"] == "/accounts/sign-in?confirmed=1"
    assert [(m.tenant_id, m.role) for m in Membership.objects.for_user(newbie)] == [(alice.tenant.pk, "ADMIN")]
    assert "_auth_user_id" not in elsewhere.session  # a link signs in only the browser that signed up
    signed_in = elsewhere.post("/accounts/sign-in", {"username": "newbie@example.test", "password": PASSWORD})
    assert signed_in["Location"] == "/"
    home = elsewhere.get("/").content.decode()
    assert "<h1>Alice&#x27;s tenant</h1>" in home and "Mallory" not in home
    row = Invitation.objects.for_tenant(alice.tenant).get()
    assert row.accepted_by == newbie
    event = AuditEvent.objects.for_tenant(alice.tenant).get(operation="accept_invitation")
    assert (event.person_id, event.door, event.outcome) == (newbie.pk, "ui", "ok")
    assert elsewhere.get(confirm)["Location"] == "/accounts/sign-in?confirmed=1"  # again: changes nothing
    assert not Membership.objects.for_tenant(mallory.tenant).filter(user=newbie).exists()
    assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(person_id=newbie.pk).exists()


def test_a_confirmation_link_signs_in_only_the_browser_that_signed_up_and_only_once(
    alice: Person, mallory: Person
) -> None:
    """A link that signed in whoever followed it, for days, let its owner sign a victim into the owner's account
    (then whatever the victim connected or wrote went to the owner's tenant). It confirms the address anywhere, but
    signs in only the browser that signed up, the first time."""
    owner = Client()
    owner.post("/accounts/sign-up", {"email": "owner@example.test", "password": PASSWORD, "tenant": "Owner Co"})
    link = _mailed_link("owner@example.test")
    victim = Client()
    assert victim.get(link)["Location"] == "/accounts/sign-in?confirmed=1"
    assert "_auth_user_id" not in victim.session
    assert User.objects.get(email="owner@example.test").email_verified_at is not None
    assert owner.get(link)["Location"] == "/accounts/sign-in?confirmed=1"  # no longer the first time
    assert "_auth_user_id" not in owner.session


def test_an_invitee_may_ask_for_a_tenant_of_their_own_too(alice: Person) -> None:
    link = _invite(alice, email="newbie@example.test")
    browser = Client()
    browser.get(link)
    browser.post(
        "/accounts/sign-up",
        {"email": "newbie@example.test", "password": PASSWORD, "own_tenant": "on", "own_tenant_name": "Newbie Co"},
    )
    newbie = User.objects.get(email="newbie@example.test")
    assert [(m.tenant.name, m.role) for m in Membership.objects.for_user(newbie).select_related("tenant")] == [
        ("Newbie Co", "OWNER")
    ]
    browser.get(_mailed_link("newbie@example.test"))
    assert browser.session[SESSION_TENANT_KEY] == str(alice.tenant.pk)  # lands where they were invited
    assert _in_alices(Person(newbie, alice.tenant, alice.workspace), alice) == "MEMBER"


def _sign_in(client: Client, email: str) -> Any:
    return client.post("/accounts/sign-in", {"username": email, "password": PASSWORD})


def _acting_in(client: Client) -> str:
    found = re.search(r'data-tenant="([^"]*)"', client.get("/").content.decode())
    assert found is not None
    return found.group(1)


def test_an_existing_person_signs_in_from_the_link_and_joins(alice: Person, carol: Person, mallory: Person) -> None:
    link = _invite(alice, role="ADMIN")
    browser = Client()
    browser.get(link)
    page = browser.get("/accounts/sign-in").content.decode()
    assert "Signing in accepts the invitation to join <strong>Alice&#x27;s tenant</strong>" in page
    assert 'value="carol@example.test"' in page
    signed_in = _sign_in(browser, "carol@example.test")
    assert signed_in.status_code == 302 and signed_in["Location"] == "/"
    assert _in_alices(carol, alice) == "ADMIN"
    assert _acting_in(browser) == str(alice.tenant.pk)
    assert SESSION_INVITATION_KEY not in browser.session
    assert not Membership.objects.for_tenant(mallory.tenant).filter(user=carol.user).exists()


def test_signing_in_as_someone_else_from_the_link_joins_no_one(alice: Person, carol: Person, mallory: Person) -> None:
    link = _invite(alice)
    mallory.user.email_verified_at = timezone.now()
    mallory.user.save()
    browser = Client()
    browser.get(link)
    answer = _sign_in(browser, "mallory@example.test")
    assert answer.status_code == 403 and "sent to another e-mail address" in answer.content.decode()
    assert _in_alices(mallory, alice) is None
    assert _browser(carol).post(link).status_code == 200  # still good for the person it was sent to


def test_the_next_sign_in_opens_the_tenant_used_last(alice: Person, carol: Person, mallory: Person) -> None:
    link = _invite(alice)
    first = Client()
    first.get(link)
    _sign_in(first, "carol@example.test")
    assert _in_alices(carol, alice) == "MEMBER"

    later = Client()
    _sign_in(later, "carol@example.test")
    assert _acting_in(later) == str(alice.tenant.pk)  # joined last, though their own tenant is older
    switched = later.post("/tenant", {"tenant_id": str(carol.tenant.pk)})
    assert switched.status_code == 302
    nav = later.get("/").content.decode()
    assert "Alice&#x27;s tenant (Member)" in nav and "Mallory" not in nav  # the switch offers the other one

    again = Client()
    _sign_in(again, "carol@example.test")
    assert _acting_in(again) == str(carol.tenant.pk)
    # the one used last, once they no longer belong to it: their first one
    again.post("/tenant", {"tenant_id": str(alice.tenant.pk)})
    theirs = Membership.objects.for_tenant(alice.tenant).get(user=carol.user)
    call(as_person(alice), "remove_member", {"membership_id": str(theirs.pk)}, confirm=True)
    gone = Client()
    _sign_in(gone, "carol@example.test")
    assert _acting_in(gone) == str(carol.tenant.pk)


def test_a_person_left_with_no_tenant_is_told_so_and_offered_one(alice: Person, mallory: Person) -> None:
    link = _invite(alice, email="newbie@example.test")
    browser = Client()
    browser.get(link)
    browser.post("/accounts/sign-up", {"email": "newbie@example.test", "password": PASSWORD})
    row = Invitation.objects.for_tenant(alice.tenant).get()
    call(as_person(alice), "cancel_invitation", {"invitation_id": str(row.pk)}, confirm=True)
    confirmed = browser.get(_mailed_link("newbie@example.test"))
    assert confirmed.status_code == 410 and "cancelled" in confirmed.content.decode()
    newbie = User.objects.get(email="newbie@example.test")
    assert newbie.email_verified_at is not None and not Membership.objects.for_user(newbie).exists()

    home = browser.get("/")
    assert home.status_code == 302 and home["Location"] == "/accounts/new-tenant"
    page = browser.get("/accounts/new-tenant").content.decode()
    assert "You do not belong to any tenant" in page and "Alice" not in page and "Mallory" not in page
    assert "create a tenant of your own" in page
    created = browser.post("/accounts/new-tenant", {"name": "Newbie Co"})
    assert created.status_code == 302 and created["Location"] == "/"
    assert [(m.tenant.name, m.role) for m in Membership.objects.for_user(newbie).select_related("tenant")] == [
        ("Newbie Co", "OWNER")
    ]
    assert "<h1>Newbie Co</h1>" in browser.get("/").content.decode()
