"""Writes of a person's own settings: their console preferences (each person's own choice, nobody else's)."""

from __future__ import annotations

from datetime import datetime

from apps.accounts.models import Preferences, User


def preferences_of(*, user: User) -> Preferences:
    """The person's preferences, made with the defaults the first time they are needed."""
    found, _ = Preferences.objects.get_or_create(user=user)
    return found


def set_mark_read_on_open(*, preferences: Preferences, value: bool, now: datetime) -> bool:
    """Whether opening a message in the console marks it read; whether this changed it."""
    if value == preferences.mark_read_on_open:
        return False
    preferences.mark_read_on_open = value
    preferences.updated_at = now
    preferences.save(update_fields=["mark_read_on_open", "updated_at"])
    return True
