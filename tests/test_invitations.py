"""Invitations (SPEC §2): an ADMIN invites by e-mail; the link works once, for its address only, until it expires.

The invitation is mailed once its transaction commits, so these tests commit for real.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.core.links import absolute_url
from apps.workspaces.models import Invitation, Membership
from apps.workspaces.selectors import SESSION_TENANT_KEY, invitation_token_hash
from tests.callers import as_person, call, joined, refusal
from tests.conftest import Person, make_person

pytestmark = pytest.mark.django_db(transaction=True)


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


def test_a_link_needs_a_signed_in_person(alice: Person) -> None:
    link = _invite(alice)
    answer = Client().get(link)
    assert answer.status_code == 302 and answer["Location"].startswith("/accounts/sign-in?next=/invitations/")


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
