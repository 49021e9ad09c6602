"""Credentials that let an agent act for one person in one tenant."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar, cast

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.utils import timezone

from apps.core.tenancy import TenantManager, TenantOwned, TenantQuerySet

if TYPE_CHECKING:
    from apps.workspaces.models import Tenant

_C = TypeVar("_C", bound=models.Model)


class CredentialQuerySet(TenantQuerySet[_C]):
    def live(self, now: datetime) -> Self:
        """Credentials that still work at `now` (the rule of Credential.is_live, in SQL)."""
        return self.filter(Q(revoked_at__isnull=True) & (Q(expires_at__isnull=True) | Q(expires_at__gt=now)))


class CredentialManager(TenantManager):
    _queryset_class = CredentialQuerySet

    def for_tenant(self, tenant: Tenant) -> CredentialQuerySet[Any]:
        return cast(CredentialQuerySet[Any], super().for_tenant(tenant))


class Credential(TenantOwned):
    """What lets an agent act for one person (`user`) in one tenant, until it is revoked or its deadline passes."""

    owner_field: ClassVar[str] = "user"
    objects: ClassVar[CredentialManager] = CredentialManager()

    # the fields every credential has (each model declares them, so their migrations stay as they are)
    revoked_at: Any
    expires_at: Any
    expiry_noticed: Any

    class Meta:
        abstract = True

    def is_live(self, now: datetime | None = None) -> bool:
        """Not revoked, and not past its deadline (none: until revoked)."""
        moment = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > moment)


class ApiKey(Credential):
    """A scoped API key: shown once, stored only as a hash, with a visible prefix."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200, blank=True)
    prefix = models.CharField(max_length=20, unique=True)
    key_hash = models.CharField(max_length=64, unique=True)
    scopes = ArrayField(models.CharField(max_length=10))
    # workspace names the key may reach; empty: every workspace (SPEC §8)
    workspaces = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    # operations the key may call; null: every operation its scopes allow
    allow_list = ArrayField(models.CharField(max_length=200), null=True, blank=True)
    # the named set of tools the key is limited to (a built-in set or its person's own, by name); '': none
    tool_set = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_via = models.CharField(max_length=20, default="console")  # console | cli
    # lockdown (SPEC §23): once it has read mail from an unknown sender, every request of it that acts outside the
    # mailbox waits for a person, whatever the send policies say
    lockdown = models.BooleanField(default=False, db_default=False)
    # what it read could not be recorded (Redis away) until this time: its requests that act outside the mailbox
    # wait for a person until then (apps.agents.reads, apps.outbound.provenance's reads_unrecorded)
    reads_unrecorded_until = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    # the deadline the feed's connection.expiring was written for (apps.agents.services.notice_expiring): once each
    expiry_noticed = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.prefix


class Connection(Credential):
    """An OAuth grant (SPEC §7): one person let one client act in one tenant, with these scopes and workspaces,
    until a deadline fixed at consent (none: until revoked). Every token issued for it hangs off it."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="connections")
    application = models.ForeignKey(
        "oauth2_provider.Application", on_delete=models.CASCADE, related_name="oaken_connections"
    )
    client_name = models.CharField(max_length=255, blank=True)
    redirect_uri = models.TextField()
    scopes = ArrayField(models.CharField(max_length=10))
    workspaces = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    # the named set of tools the connection is limited to, chosen at consent (as for an API key); '': none
    tool_set = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)  # the deadline; refreshing never moves it
    # lockdown (SPEC §23): once it has read mail from an unknown sender, every request of it that acts outside the
    # mailbox waits for a person, whatever the send policies say
    lockdown = models.BooleanField(default=False, db_default=False)
    # what it read could not be recorded (Redis away) until this time: its requests that act outside the mailbox
    # wait for a person until then (apps.agents.reads, apps.outbound.provenance's reads_unrecorded)
    reads_unrecorded_until = models.DateTimeField(null=True, blank=True)
    # the deadline the feed's connection.expiring was written for (as for an API key)
    expiry_noticed = models.DateTimeField(null=True, blank=True)
    # the authorization code that starts it (hash), and when it was redeemed: a second redemption revokes
    code_hash = models.CharField(max_length=64, unique=True, null=True, blank=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    token_family = models.UUIDField(unique=True, null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_reason = models.CharField(max_length=40, blank=True)

    def __str__(self) -> str:
        return f"{self.client_name or self.application_id} for {self.user_id}"


class ConnectionToken(models.Model):
    """Which connection an access token was issued for (the toolkit's token table has no room for it)."""

    access_token = models.OneToOneField(
        "oauth2_provider.AccessToken", on_delete=models.CASCADE, primary_key=True, related_name="oaken_link"
    )
    connection = models.ForeignKey(Connection, on_delete=models.CASCADE, related_name="token_links")

    def __str__(self) -> str:
        return str(self.connection_id)


class ToolSet(TenantOwned):
    """A person's own named set of tools: the operations a key or connection of theirs limited to it may call
    (never more than its scopes allow). Credentials name it, and read its operations on every call; deleting it
    leaves them reaching nothing. The built-in sets are no rows: the registry's definitions make them."""

    owner_field: ClassVar[str] = "user"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tool_sets")
    name = models.CharField(max_length=64)
    operations = ArrayField(models.CharField(max_length=200))
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "user", "name"], name="one_tool_set_per_name")]

    def __str__(self) -> str:
        return self.name
