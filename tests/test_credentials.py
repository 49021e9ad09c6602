"""Mailbox credentials are encrypted at rest and readable only with a configured key."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.db import connection

from apps.core import encryption as credentials
from apps.core.encryption import CredentialsUnreadableError
from apps.mail.models import MailAccount
from tests.conftest import Person


@pytest.fixture(autouse=True)
def _fresh_cipher() -> None:
    credentials._cipher.cache_clear()


def _stored_bytes(account: MailAccount) -> bytes:
    with connection.cursor() as cursor:
        cursor.execute("SELECT credentials FROM mail_mailaccount WHERE id = %s", [account.pk])
        return bytes(cursor.fetchone()[0])


def test_credentials_never_reach_the_database_in_the_clear(alice: Person, mallory: Person) -> None:
    secret = {"username": "alice", "password": "hunter2-very-secret"}
    account = MailAccount.objects.create(
        tenant=alice.tenant, workspace=alice.workspace, name="imap", credentials=secret
    )
    stored = _stored_bytes(account)
    assert b"hunter2" not in stored and b"alice" not in stored
    assert MailAccount.objects.for_tenant(alice.tenant).get(pk=account.pk).credentials == secret
    assert not MailAccount.objects.for_tenant(mallory.tenant).filter(pk=account.pk).exists()


def test_old_keys_still_decrypt_after_rotation(alice: Person, settings) -> None:
    account = MailAccount.objects.create(
        tenant=alice.tenant, workspace=alice.workspace, name="imap", credentials={"password": "p"}
    )
    settings.ENCRYPTION_KEYS = [Fernet.generate_key().decode(), *settings.ENCRYPTION_KEYS]
    credentials._cipher.cache_clear()
    assert MailAccount.objects.for_tenant(alice.tenant).get(pk=account.pk).credentials == {"password": "p"}


def test_without_the_key_credentials_are_unreadable(alice: Person, settings) -> None:
    account = MailAccount.objects.create(
        tenant=alice.tenant, workspace=alice.workspace, name="imap", credentials={"password": "p"}
    )
    settings.ENCRYPTION_KEYS = [Fernet.generate_key().decode()]
    credentials._cipher.cache_clear()
    with pytest.raises(CredentialsUnreadableError):
        MailAccount.objects.for_tenant(alice.tenant).get(pk=account.pk)
