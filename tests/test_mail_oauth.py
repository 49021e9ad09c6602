"""Mailboxes connected by OAuth against real servers: Dovecot's oauth2 passdb asking the loopback provider whether a
token is live, an SMTP server taking AUTH XOAUTH2, and the providers file. Mallory's tenant sees none of it."""

from __future__ import annotations

import html
import json
import re
import threading
import urllib.request
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import run_checks
from django.db import connection
from django.test import Client
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.mail.models import MailAccount
from apps.mail.oauth import providers
from apps.mail.oauth.tokens import access_token, stored_tokens
from apps.mail.sync import due_accounts, run_sync
from apps.outbound import requests as outbound_requests
from apps.worker import delivery
from tests.callers import as_agent, as_person, call, refusal
from tests.conftest import Person
from tests.mail_oauth import OAuthWorld, oauth_account
from tests.mailfactory import raw_message
from tests.oauthprovider import use_providers_file
from tests.outbound_accounts import request

pytestmark = pytest.mark.django_db


def _address(world: OAuthWorld, name: str) -> str:
    return world.imap.add_user(f"{name}.{uuid.uuid4().hex[:8]}@example.test")


# ---------------------------------------------------------------- the providers file


def _errors(settings: Any, tmp_path: Path, text: str) -> list[str]:
    use_providers_file(settings, tmp_path, text)
    return [m.msg for m in run_checks() if m.id == "oaken.E009"]


def test_a_providers_file_that_cannot_work_is_a_startup_error(settings: Any, tmp_path: Path) -> None:
    assert _errors(settings, tmp_path, "[providers.x]\nscopes = ['s']\nauthorize_url = 'ftp://x'\n")[0].endswith(
        "providers.x.authorize_url must be an https URL without a user or fragment"
    )
    assert "not valid TOML" in _errors(settings, tmp_path, "[providers.x\n")[0]
    entry = (
        "[providers.x]\nauthorize_url='https://a/'\ntoken_url='https://a/t'\nscopes=['s']\nclient_id='c'\n"
        "imap_host='i'\nsmtp_host='s'\n"
    )
    assert _errors(settings, tmp_path, entry) == []
    assert _errors(settings, tmp_path, entry + "mechanism='PLAIN'\n")[0].endswith(
        "providers.x.mechanism must be one of XOAUTH2, OAUTHBEARER"
    )
    assert "unknown key 'colour'" in _errors(settings, tmp_path, entry + "colour='red'\n")[0]
    assert _errors(settings, tmp_path, entry + "address='userinfo'\n")[0].endswith("userinfo_url is missing")
    # outside tests on loopback (private hosts allowed), nothing of a provider's goes in clear
    settings.MAIL_ALLOW_PRIVATE_HOSTS = False
    plain = entry.replace("token_url='https://a/t'", "token_url='http://a/t'")
    assert _errors(settings, tmp_path, plain)[0].endswith(
        "providers.x.token_url must be an https URL without a user or fragment"
    )
    assert _errors(settings, tmp_path, entry + "imap_security='none'\n")[0].endswith(
        "providers.x.imap_security must be one of ssl, starttls"
    )
    assert _errors(settings, tmp_path, entry) == []
    settings.MAIL_ALLOW_PRIVATE_HOSTS = True
    settings.MAIL_OAUTH_PROVIDERS_FILE = str(tmp_path / "absent.toml")
    providers.forget()
    assert [m.msg for m in run_checks() if m.id == "oaken.E009"] == [
        "OAKEN_MAIL_OAUTH_PROVIDERS: the file cannot be read"
    ]


