"""Whose mailbox it is, on the Members page: each member's workspaces are shown, an ADMIN narrows a MEMBER after
a confirmation that names the mailboxes, and the invite form asks which workspaces a Member gets."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from apps.workspaces.models import Invitation, Membership, Workspace
from tests.browser import look
from tests.callers import joined
from tests.conftest import Person, give_mail
from tests.test_console_browser import _sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page


@pytest.mark.slow
def test_an_admin_chooses_a_members_workspaces_and_an_invitations(
    browser_page: Page, live_server: Any, mailoutbox: list[Any], alice: Person, mallory: Person, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    team = Workspace.objects.create(tenant=alice.tenant, name="team")
    give_mail(alice, tmp_path, "own")
    give_mail(Person(alice.user, alice.tenant, team), tmp_path, "team")
    Workspace.objects.create(tenant=mallory.tenant, name="mallory-only")
    bob = joined(alice, "bob@example.test")
    page = browser_page
    _sign_in(page, alice, live_server.url)

    page.goto("/members")
    row = page.locator("#members-list tr", has_text="bob@example.test")
    expect(row).to_contain_text("Every workspace")  # a member from before: every workspace, said so
    expect(page.locator("main")).to_contain_text("keep every workspace until you choose")
    look(page, "members-workspaces")

    row.locator("summary").click()
    row.locator('input[name="every"]').uncheck()
    row.locator(f'input[name="given"][value="{team.pk}"]').check()
    row.locator("button[type=submit]").click()
    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("They will be able to read and send as team mail")
    expect(dialog).not_to_contain_text("own mail <")
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_contain_text("bob@example.test's workspaces are changed.")
    expect(page.locator("#members-list tr", has_text="bob@example.test").locator("summary")).to_have_text("team")
    member = Membership.objects.for_tenant(alice.tenant).get(user=bob.user)
    assert member.workspace_ids == [team.pk]

    # the invite form: a Member's workspaces must be chosen; the other tenant's are never offered
    assert "mallory-only" not in page.content()
    page.fill("#invite-email", "dora@example.test")
    page.click("#invite-member button[type=submit]")
    expect(page.locator("#notice")).to_contain_text("Pick the workspaces")
    page.locator(f'#invite-member input[name="workspace_ids"][value="{team.pk}"]').check()
    page.click("#invite-member button[type=submit]")
    expect(dialog).to_contain_text("They will be able to read and send as team mail")
    page.click("#confirm-yes")
    expect(page.locator("#invitations-list")).to_contain_text("dora@example.test")
    invitation = Invitation.objects.for_tenant(alice.tenant).get(email="dora@example.test")
    assert invitation.workspace_ids == [team.pk]
    assert "team mail" in mailoutbox[-1].body and "own mail" not in mailoutbox[-1].body
    look(page, "members-invited")

    # an admin's role: the workspace choice is not asked
    page.select_option("#invite-role", "ADMIN")
    expect(page.locator("#invite-workspaces")).to_be_hidden()
    assert not Invitation.objects.for_tenant(mallory.tenant).exists()
