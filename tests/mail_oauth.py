"""The servers of a mailbox connected by OAuth, for the tests: the loopback provider, a Dovecot that asks it whether
a token is live, an SMTP server that takes AUTH XOAUTH2 from it, and Oaken's providers file naming them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.utils import timezone

from apps.mail.models import STANDARD_FOLDERS, AccountKind, Folder, MailAccount
from apps.mail.oauth.providers import provider
from tests.mailservers import ImapServer, SmtpServer, dovecot
from tests.oauthprovider import OAuthProvider, use_providers_file

if TYPE_CHECKING:
    from tests.conftest import Person

PROVIDER = "loopback"


@dataclass
class OAuthWorld:
    provider: OAuthProvider
    imap: ImapServer
    smtp: SmtpServer


@pytest.fixture(scope="module")
def oauth_world() -> Iterator[OAuthWorld]:
    idp = OAuthProvider().start()
    try:
        with dovecot(introspection_url=f"{idp.url}/introspect") as imap:
            smtp = SmtpServer(deliver_to=imap, bearer_check=idp.check).start()
            try:
                yield OAuthWorld(idp, imap, smtp)
            finally:
                smtp.stop()
    finally:
        idp.stop()


@pytest.fixture
def oauth(oauth_world: OAuthWorld, settings: Any, tmp_path: Path) -> OAuthWorld:
    """The world, with Oaken's providers file naming the loopback provider as `loopback`."""
    text = oauth_world.provider.providers_toml(PROVIDER, imap=oauth_world.imap, smtp=oauth_world.smtp)
    use_providers_file(settings, tmp_path, text)
    return oauth_world


def oauth_account(
    p: Person, world: OAuthWorld, address: str, name: str = "Work mail", provider_name: str = PROVIDER
) -> MailAccount:
    """An OAuth mailbox of `address` in p's default workspace, holding a grant made without the browser."""
    tokens = world.provider.grant_for(address)
    found = provider(provider_name)
    assert found is not None
    account = MailAccount.objects.create(
        tenant=p.tenant,
        workspace=p.workspace,
        name=name,
        kind=AccountKind.IMAP,
        email_address=address,
        credentials=found.servers(address),
        oauth_provider=provider_name,
        oauth_tokens={"access_token": tokens["access_token"], "refresh_token": tokens["refresh_token"]},
        oauth_expires_at=timezone.now() + timedelta(seconds=tokens["expires_in"]),
    )
    Folder.objects.bulk_create(
        Folder(tenant=p.tenant, account=account, kind=kind, name=kind.label) for kind in STANDARD_FOLDERS
    )
    return account
