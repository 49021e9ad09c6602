"""Joining by invitation in a real browser: the link says who invited you to what; signing up from it and
confirming the address lands the new person in the inviting tenant, with no tenant of their own."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from apps.accounts import mailbound, signin
from apps.console.views import INVITATION_PAGE_KEY
from apps.core.redis_client import redis_client
from apps.workspaces.models import Membership
from tests.browser import look
from tests.callers import as_person, call
from tests.conftest import PASSWORD, Person

if TYPE_CHECKING:
    from playwright.sync_api import Page

EMAIL = "newbie@example.test"


@pytest.fixture(autouse=True)
def _no_bounds_left() -> None:
    signin.clear(EMAIL)
    for pattern in (INVITATION_PAGE_KEY + "*", mailbound.KEY_PREFIX + "*"):
        for key in redis_client().scan_iter(pattern):
            redis_client().delete(key)


def _link(message: Any) -> str:
    found = re.search(r"https?://\S+", str(message.body))
    assert found is not None
    return urlsplit(found.group(0)).path


@pytest.mark.slow
def test_an_invitee_signs_up_from_the_link_and_joins_the_inviting_tenant(
    browser_page: Page, mailoutbox: list[Any], alice: Person, mallory: Person
) -> None:
    from playwright.sync_api import expect

    call(as_person(alice), "invite_member", {"email": EMAIL, "role": "ADMIN"}, confirm=True)
    call(as_person(mallory), "invite_member", {"email": "dave@example.test"}, confirm=True)
    invitation = _link(next(m for m in mailoutbox if m.to == [EMAIL]))

    page = browser_page
    page.goto(invitation)
    expect(page.locator("main h1")).to_have_text("Join Alice's tenant on Oaken")
    expect(page.locator("main")).to_contain_text("alice@example.test invited you to join Alice's tenant as Admin.")
    assert "Mallory" not in page.content() and EMAIL not in page.content()
    look(page, "invitation")

    page.click("text=Create an account to join")
    page.wait_for_url(re.compile(r".*/accounts/sign-up\??$"))
    expect(page.locator("main h1")).to_have_text("Create your account to join Alice's tenant")
    expect(page.locator("#id_email")).to_have_value(EMAIL)
    expect(page.locator("#id_own_tenant")).not_to_be_checked()
    look(page, "invitation-sign-up")
    page.fill("#id_password", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url("**/accounts/check-mail")

    confirm = [m for m in mailoutbox if m.to == [EMAIL]][-1]
    assert invitation.removeprefix("/invitations/") not in confirm.body
    page.goto(_link(confirm))
    expect(page.locator("main h1")).to_have_text("Alice's tenant")
    assert "Mallory" not in page.content()
    rows = Membership.objects.filter(user__email=EMAIL).select_related("tenant")
    assert [(m.tenant.name, m.role) for m in rows] == [("Alice's tenant", "ADMIN")]  # and no tenant of their own
