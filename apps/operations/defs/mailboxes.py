"""Connected mailboxes (IMAP + SMTP): connecting, new credentials, removal, and sync on demand (SPEC §2, §6, §16).

Connecting and credentials are for an ADMIN at a person door only (ceiling never). The server settings
are tried before anything is saved: an IMAP login, and SMTP EHLO (+ STARTTLS) + AUTH. A failure names
the setting at fault with a fixed wording, never the server's answer or the password. Credentials are
stored encrypted and never returned: outputs show host, port, security and username only.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, cast

from pydantic import AfterValidator, Field, SecretStr, StringConstraints

from apps.core import words
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.core.kinds import Principal
from apps.mail import services
from apps.mail.imap import MailServerError, check_imap, check_smtp
from apps.mail.models import AccountKind, MailAccount
from apps.mail.oauth import flow as oauth_flow
from apps.mail.oauth.providers import Provider
from apps.mail.oauth.providers import provider as oauth_provider
from apps.mail.selectors import account_name_taken, message_count
from apps.mail.services import shown_settings
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, DisplayName, Id, Name
from apps.operations.registry import ALWAYS, NEVER, Bound, Callers, Ceiling, OpClass, Preview, operation
from apps.operations.targets import account_of
from apps.outbound.compose import from_header
from apps.workspaces.models import DEFAULT_WORKSPACE, Workspace
from apps.workspaces.selectors import access_workspace_by_name


def _host_name(value: str) -> str:
    """A name the resolver can be asked for: an IP literal, or labels IDNA can encode (none empty, none over 63)."""
    try:
        ipaddress.ip_address(value.strip("[]"))
        return value
    except ValueError:
        pass
    try:
        value.encode("idna")
    except UnicodeError:
        raise ValueError("is not a host name") from None
    return value


Host = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=255, pattern=r"^[^\s/@]+$"),
    AfterValidator(_host_name),
]
Security = Literal["ssl", "starttls", "none"]
Username = Annotated[str, StringConstraints(min_length=1, max_length=320)]
Password = Annotated[SecretStr, Field(min_length=1, max_length=1000, description="password or app password")]


class ImapIn(Closed):
    host: Host
    port: int = Field(default=993, ge=1, le=65535)
    security: Security = "ssl"
    username: Username
    password: Password


class SmtpIn(Closed):
    host: Host
    port: int = Field(default=587, ge=1, le=65535)
    security: Security = "starttls"
    username: Username | None = Field(default=None, description="default: the IMAP username")
    password: Password | None = Field(default=None, description="default: the IMAP password")


class ServerOut(Closed):
    host: str
    port: int
    security: str
    username: str


class MailboxOut(Closed):
    id: str
    name: str
    sender_name: str = Field(description="the From header's display name ('' sends under the bare address)")
    workspace: str
    email_address: str
    imap: ServerOut
    smtp: ServerOut
    last_synced_at: datetime | None
    sync_error: str = Field(description="why the last sync failed ('' when it did not); retried with backoff")
    next_sync_at: datetime | None


def _server_out(part: dict[str, Any]) -> ServerOut:
    return ServerOut(host=part["host"], port=part["port"], security=part["security"], username=part["username"])


def _stored(account: MailAccount) -> dict[str, Any]:
    return cast(dict[str, Any], account.credentials)


def mailbox_out(account: MailAccount) -> MailboxOut:
    credentials = _stored(account)
    return MailboxOut(
        id=str(account.pk),
        name=account.name,
        sender_name=account.sender_name,
        workspace=account.workspace.name,
        email_address=account.email_address,
        imap=_server_out(credentials["imap"]),
        smtp=_server_out(credentials["smtp"]),
        last_synced_at=account.synced_at,
        sync_error=account.sync_error,
        next_sync_at=account.sync_next_at,
    )


def _credentials(imap: ImapIn, smtp: SmtpIn) -> dict[str, dict[str, Any]]:
    """The stored shape: {"imap": {host, port, security, username, password}, "smtp": {the same}}."""
    password = imap.password.get_secret_value()
    return {
        "imap": {
            "host": imap.host,
            "port": imap.port,
            "security": imap.security,
            "username": imap.username,
            "password": password,
        },
        "smtp": {
            "host": smtp.host,
            "port": smtp.port,
            "security": smtp.security,
            "username": smtp.username or imap.username,
            "password": smtp.password.get_secret_value() if smtp.password is not None else password,
        },
    }


def _try_servers(ctx: Context, data: ConnectIn | UpdateCredentialsIn) -> None:
    """Log in to both servers, or refuse naming the setting at fault (nothing is saved). The gate runs this
    before the operation's transaction opens: a slow server keeps no transaction waiting."""
    credentials = _credentials(data.imap, data.smtp)
    try:
        check_imap(credentials["imap"])
        check_smtp(credentials["smtp"])
    except MailServerError as exc:
        raise OakenError("INVALID_INPUT", exc.message, field=exc.field) from None