def test_the_built_ins_are_enabled_by_their_client_settings(settings: Any) -> None:
    settings.MAIL_OAUTH_PROVIDERS_FILE = ""
    settings.MAIL_OAUTH_GOOGLE_CLIENT_ID, settings.MAIL_OAUTH_GOOGLE_CLIENT_SECRET = "g-id", ""
    settings.MAIL_OAUTH_MICROSOFT_CLIENT_ID, settings.MAIL_OAUTH_MICROSOFT_CLIENT_SECRET = "m-id", "m-secret"
    settings.MAIL_OAUTH_MICROSOFT_TENANT = "contoso.example"
    providers.forget()
    found = providers.providers()
    assert list(found) == ["microsoft"]  # google lacks its secret
    microsoft = found["microsoft"]
    assert microsoft.token_url == "https://login.microsoftonline.com/contoso.example/oauth2/v2.0/token"
    assert "https://outlook.office.com/IMAP.AccessAsUser.All" in microsoft.scopes
    assert "offline_access" in microsoft.scopes
    settings.MAIL_OAUTH_GOOGLE_CLIENT_SECRET = "g-secret"
    providers.forget()
    google = providers.providers()["google"]
    assert ("https://mail.google.com/" in google.scopes, google.mechanism) == (True, "XOAUTH2")


# ---------------------------------------------------------------- logging in with a bearer token


def test_an_oauth_mailbox_syncs_and_sends_with_its_bearer_token(
    alice: Person, mallory: Person, oauth: OAuthWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbound_requests, "enqueue_on_commit", lambda request_id: None)
    me, bob = _address(oauth, "alice"), _address(oauth, "bob")
    oauth.imap.append(me, "INBOX", raw_message(subject="Quarterly figures", to=me))
    account = oauth_account(alice, oauth, me)
    theirs = oauth_account(mallory, oauth, _address(oauth, "eve"))
    looked = oauth.provider.introspections

    assert run_sync(account.pk, force=True).state == "synced"
    assert oauth.provider.introspections > looked  # Dovecot asked the provider about the token
    listed = call(as_person(alice), "list_messages", {"account_id": str(account.pk)})
    assert [m["subject"] for m in listed["messages"]] == ["Quarterly figures"]
    assert call(as_person(mallory), "list_messages", {"account_id": str(theirs.pk)})["messages"] == []

    made = request(
        as_person(alice),
        "send_email",
        {"account_id": str(account.pk), "to": [bob], "subject": "Re: figures", "body": "Thanks.\n",
         "idempotency_key": uuid.uuid4().hex},
    )  # fmt: skip
    sent_before = len(oauth.smtp.received)
    assert delivery.deliver(made["request_id"]) == "sent"
    assert len(oauth.smtp.received) == sent_before + 1
    assert oauth.smtp.bearer_logins[-1] == me
    assert oauth.smtp.received[-1].recipients == [bob]

    # the tokens are stored encrypted, never returned by an operation
    tokens = stored_tokens(MailAccount.objects.for_tenant(alice.tenant).get(pk=account.pk))
    shown = json.dumps(call(as_person(alice), "list_accounts"))
    assert tokens["refresh_token"] not in shown and tokens["access_token"] not in shown


def test_a_dead_token_is_refused_by_the_servers(alice: Person, oauth: OAuthWorld) -> None:
    me = _address(oauth, "alice")
    account = oauth_account(alice, oauth, me)
    account.oauth_tokens = {**stored_tokens(account), "access_token": "at-forged"}
    account.save(update_fields=["oauth_tokens"])
    outcome = run_sync(account.pk, force=True)
    assert (outcome.state, outcome.reason) == ("failed", "oauth_login_failed")


# ---------------------------------------------------------------- the person's flow (the console's start and callback)


def _follow_to_provider(client: Client, query: str) -> str:
    """Start the flow in the console, let the provider answer; the callback URL the provider sends the browser to."""
    started = client.post("/mailboxes/oauth/start", query, content_type="application/x-www-form-urlencoded")
    assert started.status_code == 200 and started["Cache-Control"] == "no-store"
    authorize = started.json()["url"]
    assert authorize.startswith(oauth_url()) and "code_challenge_method=S256" in authorize
    with urllib.request.build_opener(_NoRedirect).open(authorize) as answer:
        assert answer.status == 302
        return str(answer.headers["Location"])


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def http_error_302(self, req: Any, fp: Any, code: int, msg: str, headers: Any) -> Any:
        return fp


def oauth_url() -> str:
    found = providers.provider("loopback")
    assert found is not None
    return found.authorize_url


