"""Reads of a person's own settings."""

from __future__ import annotations

from apps.accounts.models import Preferences, User


def saved_preferences(*, user: User) -> Preferences | None:
    """The person's preferences as saved, or None when they never needed any (the defaults hold)."""
    return Preferences.objects.filter(user=user).first()