def _the_account(ctx: Context, data: AccountIn | UpdateCredentialsIn) -> MailAccount:
    return account_of(ctx, data.account_id)


def _the_mailbox(ctx: Context, data: AccountIn | UpdateCredentialsIn) -> MailAccount:
    """The connected mailbox named (not a local, imported account)."""
    account = account_of(ctx, data.account_id)
    if account.kind != AccountKind.IMAP:
        raise OakenError.invalid("account_id", "this is a local (imported) account, not a connected mailbox")
    return account


# ---------------------------------------------------------------- connect_mailbox


class ConnectIn(Closed):
    account_name: Name
    workspace: str = Field(default=DEFAULT_WORKSPACE, min_length=1, max_length=100)
    email_address: str = Field(default="", max_length=320, description="default: the IMAP username if an address")
    imap: ImapIn
    smtp: SmtpIn


def _home(ctx: Context, data: ConnectIn) -> Workspace:
    return _home_named(ctx, data.workspace, data.account_name)


def _home_named(ctx: Context, workspace_name: str, account_name: str) -> Workspace:
    """The workspace the new mailbox goes to, where its name is not yet taken."""
    workspace = access_workspace_by_name(tenant=ctx.tenant, name=workspace_name)
    if account_name_taken(tenant=ctx.tenant, workspace=workspace, name=account_name):
        raise OakenError(
            "CONFLICT", "account_name: this workspace already has an account with this name", field="account_name"
        )
    return workspace


def _connect_preview(ctx: Context, data: ConnectIn) -> Preview:
    settings = shown_settings(_credentials(data.imap, data.smtp))
    return Preview((Change("new mailbox", None, {"name": data.account_name, "workspace": data.workspace} | settings),))


@operation(
    name="connect_mailbox",
    summary="Connect an IMAP/SMTP mailbox: both logins are tried first, then it is saved and synced.",
    input=ConnectIn,
    output=MailboxOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    preview=_connect_preview,
    confirm=NEVER,
    targets=_home,
    verify=_try_servers,
    callers=Callers.PERSONS,
)
def connect_mailbox(ctx: Context, data: ConnectIn) -> MailboxOut:
    """The person filling the form confirms by submitting it: the logins are tried before anything is saved."""
    address = data.email_address or (data.imap.username if "@" in data.imap.username else "")
    account = services.connect_mailbox(
        act=ctx,
        workspace=ctx.targets,
        name=data.account_name,
        email_address=address,
        credentials=_credentials(data.imap, data.smtp),
        sender_name=ctx.person_name,
    )
    return mailbox_out(account)


# ---------------------------------------------------------------- update_mailbox_credentials


class UpdateCredentialsIn(Closed):
    account_id: Id
    imap: ImapIn
    smtp: SmtpIn


def _update_preview(ctx: Context, data: UpdateCredentialsIn) -> Preview:
    account: MailAccount = ctx.targets
    before = shown_settings(_stored(account))
    return Preview((Change(str(account.pk), before, shown_settings(_credentials(data.imap, data.smtp))),))


