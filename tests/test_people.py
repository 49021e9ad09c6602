"""People in the browser: sign up with e-mail verification, throttled sign-in, sign out, password reset."""

from __future__ import annotations

import re
import statistics
import time
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.test import Client

from apps.accounts import mailbound, signin
from apps.accounts.mail import verification_token
from apps.accounts.models import User
from apps.workspaces.models import Membership, Workspace
from tests.conftest import PASSWORD, Person

NEW_PASSWORD = "a brand new passphrase 42"


@pytest.fixture(autouse=True)
def _no_lockouts() -> None:
    for pattern in ("signin-failures:*", mailbound.KEY_PREFIX + "*"):
        for key in signin._client().scan_iter(pattern):
            signin._client().delete(key)


def _link(message: str) -> str:
    """The path of the first link in a message."""
    found = re.search(r"https?://\S+", message)
    assert found is not None
    return urlsplit(found.group(0)).path


def _sign_up(client: Client, email: str = "new@example.test", password: str = PASSWORD, **extra: Any) -> Any:
    return client.post("/accounts/sign-up", {"email": email, "password": password, "tenant": "New Co"}, **extra)


def test_sign_up_sends_a_link_that_verifies_and_signs_in(
    db: None, client: Client, mailoutbox: list, mallory: Person
) -> None:
    response = _sign_up(client)
    assert response.status_code == 302 and response["Location"] == "/accounts/check-mail"
    user = User.objects.get(email="new@example.test")
    assert user.email_verified_at is None and user.password.startswith("argon2$")
    membership = Membership.objects.get(user=user)
    assert membership.tenant.name == "New Co" and membership.role == "OWNER"
    assert list(Workspace.objects.for_tenant(membership.tenant).values_list("name", flat=True)) == ["default"]
    assert len(mailoutbox) == 1 and mailoutbox[0].to == ["new@example.test"]
    assert PASSWORD not in mailoutbox[0].body

    # not verified yet: sign-in is refused with a clear message
    refused = client.post("/accounts/sign-in", {"username": "new@example.test", "password": PASSWORD})
    assert refused.status_code == 200 and "Confirm your e-mail address" in refused.content.decode()

    verified = client.get(_link(mailoutbox[0].body))
    assert verified.status_code == 302 and verified["Location"] == "/"
    user.refresh_from_db()
    assert user.email_verified_at is not None
    home = client.get("/").content.decode()
    assert "New Co" in home and "Mallory" not in home


def test_a_forged_or_foreign_verification_link_is_refused(db: None, client: Client, alice: Person) -> None:
    assert client.get("/accounts/verify/not-a-token").status_code == 400
    token = verification_token(alice.user)
    alice.user.email = "changed@example.test"
    alice.user.save()
    assert client.get(f"/accounts/verify/{token}").status_code == 400  # the token named the old address


def test_signing_up_twice_reveals_nothing(db: None, client: Client, mailoutbox: list, alice: Person) -> None:
    response = _sign_up(client, email=alice.user.email)
    assert response.status_code == 302 and response["Location"] == "/accounts/check-mail"
    assert User.objects.filter(email=alice.user.email).count() == 1
    assert "already have an account" in mailoutbox[0].body


def test_sign_up_errors_name_the_field_and_do_not_echo_the_password(db: None, client: Client) -> None:
    response = _sign_up(client, email="ok@example.test", password="zqshort")
    assert response.status_code == 400
    page = response.content.decode()
    assert "This password is too short" in page and "zqshort" not in page
    assert not User.objects.filter(email="ok@example.test").exists()


def _verified(p: Person) -> None:
    User.objects.filter(pk=p.user.pk).update(email_verified_at="2026-01-01T00:00:00Z")


