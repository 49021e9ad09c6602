"""Credentials that let an agent act for one person in one tenant."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from apps.workspaces.tenancy import TenantOwned


class ApiKey(TenantOwned):
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
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_via = models.CharField(max_length=20, default="console")  # console | cli
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.prefix

    def is_live(self, now: datetime | None = None) -> bool:
        moment = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > moment)