def test_no_other_site_can_start_a_flow_in_a_signed_in_browser(alice: Person, mallory: Person) -> None:
    """Starting the flow is a POST under the CSRF check: a link or a form of another site (which has no token) starts
    nothing, so it cannot have a signed-in person's mailbox connected into a tenant their console is in."""
    victim = Client(enforce_csrf_checks=True)
    victim.force_login(alice.user)
    assert victim.get("/mailboxes/oauth/start?provider=loopback").status_code == 405
    form = "application/x-www-form-urlencoded"
    forged = victim.post("/mailboxes/oauth/start", "provider=loopback", content_type=form)
    assert forged.status_code == 403 and "code_challenge" not in forged.content.decode()
    assert not MailAccount.objects.for_tenant(alice.tenant).exists()
    assert not MailAccount.objects.for_tenant(mallory.tenant).exists()


def _notices(client: Client) -> list[str]:
    page = client.get("/mailboxes").content.decode()
    return [html.unescape(text) for text in re.findall(r'data-oauth-notice="\w+">([^<]*)<', page)]


def test_connecting_through_the_flow_saves_syncs_and_audits_refusals(
    alice: Person, mallory: Person, oauth: OAuthWorld
) -> None:
    me = _address(oauth, "alice")
    oauth.imap.append(me, "INBOX", raw_message(subject="Welcome aboard", to=me))
    client = Client()
    client.force_login(alice.user)

    # the person says no at the provider: a clear message, the refusal audited, nothing saved
    oauth.provider.refuse_with = "access_denied"
    try:
        back = _follow_to_provider(client, "provider=loopback")
    finally:
        oauth.provider.refuse_with = ""
    assert "error=access_denied" in back
    assert client.get(back).status_code == 302
    assert _notices(client) == ["Loopback Mail: you did not allow Oaken to use this mailbox at the provider"]
    refused = AuditEvent.objects.for_tenant(alice.tenant).get(operation="connect_mailbox_oauth")
    assert refused.outcome == "FORBIDDEN"
    assert not MailAccount.objects.for_tenant(alice.tenant).exists()

    # a state is bound to the person: mallory cannot finish alice's flow, and a state is used once
    oauth.provider.next_address = me
    back = _follow_to_provider(client, "provider=loopback")
    other = Client()
    other.force_login(mallory.user)
    other.get(back)
    assert "was not started here" in _notices(other)[0]
    assert client.get(back).status_code == 302
    assert "was not started here" in _notices(client)[0]  # mallory's try used the state up

    alice.user.name = "Alice Walker"  # a new mailbox sends under its person's name (issue 38, item 6)
    alice.user.save(update_fields=["name"])
    back = _follow_to_provider(client, "provider=loopback")
    assert "code=" in back and "access_token" not in back
    client.get(back)
    assert _notices(client) == [f"Connected {me} with Loopback Mail; its mail is syncing."]
    account = MailAccount.objects.for_tenant(alice.tenant).get()
    assert (account.oauth_provider, account.email_address, account.name) == ("loopback", me, me)
    assert account.sender_name == "Alice Walker"
    assert run_sync(account.pk).state == "synced"  # the sync queued once the connection commits
    listed = call(as_person(alice), "list_messages", {"account_id": str(account.pk)})
    assert [m["subject"] for m in listed["messages"]] == ["Welcome aboard"]
    tokens = stored_tokens(account)
    for event in AuditEvent.objects.for_tenant(alice.tenant):
        text = json.dumps([event.targets, str(event.input_digest)])
        assert tokens["access_token"] not in text and tokens["refresh_token"] not in text
    assert not MailAccount.objects.for_tenant(mallory.tenant).exists()
    assert call(as_person(mallory), "list_accounts")["accounts"] == []


