"""The loopback mail servers the mail tests rely on behave like real ones."""

from __future__ import annotations

import smtplib

import pytest

from tests.mailfactory import raw_message
from tests.mailservers import PASSWORD, ImapServer, SmtpServer


def test_dovecot_serves_imap_with_special_use_folders(imap_server: ImapServer) -> None:
    user = imap_server.add_user("ivy@example.test")
    imap_server.append(user, "INBOX", raw_message(subject="Hello ivy"))
    with imap_server.client(user) as client:
        folders = {name: flags for flags, _, name in client.list_folders()}
        assert {"INBOX", "Sent", "Drafts", "Trash", "Junk"} <= set(folders)
        assert b"\\Sent" in folders["Sent"]
        assert b"CONDSTORE" in client.capabilities()
        info = client.select_folder("INBOX")
        assert info[b"EXISTS"] == 1 and info[b"UIDVALIDITY"] > 0
    with pytest.raises(Exception):  # noqa: B017 (imapclient raises its LoginError)
        imap_server.client(user, PASSWORD + "x")


def test_smtp_delivers_into_dovecot_and_can_drop_after_data(imap_server: ImapServer, smtp_server: SmtpServer) -> None:
    user = imap_server.add_user("jay@example.test")
    with smtplib.SMTP(smtp_server.host, smtp_server.port, timeout=10) as smtp:
        smtp.sendmail("a@example.test", [user], raw_message(subject="Delivered", message_id="<d1@example.test>"))
    ((_, raw, _),) = imap_server.folder_messages(user, "INBOX")
    assert b"Delivered" in raw and smtp_server.received[0].message_id == "<d1@example.test>"
    smtp_server.drop_after_data = True
    with pytest.raises(smtplib.SMTPServerDisconnected), smtplib.SMTP(smtp_server.host, smtp_server.port) as smtp:
        smtp.sendmail("a@example.test", [user], raw_message(subject="Dropped", message_id="<d2@example.test>"))
    assert smtp_server.data_commands == 2 and len(imap_server.folder_messages(user, "INBOX")) == 2
