"""The OAuth mail providers a person can connect a mailbox with.

Built in: `google` and `microsoft`, each enabled when its client id and secret are set. Any other provider (a
self-hosted one, the tests' own) is an entry of the TOML file OAKEN_MAIL_OAUTH_PROVIDERS names, of the same shape
as the built-ins (docs/mail.md):

    [providers.example]
    label = "Example Mail"                 # optional: the button says "Connect with <label>"
    authorize_url = "https://id.example.org/authorize"
    token_url = "https://id.example.org/token"
    revoke_url = "https://id.example.org/revoke"          # optional
    userinfo_url = "https://id.example.org/userinfo"      # with address = "userinfo"
    scopes = ["openid", "email", "mail"]
    client_id = "..."
    client_secret = "..."
    imap_host = "imap.example.org"
    imap_port = 993
    imap_security = "ssl"
    smtp_host = "smtp.example.org"
    smtp_port = 465
    smtp_security = "ssl"
    mechanism = "XOAUTH2"                  # or "OAUTHBEARER"
    address = "id_token"                   # the ID token's email claim; "userinfo"; or "ask" the person

The file is read once and checked at start (oaken.E009): a provider that cannot work is a start-up error, not
a failed connection later.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

MECHANISMS = ("XOAUTH2", "OAUTHBEARER")
ADDRESS_SOURCES = ("id_token", "userinfo", "ask")
SECURITY = ("ssl", "starttls", "none")
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


class ProviderFileError(Exception):
    """The providers file cannot be used; the message names the file's entry and field, never a secret."""


@dataclass(frozen=True)
class Provider:
    name: str
    label: str
    authorize_url: str
    token_url: str
    scopes: tuple[str, ...]
    client_id: str
    client_secret: str
    imap_host: str
    imap_port: int
    imap_security: str
    smtp_host: str
    smtp_port: int
    smtp_security: str
    mechanism: str = "XOAUTH2"
    address: str = "id_token"
    revoke_url: str = ""
    userinfo_url: str = ""
    # extra parameters of the authorization request (Google gives a refresh token only with access_type=offline)
    authorize_params: tuple[tuple[str, str], ...] = field(default=())

    def servers(self, username: str) -> dict[str, dict[str, Any]]:
        """The stored server settings of a mailbox of this provider (no password: the token is the login)."""
        return {
            "imap": {
                "host": self.imap_host,
                "port": self.imap_port,
                "security": self.imap_security,
                "username": username,
            },
            "smtp": {
                "host": self.smtp_host,
                "port": self.smtp_port,
                "security": self.smtp_security,
                "username": username,
            },
        }


def _google(client_id: str, secret: str) -> Provider:
    return Provider(
        name="google",
        label="Google",
        authorize_url="https://accounts.google.com/o/oauth2/v2/auth",
        token_url="https://oauth2.googleapis.com/token",  # noqa: S106 (a URL, not a password)
        revoke_url="https://oauth2.googleapis.com/revoke",
        scopes=("openid", "email", "https://mail.google.com/"),
        client_id=client_id,
        client_secret=secret,
        imap_host="imap.gmail.com",
        imap_port=993,
        imap_security="ssl",
        smtp_host="smtp.gmail.com",
        smtp_port=465,
        smtp_security="ssl",
        mechanism="XOAUTH2",
        address="id_token",
        authorize_params=(("access_type", "offline"), ("prompt", "consent")),
    )


def _microsoft(client_id: str, secret: str, tenant: str) -> Provider:
    base = f"https://login.microsoftonline.com/{tenant}/oauth2/v2.0"
    return Provider(
        name="microsoft",
        label="Microsoft",
        authorize_url=f"{base}/authorize",
        token_url=f"{base}/token",
        scopes=(
            "openid",
            "email",
            "offline_access",
            "https://outlook.office.com/IMAP.AccessAsUser.All",
            "https://outlook.office.com/SMTP.Send",
        ),
        client_id=client_id,
        client_secret=secret,
        imap_host="outlook.office365.com",
        imap_port=993,
        imap_security="ssl",
        smtp_host="smtp.office365.com",
        smtp_port=587,
        smtp_security="starttls",
        mechanism="XOAUTH2",
        address="id_token",
        authorize_params=(("prompt", "select_account"),),
    )


