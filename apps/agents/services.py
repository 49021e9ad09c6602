"""Writes of API keys and OAuth connections: granting a connection, revoking a key, ending every credential a
person holds in a tenant when they leave it, and marking those whose deadline nears. Issuing a key is
apps.agents.keys.issue_key; ending one connection and its tokens is apps.agents.connections.revoke_connection."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from django.db import IntegrityError, transaction
from django.db.models import F
from oauth2_provider.models import Application

from apps.accounts.models import User
from apps.agents.connections import revoke_connection
from apps.agents.models import ApiKey, Connection, ToolSet
from apps.agents.selectors import live_credentials
from apps.core.acts import Act
from apps.core.errors import OakenError
from apps.workspaces.models import Tenant


def revoke_api_key(*, key: ApiKey, now: datetime) -> bool:
    """End a key from `now` on; whether this call ended it (False: it already was)."""
    if key.revoked_at is not None:
        return False
    key.revoked_at = now
    key.save(update_fields=["revoked_at"])
    return True


def grant_connection(
    *,
    tenant: Tenant,
    user: User,
    application: Application,
    redirect_uri: str,
    scopes: list[str],
    workspaces: list[str],
    now: datetime,
    expires_at: datetime | None,
    tool_set: str = "",
) -> Connection:
    """A connection letting `application` act for `user` in `tenant` (its code not yet redeemed)."""
    return Connection.objects.create(
        tenant=tenant,
        user=user,
        application=application,
        client_name=client_words(application)[:255],
        redirect_uri=redirect_uri,
        scopes=scopes,
        workspaces=workspaces,
        tool_set=tool_set,
        created_at=now,
        expires_at=expires_at,
    )


def client_words(application: Application) -> str:
    """How a client is named to people: its name, and for a client described by a metadata document, the host that
    publishes it (the name is that site's claim; the host is what vouches for it)."""
    if application.registration_source == Application.RegistrationSource.CIMD:
        return f"{application.name} ({urlsplit(application.client_id).netloc})"
    return application.name


def record_document_client(
    *, client_id: str, name: str, redirect_uris: list[str], expires_at: datetime
) -> Application | None:
    """The OAuth client a client ID metadata document describes (apps.oauth.cimd), created or brought up to date:
    public, authorization code, the document's name and redirect URIs, fetched again after `expires_at`. None when
    the client_id belongs to a client registered another way: a document never takes one over."""
    fields = {
        "name": name,
        "redirect_uris": " ".join(redirect_uris),
        "client_type": Application.CLIENT_PUBLIC,
        "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
        "registration_source": Application.RegistrationSource.CIMD,
        "cimd_expires_at": expires_at,
        "user": None,
    }
    with transaction.atomic():
        app = Application.objects.select_for_update().filter(client_id=client_id).first()
        if app is None:
            try:
                with transaction.atomic():
                    return Application.objects.create(client_id=client_id, **fields)
            except IntegrityError:  # the same document fetched at once for another request: it made the row
                app = Application.objects.select_for_update().get(client_id=client_id)
        if app.registration_source != Application.RegistrationSource.CIMD:
            return None
        for field, value in fields.items():
            setattr(app, field, value)
        app.save()
        return app


def notice_expiring(*, now: datetime, days: int) -> int:
    """Mark every live key and connection (of every tenant) whose deadline comes within `days`, once per deadline;
    the mark's UPDATE writes the feed's `connection.expiring` (events/0004). How many were marked.

    Only a credential that entered the window is marked: one made to last less than `days` (a connection's default
    24 hours) was given that short a life on purpose, the day it was made, and is never warned about. A statement
    per kind, each row once: a run racing another re-reads a row it waited for and finds it marked already."""
    window = timedelta(days=days)
    marked = 0
    for model in (ApiKey, Connection):
        due = model.objects.unscoped().filter(
            revoked_at__isnull=True,
            expires_at__gt=now,
            expires_at__lte=now + window,
            created_at__lt=F("expires_at") - window,
        )
        if model is Connection:
            due = due.filter(activated_at__isnull=False)  # a code never redeemed gave nothing to expire
        marked += due.exclude(expiry_noticed=F("expires_at")).update(expiry_noticed=F("expires_at"))
    return marked


@dataclass(frozen=True)
class RevokedCredentials:
    api_keys: list[uuid.UUID]
    connections: list[uuid.UUID]


@transaction.atomic
def revoke_credentials_of(*, tenant: Tenant, user_id: uuid.UUID, now: datetime) -> RevokedCredentials:
    """End every key and connection the person still holds in this tenant, for good: removing a member calls it
    in the same transaction, or they would come back to life if the person were ever invited again."""
    live = live_credentials(tenant=tenant, user_id=user_id)
    keys = [key.pk for key in live.api_keys.select_for_update() if revoke_api_key(key=key, now=now)]
    connections = []
    for grant in live.connections:
        revoke_connection(grant, "member_removed")
        connections.append(grant.pk)
    return RevokedCredentials(api_keys=keys, connections=connections)


def tool_set_name_taken() -> OakenError:
    return OakenError("CONFLICT", "name: you already have a tool set with this name", field="name")


def delete_tool_set(tool_set: ToolSet) -> None:
    """The set goes; the credentials naming it stay, limited to a set that is no more: they reach no tool."""
    ToolSet.objects.for_tenant(tool_set.tenant).filter(pk=tool_set.pk).delete()


def create_tool_set(*, tenant: Tenant, user: User, name: str, operations: list[str], now: datetime) -> ToolSet:
    """A person's new named set of tools; CONFLICT when they have one by this name (a concurrent call may take it
    first)."""
    try:
        with transaction.atomic():
            return ToolSet.objects.create(tenant=tenant, user=user, name=name, operations=operations, created_at=now)
    except IntegrityError:
        raise tool_set_name_taken() from None


def set_lockdown(row: ApiKey | Connection, lockdown: bool, *, act: Act) -> None:
    """Put a key or connection in lockdown or end it (apps.outbound.provenance reads it when the credential asks for
    something); recorded on the call when it changes."""
    if row.lockdown == lockdown:
        return
    type(row).objects.for_tenant(act.tenant).filter(pk=row.pk).update(lockdown=lockdown)
    act.touch(row.pk, {"lockdown": row.lockdown}, {"lockdown": lockdown})
    row.lockdown = lockdown
