"""Reads of a person's own settings."""

from __future__ import annotations

import uuid

from apps.accounts.models import Preferences, User


def saved_preferences(*, user: User) -> Preferences | None:
    """The person's preferences as saved, or None when they never needed any (the defaults hold)."""
    return Preferences.objects.filter(user=user).first()


def last_tenant_id(*, user: User) -> uuid.UUID | None:
    """The tenant the person used last (services.remember_tenant), if any; they may no longer belong to it."""
    return Preferences.objects.filter(user=user).values_list("last_tenant_id", flat=True).first()
