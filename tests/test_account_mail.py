"""Account mail (sign-up, password reset) leaves from a real Celery worker, not from the page: the page hands
the broker one task whoever the address belongs to and never speaks to an SMTP server, so its answer and its
time are the same for a known and an unknown address. The broker's messages and the worker's log carry no
token and no link; the links the worker mails work. Mallory's account is untouched throughout."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable
from email import message_from_bytes
from typing import Any, cast
from urllib.parse import urlsplit

import pytest
from django.test import Client

from apps.accounts import mailbound
from apps.accounts.models import User
from apps.core.redis_client import redis_client
from tests.celeryworker import worker_process
from tests.conftest import PASSWORD, Person
from tests.mailservers import SmtpServer

QUEUE = "celery"  # Celery's default queue: a Redis list
NEW_PASSWORD = "a brand new passphrase 42"


def _wait_until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.2)


def _queued() -> list[tuple[str, dict[str, Any], bytes]]:
    """(task name, keyword arguments, the raw message) of each account mail task waiting in the broker, oldest
    first (kombu pushes on the left and takes from the right)."""
    found = []
    for raw in reversed(cast(list[bytes], redis_client().lrange(QUEUE, 0, -1))):
        message = json.loads(raw)
        name = message["headers"]["task"]
        if name.startswith("accounts."):
            _, kwargs, _ = json.loads(base64.b64decode(message["body"]))
            found.append((name, kwargs, raw))
    return found


def _drop_queued() -> None:
    """Account mail left in the broker by an earlier session's run would be sent by this test's worker."""
    for _, _, raw in _queued():
        redis_client().lrem(QUEUE, 0, raw.decode())


def _text(data: bytes) -> str:
    payload = message_from_bytes(data).get_payload(decode=True)
    assert isinstance(payload, bytes)
    return payload.decode()


def _link(text: str) -> str:
    found = re.search(r"https?://\S+", text)
    assert found is not None
    return found.group(0)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_account_mail_is_sent_by_a_worker_after_the_same_work_for_any_address(
    alice: Person, mallory: Person, account_mail_queued: None, settings: Any
) -> None:
    User.objects.filter(pk__in=[alice.user.pk, mallory.user.pk]).update(email_verified_at="2026-01-01T00:00:00Z")
    for key in redis_client().scan_iter(mailbound.KEY_PREFIX + "*"):
        redis_client().delete(key)
    _drop_queued()
    smtp = SmtpServer().start()
    # were the page to send, it would reach this server
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_USE_TLS = smtp.host, smtp.port, False
    try:
        client = Client()
        known = client.post("/accounts/password-reset", {"email": alice.user.email})
        unknown = client.post("/accounts/password-reset", {"email": "nobody@example.test"})
        signed_up_again = client.post(
            "/accounts/sign-up", {"email": alice.user.email, "password": PASSWORD, "tenant": "Again"}
        )
        signed_up = client.post(
            "/accounts/sign-up", {"email": "new@example.test", "password": PASSWORD, "tenant": "New Co"}
        )
        assert known.status_code == unknown.status_code == 302
        assert known["Location"] == unknown["Location"] == "/accounts/password-reset/sent"
        assert signed_up_again["Location"] == signed_up["Location"] == "/accounts/check-mail"
        # no page spoke to the SMTP server: each handed the broker one task, the two resets the very same one
        assert smtp.connections == 0
        queued = _queued()
        assert [(name, sorted(kwargs)) for name, kwargs, _ in queued] == [
            ("accounts.send_password_reset", ["email", "origin"]),
            ("accounts.send_password_reset", ["email", "origin"]),
            ("accounts.send_already_signed_up", ["email"]),
            ("accounts.send_verification", ["origin", "user_id"]),
        ]
        assert [kwargs.get("email") for _, kwargs, _ in queued[:2]] == [alice.user.email, "nobody@example.test"]
        new = User.objects.get(email="new@example.test")
        assert queued[3][1]["user_id"] == str(new.pk)

        env = {
            "OAKEN_EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "OAKEN_SMTP_HOST": smtp.host,
            "OAKEN_SMTP_PORT": str(smtp.port),
            "OAKEN_SMTP_STARTTLS": "false",
        }
        with worker_process("account-mail", env=env) as worker:
            _wait_until(lambda: not _queued(), "the worker took the account mail")
            _wait_until(lambda: worker.output.count("] succeeded in") >= 4, "the worker sent the account mail")
            log = worker.output
    finally:
        smtp.stop()

    # one reset (nobody's address has no account), one warning to alice, one link for the new person
    assert sorted(m.recipients[0] for m in smtp.received) == sorted([alice.user.email] * 2 + ["new@example.test"])
    to_alice = [_text(m.data) for m in smtp.received if m.recipients == [alice.user.email]]
    [reset] = [text for text in to_alice if "reset the password" in text]
    assert any("already have an account" in text for text in to_alice)
    [verification] = [_text(m.data) for m in smtp.received if m.recipients == ["new@example.test"]]
    assert not any(mallory.user.email in m.recipients for m in smtp.received)

    # the secrets were made by the worker: in no message the broker held, nowhere in the worker's log
    reset_link, verify_link = _link(reset), _link(verification)
    for link in (reset_link, verify_link):
        secret = urlsplit(link).path.rstrip("/").rsplit("/", 1)[-1]
        assert len(secret) > 20
        assert not any(secret.encode() in raw for _, _, raw in queued)
        assert secret not in log
    assert "/accounts/reset/" not in log and "/accounts/verify/" not in log

    # and the links work: the reset sets alice's password, the confirmation confirms the new person
    form = client.get(urlsplit(reset_link).path, follow=True)
    assert form.status_code == 200 and "Choose a new password" in form.content.decode()
    client.post(form.redirect_chain[-1][0], {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD})
    assert User.objects.get(pk=alice.user.pk).check_password(NEW_PASSWORD)
    assert User.objects.get(pk=mallory.user.pk).check_password(PASSWORD)
    # (in a browser other than the one that signed up: confirmed, and asked to sign in, not signed in)
    assert Client().get(urlsplit(verify_link).path)["Location"] == "/accounts/sign-in?confirmed=1"
    assert User.objects.get(pk=new.pk).email_verified_at is not None
    assert User.objects.filter(email="new@example.test").count() == 1
