"""A person's own preferences for the console (persons only: no agent reads or changes how a person's console
behaves). Today one: whether opening a message marks it read."""

from __future__ import annotations

from pydantic import Field

from apps.accounts.models import Preferences
from apps.accounts.selectors import saved_preferences
from apps.accounts.services import preferences_of, set_mark_read_on_open
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Empty
from apps.operations.registry import NEVER, Callers, Ceiling, OpClass, operation


class PreferencesOut(Closed):
    mark_read_on_open: bool = Field(description="opening a message in the console marks it read (mark_read)")


def _mine(ctx: Context) -> Preferences:
    assert ctx.caller.user is not None
    return preferences_of(user=ctx.caller.user)


@operation(
    name="get_preferences",
    summary="Your own preferences for the console (whether opening a message marks it read).",
    input=Empty,
    output=PreferencesOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    callers=Callers.PERSONS,
)
def get_preferences(ctx: Context, data: Empty) -> PreferencesOut:
    assert ctx.caller.user is not None
    found = saved_preferences(user=ctx.caller.user)
    return PreferencesOut(mark_read_on_open=found.mark_read_on_open if found else True)


class SetPreferencesIn(Closed):
    mark_read_on_open: bool | None = Field(default=None, description="leave out to keep it as it is")


@operation(
    name="set_preferences",
    summary="Change your own preferences for the console; what you leave out stays as it is.",
    input=SetPreferencesIn,
    output=PreferencesOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    confirm=NEVER,
    callers=Callers.PERSONS,
)
def set_preferences(ctx: Context, data: SetPreferencesIn) -> PreferencesOut:
    """A person's own setting, reversible at once: no confirmation asked."""
    mine = _mine(ctx)
    before = mine.mark_read_on_open
    if data.mark_read_on_open is not None and set_mark_read_on_open(
        preferences=mine, value=data.mark_read_on_open, now=ctx.now
    ):
        ctx.touch(mine.pk, {"mark_read_on_open": before}, {"mark_read_on_open": mine.mark_read_on_open})
    return PreferencesOut(mark_read_on_open=mine.mark_read_on_open)