def test_a_grant_is_the_persons_own(alice: Person, mallory: Person, oauth: OAuthWorld) -> None:
    """connect_mailbox_oauth takes a handle only its person in its tenant can use; agents cannot call it at all."""
    from apps.mail.oauth import flow

    grant = flow.keep_grant(
        {"provider": "loopback", "account": "", "access_token": "x", "refresh_token": "y", "address": "a@b.test"},
        user_id=str(alice.user.pk),
        tenant_id=str(alice.tenant.pk),
    )
    error = refusal(as_person(mallory), "connect_mailbox_oauth", {"grant": grant})
    assert (error.code, error.field) == ("NOT_FOUND", "grant")  # as any id out of reach
    assert "x" not in error.message.split()
    assert refusal(as_agent(alice), "connect_mailbox_oauth", {"grant": grant}).code == "NOT_AVAILABLE"


def test_an_address_the_provider_gives_is_held_to_what_a_person_may_type(
    alice: Person, mallory: Person, oauth: OAuthWorld
) -> None:
    """An ID token's claim or a userinfo answer is the provider's word: an address with a line break, a space, two
    @ or 400 characters is refused (it would become the account's address, its name and a From header)."""
    from apps.mail.oauth import flow

    for address in ("a@b.test\r\nBcc: x@y.test", "a b@c.test", "a@b@c.test", "a@" + "b" * 400 + ".test", "@b.test"):
        grant = flow.keep_grant(
            {"provider": "loopback", "account": "", "access_token": "x", "refresh_token": "y", "address": address},
            user_id=str(alice.user.pk),
            tenant_id=str(alice.tenant.pk),
        )
        error = refusal(as_person(alice), "connect_mailbox_oauth", {"grant": grant})
        assert (error.code, error.field) == ("INVALID_INPUT", "grant"), address
        assert "not a plain e-mail address" in error.message
        assert "Bcc" not in error.message and "bbbb" not in error.message
    assert not MailAccount.objects.for_tenant(alice.tenant).exists()
    assert not MailAccount.objects.for_tenant(mallory.tenant).exists()