@operation(
    name="update_mailbox_credentials",
    summary="Replace a connected mailbox's server settings and passwords (tried before they are saved).",
    input=UpdateCredentialsIn,
    output=MailboxOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    preview=_update_preview,
    confirm=NEVER,
    targets=_the_mailbox,
    verify=_try_servers,
    callers=Callers.PERSONS,
)
def update_mailbox_credentials(ctx: Context, data: UpdateCredentialsIn) -> MailboxOut:
    credentials = _credentials(data.imap, data.smtp)
    return mailbox_out(services.replace_credentials(act=ctx, account=ctx.targets, credentials=credentials))


# ---------------------------------------------------------------- set_mailbox_sender_name


class SenderNameIn(Closed):
    account_id: Id
    sender_name: DisplayName = Field(
        description="the From header's display name of mail sent from this mailbox, e.g. your own name; '' sends "
        "under the bare address. One line: no control character, no bidirectional override, no @"
    )


def _named_mailbox(ctx: Context, data: SenderNameIn) -> MailAccount:
    """A connected mailbox (a local, imported account sends nothing)."""
    return _the_mailbox(ctx, AccountIn(account_id=data.account_id))


def _sender_name_preview(ctx: Context, data: SenderNameIn) -> Preview:
    account: MailAccount = ctx.targets
    shown = from_header(data.sender_name, account.email_address)
    return Preview(
        (Change(str(account.pk), {"sender_name": account.sender_name}, {"sender_name": data.sender_name}),),
        summary=f"Mail sent from {words.named(account.name)} from now on says it is from {words.named(shown)}.",
    )


@operation(
    name="set_mailbox_sender_name",
    summary="Set the name the From header of a mailbox's mail shows before its address (apart from the account's "
    "label); requests made already keep the name they were made with.",
    input=SenderNameIn,
    output=MailboxOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    preview=_sender_name_preview,
    confirm=NEVER,
    targets=_named_mailbox,
    callers=Callers.PERSONS,
    bounds=(Bound("sender_name", "SENDER_NAME_MAX_CHARS", "{field}: at most {maximum} characters"),),
)
def set_mailbox_sender_name(ctx: Context, data: SenderNameIn) -> MailboxOut:
    """The person filling the form confirms by submitting it, as with the mailbox's server settings."""
    account = services.set_sender_name(act=ctx, account=ctx.targets, sender_name=data.sender_name)
    return mailbox_out(account)


# ---------------------------------------------------------------- remove_mailbox


class AccountIn(Closed):
    account_id: Id


class RemovedOut(Closed):
    removed: str
    messages_removed: int


def _remove_preview(ctx: Context, data: AccountIn) -> Preview:
    account: MailAccount = ctx.targets
    count = message_count(tenant=ctx.tenant, account=account)
    return Preview(
        (Change(str(account.pk), {"name": account.name, "kind": account.kind, "messages": count}, None),),
        summary=f"Remove the mailbox {words.named(account.name)} and the {words.count(count, 'message')} Oaken "
        "holds for it. A mail server keeps its own copy.",
        title="Remove this mailbox?",
        verb="Remove mailbox",
    )


@operation(
    name="remove_mailbox",
    summary="Remove a mail account and everything Oaken holds for it; a connected server keeps its mail.",
    input=AccountIn,
    output=RemovedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    preview=_remove_preview,
    confirm=ALWAYS,
    targets=_the_account,
    callers=Callers.PERSONS,
)
def remove_mailbox(ctx: Context, data: AccountIn) -> RemovedOut:
    account: MailAccount = ctx.targets
    count = services.remove_account(act=ctx, account=account)
    return RemovedOut(removed=str(account.pk), messages_removed=count)


# ---------------------------------------------------------------- sync_mailbox


class SyncOut(Closed):
    account_id: str
    queued: bool = Field(description="false while the account backs off after failures (agents wait for it)")
    last_synced_at: datetime | None
    sync_error: str
    next_sync_at: datetime | None


def _backing_off(ctx: Context, account: MailAccount) -> bool:
    """A person asking is a fresh try even while a failing account backs off; an agent's ask waits for it."""
    return (
        ctx.caller.principal != Principal.PERSON and account.sync_next_at is not None and account.sync_next_at > ctx.now
    )


