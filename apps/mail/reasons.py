"""Why a mail server could not be used, or why a mailbox's sync fails: a fixed reason code each (stored in
MailAccount.sync_error, never the server's own words), and how a person is told, in one table.

Each reason is said two ways: of the server settings someone is entering (connect_mailbox and
update_mailbox_credentials refuse them, after the setting at fault), and of a connected mailbox whose sync fails
(list_accounts' sync_problem, which the console shows).
"""

from __future__ import annotations

from typing import NamedTuple


class Wording(NamedTuple):
    setting: str  # of the settings entered: "imap.password: " comes before it
    account: str  # of the mailbox, to the person whose mailbox it is


REASONS: dict[str, Wording] = {
    "connection_failed": Wording(
        "could not connect to the server (refused, unreachable or timed out)",
        "the mail server could not be reached",
    ),
    "tls_failed": Wording(
        "the secure connection failed (wrong security setting, or the certificate is not valid)",
        "no secure connection could be made to the mail server",
    ),
    "login_failed": Wording(
        "the server refused this username and password",
        "the mail server refused the login: enter the password again",
    ),
    "server_error": Wording(
        "the server answered in a way Oaken does not understand",
        "the mail server answered with an error",
    ),
    "credentials_unreadable": Wording(
        "the stored credentials cannot be decrypted; enter them again",
        "its login can no longer be read: enter the password again",
    ),
    "not_connected": Wording(
        "this account has no server settings",
        "the mailbox is not connected",
    ),
    "sync_failed": Wording(
        "the sync failed inside Oaken; it is tried again later",
        "syncing failed; it is tried again later",
    ),
    "private_host": Wording(
        "this host is on a private or local network, which a hosted mailbox may not use",
        "the mail server is on a private network, which Oaken may not reach",
    ),
    "unsupported_characters": Wording(
        "this server cannot log in with characters outside ASCII; use an app password",
        "the login holds characters the mail server cannot take",
    ),
    # mailboxes connected by OAuth (apps.mail.oauth)
    "oauth_login_failed": Wording(
        "the server refused the access the provider granted",
        "the mail server refused Oaken's access: reconnect the mailbox",
    ),
    "needs_reconnect": Wording(
        "the provider no longer honours Oaken's access; connect again",
        "the provider withdrew Oaken's access (revoked, password changed or consent withdrawn): a person reconnects "
        "it on the Mailboxes page",
    ),
    "token_refresh_failed": Wording(
        "the provider could not renew the access now; try again later",
        "the provider could not renew Oaken's access for now; it is tried again later",
    ),
    "provider_unavailable": Wording(
        "this provider is not enabled on this Oaken",
        "the provider this mailbox was connected with is no longer enabled here",
    ),
}


class MailServerError(Exception):
    """A mail server could not be used: `reason` is a key of REASONS, `field` the setting at fault."""

    def __init__(self, reason: str, field: str) -> None:
        super().__init__(f"{field}: {setting_problem(reason)}")
        self.reason = reason
        self.field = field

    @property
    def message(self) -> str:
        return f"{self.field}: {setting_problem(self.reason)}"


def setting_problem(reason: str) -> str:
    """What is wrong with the settings entered, for a reason the servers gave (always a key of REASONS)."""
    return REASONS[reason].setting


def sync_problem(reason: str) -> str:
    """Why a mailbox's sync fails, in words ('' when it does not); a reason this table lacks is still said."""
    if not reason:
        return ""
    known = REASONS.get(reason)
    return known.account if known is not None else "syncing fails (" + reason.replace("_", " ") + ")"