def _url(entry: str, key: str, value: Any, *, required: bool) -> str:
    if value is None or value == "":
        if required:
            raise ProviderFileError(f"providers.{entry}.{key} is missing")
        return ""
    if not isinstance(value, str):
        raise ProviderFileError(f"providers.{entry}.{key} must be a URL")
    parts = urlsplit(value)
    schemes = ("http", "https") if settings.MAIL_ALLOW_PRIVATE_HOSTS else ("https",)
    if parts.scheme not in schemes or not parts.hostname or parts.username or parts.fragment:
        # in clear, the client secret, the codes and the tokens could be read or changed on the way (and the ID
        # token, whose address Oaken reads, is trusted for coming over TLS from the token endpoint)
        raise ProviderFileError(f"providers.{entry}.{key} must be an https URL without a user or fragment")
    return value


def _security(entry: str, key: str, value: Any) -> str:
    """A mail server's security: ssl or starttls (a bearer token never goes in clear), "none" only where private
    hosts are allowed (tests on loopback)."""
    choices = SECURITY if settings.MAIL_ALLOW_PRIVATE_HOSTS else tuple(c for c in SECURITY if c != "none")
    return _text(entry, key, value, default="ssl", choices=choices)


def _text(entry: str, key: str, value: Any, *, default: str | None = None, choices: tuple[str, ...] = ()) -> str:
    if value is None and default is not None:
        return default
    if not isinstance(value, str) or not value:
        raise ProviderFileError(f"providers.{entry}.{key} is missing or not a string")
    if choices and value not in choices:
        raise ProviderFileError(f"providers.{entry}.{key} must be one of {', '.join(choices)}")
    return value


def _port(entry: str, key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        raise ProviderFileError(f"providers.{entry}.{key} must be a port number")
    return value


_KEYS = {
    "label",
    "authorize_url",
    "token_url",
    "revoke_url",
    "userinfo_url",
    "scopes",
    "client_id",
    "client_secret",
    "imap_host",
    "imap_port",
    "imap_security",
    "smtp_host",
    "smtp_port",
    "smtp_security",
    "mechanism",
    "address",
    "authorize_params",
}


def _entry(name: str, raw: Any) -> Provider:
    if not _NAME.match(name):
        raise ProviderFileError(f"providers.{name}: a name is lowercase letters, digits, '-' and '_' (at most 40)")
    if not isinstance(raw, dict):
        raise ProviderFileError(f"providers.{name} must be a table")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ProviderFileError(f"providers.{name}: unknown key {unknown[0]!r}")
    scopes = raw.get("scopes")
    if not isinstance(scopes, list) or not scopes or not all(isinstance(s, str) and s for s in scopes):
        raise ProviderFileError(f"providers.{name}.scopes must be a list of scopes")
    params = raw.get("authorize_params", {})
    if not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values()):
        raise ProviderFileError(f"providers.{name}.authorize_params must be a table of strings")
    address = _text(name, "address", raw.get("address"), default="id_token", choices=ADDRESS_SOURCES)
    userinfo = _url(name, "userinfo_url", raw.get("userinfo_url"), required=address == "userinfo")
    return Provider(
        name=name,
        label=_text(name, "label", raw.get("label"), default=name),
        authorize_url=_url(name, "authorize_url", raw.get("authorize_url"), required=True),
        token_url=_url(name, "token_url", raw.get("token_url"), required=True),
        revoke_url=_url(name, "revoke_url", raw.get("revoke_url"), required=False),
        userinfo_url=userinfo,
        scopes=tuple(scopes),
        client_id=_text(name, "client_id", raw.get("client_id")),
        client_secret=_text(name, "client_secret", raw.get("client_secret"), default=""),
        imap_host=_text(name, "imap_host", raw.get("imap_host")),
        imap_port=_port(name, "imap_port", raw.get("imap_port", 993)),
        imap_security=_security(name, "imap_security", raw.get("imap_security")),
        smtp_host=_text(name, "smtp_host", raw.get("smtp_host")),
        smtp_port=_port(name, "smtp_port", raw.get("smtp_port", 465)),
        smtp_security=_security(name, "smtp_security", raw.get("smtp_security")),
        mechanism=_text(name, "mechanism", raw.get("mechanism"), default="XOAUTH2", choices=MECHANISMS),
        address=address,
        authorize_params=tuple(sorted(params.items())),
    )


