"""Writes of a person's own settings: their console preferences (each person's own choice, nobody else's)."""

from __future__ import annotations

import uuid
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


def set_name(*, user: User, name: str) -> bool:
    """How the person is called (a new mailbox they connect sends under it); whether this changed it."""
    if name == user.name:
        return False
    user.name = name
    user.save(update_fields=["name"])
    return True


def remember_tenant(*, user: User, tenant_id: uuid.UUID, now: datetime) -> None:
    """The tenant the person used last (switched to, or joined by an invitation): where their console opens after
    they next sign in, while they still belong to it."""
    Preferences.objects.update_or_create(user=user, defaults={"last_tenant_id": tenant_id, "updated_at": now})


def set_awaiting_reply(*, preferences: Preferences, days: int | None, nudge: bool | None, now: datetime) -> bool:
    """After how many days a thread they wrote last waits for reply, and whether the nudge brings it back to the
    inbox; what is None stays. Whether this changed anything."""
    changed = []
    if days is not None and days != preferences.awaiting_reply_days:
        preferences.awaiting_reply_days = days
        changed.append("awaiting_reply_days")
    if nudge is not None and nudge != preferences.awaiting_reply_nudge:
        preferences.awaiting_reply_nudge = nudge
        changed.append("awaiting_reply_nudge")
    if not changed:
        return False
    preferences.updated_at = now
    preferences.save(update_fields=[*changed, "updated_at"])
    return True
