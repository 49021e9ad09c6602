"""Console pages (SPEC §18): shells for signed-in people, the tenant switcher, and the tenant the REST door acts in."""

from __future__ import annotations

import gzip
import re
from urllib.parse import urljoin

import pytest
from django.test import Client

from apps.console.assets import asset_url
from apps.console.templatetags.console import nav_groups
from apps.workspaces.models import Membership
from apps.workspaces.selectors import SESSION_TENANT_KEY
from tests.callers import joined
from tests.conftest import Person
from tests.test_rest_door import api_client, error_of, post

PAGES = [
    "/",
    "/keys",
    "/connections",
    "/workspaces",
    "/members",
    "/exposure",
    "/mailboxes",
    "/budgets",
    "/audit",
    "/mail",
    "/plugins",
    "/policies",
    "/import",
    "/rules",
]
MODULE_PAGES = [
    "keys", "connections", "workspaces", "members", "exposure", "outbound", "mailboxes", "budgets", "audit", "mail",
    "plugins", "policies", "import", "rules",
]  # fmt: skip


def _signed_in(p: Person) -> Client:
    client = Client()
    client.force_login(p.user)
    return client


@pytest.mark.parametrize("path", PAGES)
def test_a_page_renders_for_a_signed_in_person(path: str, alice: Person, mallory: Person) -> None:
    response = _signed_in(alice).get(path)
    page = response.content.decode()
    assert response.status_code == 200
    assert "Alice&#x27;s tenant" in page and "Mallory" not in page
    assert f'<script type="module" src="{asset_url("console/nav.js")}"></script>' in page
    if path != "/":
        assert f'<script type="module" src="{asset_url(f"console/pages{path}.js")}"></script>' in page
    assert '<meta name="csrf-token"' in page and 'href="/exposure"' in page
    assert "<script>" not in page and " onclick=" not in page  # no inline scripts: a strict CSP can come


# an invitation link answers anonymous people itself (tests/test_invitations.py): it says what it invites to
@pytest.mark.parametrize("path", PAGES)
def test_a_page_sends_anonymous_people_to_sign_in(path: str, db: None) -> None:
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/sign-in?next={path}"


def _modules(client: Client, html: str) -> dict[str, str]:
    """The script modules a page loads, and those they import, by URL (each must be served)."""
    found: dict[str, str] = {}
    todo = re.findall(r'<script type="module" src="([^"]+)"></script>', html)
    while todo:
        url = todo.pop()
        if url in found:
            continue
        response = client.get(url)
        assert response.status_code == 200 and response["Content-Type"].startswith("text/javascript"), url
        found[url] = response.content.decode()
        todo += [urljoin(url, spec) for spec in re.findall(r'^import .* from "([^"]+)";$', found[url], re.M)]
    return found


def test_the_pages_name_the_operations_they_call(alice: Person) -> None:
    client = _signed_in(alice)
    for page in ("keys", "members", "exposure", "mailboxes", "budgets"):
        path = f"/{page}"
        html = client.get(path).content.decode()
        assert f'data-page="{page}" data-role="OWNER"' in html
    modules: dict[str, str] = {}
    for page in MODULE_PAGES:
        loaded = _modules(client, client.get(f"/{page}").content.decode())
        assert {asset_url(f"console/pages/{page}.js"), asset_url("console/lib.js")} <= set(loaded), page
        modules |= loaded
    script = "\n".join(modules.values())
    for op in (
        "create_api_key",
        "list_api_keys",
        "revoke_api_key",
        "list_webhooks",
        "update_webhook",
        "list_connections",
        "revoke_connection",
        "list_workspaces",
        "create_workspace",
        "rename_workspace",
        "list_members",
        "invite_member",
        "change_member_role",
        "remove_member",
        "cancel_invitation",
        "list_operation_exposure",
        "set_operation_exposure",
        "list_accounts",
        "connect_mailbox",
        "sync_mailbox",
        "remove_mailbox",
        "list_send_budgets",
        "list_outbound",
        "approve_outbound",
        "reject_outbound",
        "settle_outbound_request",
        "get_outbound_request",
        "get_outbound_attachment",
        "list_send_policies",
        "create_send_policy",
        "delete_send_policy",
        "list_audit_events",
        "verify_audit",
        "export_audit_chain",
        "list_folders",
        "list_labels",
        "list_messages",
        "search",
        "get_thread",
        "get_message",
        "get_attachment",
        "mark_read",
        "mark_unread",
        "set_pinned",
        "add_labels",
        "move_messages",
        "trash_messages",
        "restore_messages",
        "get_preferences",
        "set_preferences",
        "list_rules",
        "get_rule",
        "create_rule",
        "update_rule",
        "delete_rule",
        "reorder_rules",
        "test_rule",
        "apply_rule",
        "list_awaiting_reply",
    ):
        assert f'"{op}"' in script, op
    # text only, and no rule of their own: what a person may do comes with the rows
    for url, text in modules.items():
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text, url
        assert not re.search(r"\b(OWNER|ADMIN|MEMBER)\b|dataset\.role", text), url


