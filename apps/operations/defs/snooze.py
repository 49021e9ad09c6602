"""Snooze: a message leaves the inbox until a time, then comes back to it, unread, on top of the listing.

Snoozing moves a message of the inbox to its account's archive, in Oaken and (mirrored as any move) on a connected
mailbox's server, as Gmail does: the mailbox's other clients stop showing it in their inbox too, and no hidden
state of Oaken's decides what the inbox holds. The time is Oaken's own. The return is the system's: a beat task
(apps.worker.snooze) calls `mark_unread` (the read-state operation, SPEC §9) and then `return_snoozed_message`
through the gate on the internal door, each audited; the return is one guarded UPDATE on the message's own state,
so it happens once whatever beats, workers or restarts run it.
"""

from __future__ import annotations

import zoneinfo
from datetime import datetime, timedelta
from typing import NamedTuple

from pydantic import Field

from apps.core import words
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.mail import services
from apps.mail.models import Folder, FolderKind, Message
from apps.mail.selectors import access_folder_by_name, access_message_by_id
from apps.operations.context import Context
from apps.operations.defs.mail_organize import SMALL_CHANGE, ChangedOut
from apps.operations.defs.shapes import Closed, Id, MessageIds, TimeZone, folder_label
from apps.operations.registry import Bound, Callers, Ceiling, OpClass, Preview, operation
from apps.operations.targets import reach, the_messages

_BATCH = Bound("message_ids", "BATCH_MAX")
# where a snoozed message may not be: a person who put it there meant it gone, and it does not come back from there
_AWAY = (FolderKind.TRASH, FolderKind.SPAM)


class SnoozeIn(MessageIds):
    until: datetime = Field(
        description="when they come back: a time with its offset (2026-12-08T09:00:00+01:00 or …Z), or a local "
        "time (2026-12-08T09:00:00) in the time zone tz; not in the past, at most SNOOZE_MAX_DAYS ahead"
    )
    tz: TimeZone | None = Field(default=None, description="the IANA time zone of a local `until`, e.g. Europe/Paris")


def _until(ctx: Context, data: SnoozeIn) -> datetime:
    """The time asked for, as an instant: an offset it carries, or its tz; refused in the past or past the bound."""
    until = data.until
    if until.tzinfo is None:
        if data.tz is None:
            raise OakenError.invalid("until", "a local time needs tz (or give the time with its offset)")
        until = until.replace(tzinfo=zoneinfo.ZoneInfo(data.tz))
    elif data.tz is not None:
        raise OakenError.invalid("tz", "until already carries its offset: give tz only with a local time")
    if until <= ctx.now:
        raise OakenError.invalid("until", "is in the past: a snooze ends in the future")
    days = ctx.bounds.SNOOZE_MAX_DAYS
    if until > ctx.now + timedelta(days=days):
        raise OakenError.invalid("until", f"is more than {days} days ahead (SNOOZE_MAX_DAYS)")
    return until


class Snoozing(NamedTuple):
    until: datetime | None
    # each message, and the folder it goes to (None: it stays where it is)
    moves: list[tuple[Message, Folder | None]]


def _folders(messages: list[Message], kind: FolderKind, only_from: FolderKind) -> list[tuple[Message, Folder | None]]:
    """Each message with its account's folder of `kind` when it is now in the folder of kind `only_from`."""
    found: dict[object, Folder] = {}
    moves: list[tuple[Message, Folder | None]] = []
    for m in messages:
        if m.folder.kind != only_from:
            moves.append((m, None))
            continue
        if m.account_id not in found:
            try:
                found[m.account_id] = access_folder_by_name(kind, account=m.account)
            except OakenError:
                missing = f"a mailbox here has no {kind.label} folder to move them to"
                raise OakenError.invalid("message_ids", missing) from None
        moves.append((m, found[m.account_id]))
    return moves


def _snoozing(ctx: Context, data: SnoozeIn) -> Snoozing:
    messages = the_messages(ctx, data)  # first: ids of nothing are NOT_FOUND whatever the time
    until = _until(ctx, data)
    if any(m.folder.kind in _AWAY for m in messages):
        raise OakenError.invalid("message_ids", "a message in the trash or spam cannot be snoozed: restore it first")
    return Snoozing(until, _folders(messages, FolderKind.ARCHIVE, FolderKind.INBOX))


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _snooze_changes(snoozing: Snoozing) -> tuple[Change, ...]:
    return tuple(
        Change(
            str(m.pk),
            {"folder": folder_label(m.folder), "snoozed_until": _iso(m.snoozed_until)},
            {"folder": folder_label(to or m.folder), "snoozed_until": _iso(snoozing.until)},
        )
        for m, to in snoozing.moves
        if m.snoozed_until != snoozing.until or to is not None
    )