def test_sign_in_and_sign_out(db: None, client: Client, alice: Person, mallory: Person) -> None:
    _verified(alice)
    response = client.post("/accounts/sign-in", {"username": "ALICE@example.test", "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == "/"
    assert "Alice&#x27;s tenant" in client.get("/").content.decode()
    assert "Mallory" not in client.get("/").content.decode()
    assert client.get("/accounts/sign-out").status_code == 405  # signing out is a POST
    assert client.post("/accounts/sign-out").status_code == 302
    assert client.get("/")["Location"].startswith("/accounts/sign-in")


def test_repeated_failures_lock_the_address(db: None, client: Client, alice: Person, settings) -> None:
    _verified(alice)
    for _ in range(settings.OPERATIONS["SIGN_IN_MAX_FAILURES"]):
        page = client.post("/accounts/sign-in", {"username": alice.user.email, "password": "wrong"}).content.decode()
        assert "Please enter a correct" in page
    locked = client.post("/accounts/sign-in", {"username": alice.user.email, "password": PASSWORD})
    assert locked.status_code == 200 and "Too many failed attempts" in locked.content.decode()
    signin.clear(alice.user.email)
    assert client.post("/accounts/sign-in", {"username": alice.user.email, "password": PASSWORD}).status_code == 302


def test_sign_in_refuses_when_failures_cannot_be_counted(db: None, client: Client, alice: Person, settings) -> None:
    _verified(alice)
    settings.REDIS_URL = "unix:///nonexistent/redis.sock"
    signin._client.cache_clear()
    try:
        page = client.post("/accounts/sign-in", {"username": alice.user.email, "password": PASSWORD})
        assert page.status_code == 200 and "Too many failed attempts" in page.content.decode()
    finally:
        signin._client.cache_clear()


def test_forms_need_the_csrf_token(db: None, alice: Person) -> None:
    _verified(alice)
    strict = Client(enforce_csrf_checks=True)
    assert strict.post("/accounts/sign-in", {"username": alice.user.email, "password": PASSWORD}).status_code == 403
    assert (
        strict.post("/accounts/sign-up", {"email": "x@example.test", "password": PASSWORD, "tenant": "x"}).status_code
        == 403
    )


def test_password_reset_by_mail(db: None, client: Client, mailoutbox: list, alice: Person, mallory: Person) -> None:
    _verified(alice)
    assert client.post("/accounts/password-reset", {"email": alice.user.email}).status_code == 302
    assert client.post("/accounts/password-reset", {"email": "nobody@example.test"}).status_code == 302
    assert len(mailoutbox) == 1 and mailoutbox[0].to == [alice.user.email]
    link = _link(mailoutbox[0].body)
    form = client.get(link, follow=True)
    assert form.status_code == 200 and "Choose a new password" in form.content.decode()
    done = client.post(form.redirect_chain[-1][0], {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD})
    assert done.status_code == 302 and done["Location"] == "/accounts/password-reset/done"
    assert User.objects.get(pk=alice.user.pk).check_password(NEW_PASSWORD)
    assert User.objects.get(pk=mallory.user.pk).check_password(PASSWORD)
    # the link works once
    assert "does not work" in client.get(link, follow=True).content.decode()


def test_a_completed_password_reset_lifts_the_sign_in_lock(
    db: None, client: Client, mailoutbox: list, alice: Person, mallory: Person, settings
) -> None:
    _verified(alice)
    _verified(mallory)
    for who in (alice, mallory):
        for _ in range(settings.OPERATIONS["SIGN_IN_MAX_FAILURES"]):
            client.post("/accounts/sign-in", {"username": who.user.email, "password": "wrong"})
    assert signin.locked(alice.user.email, "127.0.0.1") and signin.locked(mallory.user.email, "127.0.0.1")
    client.post("/accounts/password-reset", {"email": alice.user.email})
    form = client.get(_link(mailoutbox[-1].body), follow=True)
    assert signin.locked(alice.user.email, "127.0.0.1")  # asking for the link lifts nothing: anyone can ask
    client.post(form.redirect_chain[-1][0], {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD})
    assert not signin.locked(alice.user.email, "127.0.0.1")
    assert signin.locked(mallory.user.email, "127.0.0.1")  # only the address whose password was reset
    signed_in = client.post("/accounts/sign-in", {"username": alice.user.email, "password": NEW_PASSWORD})
    assert signed_in.status_code == 302 and signed_in["Location"] == "/"


def test_signing_up_with_a_known_address_takes_as_long_as_with_a_new_one(
    db: None, client: Client, mailoutbox: list, alice: Person
) -> None:
    known, new = [], []
    for i in range(5):  # interleaved, so a busy machine slows both alike
        started = time.perf_counter()
        assert _sign_up(client, email=alice.user.email).status_code == 302
        known.append(time.perf_counter() - started)
        started = time.perf_counter()
        assert _sign_up(client, email=f"new{i}@example.test").status_code == 302
        new.append(time.perf_counter() - started)
        for key in signin._client().scan_iter(mailbound.KEY_PREFIX + "*"):
            signin._client().delete(key)
    # a new address costs one password hash and one mail; a known one must cost as much (it was 30 times less)
    assert statistics.median(known) > 0.5 * statistics.median(new), (known, new)
    assert [m.to for m in mailoutbox] == [to for i in range(5) for to in ([alice.user.email], [f"new{i}@example.test"])]


def test_reset_mail_is_bounded_per_address_with_the_same_answer(
    db: None, client: Client, mailoutbox: list, alice: Person, mallory: Person, settings
) -> None:
    _verified(alice)
    answers = {client.post("/accounts/password-reset", {"email": alice.user.email})["Location"] for _ in range(15)}
    assert answers == {"/accounts/password-reset/sent"}
    assert len(mailoutbox) == settings.OPERATIONS["ACCOUNT_MAIL_PER_ADDRESS"]  # 15 asked, the bound sent
    # another address is not held back by alice's bound, from the same client
    client.post("/accounts/password-reset", {"email": mallory.user.email})
    assert [m.to for m in mailoutbox[settings.OPERATIONS["ACCOUNT_MAIL_PER_ADDRESS"] :]] == [[mallory.user.email]]


def test_account_mail_is_bounded_per_client_address(
    db: None, client: Client, mailoutbox: list, alice: Person, settings
) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "ACCOUNT_MAIL_PER_CLIENT": 4}
    for i in range(6):
        response = _sign_up(client, email=f"someone{i}@example.test")
        assert response.status_code == 302 and response["Location"] == "/accounts/check-mail"
    reset = client.post("/accounts/password-reset", {"email": alice.user.email})
    assert reset["Location"] == "/accounts/password-reset/sent"
    assert len(mailoutbox) == 4  # sign-ups and resets share the client's bound
    assert not User.objects.filter(email="someone5@example.test").exists()  # and nothing is half made
    # another client is not held back
    other = Client(REMOTE_ADDR="198.51.100.7")
    _verified(alice)
    assert other.post("/accounts/password-reset", {"email": alice.user.email}).status_code == 302
    assert len(mailoutbox) == 5 and mailoutbox[-1].to == [alice.user.email]


def test_without_redis_no_account_mail_is_sent_and_the_page_says_so(
    db: None, client: Client, mailoutbox: list, alice: Person, settings
) -> None:
    _verified(alice)
    settings.REDIS_URL = "unix:///nonexistent/redis.sock"
    signin._client.cache_clear()
    try:
        pages = [
            _sign_up(client, email=alice.user.email),
            _sign_up(client, email="fresh@example.test"),
            client.post("/accounts/password-reset", {"email": alice.user.email}),
            client.post("/accounts/password-reset", {"email": "nobody@example.test"}),
        ]
    finally:
        signin._client.cache_clear()
    assert {p.status_code for p in pages} == {503}
    assert len({p.content for p in pages}) == 1  # the same page whoever the address belongs to
    assert all("cannot send mail right now" in p.content.decode() for p in pages)
    assert mailoutbox == [] and not User.objects.filter(email="fresh@example.test").exists()


def test_mailed_links_follow_the_public_url_when_it_is_set(
    db: None, client: Client, mailoutbox: list, alice: Person, settings
) -> None:
    _verified(alice)
    settings.PUBLIC_URL = "https://oaken.example"
    _sign_up(client, email="new@example.test")
    client.post("/accounts/password-reset", {"email": alice.user.email})
    assert [m.body.split("https://oaken.example/")[1].split("/")[0] for m in mailoutbox] == ["accounts"] * 2
    assert all("testserver" not in m.body for m in mailoutbox)


def test_mailed_links_follow_the_request_without_a_public_url(
    db: None, client: Client, mailoutbox: list, alice: Person, settings
) -> None:
    _verified(alice)
    settings.PUBLIC_URL = ""
    _sign_up(client, email="new@example.test", HTTP_HOST="127.0.0.1:8765")
    client.post("/accounts/password-reset", {"email": alice.user.email}, HTTP_HOST="127.0.0.1:8765")
    assert len(mailoutbox) == 2
    assert all(re.search(r"http://127\.0\.0\.1:8765/accounts/\S+", m.body) for m in mailoutbox)
