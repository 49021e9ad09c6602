"""A person's own preferences (persons only: no agent reads or changes how a person's console behaves, nor what
they are called): whether opening a message marks it read, their name, which a mailbox they connect from then
on sends under (its sender name, set_mailbox_sender_name), and waiting for reply (after how many days, and whether
the nudge brings such a thread back to the inbox)."""

from __future__ import annotations

from pydantic import Field

from apps.accounts.models import Preferences
from apps.accounts.selectors import saved_preferences
from apps.accounts.services import preferences_of, set_awaiting_reply, set_mark_read_on_open, set_name
from apps.operations.context import Context
from apps.operations.defs.awaiting import days_of
from apps.operations.defs.shapes import Closed, DisplayName, Empty
from apps.operations.registry import NEVER, Bound, Callers, Ceiling, OpClass, operation


class PreferencesOut(Closed):
    mark_read_on_open: bool = Field(description="opening a message in the console marks it read (mark_read)")
    name: str = Field(description="your name: a mailbox you connect sends under it ('' for none)")
    awaiting_reply_days: int = Field(
        description="waiting for reply: a thread you wrote last is listed this many days after, if nobody answered"
    )
    awaiting_reply_nudge: bool = Field(
        description="such a thread comes back to the top of your inbox once, marked (the nudge; off by default)"
    )


def _mine(ctx: Context) -> Preferences:
    assert ctx.caller.user is not None
    return preferences_of(user=ctx.caller.user)


@operation(
    name="get_preferences",
    summary="Your own preferences: whether opening a message marks it read, your name, and waiting for reply.",
    input=Empty,
    output=PreferencesOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    callers=Callers.PERSONS,
)
def get_preferences(ctx: Context, data: Empty) -> PreferencesOut:
    assert ctx.caller.user is not None
    found = saved_preferences(user=ctx.caller.user)
    return _out(ctx, found, ctx.caller.user.name)


def _out(ctx: Context, found: Preferences | None, name: str) -> PreferencesOut:
    return PreferencesOut(
        mark_read_on_open=found.mark_read_on_open if found else True,
        name=name,
        awaiting_reply_days=days_of(ctx),
        awaiting_reply_nudge=found.awaiting_reply_nudge if found else False,
    )


class SetPreferencesIn(Closed):
    mark_read_on_open: bool | None = Field(default=None, description="leave out to keep it as it is")
    name: DisplayName | None = Field(
        default=None,
        description="your name, as a From header shows it before a mailbox's address ('' for none; no control "
        "character, bidirectional override or @); a mailbox you connect from then on sends under it. Leave out to "
        "keep it as it is",
    )
    awaiting_reply_days: int | None = Field(
        default=None,
        ge=1,
        description="waiting for reply: after how many days a thread you wrote last, with no answer, is listed "
        "(at most AWAITING_REPLY_DAYS_MAX); leave out to keep it as it is",
    )
    awaiting_reply_nudge: bool | None = Field(
        default=None,
        description="whether such a thread comes back to the top of your inbox once, marked; leave out to keep it",
    )


@operation(
    name="set_preferences",
    summary="Change your own preferences (your name among them); what you leave out stays as it is.",
    input=SetPreferencesIn,
    output=PreferencesOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    confirm=NEVER,
    callers=Callers.PERSONS,
    bounds=(
        Bound("name", "SENDER_NAME_MAX_CHARS", "{field}: at most {maximum} characters"),
        Bound("awaiting_reply_days", "AWAITING_REPLY_DAYS_MAX", "{field}: at most {maximum} days"),
    ),
)
def set_preferences(ctx: Context, data: SetPreferencesIn) -> PreferencesOut:
    """A person's own setting, reversible at once: no confirmation asked."""
    mine = _mine(ctx)
    before = mine.mark_read_on_open
    if data.mark_read_on_open is not None and set_mark_read_on_open(
        preferences=mine, value=data.mark_read_on_open, now=ctx.now
    ):
        ctx.touch(mine.pk, {"mark_read_on_open": before}, {"mark_read_on_open": mine.mark_read_on_open})
    user = ctx.caller.user
    assert user is not None
    named = user.name
    if data.name is not None and set_name(user=user, name=data.name):
        ctx.touch(mine.pk, {"name": named}, {"name": user.name})
    waiting = {"awaiting_reply_days": mine.awaiting_reply_days, "awaiting_reply_nudge": mine.awaiting_reply_nudge}
    if set_awaiting_reply(
        preferences=mine, days=data.awaiting_reply_days, nudge=data.awaiting_reply_nudge, now=ctx.now
    ):
        ctx.touch(
            mine.pk,
            waiting,
            {"awaiting_reply_days": mine.awaiting_reply_days, "awaiting_reply_nudge": mine.awaiting_reply_nudge},
        )
    return _out(ctx, mine, user.name)