def _snooze_preview(ctx: Context, data: SnoozeIn) -> Preview:
    snoozing: Snoozing = ctx.targets
    changes = _snooze_changes(snoozing)
    assert snoozing.until is not None
    if data.tz is not None:  # in the zone the time was given in
        local = snoozing.until.astimezone(zoneinfo.ZoneInfo(data.tz))
        until = f"{local.day} {local:%B %Y} at {local:%H:%M} ({data.tz})"
    else:
        until = words.moment(snoozing.until)
    return Preview(
        changes,
        summary=f"Snooze {words.count(len(changes), 'message')} until {until}: out of the inbox (to the Archive) "
        "until then, back in the inbox unread at that time.",
        title="Snooze these messages?",
        verb="Snooze",
    )


class SnoozedOut(ChangedOut):
    snoozed_until: datetime


@operation(
    name="snooze_messages",
    summary="Snooze messages until a time (with its offset, or local in tz): they leave the inbox (to the archive, "
    "on the server too) and come back to it unread, on top of the listing, at that time.",
    input=SnoozeIn,
    output=SnoozedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_snooze_preview,
    confirm=SMALL_CHANGE,
    targets=_snoozing,
    bounds=(_BATCH,),
)
def snooze_messages(ctx: Context, data: SnoozeIn) -> SnoozedOut:
    snoozing: Snoozing = ctx.targets
    assert snoozing.until is not None
    changes = _snooze_changes(snoozing)
    changed = {c.id for c in changes}
    moves = [(m, to) for m, to in snoozing.moves if str(m.pk) in changed]
    ids = services.snooze_messages(act=ctx, moves=moves, until=snoozing.until, changes=changes)
    return SnoozedOut(changed=len(ids), message_ids=ids, snoozed_until=snoozing.until)


def _unsnoozing(ctx: Context, data: MessageIds) -> Snoozing:
    snoozed = [m for m in the_messages(ctx, data) if m.snoozed_until is not None]
    return Snoozing(None, _folders(snoozed, FolderKind.INBOX, FolderKind.ARCHIVE))


def _unsnooze_changes(snoozing: Snoozing) -> tuple[Change, ...]:
    return tuple(
        Change(
            str(m.pk),
            {"folder": folder_label(m.folder), "snoozed_until": _iso(m.snoozed_until)},
            {"folder": folder_label(to or m.folder), "snoozed_until": None},
        )
        for m, to in snoozing.moves
    )


def _unsnooze_preview(ctx: Context, data: MessageIds) -> Preview:
    changes = _unsnooze_changes(ctx.targets)
    return Preview(
        changes,
        summary=f"End the snooze of {words.count(len(changes), 'message')}: back in the inbox now, as read or "
        "unread as they are.",
        title="Unsnooze these messages?",
        verb="Unsnooze",
    )


@operation(
    name="unsnooze_messages",
    summary="End messages' snooze now: back to the inbox from the archive (a snoozed message moved elsewhere since "
    "stays there), read state unchanged; messages not snoozed are left alone.",
    input=MessageIds,
    output=ChangedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_unsnooze_preview,
    confirm=SMALL_CHANGE,
    targets=_unsnoozing,
    bounds=(_BATCH,),
)
def unsnooze_messages(ctx: Context, data: MessageIds) -> ChangedOut:
    snoozing: Snoozing = ctx.targets
    ids = services.unsnooze_messages(act=ctx, moves=snoozing.moves, changes=_unsnooze_changes(snoozing))
    return ChangedOut(changed=len(ids), message_ids=ids)


# ---------------------------------------------------------------- the return (the system's)


class ReturnIn(Closed):
    message_id: Id
    until: datetime = Field(description="the snooze's time as the task read it: a snooze moved since is not returned")


class ReturnOut(Closed):
    message_id: str
    folder: str
    returned_at: datetime


class Returning(NamedTuple):
    message: Message
    inbox: Folder | None


def _returning(ctx: Context, data: ReturnIn) -> Returning:
    message = access_message_by_id(data.message_id, reach=reach(ctx))
    if message.folder.kind in _AWAY:
        return Returning(message, None)
    if message.folder.kind == FolderKind.INBOX:
        return Returning(message, message.folder)
    return Returning(message, access_folder_by_name(FolderKind.INBOX, account=message.account))


@operation(
    name="return_snoozed_message",
    summary="The snooze schedule brings a snoozed message whose time has come back to the inbox, on top of the "
    "listing (once: a message already returned, or snoozed again, is refused).",
    input=ReturnIn,
    output=ReturnOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    callers=Callers.INTERNAL,
    targets=_returning,
)
def return_snoozed_message(ctx: Context, data: ReturnIn) -> ReturnOut:
    returning: Returning = ctx.targets
    message = returning.message
    if not services.return_snoozed(act=ctx, message=message, until=data.until, inbox=returning.inbox):
        raise OakenError("CONFLICT", "not snoozed until that time, or not due: already returned or snoozed again")
    folder = returning.inbox or message.folder
    return ReturnOut(message_id=str(message.pk), folder=folder_label(folder), returned_at=ctx.now)
