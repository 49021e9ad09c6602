"""Sign-in throttling as an attacker meets it (issue 35, item 8), over real HTTP from several loopback clients.

The server is the real gunicorn (tests.liveserver); each client connects from an address of its own in
127.0.0.0/8 (all loopback), so REMOTE_ADDR differs as it would for two machines. Failures lock an address for
one client only; failures from every client together slow the address (one attempt per interval), never lock
it; the password reset works all the while; and no answer tells whether the address has an account.
"""

from __future__ import annotations

import html
import os
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from django.test import Client

from apps.accounts import mailbound, signin
from apps.accounts.models import User
from tests.conftest import PASSWORD, Person

pytestmark = [pytest.mark.django_db(transaction=True)]

NEW_PASSWORD = "a brand new passphrase 42"
MAX_FAILURES = 5  # the default pair bound (config/settings/mail.py)
CEILING = 8  # the address ceiling, small here so a test reaches it with two clients
SLOW_SECONDS = 2
_CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
_ERRORS = re.compile(r'<div class="errors"[^>]*>(.*?)</div>|<ul class="errorlist[^"]*">(.*?)</ul>', re.S)


@pytest.fixture(scope="module", autouse=True)
def _server_bounds() -> Iterator[None]:
    """The live server of this module (started after this, module-scoped) reads its bounds from the environment."""
    names = {
        "OAKEN_SIGN_IN_ADDRESS_CEILING": str(CEILING),
        "OAKEN_SIGN_IN_SLOW_SECONDS": str(SLOW_SECONDS),
        "OAKEN_SIGN_IN_MAX_FAILURES": str(MAX_FAILURES),
    }
    before = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _no_counts() -> None:
    for pattern in (signin.KEY_PREFIX + "*", mailbound.KEY_PREFIX + "*"):
        for key in signin._client().scan_iter(pattern):
            signin._client().delete(key)


def _verified(*people: Person) -> None:
    User.objects.filter(pk__in=[p.user.pk for p in people]).update(email_verified_at="2026-01-01T00:00:00Z")


class Browser:
    """One client machine: its own loopback address, its own cookies."""

    def __init__(self, base: str, address: str) -> None:
        self.address = address
        self.http = httpx2.Client(
            base_url=base,
            transport=httpx2.HTTPTransport(local_address=address),
            follow_redirects=False,
            timeout=30,
        )

    def sign_in(self, email: str, password: str) -> Any:
        page = self.http.get("/accounts/sign-in")
        token = _CSRF.search(page.text)
        assert token is not None
        form = {"csrfmiddlewaretoken": token.group(1), "username": email, "password": password}
        return self.http.post("/accounts/sign-in", data=form, headers={"Referer": str(self.http.base_url)})

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def clients(live_url: str) -> Iterator[Any]:
    made: list[Browser] = []

    def at(address: str) -> Browser:
        browser = Browser(live_url, address)
        made.append(browser)
        return browser

    yield at
    for browser in made:
        browser.close()


def _error(response: Any) -> str:
    """The page's error words (what a person reads), without the form around them."""
    found = [a or b for a, b in _ERRORS.findall(response.text)]
    return html.unescape(re.sub(r"<[^>]+>", " ", " ".join(found))).strip()


def _signed_in(response: Any) -> bool:
    return response.status_code == 302 and response.headers["Location"] == "/"


def test_an_attacker_locks_out_only_their_own_client(clients: Any, alice: Person, mallory: Person) -> None:
    _verified(alice, mallory)
    attacker, person = clients("127.0.0.2"), clients("127.0.0.3")
    for _ in range(MAX_FAILURES):
        assert "correct" in _error(attacker.sign_in(alice.user.email, "wrong guess"))
    # the attacker's client is locked for alice, even with the right password
    locked = attacker.sign_in(alice.user.email, PASSWORD)
    assert locked.status_code == 200 and "Too many failed attempts" in _error(locked)
    # alice, from her own client, signs in as ever
    assert _signed_in(person.sign_in(alice.user.email, PASSWORD))
    # her success lifts nothing for the attacker's client
    assert "Too many failed attempts" in _error(attacker.sign_in(alice.user.email, PASSWORD))
    # and the attacker's client is locked for alice only: the other tenant's person is not held back
    assert _signed_in(attacker.sign_in(mallory.user.email, PASSWORD))
    assert signin.locked(alice.user.email, "127.0.0.2") and not signin.locked(alice.user.email, "127.0.0.3")