def test_the_console_files_are_served_without_a_static_server(db: None) -> None:
    script = Client().get("/static/console/lib.js")
    assert script.status_code == 200 and script["Content-Type"].startswith("text/javascript")
    assert b"CONFIRMATION_REQUIRED" in script.content
    # asked again with its validator, an unchanged file is a 304 with no body; another validator gets the file
    again = Client().get("/static/console/lib.js", headers={"If-None-Match": script["ETag"]})
    assert again.status_code == 304 and again.content == b"" and again["ETag"] == script["ETag"]
    assert script["Cache-Control"] == "no-cache"
    stale = Client().get("/static/console/lib.js", headers={"If-None-Match": '"0-0"'})
    assert stale.status_code == 200 and stale.content == script.content
    for name in ("nav.js", *(f"pages/{page}.js" for page in MODULE_PAGES)):
        module = Client().get(f"/static/console/{name}")
        assert module.status_code == 200 and module["Content-Type"].startswith("text/javascript"), name
    style = Client().get("/static/console/console.css")
    assert style.status_code == 200 and style["Content-Type"].startswith("text/css")
    for missing in ("other.js", "pages/other.js", "pages/../lib.js", "../../config/settings/base.py", "lib.js.map"):
        assert Client().get(f"/static/console/{missing}").status_code == 404, missing


def test_the_console_files_are_kept_by_the_browser_until_they_change(db: None) -> None:
    """Under the address naming their content, a browser keeps them for good: a page then asks for none of them;
    an address naming another version (a page from before a deploy) gets the current file, revalidated."""
    current = asset_url("console/lib.js")
    assert re.fullmatch(r"/assets/[0-9a-f]{16}/console/lib\.js", current)
    kept = Client().get(current)
    plain = Client().get("/static/console/lib.js")
    assert kept.status_code == 200 and kept.content == plain.content
    assert kept["Cache-Control"] == "public, max-age=31536000, immutable"
    older = Client().get("/assets/0000000000000000/console/lib.js")
    assert older.status_code == 200 and older.content == plain.content and older["Cache-Control"] == "no-cache"
    for missing in ("console/other.js", "console/../../manage.py", "console/lib.js.map"):
        assert Client().get(asset_url(missing)).status_code == 404, missing
    # a module's relative imports resolve under the same version, so they are kept as well
    page = asset_url("console/pages/mail.js")
    assert 'from "../lib.js"' in Client().get(page).content.decode()
    assert urljoin(page, "../lib.js") == current


def test_the_navigation_is_grouped_and_marks_the_current_page(alice: Person) -> None:
    """Mail, then the Assistants and Tenant groups; the page shown (or one under it) is marked current."""
    html = _signed_in(alice).get("/keys").content.decode()
    assert html.count('aria-current="page"') == 1 and '<a href="/keys" aria-current="page">API keys</a>' in html
    assert html.index(">Mail<") < html.index(">Assistants<") < html.index(">API keys<") < html.index(">Tenant<")
    assert html.index(">Tenant<") < html.index(">Audit log<")
    marked = [link["words"] for group in nav_groups("/mail/t/0123") for link in group["links"] if link["current"]]
    assert marked == ["Mail"]
    assert not any(link["current"] for group in nav_groups("/mailboxes-x") for link in group["links"])


