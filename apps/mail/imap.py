"""Connections to a mailbox's IMAP and SMTP servers, per its stored credentials, with timeouts.

Credentials have exactly this shape (the outbound half relies on it):
`{"imap": {"host", "port", "security", "username", "password"}, "smtp": {... the same keys}}`,
security one of "ssl", "starttls", "none". A mailbox connected by OAuth stores no password: its login settings
(apps.mail.oauth.tokens.login_config) carry a fresh access token as "bearer" and the SASL "mechanism" instead,
and the one login function of each protocol below decides from them. Failures raise MailServerError with a fixed
reason and the setting at fault: never the server's own words, which could quote the submitted secrets.
"""

from __future__ import annotations

import base64
import smtplib
import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

from django.conf import settings
from imapclient import IMAPClient
from imapclient.exceptions import CapabilityError, IMAPClientError, LoginError

from apps.core import pinned
from apps.core.bounds import bounds
from apps.mail.models import MailAccount
from apps.mail.oauth.tokens import login_config
from apps.mail.reasons import MailServerError

__all__ = ["MailServerError", "check_imap", "check_smtp", "imap_session", "open_imap", "smtp_authenticate"]

SECURITY = ("ssl", "starttls", "none")


def _timeout() -> float:
    return float(bounds.MAIL_SERVER_TIMEOUT_SECONDS)


def pinned_address(host: str, port: int, field: str) -> str:
    """The one address a mail server is reached at: its name resolved once, here, and every address it has checked
    (never a loopback, private, link-local or reserved one, nor one that carries such an IPv4 address inside an
    IPv6 one: apps.core.pinned), so a mailbox cannot be pointed at Oaken's own network. The connection goes to this
    address, so a name that resolves elsewhere a moment later (DNS rebinding) changes nothing; TLS still checks the
    certificate against the name (name_checking_context). OAKEN_MAIL_ALLOW_PRIVATE_HOSTS lifts the check (tests,
    self-hosting next to the mail server)."""
    try:
        addresses = pinned.resolve(host, port, allow_private=settings.MAIL_ALLOW_PRIVATE_HOSTS)
    except pinned.Unreachable as refused:
        raise MailServerError("private_host" if refused.reason == "private" else "connection_failed", field) from None
    return str(addresses[0][1][0])


class _NameCheckingContext(ssl.SSLContext):
    """A client TLS context that checks the certificate against the server's name, whatever address the socket
    was connected to (the libraries wrap with the host they were given: here the pinned address)."""

    server_name = ""

    def wrap_socket(self, sock: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["server_hostname"] = self.server_name
        return super().wrap_socket(sock, *args, **kwargs)


def name_checking_context(server_name: str) -> ssl.SSLContext:
    """The system's trust and hostname checking (as ssl.create_default_context), for `server_name`."""
    context = _NameCheckingContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    context.server_name = server_name
    return context


def open_imap(config: Mapping[str, Any]) -> IMAPClient:
    """A logged-in IMAPClient for the "imap" part of a mailbox's credentials."""
    security = config["security"]
    address = pinned_address(config["host"], int(config["port"]), "imap.host")
    context = name_checking_context(config["host"])
    try:
        client = IMAPClient(
            address,
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
            _imap_login(client, config)
        except LoginError:
            if config.get("bearer"):
                raise MailServerError("oauth_login_failed", "imap.oauth") from None
            raise MailServerError("login_failed", "imap.password") from None
        except (OSError, UnicodeError, IMAPClientError):
            raise MailServerError("server_error", "imap.host") from None
    except BaseException:
        _close(client)
        raise
    return client


def _imap_login(client: IMAPClient, config: Mapping[str, Any]) -> None:
    """An OAuth mailbox's bearer token goes by AUTHENTICATE XOAUTH2 or OAUTHBEARER (RFC 7628); a password by LOGIN,
    which carries ASCII only; other characters go as UTF-8 in AUTHENTICATE PLAIN (RFC 4616) where offered."""
    username = config["username"]
    if config.get("bearer"):
        if config.get("mechanism") == "OAUTHBEARER":
            client.oauthbearer_login(username, config["bearer"])
        else:
            client.oauth2_login(username, config["bearer"])
        return
    password = config["password"]
    if f"{username}{password}".isascii():
        client.login(username, password)
    elif client.has_capability("AUTH=PLAIN"):
        client.plain_login(username, password)
    else:
        raise MailServerError("unsupported_characters", "imap.password")


def bearer_response(mechanism: str, username: str, token: str) -> str:
    """The initial client response of XOAUTH2 (Google's and Microsoft's) or OAUTHBEARER (RFC 7628 §3.1)."""
    if mechanism == "OAUTHBEARER":
        identity = username.replace("=", "=3D").replace(",", "=2C")  # RFC 5801 §4's saslname
        text = f"n,a={identity},\x01auth=Bearer {token}\x01\x01"
    else:
        text = f"user={username}\x01auth=Bearer {token}\x01\x01"
    return base64.b64encode(text.encode()).decode("ascii")


def smtp_authenticate(smtp: smtplib.SMTP, config: Mapping[str, Any]) -> None:
    """The one SMTP login: a bearer token by its SASL mechanism, or a password (smtp_login). Raises smtplib's
    exceptions (SMTPAuthenticationError when refused), or MailServerError."""
    username = config.get("username", "")
    token = config.get("bearer")
    if not token:
        smtp_login(smtp, username, config.get("password", ""))
        return
    if not smtp.has_extn("auth"):
        return
    mechanism = config.get("mechanism", "XOAUTH2")
    code, _ = smtp.docmd("AUTH", f"{mechanism} {bearer_response(mechanism, username, token)}")
    if code == 334:
        # the server's error challenge (JSON): an empty answer (XOAUTH2) or ^A (OAUTHBEARER) ends the exchange
        code, _ = smtp.docmd("AQ==" if mechanism == "OAUTHBEARER" else "")
    if code != 235:
        raise smtplib.SMTPAuthenticationError(code, b"")


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
    return login_config(account, "imap")


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
    host, port = config["host"], int(config["port"])
    address = pinned_address(host, port, "smtp.host")
    context = name_checking_context(host)
    try:
        if security == "ssl":
            smtp: smtplib.SMTP = smtplib.SMTP_SSL(address, port, timeout=_timeout(), context=context)
        else:
            smtp = smtplib.SMTP(address, port, timeout=_timeout())
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
                smtp_authenticate(smtp, config)
            except smtplib.SMTPAuthenticationError:
                if config.get("bearer"):
                    raise MailServerError("oauth_login_failed", "smtp.oauth") from None
                raise MailServerError("login_failed", "smtp.password") from None
        except (OSError, smtplib.SMTPException):
            raise MailServerError("server_error", "smtp.host") from None
    finally:
        with suppress(Exception):
            smtp.quit()
        with suppress(Exception):
            smtp.close()