def _sync_preview(ctx: Context, data: AccountIn) -> Preview:
    account: MailAccount = ctx.targets
    after = {"sync": "backing off" if _backing_off(ctx, account) else "queued"}
    return Preview((Change(str(account.pk), None, after),), summary="fetch new mail and flags now")


@operation(
    name="sync_mailbox",
    summary="Fetch a connected mailbox's new mail and flag changes now (it also syncs every minute); an account "
    "backing off after failures is only tried again early for a person.",
    input=AccountIn,
    output=SyncOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.OFF,
    preview=_sync_preview,
    confirm=NEVER,
    targets=_the_mailbox,
)
def sync_mailbox(ctx: Context, data: AccountIn) -> SyncOut:
    account: MailAccount = ctx.targets
    waiting = _backing_off(ctx, account)
    if not waiting:
        services.queue_sync(account=account, force=ctx.caller.principal == Principal.PERSON)
    ctx.touch(account.pk, None, {"sync": "backing off" if waiting else "queued"})
    return SyncOut(
        account_id=str(account.pk),
        queued=not waiting,
        last_synced_at=account.synced_at,
        sync_error=account.sync_error,
        next_sync_at=account.sync_next_at,
    )


# ---------------------------------------------------------------- connect_mailbox_oauth

# what a person is told when the provider refused (the provider's own words are never shown)
PROVIDER_REFUSALS = {
    "access_denied": "you did not allow Oaken to use this mailbox at the provider",
    "invalid_client": "the provider does not know Oaken's client: the operator's registration is wrong",
    "unauthorized_client": "the provider does not let Oaken's client use this flow: the operator's registration",
    "invalid_scope": "the provider refused the access Oaken asks for",
    "scope_not_granted": "the provider did not grant access to the mail: allow all the access asked for",
    "no_refresh_token": "the provider gave no lasting access (no refresh token): connect again",
    "consent_required": "the provider asks for consent that was not given",
    "interaction_required": "the provider needs you to sign in again",
    "login_required": "the provider needs you to sign in again",
    "invalid_grant": "the provider's answer was already used or has expired: connect again",
    "provider_unreachable": "the provider could not be reached: try again",
}
_PROVIDER_REFUSED = "the provider refused: try again"


def provider_refusal(code: str) -> str:
    return PROVIDER_REFUSALS.get(code, _PROVIDER_REFUSED)


class ConnectOAuthIn(Closed):
    grant: str = Field(
        min_length=1, max_length=200, description="the handle Oaken's OAuth callback made for this person (no token)"
    )
    account_name: Name | None = Field(default=None, description="default: the mailbox's address")
    workspace: str = Field(default=DEFAULT_WORKSPACE, min_length=1, max_length=100)
    email_address: str = Field(default="", max_length=320, description="asked only when the provider does not say it")


@dataclass
class _OAuthTarget:
    grant: dict[str, Any]
    provider: Provider
    address: str
    workspace: Workspace | None  # a new mailbox goes here
    account: MailAccount | None  # or the mailbox being reconnected


def _grant_of(ctx: Context, data: ConnectOAuthIn) -> dict[str, Any]:
    user = ctx.caller.user
    grant = None
    if user is not None:
        grant = oauth_flow.read_grant(data.grant, user_id=str(user.pk), tenant_id=str(ctx.tenant.pk))
    if grant is None:  # as any id out of the caller's reach: no such thing here
        gone = "grant: this connection has expired or is not yours: connect again"
        raise OakenError("NOT_FOUND", gone, field="grant")
    if grant.get("error"):
        raise OakenError("FORBIDDEN", provider_refusal(str(grant["error"])), field="grant")
    return grant