def test_the_console_files_go_gzipped_to_a_browser_that_takes_it(db: None) -> None:
    """Style sheets and scripts travel gzipped when asked (Accept-Encoding), under an ETag of their own; the same
    bytes once unpacked, and plain to a client that does not take gzip."""
    plain = Client().get(asset_url("console/console.css"))
    assert "Content-Encoding" not in plain and plain["Vary"] == "Accept-Encoding"
    packed = Client().get(asset_url("console/console.css"), headers={"Accept-Encoding": "gzip, deflate, br"})
    assert packed["Content-Encoding"] == "gzip" and packed["Vary"] == "Accept-Encoding"
    assert gzip.decompress(packed.content) == plain.content and len(packed.content) < len(plain.content) / 2
    assert packed["ETag"] != plain["ETag"]
    again = Client().get(
        asset_url("console/console.css"), headers={"Accept-Encoding": "gzip", "If-None-Match": packed["ETag"]}
    )
    assert again.status_code == 304
    icon = Client().get("/static/favicon.svg", headers={"Accept-Encoding": "gzip"})
    assert icon.status_code == 200 and gzip.decompress(icon.content).startswith(b"<svg")


def test_a_member_sees_no_admin_forms(alice: Person) -> None:
    bob = joined(alice, "bob@example.test")
    client = _signed_in(bob)
    client.post("/tenant", {"tenant_id": str(alice.tenant.pk)})
    html = client.get("/members").content.decode()
    assert 'data-role="MEMBER"' in html and 'id="invite-member"' not in html
    assert 'id="create-workspace"' not in client.get("/workspaces").content.decode()
    assert 'id="connect-mailbox"' not in client.get("/mailboxes").content.decode()
    owner_page = _signed_in(alice).get("/members").content.decode()
    assert 'id="invite-member"' in owner_page and '<option value="OWNER">' in owner_page
    assert 'id="connect-mailbox"' in _signed_in(alice).get("/mailboxes").content.decode()
    # the audit log's proof (Verify, Export) is offered where the role reaches verify_audit
    assert 'id="verify-chain"' not in client.get("/audit").content.decode()
    assert 'id="verify-chain"' in _signed_in(alice).get("/audit").content.decode()
    admin = joined(alice, "ada@example.test", "ADMIN")
    admin_client = _signed_in(admin)
    admin_client.post("/tenant", {"tenant_id": str(alice.tenant.pk)})
    admin_page = admin_client.get("/members").content.decode()
    assert 'id="invite-member"' in admin_page and '<option value="OWNER">' not in admin_page


# ---------------------------------------------------------------- the tenant switcher


def test_the_switcher_changes_the_tenant_the_api_acts_in(alice: Person, mallory: Person) -> None:
    bob = joined(alice, "bob@example.test")  # bob's first tenant is his own
    client = api_client(bob.user)
    assert post(client, "status").json()["tenant"] == "bob@example.test's own tenant"
    home = client.get("/").content.decode()
    assert 'id="tenant-switch"' in home and "Alice&#x27;s tenant (Member)" in home

    switched = client.post("/tenant", {"tenant_id": str(alice.tenant.pk), "next": "/members"})
    assert switched.status_code == 302 and switched["Location"] == "/members"
    assert client.session[SESSION_TENANT_KEY] == str(alice.tenant.pk)
    assert post(client, "status").json()["tenant"] == "Alice's tenant"
    emails = [m["email"] for m in post(client, "list_members").json()["members"]]
    assert emails == ["alice@example.test", "bob@example.test"]
    # a header still names the tenant explicitly
    assert post(client, "status", tenant=bob.user.memberships.order_by("created_at")[0].tenant_id).json()["tenant"] == (
        "bob@example.test's own tenant"
    )