def read_file(path: str) -> dict[str, Provider]:
    """The providers of a TOML file; ProviderFileError when it cannot be read or an entry is wrong."""
    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except OSError:
        raise ProviderFileError("the file cannot be read") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProviderFileError(f"the file is not valid TOML ({exc})") from None
    unknown = sorted(set(data) - {"providers"})
    if unknown:
        raise ProviderFileError(f"unknown top-level key {unknown[0]!r} (providers are [providers.<name>] tables)")
    table = data.get("providers", {})
    if not isinstance(table, dict):
        raise ProviderFileError("providers must be a table of [providers.<name>] entries")
    return {name: _entry(name, raw) for name, raw in table.items()}


def load() -> dict[str, Provider]:
    """Every enabled provider by name, built-ins first; ProviderFileError for a bad providers file."""
    found: dict[str, Provider] = {}
    if settings.MAIL_OAUTH_GOOGLE_CLIENT_ID and settings.MAIL_OAUTH_GOOGLE_CLIENT_SECRET:
        found["google"] = _google(settings.MAIL_OAUTH_GOOGLE_CLIENT_ID, settings.MAIL_OAUTH_GOOGLE_CLIENT_SECRET)
    if settings.MAIL_OAUTH_MICROSOFT_CLIENT_ID and settings.MAIL_OAUTH_MICROSOFT_CLIENT_SECRET:
        found["microsoft"] = _microsoft(
            settings.MAIL_OAUTH_MICROSOFT_CLIENT_ID,
            settings.MAIL_OAUTH_MICROSOFT_CLIENT_SECRET,
            settings.MAIL_OAUTH_MICROSOFT_TENANT,
        )
    if settings.MAIL_OAUTH_PROVIDERS_FILE:
        for name, provider in read_file(settings.MAIL_OAUTH_PROVIDERS_FILE).items():
            if name in found:
                raise ProviderFileError(f"providers.{name}: the built-in provider of this name is already enabled")
            found[name] = provider
    return found


@cache
def _cached(key: tuple[str, ...]) -> dict[str, Provider]:
    return load()


def _key() -> tuple[str, ...]:
    return (
        settings.MAIL_OAUTH_GOOGLE_CLIENT_ID,
        settings.MAIL_OAUTH_MICROSOFT_CLIENT_ID,
        settings.MAIL_OAUTH_MICROSOFT_TENANT,
        settings.MAIL_OAUTH_PROVIDERS_FILE,
        str(settings.MAIL_ALLOW_PRIVATE_HOSTS),
    )


def providers() -> dict[str, Provider]:
    """The enabled providers (read once per configuration; a bad file was refused at start by the check)."""
    try:
        return _cached(_key())
    except ProviderFileError:
        return {}


def provider(name: str) -> Provider | None:
    return providers().get(name)


def forget() -> None:
    """Read the providers again at the next look (tests that write a new file under the same name)."""
    _cached.cache_clear()


def check_providers(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """oaken.E009: the providers file names providers that can work."""
    from django.core.checks import Error

    try:
        load()
    except ProviderFileError as exc:
        return [
            Error(
                f"OAKEN_MAIL_OAUTH_PROVIDERS: {exc}",
                hint="See docs/mail.md, 'Mailboxes connected by OAuth'.",
                obj="OAKEN_MAIL_OAUTH_PROVIDERS",
                id="oaken.E009",
            )
        ]
    return []