def test_past_the_address_ceiling_sign_in_is_slowed_never_locked(clients: Any, alice: Person, mallory: Person) -> None:
    _verified(alice, mallory)
    # failures spread over clients, none reaching its own lock: the address's ceiling is reached
    spread = [clients(f"127.0.0.{n}") for n in (4, 5)]
    for browser in spread:
        for _ in range(CEILING // 2):
            assert "correct" in _error(browser.sign_in(alice.user.email, "wrong guess"))
    # past it, one attempt per interval goes through, from whichever client; this one is the attacker's
    assert "correct" in _error(clients("127.0.0.6").sign_in(alice.user.email, "another guess"))
    person = clients("127.0.0.7")
    slowed = person.sign_in(alice.user.email, PASSWORD)
    assert slowed.status_code == 200 and "Try again in a minute" in _error(slowed)
    assert "Too many failed attempts" not in _error(slowed)  # slowed, not locked
    # the other tenant's person is not slowed by alice's ceiling
    assert _signed_in(clients("127.0.0.8").sign_in(mallory.user.email, PASSWORD))
    # once the interval has passed, the person gets in: a rate, not a lock
    started = time.monotonic()
    deadline = started + SLOW_SECONDS * 10
    while True:
        time.sleep(SLOW_SECONDS / 2)
        answer = person.sign_in(alice.user.email, PASSWORD)
        if _signed_in(answer) or time.monotonic() > deadline:
            break
    print(f"signed in {time.monotonic() - started:.1f} s after being slowed (interval {SLOW_SECONDS} s)")
    assert _signed_in(answer), _error(answer)


def test_the_password_reset_works_while_the_address_is_locked_and_slowed(
    clients: Any, alice: Person, mallory: Person, mailoutbox: list
) -> None:
    _verified(alice, mallory)
    attacker = clients("127.0.0.9")
    for _ in range(MAX_FAILURES):
        attacker.sign_in(alice.user.email, "wrong guess")
    for _ in range(CEILING - MAX_FAILURES):
        clients("127.0.0.10").sign_in(alice.user.email, "wrong guess")
    assert "Too many failed attempts" in _error(attacker.sign_in(alice.user.email, PASSWORD))
    # the reset, asked for from the locked client itself (this process's client, the same address), goes through
    here = Client(REMOTE_ADDR="127.0.0.9")
    asked = here.post("/accounts/password-reset", {"email": alice.user.email})
    assert asked.status_code == 302 and asked["Location"] == "/accounts/password-reset/sent"
    assert [m.to for m in mailoutbox] == [[alice.user.email]]
    link = re.search(r"https?://\S+", mailoutbox[0].body)
    assert link is not None
    form = here.get(link.group(0).split("testserver", 1)[-1], follow=True)
    assert form.status_code == 200 and "Choose a new password" in form.content.decode()
    done = here.post(form.redirect_chain[-1][0], {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD})
    assert done.status_code == 302 and done["Location"] == "/accounts/password-reset/done"
    # the completed reset lifted the lock and the slowing: the new password works from that very client
    assert _signed_in(attacker.sign_in(alice.user.email, NEW_PASSWORD))
    assert User.objects.get(pk=mallory.user.pk).check_password(PASSWORD)  # nobody else's password moved


def test_no_answer_tells_whether_the_address_has_an_account(clients: Any, alice: Person, mallory: Person) -> None:
    _verified(alice, mallory)
    known, unknown = alice.user.email, "nobody-here@example.test"
    answers: dict[str, list[str]] = {}
    for email, browser in ((known, clients("127.0.0.11")), (unknown, clients("127.0.0.12"))):
        words = [_error(browser.sign_in(email, "wrong guess")) for _ in range(MAX_FAILURES)]
        words.append(_error(browser.sign_in(email, PASSWORD)))  # locked: the same words either way
        answers[email] = words
    assert answers[known] == answers[unknown]
    assert answers[known][0] and answers[known][-1] != answers[known][0]
    assert "nobody-here" not in " ".join(answers[unknown])  # the address typed is never repeated in an error
    assert "account" not in " ".join(answers[known]).lower()
    # slowed alike: past the ceiling, a known and an unknown address get the same words
    for email in (known, unknown):
        for _ in range(CEILING):
            clients("127.0.0.13").sign_in(email, "wrong guess")
    slowed = [_error(clients("127.0.0.14").sign_in(email, "wrong guess")) for email in (known, unknown)]
    slowed += [_error(clients("127.0.0.14").sign_in(email, "wrong guess")) for email in (known, unknown)]
    assert slowed[2] == slowed[3] and "Try again in a minute" in slowed[2]