def test_the_switcher_only_switches_to_the_persons_tenants(alice: Person, mallory: Person) -> None:
    client = api_client(alice.user)
    for tenant_id in (str(mallory.tenant.pk), "not-a-tenant", ""):
        refused = client.post("/tenant", {"tenant_id": tenant_id})
        assert refused.status_code == 404 and "Mallory" not in refused.content.decode()
    assert SESSION_TENANT_KEY not in client.session
    assert post(client, "status").json()["tenant"] == "Alice's tenant"
    elsewhere = client.post("/tenant", {"tenant_id": str(alice.tenant.pk), "next": "https://evil.example/"})
    assert elsewhere["Location"] == "/"
    forged = api_client(alice.user, csrf=False).post("/tenant", {"tenant_id": str(alice.tenant.pk)})
    assert forged.status_code == 403  # a form on another site cannot switch it


def test_a_tenant_the_person_left_is_refused_until_a_page_drops_it(alice: Person, mallory: Person) -> None:
    bob = joined(alice, "bob@example.test")
    client = api_client(bob.user)
    client.post("/tenant", {"tenant_id": str(alice.tenant.pk)})
    Membership.objects.for_tenant(alice.tenant).filter(user=bob.user).delete()
    # never silently swapped for another tenant: the console's next call is refused
    response = post(client, "list_members")
    assert response.status_code == 404 and error_of(response)["code"] == "NOT_FOUND"
    page = client.get("/members").content.decode()
    assert "Alice" not in page and SESSION_TENANT_KEY not in client.session
    assert post(client, "status").json()["tenant"] == "bob@example.test's own tenant"


@pytest.mark.parametrize("path", ["/no-such-page", "/accounts/nothing", "/apis/v2/x", "/static/console/missing.css"])
def test_an_unknown_address_is_a_404_in_the_consoles_layout(path: str, alice: Person, mallory: Person) -> None:
    anonymous = Client().get(path)
    assert anonymous.status_code == 404 and anonymous["Content-Type"].startswith("text/html")
    page = anonymous.content.decode()
    assert "There is nothing here" in page and '<a href="/">Go to the start page</a>' in page
    assert f'href="{asset_url("console/console.css")}"' in page and "Not Found</h1>" not in page
    signed_in = _signed_in(alice).get(path)
    assert signed_in.status_code == 404
    assert 'href="/exposure"' in signed_in.content.decode()  # the console's navigation, for a signed-in person
    assert "Alice&#x27;s tenant" in signed_in.content.decode() and "Mallory" not in signed_in.content.decode()


def test_every_page_links_the_favicon_it_serves(alice: Person) -> None:
    for path in ("/", "/accounts/sign-in", "/no-such-page"):
        page = _signed_in(alice).get(path).content.decode()
        assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page, path
    icon = Client().get("/static/favicon.svg")
    assert icon.status_code == 200 and icon["Content-Type"] == "image/svg+xml"


def test_a_form_without_its_token_and_a_failure_are_plain_pages_in_the_consoles_layout(
    alice: Person, mallory: Person
) -> None:
    from django.test import RequestFactory

    from config.errors import server_error

    # a form sent from a stale page (or another site): refused with a page that says what to do, never Django's
    for client, path in (
        (api_client(alice.user, csrf=False), "/tenant"),
        (Client(enforce_csrf_checks=True), "/accounts/sign-in"),
    ):
        refused = client.post(path, {"tenant_id": str(alice.tenant.pk), "username": "a", "password": "b"})
        page = refused.content.decode()
        assert refused.status_code == 403 and "That form could not be sent" in page, path
        assert f'href="{asset_url("console/console.css")}"' in page and "CSRF verification failed" not in page
    assert SESSION_TENANT_KEY not in Client().session
    # anything that escapes a page: the console's own words, nothing of the exception
    try:
        raise RuntimeError("a bug that quotes mallory@example.test")
    except RuntimeError:
        failed = server_error(RequestFactory().get("/keys"))
    page = failed.content.decode()
    assert failed.status_code == 500 and "Something went wrong on Oaken's side" in page
    assert f'href="{asset_url("console/console.css")}"' in page
    assert "Server Error (500)" not in page and "mallory" not in page
