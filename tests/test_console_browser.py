"""The console in a real browser: the API key flow from sign-up to revocation, and the admin pages."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.test import Client

from apps.accounts import mailbound, signin
from apps.agents.keys import caller_for_key
from apps.agents.models import ApiKey
from apps.core.redis_client import redis_client
from apps.mail.models import MailAccount, Message
from apps.operations.exposure import tenant_settings
from apps.search.indexing import enrich_pending
from apps.workspaces.models import Membership, Workspace
from tests.callers import joined
from tests.conftest import PASSWORD, Person
from tests.imapbox import eager  # noqa: F401 (a fixture)
from tests.mailfactory import raw_message
from tests.mailservers import PASSWORD as MAIL_PASSWORD
from tests.mailservers import ImapServer, SmtpServer

if TYPE_CHECKING:
    from playwright.sync_api import Page

EMAIL = "carol@example.test"


@pytest.fixture(autouse=True)
def _no_lockouts() -> None:
    signin.clear(EMAIL)
    for key in redis_client().scan_iter(mailbound.KEY_PREFIX + "*"):  # sign-up mail is bounded per client
        redis_client().delete(key)


def _link(body: str) -> str:
    found = re.search(r"https?://\S+", body)
    assert found is not None
    return urlsplit(found.group(0)).path


@pytest.mark.slow
def test_a_person_creates_a_read_only_key_sees_it_once_and_revokes_it(
    browser_page: Page, mailoutbox: list[Any], mallory: Person
) -> None:
    from playwright.sync_api import expect

    page = browser_page
    page.goto("/accounts/sign-up")
    page.fill("#id_email", EMAIL)
    page.fill("#id_password", PASSWORD)
    page.fill("#id_tenant", "Carol's team")
    page.click("main button[type=submit]")
    page.wait_for_url("**/accounts/check-mail")
    assert [m.to for m in mailoutbox] == [[EMAIL]]

    # the link confirms the address (and signs in); sign out and in again through the form
    page.goto(_link(mailoutbox[0].body))
    expect(page.locator("main")).to_contain_text("Carol's team")
    page.click("header button[type=submit]")
    page.wait_for_url("**/accounts/sign-in")
    page.fill("#id_username", EMAIL)
    page.fill("#id_password", PASSWORD)
    page.click("main button[type=submit]")
    expect(page.locator("h1")).to_have_text("Carol's team")  # home, acting in the tenant made at sign-up

    page.click("nav >> text=API keys")
    page.wait_for_url("**/keys")
    expect(page.locator("#keys-list")).to_contain_text("No keys yet.")
    page.fill("#key-name", "browser test")
    expect(page.locator('input[name="scopes"][value="write"]')).not_to_be_checked()
    page.click("#create-key button[type=submit]")
    # nothing is created before the person confirms what the proposal says
    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_be_visible()
    # the dialog says it in words since issue 37 (it printed the change's id, "new api key")
    expect(dialog).to_contain_text("Create the API key “browser test”: it may read mail")
    assert not ApiKey.objects.unscoped().exists()
    page.click("#confirm-yes")

    expect(page.locator("#new-key")).to_be_visible()
    key = page.locator("#new-key-value").inner_text().strip()
    row = page.locator("#keys-list tr[data-prefix]")
    expect(row).to_have_count(1)
    prefix = row.get_attribute("data-prefix")
    assert prefix is not None and key.startswith(f"{prefix}_")
    expect(row).to_contain_text("active")

    # shown once: after a reload only the prefix is left
    page.reload()
    expect(page.locator("#keys-list tr[data-prefix]")).to_have_count(1)
    expect(page.locator("#new-key")).to_be_hidden()
    assert key not in page.content()

    caller = caller_for_key(key)
    assert caller is not None and caller.scopes == {"read"} and caller.tenant.name == "Carol's team"
    assert caller.workspaces == ("default",) and caller.user is not None and caller.user.email == EMAIL

    # revoking asks first, too
    page.click("#keys-list button[data-action=revoke]")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("It stops working at once.")  # in words since issue 37 (was "revoked: true")
    page.click("#confirm-yes")
    expect(page.locator("#keys-list tr[data-prefix] .status-revoked")).to_have_text("revoked")
    expect(page.locator("#notice")).to_contain_text(f"Key {prefix} is revoked.")
    assert caller_for_key(key) is None
    assert not ApiKey.objects.for_tenant(mallory.tenant).exists()


def _sign_in(page: Page, p: Person, url: str) -> None:
    """Give the browser a session for `p` (the sign-in form itself is exercised above)."""
    client = Client()
    client.force_login(p.user)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": url}])


@pytest.mark.slow
def test_the_admin_pages_work_in_a_browser(
    browser_page: Page, live_server: Any, mailoutbox: list[Any], alice: Person, mallory: Person
) -> None:
    from playwright.sync_api import expect

    page = browser_page
    bob = joined(alice, "bob@example.test")
    _sign_in(page, alice, live_server.url)

    # workspaces: create one, rename it (each confirmed)
    page.goto("/workspaces")
    expect(page.locator("#workspaces-list tr[data-workspace-id]")).to_have_count(1)
    page.fill("#workspace-name", "work")
    page.click("#create-workspace button[type=submit]")
    page.click("#confirm-yes")
    expect(page.locator("#workspaces-list tr[data-workspace-id]")).to_have_count(2)
    row = page.locator("#workspaces-list tr", has_text="work")
    row.locator("input").fill("job")
    row.locator("button").click()
    page.click("#confirm-yes")
    expect(page.locator("#workspaces-list")).to_contain_text("job")
    assert sorted(Workspace.objects.for_tenant(alice.tenant).values_list("name", flat=True)) == ["default", "job"]

    # members: invite, promote, remove; a cancelled confirmation changes nothing
    page.goto("/members")
    expect(page.locator("#members-list tr[data-membership-id]")).to_have_count(2)
    page.fill("#invite-email", "carol@example.test")
    page.select_option("#invite-role", "ADMIN")
    page.click("#invite-member button[type=submit]")
    page.click("#confirm-yes")
    expect(page.locator("#invitations-list tr[data-invitation-id]")).to_contain_text("carol@example.test")
    assert [m.to for m in mailoutbox] == [["carol@example.test"]]
    bobs = page.locator("#members-list tr", has_text="bob@example.test")
    bobs.locator("select").select_option("ADMIN")
    bobs.get_by_role("button", name="Change").click()
    page.click("#confirm-dialog button[value=cancel]")
    expect(page.locator("#notice")).to_have_text("Nothing was changed.")
    assert Membership.objects.for_tenant(alice.tenant).get(user=bob.user).role == "MEMBER"
    expect(bobs.locator("select")).to_have_value("MEMBER")  # the page shows what is, not what was asked
    bobs.locator("select").select_option("ADMIN")
    bobs.get_by_role("button", name="Change").click()
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_contain_text("bob@example.test is now ADMIN.")
    assert Membership.objects.for_tenant(alice.tenant).get(user=bob.user).role == "ADMIN"
    bobs.locator("button[data-action=remove]").click()
    page.click("#confirm-yes")
    expect(page.locator("#members-list tr[data-membership-id]")).to_have_count(1)
    # the last OWNER cannot leave: refused before anything is proposed, and the page says why
    page.click("#members-list button[data-action=remove]")
    expect(page.locator("#notice")).to_contain_text("last OWNER")
    expect(page.locator("#confirm-dialog")).to_be_hidden()
    assert Membership.objects.for_tenant(alice.tenant).get().role == "OWNER"

    # exposure: withdraw an operation from agents, then offer it again
    page.goto("/exposure")
    # the operations are folded away under their group since issue 37: unfold "Read mail" first
    page.click('#exposure-list section[data-group="read"] details summary')
    search = page.locator('#exposure-list tr[data-operation="search"]')
    expect(search).to_contain_text("yes")
    search.locator("button[data-action=off]").click()
    page.click("#confirm-yes")
    expect(search).to_contain_text("no")
    assert tenant_settings(alice.tenant) == {"search": "off"} and tenant_settings(mallory.tenant) == {}
    search.locator("button[data-action=on]").click()
    page.click("#confirm-yes")
    expect(search.locator("button[data-action=off]")).to_be_visible()
    expect(page.locator('#exposure-list tr[data-operation="create_api_key"]')).to_contain_text("never offered")

    # connections: the page lists them (none yet)
    page.goto("/connections")
    expect(page.locator("#connections-list")).to_contain_text("No assistant is connected.")
    assert not Workspace.objects.for_tenant(mallory.tenant).exclude(name="default").exists()


@pytest.mark.slow
def test_the_pages_offer_an_admin_and_a_member_only_what_their_role_allows(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person
) -> None:
    from playwright.sync_api import expect

    page = browser_page
    admin = joined(alice, "ada@example.test", "ADMIN")
    bob = joined(alice, "bob@example.test")
    joined(mallory, "mel@example.test")
    Workspace.objects.create(tenant=alice.tenant, name="work")
    MailAccount.objects.create(tenant=alice.tenant, workspace=alice.workspace, name="Shared inbox")

    def act_in_alices_tenant(p: Person) -> None:
        page.context.clear_cookies()
        _sign_in(page, p, live_server.url)
        page.goto("/")  # their own tenant first; picking another in the switcher moves there at once
        page.select_option("#tenant-switch", str(alice.tenant.pk))
        expect(page.locator(".tenant-switch option:checked")).to_contain_text("Alice's tenant")

    def member_row(email: str) -> Any:
        return page.locator("#members-list tr[data-membership-id]", has_text=email)

    act_in_alices_tenant(admin)
    page.goto("/members")
    expect(page.locator("#members-list tr[data-membership-id]")).to_have_count(3)
    expect(page.locator("#members-list")).not_to_contain_text("mel@example.test")
    # an OWNER's row is only shown to an ADMIN; others can be moved between MEMBER and ADMIN
    expect(member_row("alice@example.test").locator("select, button")).to_have_count(0)
    expect(member_row("alice@example.test")).to_contain_text("OWNER")
    expect(member_row("bob@example.test").locator("select option")).to_have_text(["MEMBER", "ADMIN"])
    expect(member_row("bob@example.test").locator("button[data-action=remove]")).to_have_text("Remove")
    expect(member_row("ada@example.test").locator("select option")).to_have_text(["MEMBER", "ADMIN"])
    expect(member_row("ada@example.test").locator("button[data-action=remove]")).to_have_text("Leave")
    page.goto("/workspaces")
    expect(page.locator("#workspaces-list tr", has_text="default").locator("input")).to_have_count(0)
    expect(page.locator("#workspaces-list tr", has_text="work").locator("input")).to_have_count(1)
    page.goto("/mailboxes")
    expect(page.locator("#accounts-list tr[data-account-id] button[data-action=remove]")).to_have_count(1)

    act_in_alices_tenant(bob)
    page.goto("/members")
    expect(page.locator("#members-list tr[data-membership-id]")).to_have_count(3)
    expect(page.locator("#members-list select")).to_have_count(0)
    expect(page.locator("#members-list button")).to_have_count(1)
    expect(member_row("bob@example.test").locator("button[data-action=remove]")).to_have_text("Leave")
    page.goto("/workspaces")
    expect(page.locator("#workspaces-list tr[data-workspace-id]")).to_have_count(2)
    expect(page.locator("#workspaces-list input")).to_have_count(0)
    page.goto("/mailboxes")
    expect(page.locator("#accounts-list tr[data-account-id]")).to_contain_text("Shared inbox")
    expect(page.locator("#accounts-list button[data-action=remove]")).to_have_count(0)
    assert Membership.objects.for_tenant(alice.tenant).count() == 3
    assert Membership.objects.for_tenant(mallory.tenant).count() == 2


@pytest.mark.slow
@pytest.mark.usefixtures("eager")
def test_a_person_connects_a_mailbox_in_a_browser(
    browser_page: Page,
    live_server: Any,
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
) -> None:
    from playwright.sync_api import expect

    page = browser_page
    user = imap_server.add_user("someone@example.test")
    imap_server.append(user, "INBOX", raw_message(subject="Welcome", message_id="<welcome@example.test>"))
    _sign_in(page, alice, live_server.url)

    page.goto("/")
    page.click("nav >> text=Mailboxes")
    page.wait_for_url("**/mailboxes")
    expect(page.locator("#accounts-list")).to_contain_text("No mail accounts yet.")
    expect(page.locator("#mailbox-workspace option")).to_have_text(["default"])
    page.fill("#mailbox-name", "Someone")
    page.fill("#imap-host", imap_server.host)
    page.fill("#imap-port", str(imap_server.port))
    page.select_option("#imap-security", "none")
    page.fill("#imap-username", user)
    page.fill("#smtp-host", smtp_server.host)
    page.fill("#smtp-port", str(smtp_server.port))
    page.select_option("#smtp-security", "none")

    # a wrong password: the refusal shows at the password field, nothing is saved, nothing is kept
    page.fill("#imap-password", "wrong-password-42")
    page.click("#connect-mailbox button[type=submit]")
    expect(page.locator('[data-error-for="imap.password"]')).to_be_visible()
    refused = page.locator('[data-error-for="imap.password"]')
    expect(refused).to_contain_text("the server refused this username and password")
    expect(page.locator("main")).not_to_contain_text("imap.password")  # in words, never a path
    expect(page.locator("#notice")).not_to_contain_text("imap.password")
    expect(page.locator('[data-error-for="imap.host"]')).to_be_hidden()
    expect(page.locator("#imap-password")).to_have_value("")
    assert not MailAccount.objects.unscoped().exists()
    assert "wrong-password-42" not in page.content()

    # the right one: connected, listed, and its mail synced
    page.fill("#imap-password", MAIL_PASSWORD)
    page.click("#connect-mailbox button[type=submit]")
    # connecting logs in to both servers and runs the first sync before it answers
    expect(page.locator("#notice")).to_contain_text("Someone is connected", timeout=30_000)
    expect(page.locator('[data-error-for="imap.password"]')).to_be_hidden()
    expect(page.locator("#imap-password")).to_have_value("")
    expect(page.locator("#mailbox-name")).to_have_value("")
    row = page.locator("#accounts-list tr[data-account-id]")
    expect(row).to_have_count(1)
    expect(row).to_contain_text(user)
    expect(row).to_contain_text("default")
    assert MAIL_PASSWORD not in page.content()
    account = MailAccount.objects.for_tenant(alice.tenant).select_related("workspace").get()
    assert row.get_attribute("data-account-id") == str(account.pk)
    assert Message.objects.for_tenant(alice.tenant).filter(account=account, message_id="welcome@example.test").exists()
    # the new mail waits for the enricher, and the page says so; once embedded, it says that too
    page.reload()
    expect(page.locator("#search-index")).to_contain_text("0 of 1 messages found by meaning")
    expect(page.locator("#search-index [data-waiting]")).to_have_attribute("data-waiting", "1")
    enrich_pending()
    expect(page.locator("#search-index")).to_contain_text("1 of 1 messages found by meaning", timeout=15_000)
    expect(page.locator("#search-index [data-waiting]")).to_have_count(0)

    # sync on demand, then removal (confirmed)
    row.locator("button[data-action=sync]").click()
    expect(page.locator("#notice")).to_contain_text("a sync is on its way")
    assert account.synced_at is not None
    row.locator("button[data-action=remove]").click()
    expect(page.locator("#confirm-dialog")).to_contain_text("the 1 message Oaken holds")  # in words since issue 37
    page.click("#confirm-yes")
    expect(page.locator("#accounts-list")).to_contain_text("No mail accounts yet.")
    assert not MailAccount.objects.for_tenant(alice.tenant).exists()
    assert not MailAccount.objects.for_tenant(mallory.tenant).exists()
    assert not Message.objects.for_tenant(mallory.tenant).exists()


@pytest.mark.slow
def test_a_person_approves_and_settles_outbound_mail_in_a_browser(
    browser_page: Page,
    live_server: Any,
    alice: Person,
    mallory: Person,
    imap_server: ImapServer,
    smtp_server: SmtpServer,
) -> None:
    from playwright.sync_api import expect

    from apps.outbound.models import OutboundRequest
    from apps.worker import delivery
    from tests.callers import as_agent, as_person
    from tests.outbound_accounts import imap_account, mail_user, request

    page = browser_page
    me = mail_user(imap_server, "alice")
    account = imap_account(alice, imap_server, smtp_server, me, sender_name="Alice Mail")
    bob = mail_user(imap_server, "bob")

    def email(subject: str) -> dict[str, Any]:
        return {
            "account_id": str(account.pk),
            "to": [bob],
            "subject": subject,
            "body": "Hello.\n",
            "idempotency_key": subject,
        }

    asked = request(as_agent(alice, scopes={"read", "write", "send"}), "send_email", email("Waiting"))
    smtp_server.drop_after_data = True
    lost = request(as_person(alice), "send_email", email("Lost"))
    assert delivery.deliver(lost["request_id"]) == "unknown"
    smtp_server.drop_after_data = False
    _sign_in(page, alice, live_server.url)

    # the approval link the assistant was given picks its request out
    page.goto(urlsplit(asked["approval_url"]).path + "?" + urlsplit(asked["approval_url"]).query)
    waiting = page.locator(f'#outbound-list article[data-request-id="{asked["request_id"]}"]')
    expect(waiting).to_contain_text("Waiting")
    # every header that will be sent, the From header exactly as it goes out (its display name included)
    headers = waiting.locator("dl.headers")
    expect(headers).to_contain_text(f"FromAlice Mail <{me}>")
    expect(headers).to_contain_text(f"To{bob}")
    # the content hash is folded under "Technical details" since issue 37 (it was a header row)
    expect(waiting.locator("details.technical")).to_contain_text(f"Content hash{asked['content_hash']}")
    expect(waiting).to_have_class(re.compile(r"\bselected\b"))
    expect(page.locator("#outbound-named")).to_contain_text("marked below")
    unknown = page.locator(f'#outbound-unknown article[data-request-id="{lost["request_id"]}"]')
    expect(unknown).to_contain_text("Lost")
    expect(unknown).to_contain_text("connection_lost_after_data")

    # settling asks first; declining changes nothing
    unknown.locator("button[data-action=settle-not-sent]").click()
    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_contain_text("was not sent. Nothing is sent again.")  # in words since issue 37
    page.click("#confirm-dialog button[value=cancel]")
    expect(page.locator("#notice")).to_contain_text("Nothing was changed.")
    assert OutboundRequest.objects.for_tenant(alice.tenant).get(pk=lost["request_id"]).state == "unknown"
    unknown.locator("button[data-action=settle-not-sent]").click()
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_contain_text("Recorded as not sent")
    expect(page.locator("#outbound-unknown")).to_contain_text("No request has an unknown outcome.")
    settled = OutboundRequest.objects.for_tenant(alice.tenant).get(pk=lost["request_id"])
    assert (settled.state, settled.error, settled.settled_by_id) == ("failed", "settled_not_sent", alice.user.pk)

    waiting.locator("button[data-action=approve]").click()
    page.click("#ask-first-yes")  # the page asks once more
    expect(page.locator("#notice")).to_contain_text("Approved")
    expect(page.locator("#outbound-list")).to_contain_text("Nothing is waiting for your approval.")

    # a body longer than a list shows is read whole before it can be approved; files show type and size
    tail = "And one more thing, at the very end."
    long = email("Long") | {
        "body": "word " * 5000 + tail,
        "attachments": [
            {"filename": "plan.pdf", "content_type": "application/pdf", "content_base64": "JVBERi0xLjQK" * 200}
        ],
    }
    asked_long = request(as_agent(alice, scopes={"read", "write", "send"}), "send_email", long)
    page.goto("/outbound")
    article = page.locator(f'#outbound-list article[data-request-id="{asked_long["request_id"]}"]')
    expect(article).to_contain_text("plan.pdf (application/pdf, 2 KB)")
    expect(article.locator("pre")).not_to_contain_text(tail)
    expect(article.locator("button[data-action=approve]")).to_be_disabled()
    article.locator("button[data-action=show-whole]").click()
    expect(article.locator("pre")).to_contain_text(tail)
    article.locator("button[data-action=approve]").click()
    page.click("#ask-first-yes")
    expect(page.locator("#notice")).to_contain_text("Approved")
    assert OutboundRequest.objects.for_tenant(alice.tenant).get(pk=asked_long["request_id"]).state == "queued"
    assert OutboundRequest.objects.for_tenant(alice.tenant).get(pk=asked["request_id"]).state == "queued"
    assert smtp_server.data_commands == 1  # the lost one's: approving queues, the worker sends
    assert not OutboundRequest.objects.for_tenant(mallory.tenant).exists()

    # the same link later says what became of it; another tenant's request is not there at all
    page.goto(f"/outbound?request={asked['request_id']}")
    expect(page.locator("#outbound-named")).to_contain_text("no longer waiting: queued")
    theirs = imap_account(mallory, imap_server, smtp_server, mail_user(imap_server, "mallory"))
    hidden = request(
        as_agent(mallory, scopes={"read", "write", "send"}),
        "send_email",
        email("Mallory's secret") | {"account_id": str(theirs.pk)},
    )
    page.goto(f"/outbound?request={hidden['request_id']}")
    expect(page.locator("#outbound-named")).to_contain_text("was not found")  # as for any unknown id, in words
    expect(page.locator("main")).not_to_contain_text("Mallory's secret")