def test_a_grant_connects_one_mailbox_however_many_calls_race_with_it(
    alice: Person, mallory: Person, oauth: OAuthWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two calls with one grant (a form sent twice) both pass the server checks, which take seconds; the grant is
    claimed inside the call's transaction, so one saves the mailbox and the other is refused: never two mailboxes
    holding one refresh token (rotation would strand one, and removing either would revoke both)."""
    from apps.mail.oauth import flow
    from apps.operations.defs import mailboxes

    me = _address(oauth, "alice")
    tokens = oauth.provider.grant_for(me)
    grant = flow.keep_grant(
        {"provider": "loopback", "account": "", "access_token": tokens["access_token"],
         "refresh_token": tokens["refresh_token"], "address": me},
        user_id=str(alice.user.pk),
        tenant_id=str(alice.tenant.pk),
    )  # fmt: skip
    real_check = mailboxes.check_smtp
    raced: list[str] = []

    def check_while_another_call_runs(config: Any) -> None:
        real_check(config)
        if not raced:  # the first call's check: the second call runs to its end meanwhile
            raced.append("second")
            call(as_person(alice), "connect_mailbox_oauth", {"grant": grant, "account_name": "second"})

    monkeypatch.setattr(mailboxes, "check_smtp", check_while_another_call_runs)
    first = refusal(as_person(alice), "connect_mailbox_oauth", {"grant": grant, "account_name": "first"})
    # refused as used up: when it looks for the grant again, or (a moment later) when it claims it
    assert first.code in ("CONFLICT", "NOT_FOUND") and first.field == "grant"
    assert [a.name for a in MailAccount.objects.for_tenant(alice.tenant)] == ["second"]
    assert not MailAccount.objects.for_tenant(mallory.tenant).exists()


# ---------------------------------------------------------------- tokens over time


def _expire(account: MailAccount, world: OAuthWorld) -> None:
    """The access token's time is up, at the provider and in Oaken."""
    world.provider.expire_access(account.email_address)
    MailAccount.objects.unscoped().filter(pk=account.pk).update(oauth_expires_at=timezone.now() - timedelta(seconds=1))


@pytest.mark.django_db(transaction=True)
def test_an_expired_token_is_refreshed_once_across_two_workers(
    alice: Person, mallory: Person, oauth: OAuthWorld
) -> None:
    me = _address(oauth, "alice")
    oauth.imap.append(me, "INBOX", raw_message(subject="After the refresh", to=me))
    account = oauth_account(alice, oauth, me)
    oauth_account(mallory, oauth, _address(oauth, "eve"))
    _expire(account, oauth)
    before = oauth.provider.refresh_calls
    oauth.provider.refresh_delay = 0.5  # the first refresh is still in flight when the second worker asks
    start = threading.Barrier(2)
    got: list[str] = []

    def worker() -> None:
        try:
            start.wait()
            got.append(access_token(MailAccount.objects.unscoped().get(pk=account.pk)))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        oauth.provider.refresh_delay = 0.0
    assert oauth.provider.refresh_calls == before + 1  # one refresh, though two workers needed one
    assert len(got) == 2 and got[0] == got[1]
    stored = MailAccount.objects.unscoped().get(pk=account.pk)
    grant = next(g for g in oauth.provider.grants if g.address == me)
    assert stored_tokens(stored)["refresh_token"] == grant.refresh_token  # the rotated one, stored at once
    assert stored.oauth_expires_at is not None and stored.oauth_expires_at > timezone.now()
    assert run_sync(account.pk, force=True).state == "synced"
    assert oauth.provider.refresh_calls == before + 1  # the sync used the refreshed token
    listed = call(as_person(alice), "list_messages", {"account_id": str(account.pk)})
    assert [m["subject"] for m in listed["messages"]] == ["After the refresh"]


def test_a_revoked_grant_needs_reconnecting_and_reconnect_keeps_the_mail(
    alice: Person, mallory: Person, oauth: OAuthWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbound_requests, "enqueue_on_commit", lambda request_id: None)
    me, bob = _address(oauth, "alice"), _address(oauth, "bob")
    oauth.imap.append(me, "INBOX", raw_message(subject="Kept through it all", to=me))
    account = oauth_account(alice, oauth, me)
    assert run_sync(account.pk, force=True).state == "synced"

    # the person withdraws consent at the provider; the access token runs out
    oauth.provider.revoke_grants(me)
    _expire(account, oauth)
    outcome = run_sync(account.pk, force=True)
    assert (outcome.state, outcome.reason) == ("failed", "needs_reconnect")
    account.refresh_from_db()
    assert account.oauth_state == "needs_reconnect"
    assert account.pk not in due_accounts()  # sync stops trying
    refreshes = oauth.provider.refresh_calls
    assert run_sync(account.pk, force=True).reason == "needs_reconnect"
    assert oauth.provider.refresh_calls == refreshes  # nor asks the provider again
    listed = call(as_person(alice), "list_accounts")["accounts"]
    assert [(a["needs_reconnect"], a["provider"]) for a in listed] == [(True, "loopback")]
    assert "reconnect" in listed[0]["sync_problem"]
    assert call(as_person(alice), "status")["accounts_needing_reconnect"] == 1
    made = request(
        as_person(alice),
        "send_email",
        {"account_id": str(account.pk), "to": [bob], "subject": "Later", "body": "Later.\n",
         "idempotency_key": uuid.uuid4().hex},
    )  # fmt: skip
    sent = len(oauth.smtp.received)
    assert delivery.deliver(made["request_id"]) == "failed"  # delivery does not retry a withdrawn grant
    assert len(oauth.smtp.received) == sent
    row = call(as_person(alice), "get_outbound_request", {"request_id": made["request_id"]})
    assert row["error"] == "smtp_needs_reconnect"

    # mallory cannot reconnect alice's mailbox, nor see it
    other = Client()
    other.force_login(mallory.user)
    oauth.provider.next_address = me
    other.get(_follow_to_provider(other, f"provider=loopback&account_id={account.pk}"))
    assert _notices(other)[0].startswith("Loopback Mail: ")
    assert call(as_person(mallory), "list_accounts")["accounts"] == []
    assert call(as_person(mallory), "status")["accounts_needing_reconnect"] == 0

    # Reconnect runs the flow again for the same account: its mail stays, sync resumes
    client = Client()
    client.force_login(alice.user)
    client.get(_follow_to_provider(client, f"provider=loopback&account_id={account.pk}"))
    assert _notices(client) == [f"Connected {me} with Loopback Mail; its mail is syncing."]
    account.refresh_from_db()
    assert (account.oauth_state, account.sync_error) == ("ok", "")
    assert MailAccount.objects.for_tenant(alice.tenant).count() == 1
    oauth.imap.append(me, "INBOX", raw_message(subject="After reconnecting", to=me, message_id="<m2@example.test>"))
    assert run_sync(account.pk, force=True).state == "synced"
    listed = call(as_person(alice), "list_messages", {"account_id": str(account.pk)})
    assert sorted(m["subject"] for m in listed["messages"]) == ["After reconnecting", "Kept through it all"]
    assert call(as_person(alice), "list_accounts")["accounts"][0]["needs_reconnect"] is False


def test_removing_the_mailbox_revokes_its_token_at_the_provider(
    alice: Person, mallory: Person, oauth: OAuthWorld, django_capture_on_commit_callbacks: Any
) -> None:
    me = _address(oauth, "alice")
    account = oauth_account(alice, oauth, me)
    theirs = oauth_account(mallory, oauth, _address(oauth, "eve"))
    assert refusal(as_person(mallory), "remove_mailbox", {"account_id": str(account.pk)}, confirm=True).code == (
        "NOT_FOUND"
    )
    with django_capture_on_commit_callbacks(execute=True):
        call(as_person(alice), "remove_mailbox", {"account_id": str(account.pk)}, confirm=True)
    assert oauth.provider.revocations.count(me) == 1
    assert not MailAccount.objects.for_tenant(alice.tenant).exists()
    assert theirs.email_address not in oauth.provider.revocations
    assert MailAccount.objects.for_tenant(mallory.tenant).filter(pk=theirs.pk).exists()


# ---------------------------------------------------------------- the other mechanism, addresses, refusals


def test_oauthbearer_logs_in_to_both_servers(
    alice: Person, oauth: OAuthWorld, settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbound_requests, "enqueue_on_commit", lambda request_id: None)
    text = oauth.provider.providers_toml("bearer", imap=oauth.imap, smtp=oauth.smtp, mechanism="OAUTHBEARER")
    use_providers_file(settings, tmp_path, text)
    me, bob = _address(oauth, "alice"), _address(oauth, "bob")
    oauth.imap.append(me, "INBOX", raw_message(subject="By OAUTHBEARER", to=me))
    account = oauth_account(alice, oauth, me, provider_name="bearer")
    assert run_sync(account.pk, force=True).state == "synced"
    made = request(
        as_person(alice),
        "send_email",
        {"account_id": str(account.pk), "to": [bob], "subject": "Hi", "body": "Hi.\n",
         "idempotency_key": uuid.uuid4().hex},
    )  # fmt: skip
    assert delivery.deliver(made["request_id"]) == "sent"
    assert oauth.smtp.bearer_logins[-1] == me


def test_the_person_gives_the_address_when_the_provider_does_not_say(
    alice: Person, mallory: Person, oauth: OAuthWorld, settings: Any, tmp_path: Path
) -> None:
    text = oauth.provider.providers_toml("loopback", imap=oauth.imap, smtp=oauth.smtp, address="ask")
    use_providers_file(settings, tmp_path, text)
    me = _address(oauth, "alice")
    oauth.provider.next_address = me
    client = Client()
    client.force_login(alice.user)
    client.get(_follow_to_provider(client, "provider=loopback"))
    assert _notices(client) == ["Loopback Mail does not say the mailbox's address: enter it below."]
    assert not MailAccount.objects.for_tenant(alice.tenant).exists()
    grant = client.session["mail_oauth_grant"]
    assert f'data-grant="{grant}"' in client.get("/mailboxes").content.decode()
    # an address the token is not for: IMAP refuses it, nothing is saved
    error = refusal(as_person(alice), "connect_mailbox_oauth", {"grant": grant, "email_address": "x@example.test"})
    assert (error.code, error.field) == ("INVALID_INPUT", "imap.oauth")
    assert refusal(as_person(mallory), "connect_mailbox_oauth", {"grant": grant, "email_address": me}).field == "grant"
    out = call(as_person(alice), "connect_mailbox_oauth", {"grant": grant, "email_address": me})
    assert (out["email_address"], out["name"]) == (me, me)


@pytest.mark.parametrize(
    ("arrange", "said"),
    [
        ({"granted_scope": "openid email"}, "the provider did not grant access to the mail"),
        ({"client_secret": "wrong"}, "the provider does not know Oaken's client"),
    ],
)
def test_a_refusal_at_the_token_endpoint_is_said_and_audited(
    alice: Person, oauth: OAuthWorld, settings: Any, tmp_path: Path, arrange: dict[str, str], said: str
) -> None:
    text = oauth.provider.providers_toml("loopback", imap=oauth.imap, smtp=oauth.smtp)
    if "client_secret" in arrange:
        text = text.replace('client_secret = "oaken-test-secret"', 'client_secret = "wrong"')
    use_providers_file(settings, tmp_path, text)
    oauth.provider.next_address = _address(oauth, "alice")
    oauth.provider.granted_scope = arrange.get("granted_scope", "")
    client = Client()
    client.force_login(alice.user)
    try:
        client.get(_follow_to_provider(client, "provider=loopback"))
    finally:
        oauth.provider.granted_scope = ""
    assert _notices(client)[0].startswith(f"Loopback Mail: {said}")
    event = AuditEvent.objects.for_tenant(alice.tenant).get(operation="connect_mailbox_oauth")
    assert event.outcome == "FORBIDDEN"
    assert not MailAccount.objects.for_tenant(alice.tenant).exists()


# ---------------------------------------------------------------- the IDLE watcher


@pytest.mark.django_db(transaction=True)  # the watcher's thread closes old connections, as a long process must
def test_the_idle_watcher_logs_in_by_the_mailboxs_token_and_leaves_one_that_needs_reconnecting(
    alice: Person, mallory: Person, oauth: OAuthWorld
) -> None:
    """The watcher obtains an OAuth mailbox's login where the sync does (login_config: a fresh access token and the
    provider's mechanism), logs in to Dovecot by it and hears new mail; a mailbox that needs reconnecting is not
    watched at all. Another tenant's mailbox on the same server is watched with its own token only."""
    import asyncio
    import time

    from apps.mail.idle import IdleConnection
    from apps.mail.watcher import watch_login, watchable_accounts

    me, theirs = _address(oauth, "alice"), _address(oauth, "mallory")
    account, other = oauth_account(alice, oauth, me), oauth_account(mallory, oauth, theirs)
    assert {str(account.pk), str(other.pk)} <= set(watchable_accounts())
    login = watch_login(str(account.pk))
    assert login is not None and login.bearer and login.mechanism == "XOAUTH2" and login.password == ""
    assert login.bearer not in repr(login)
    assert login.bearer != (watch_login(str(other.pk)) or login).bearer

    async def hears_new_mail() -> int:
        conn = await IdleConnection.open(login, 10)
        seen: list[int] = []
        try:
            await conn.examine_inbox()

            def deliver() -> None:
                time.sleep(0.5)
                oauth.imap.append(me, "INBOX", raw_message(subject="Heard by IDLE", to=me))

            delivered = asyncio.get_running_loop().run_in_executor(None, deliver)
            for _ in range(3):
                await conn.idle(1.0, lambda: seen.append(1))
            await delivered
        finally:
            conn.close()
        return len(seen)

    assert asyncio.run(hears_new_mail()) >= 1

    # a dead token is refused by the server, as a login refusal
    async def refused() -> str:
        dead = type(login)(login.host, login.port, login.security, login.username, "", bearer="not-a-token")
        try:
            (await IdleConnection.open(dead, 10)).close()
        except Exception as exc:
            return str(exc)
        return "logged in"

    assert asyncio.run(refused()) == "login_failed"

    oauth.provider.revoke_grants(me)
    _expire(account, oauth)
    assert watch_login(str(account.pk)) is None  # the refresh was refused: needs reconnecting
    account.refresh_from_db()
    assert account.oauth_state == "needs_reconnect"
    assert str(account.pk) not in watchable_accounts() and str(other.pk) in watchable_accounts()


def test_changes_made_while_a_mailbox_needs_reconnecting_reach_the_server_after_it(
    alice: Person,
    mallory: Person,
    oauth: OAuthWorld,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from apps.mail.mirror import push_flags, push_moves
    from apps.mail.models import Message
    from apps.mail.tasks import push_flags_task, push_moves_task

    queued: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(push_flags_task, "delay", lambda **kw: queued.append(("flags", kw)))
    monkeypatch.setattr(push_moves_task, "delay", lambda **kw: queued.append(("moves", kw)))
    me = _address(oauth, "alice")
    oauth.imap.append(me, "INBOX", raw_message(subject="Read me later", to=me))
    with oauth.imap.client(me) as server:
        server.create_folder("Archive")
    account = oauth_account(alice, oauth, me)
    assert run_sync(account.pk, force=True).state == "synced"
    message = Message.objects.for_tenant(alice.tenant).get(account=account)
    oauth.provider.revoke_grants(me)
    _expire(account, oauth)
    assert run_sync(account.pk, force=True).reason == "needs_reconnect"

    # read and archived in Oaken meanwhile: the pushes leave the account alone, asking the provider nothing
    call(as_person(alice), "mark_read", {"message_ids": [str(message.pk)]})
    call(as_person(alice), "move_messages", {"message_ids": [str(message.pk)], "folder": "archive"})
    refreshes = oauth.provider.refresh_calls
    assert push_flags_task.run(tenant_id=str(alice.tenant.pk), message_ids=[str(message.pk)]) == 0
    assert push_moves(tenant=alice.tenant, message_ids=[str(message.pk)]) == 0
    assert oauth.provider.refresh_calls == refreshes
    message.refresh_from_db()
    assert message.flags_pending  # still waiting, not lost
    assert [b"\\Seen" in flags for _, _, flags in oauth.imap.folder_messages(me, "INBOX")] == [False]

    # reconnected: what waited is queued, and reaches the server
    queued.clear()
    oauth.provider.next_address = me
    client = Client()
    client.force_login(alice.user)
    with django_capture_on_commit_callbacks() as callbacks:
        client.get(_follow_to_provider(client, f"provider=loopback&account_id={account.pk}"))
    for callback in callbacks:
        if getattr(callback, "func", None) in (push_flags_task.delay, push_moves_task.delay):
            callback()
    assert _notices(client) == [f"Connected {me} with Loopback Mail; its mail is syncing."]
    assert {kind for kind, _ in queued} == {"flags", "moves"}  # (the move made earlier is among them too)
    assert all(kw["message_ids"] == [str(message.pk)] for _, kw in queued)
    assert push_flags(tenant=alice.tenant, message_ids=[str(message.pk)]) == 1
    assert push_moves(tenant=alice.tenant, message_ids=[str(message.pk)]) == 1
    assert oauth.imap.folder_messages(me, "INBOX") == []
    assert [b"\\Seen" in flags for _, _, flags in oauth.imap.folder_messages(me, "Archive")] == [True]
    assert call(as_person(mallory), "list_messages", {})["messages"] == []


def test_an_id_token_for_another_client_names_no_address(alice: Person, mallory: Person, oauth: OAuthWorld) -> None:
    me = _address(oauth, "alice")
    oauth.provider.next_address = me
    oauth.provider.id_token_audience = ["someone-else"]  # a token the provider made for another application
    client = Client()
    client.force_login(alice.user)
    client.get(_follow_to_provider(client, "provider=loopback"))
    # its address is not believed: the person is asked, and nothing is connected meanwhile
    assert _notices(client) == ["Loopback Mail does not say the mailbox's address: enter it below."]
    assert not MailAccount.objects.for_tenant(alice.tenant).exists()
    oauth.provider.id_token_audience = ["someone-else", "x", *[providers.provider("loopback").client_id]]  # type: ignore[union-attr]
    client.get(_follow_to_provider(client, "provider=loopback"))
    assert _notices(client) == [f"Connected {me} with Loopback Mail; its mail is syncing."]
    assert not MailAccount.objects.for_tenant(mallory.tenant).exists()