def _oauth_target(ctx: Context, data: ConnectOAuthIn) -> _OAuthTarget:
    grant = _grant_of(ctx, data)
    provider = oauth_provider(str(grant.get("provider", "")))
    if provider is None:
        raise OakenError.invalid("grant", "this provider is not enabled here")
    address = str(grant.get("address") or data.email_address).strip()
    if "@" not in address:
        raise OakenError.invalid("email_address", "the provider does not say the mailbox's address: enter it")
    if not _plain_address(address):
        # the provider's own word (an ID token's claim, its userinfo) is held to what a person may type
        field = "grant" if grant.get("address") else "email_address"
        raise OakenError.invalid(field, "the mailbox's address is not a plain e-mail address")
    if grant.get("account"):
        account = _the_mailbox(ctx, AccountIn(account_id=grant["account"]))
        if account.oauth_provider != provider.name or account.email_address.lower() != address.lower():
            raise OakenError.invalid("grant", f"reconnect with the same mailbox ({account.email_address})")
        return _OAuthTarget(grant, provider, address, None, account)
    name = data.account_name or _default_name(address)
    workspace = _home_named(ctx, data.workspace, name)
    return _OAuthTarget(grant, provider, address, workspace, None)


def _plain_address(address: str) -> bool:
    """One @, no space or control character, at most 320 characters (what the account's column holds)."""
    return (
        len(address) <= 320
        and address.count("@") == 1
        and address.isprintable()
        and not any(c.isspace() for c in address)
        and all(address.split("@"))
    )


def _default_name(address: str) -> str:
    """A new mailbox's name when none is given: its address, cut to what a name may hold."""
    return address[:200]


def _bearer_config(target: _OAuthTarget, part: str) -> dict[str, Any]:
    return target.provider.servers(target.address)[part] | {
        "bearer": target.grant["access_token"],
        "mechanism": target.provider.mechanism,
    }


def _try_with_token(ctx: Context, data: ConnectOAuthIn) -> None:
    """Log in to both servers with the access token before anything is saved."""
    target: _OAuthTarget = ctx.targets
    try:
        check_imap(_bearer_config(target, "imap"))
        check_smtp(_bearer_config(target, "smtp"))
    except MailServerError as exc:
        raise OakenError("INVALID_INPUT", exc.message, field=exc.field) from None


def _connect_oauth_preview(ctx: Context, data: ConnectOAuthIn) -> Preview:
    target: _OAuthTarget = ctx.targets
    if target.account is not None:
        return Preview(
            (Change(str(target.account.pk), {"connection": target.account.oauth_state}, {"connection": "ok"}),)
        )
    settings = shown_settings(target.provider.servers(target.address))
    shown = {"name": data.account_name or target.address, "workspace": data.workspace, "provider": target.provider.name}
    return Preview((Change("new mailbox", None, shown | settings),))


def _expiry(grant: dict[str, Any]) -> datetime | None:
    value = grant.get("expires_at")
    return datetime.fromisoformat(value) if isinstance(value, str) else None


@operation(
    name="connect_mailbox_oauth",
    summary="Connect (or reconnect) a mailbox by OAuth once its provider said yes: the access token is tried on "
    "IMAP and SMTP, then the mailbox is saved and synced; the tokens are stored encrypted and never returned.",
    input=ConnectOAuthIn,
    output=MailboxOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    preview=_connect_oauth_preview,
    confirm=NEVER,
    targets=_oauth_target,
    verify=_try_with_token,
    callers=Callers.PERSONS,
)
def connect_mailbox_oauth(ctx: Context, data: ConnectOAuthIn) -> MailboxOut:
    """The person's consent at the provider is the confirmation; the grant is used once: claimed here, inside the
    call's transaction, so of two calls with one grant (a form sent twice) one saves and the other is refused."""
    target: _OAuthTarget = ctx.targets
    if not oauth_flow.claim_grant(data.grant):
        raise OakenError("CONFLICT", "this connection was used already: connect again", field="grant")
    tokens = {"access_token": target.grant["access_token"], "refresh_token": target.grant["refresh_token"]}
    if target.account is not None:
        account = services.reconnect_mailbox_oauth(
            act=ctx, account=target.account, tokens=tokens, expires_at=_expiry(target.grant)
        )
    else:
        assert target.workspace is not None
        account = services.connect_mailbox_oauth(
            act=ctx,
            workspace=target.workspace,
            name=data.account_name or _default_name(target.address),
            email_address=target.address,
            provider=target.provider.name,
            credentials=target.provider.servers(target.address),
            tokens=tokens,
            expires_at=_expiry(target.grant),
            sender_name=ctx.person_name,
        )
    return mailbox_out(account)
