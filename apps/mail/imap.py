"""Connections to a mailbox's IMAP and SMTP servers, per its stored credentials, with timeouts.

Credentials have exactly this shape (the outbound half relies on it):
`{"imap": {"host", "port", "security", "username", "password"}, "smtp": {... the same keys}}`,
security one of "ssl", "starttls", "none". Failures raise MailServerError with a fixed reason and
the setting at fault: never the server's own words, which could quote the submitted secrets.
"""

from __future__ import annotations

import base64
import ipaddress
import smtplib
import socket
import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

from django.conf import settings
from imapclient import IMAPClient
from imapclient.exceptions import CapabilityError, IMAPClientError, LoginError

from apps.core.bounds import bounds
from apps.core.encryption import CredentialsUnreadableError
from apps.mail.models import MailAccount
from apps.mail.reasons import setting_problem

SECURITY = ("ssl", "starttls", "none")


class MailServerError(Exception):
    """A mail server could not be used: `reason` is a key of apps.mail.reasons.REASONS, `field` the setting at
    fault."""

    def __init__(self, reason: str, field: str) -> None:
        super().__init__(f"{field}: {setting_problem(reason)}")
        self.reason = reason
        self.field = field

    @property
    def message(self) -> str:
        return f"{self.field}: {setting_problem(self.reason)}"


def _timeout() -> float:
    return float(bounds.MAIL_SERVER_TIMEOUT_SECONDS)


def require_public_host(host: str, port: int, field: str) -> None:
    """Refuse a mail server that resolves to a loopback, private, link-local or reserved address, so a
    mailbox cannot be pointed at Oaken's own network (OAKEN_MAIL_ALLOW_PRIVATE_HOSTS lifts it: tests,
    self-hosting next to the mail server)."""
    if settings.MAIL_ALLOW_PRIVATE_HOSTS:
        return
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)}
    except (OSError, UnicodeError):
        raise MailServerError("connection_failed", field) from None
    for address in addresses:
        ip = ipaddress.ip_address(str(address).split("%")[0])
        if not ip.is_global or ip.is_multicast:
            raise MailServerError("private_host", field)


def open_imap(config: Mapping[str, Any]) -> IMAPClient:
    """A logged-in IMAPClient for the "imap" part of a mailbox's credentials."""
    security = config["security"]
    require_public_host(config["host"], int(config["port"]), "imap.host")
    context = ssl.create_default_context()
    try:
        client = IMAPClient(
            config["host"],
            port=int(config["port"]),
            ssl=security == "ssl",
            ssl_context=context if security == "ssl" else None,
            timeout=_timeout(),
        )
    except ssl.SSLError:
        raise MailServerError("tls_failed", "imap.security") from None
    except (OSError, UnicodeError, IMAPClientError):
        raise MailServerError("connection_failed", "imap.host") from None
    try:
        if security == "starttls":
            try:
                client.starttls(context)
            except (ssl.SSLError, CapabilityError, IMAPClientError):
                raise MailServerError("tls_failed", "imap.security") from None
        try:
            _imap_login(client, config["username"], config["password"])
        except LoginError:
            raise MailServerError("login_failed", "imap.password") from None
        except (OSError, UnicodeError, IMAPClientError):
            raise MailServerError("server_error", "imap.host") from None
    except BaseException:
        _close(client)
        raise
    return client


def _imap_login(client: IMAPClient, username: str, password: str) -> None:
    """LOGIN carries ASCII only; other characters go as UTF-8 in AUTHENTICATE PLAIN (RFC 4616) where offered."""
    if f"{username}{password}".isascii():
        client.login(username, password)
    elif client.has_capability("AUTH=PLAIN"):
        client.plain_login(username, password)
    else:
        raise MailServerError("unsupported_characters", "imap.password")


def smtp_login(smtp: smtplib.SMTP, username: str, password: str) -> None:
    """AUTH, where the server offers it and a username is set (a relay that trusts the network is used
    without): the server's own choice of mechanism for ASCII credentials; other characters go as UTF-8 in
    AUTH PLAIN (RFC 4616), which smtplib cannot send. Raises smtplib's exceptions, or MailServerError."""
    if not username or not smtp.has_extn("auth"):
        return
    if f"{username}{password}".isascii():
        smtp.login(username, password)
        return
    if "PLAIN" not in smtp.esmtp_features.get("auth", "").upper().split():
        raise MailServerError("unsupported_characters", "smtp.password")
    token = base64.b64encode(f"\0{username}\0{password}".encode()).decode("ascii")
    code, reply = smtp.docmd("AUTH", f"PLAIN {token}")
    if code == 535:
        raise smtplib.SMTPAuthenticationError(code, reply)
    if code != 235:
        raise smtplib.SMTPResponseException(code, reply)


def _close(client: IMAPClient) -> None:
    with suppress(Exception):
        client.logout()
    with suppress(Exception):
        client.shutdown()


def imap_config(account: MailAccount) -> Mapping[str, Any]:
    try:
        credentials = account.credentials
    except CredentialsUnreadableError:
        raise MailServerError("credentials_unreadable", "imap.password") from None
    if not isinstance(credentials, dict) or "imap" not in credentials:
        raise MailServerError("not_connected", "imap.host")
    return credentials["imap"]


@contextmanager
def imap_session(account: MailAccount) -> Iterator[IMAPClient]:
    """A logged-in IMAP connection to the account's server, logged out afterwards."""
    client = open_imap(imap_config(account))
    try:
        yield client
    finally:
        _close(client)


def check_imap(config: Mapping[str, Any]) -> None:
    """Log in and out, or raise MailServerError."""
    _close(open_imap(config))


def check_smtp(config: Mapping[str, Any]) -> None:
    """EHLO, STARTTLS where asked, and AUTH where the server offers it; or raise MailServerError."""
    security = config["security"]
    context = ssl.create_default_context()
    host, port = config["host"], int(config["port"])
    require_public_host(host, port, "smtp.host")
    try:
        if security == "ssl":
            smtp: smtplib.SMTP = smtplib.SMTP_SSL(host, port, timeout=_timeout(), context=context)
        else:
            smtp = smtplib.SMTP(host, port, timeout=_timeout())
    except ssl.SSLError:
        raise MailServerError("tls_failed", "smtp.security") from None
    except (OSError, smtplib.SMTPException):
        raise MailServerError("connection_failed", "smtp.host") from None
    try:
        try:
            smtp.ehlo()
            if security == "starttls":
                try:
                    smtp.starttls(context=context)
                except (ssl.SSLError, smtplib.SMTPNotSupportedError, smtplib.SMTPResponseException):
                    raise MailServerError("tls_failed", "smtp.security") from None
                smtp.ehlo()
            try:
                smtp_login(smtp, config["username"], config["password"])
            except smtplib.SMTPAuthenticationError:
                raise MailServerError("login_failed", "smtp.password") from None
        except (OSError, smtplib.SMTPException):
            raise MailServerError("server_error", "smtp.host") from None
    finally:
        with suppress(Exception):
            smtp.quit()
        with suppress(Exception):
            smtp.close()
