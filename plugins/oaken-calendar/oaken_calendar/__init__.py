"""The calendar invites in a mailbox: Oaken hands this plugin the text/calendar parts of the mail the caller
may read, and it reads the events out of them (icalendar). Everything it returns comes from mail."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import icalendar
from oaken_plugin import Closed, MailText, Part, Plugin, Service
from pydantic import Field

CALENDAR_TYPES = ("text/calendar", "application/ics")


class Settings(Closed):
    include_cancelled: bool = Field(default=True, description="list invites the organizer cancelled")


def _healthy() -> bool:
    calendar = icalendar.Calendar.from_ical("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nEND:VCALENDAR\r\n")
    return calendar.get("VERSION") == "2.0"


plugin = Plugin(name="calendar", version="1.0.0", settings=Settings, health=_healthy)


class Attendee(Closed):
    address: MailText
    name: MailText | None = None
    response: str | None = Field(default=None, description="ACCEPTED, DECLINED, TENTATIVE, NEEDS-ACTION")


class Invite(Closed):
    message_id: str
    uid: MailText
    method: str | None = Field(description="REQUEST (an invitation), CANCEL, REPLY, PUBLISH")
    status: str | None = None
    title: MailText
    organizer: MailText | None
    organizer_name: MailText | None = None
    start: str | None = Field(description="ISO 8601: a date for an all-day event, a time with its offset otherwise")
    end: str | None
    time_zone: MailText | None = Field(description="the event's time zone; null for a floating or all-day time")
    all_day: bool
    location: MailText | None
    attendees: list[Attendee]
    recurrence: MailText | None = Field(description="the recurrence rule (RRULE), when the event repeats")
    sequence: int = 0


class ListIn(Closed):
    account_id: str = Field(min_length=1, max_length=64)
    limit: int = Field(default=50, ge=1, le=200, description="at most this many invites, newest mail first")


class InvitesOut(Closed):
    invites: list[Invite]


class GetIn(Closed):
    message_id: str = Field(min_length=1, max_length=64)


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _address(value: Any) -> str | None:
    text = _text(value)
    if text is None:
        return None
    return text[7:] if text.lower().startswith("mailto:") else text


def _when(prop: Any) -> tuple[str | None, str | None, bool]:
    """(ISO time, time zone name, all day) of a DTSTART/DTEND."""
    if prop is None:
        return None, None, False
    value = prop.dt
    if isinstance(value, datetime):
        zone = None if value.tzinfo is None else (getattr(value.tzinfo, "key", None) or value.tzinfo.tzname(value))
        return value.isoformat(), zone, False
    if isinstance(value, date):
        return value.isoformat(), None, True
    return None, None, False


def _attendees(event: Any) -> list[Attendee]:
    found = event.get("ATTENDEE")
    if found is None:
        return []
    listed = found if isinstance(found, list) else [found]
    attendees = []
    for entry in listed:
        address = _address(entry)
        if address:
            params = getattr(entry, "params", {})
            attendees.append(
                Attendee(address=address, name=_text(params.get("CN")), response=_text(params.get("PARTSTAT")))
            )
    return attendees


def invites_in(part: Part, settings: Settings) -> list[Invite]:
    """The events of one calendar part (none when it cannot be read)."""
    try:
        calendar = icalendar.Calendar.from_ical(part.text)
    except ValueError:
        return []
    method = _text(calendar.get("METHOD"))
    invites = []
    for event in calendar.walk("VEVENT"):
        status = _text(event.get("STATUS"))
        if not settings.include_cancelled and (method == "CANCEL" or status == "CANCELLED"):
            continue
        start, zone, all_day = _when(event.get("DTSTART"))
        end, _, _ = _when(event.get("DTEND"))
        organizer = event.get("ORGANIZER")
        rule = event.get("RRULE")
        invites.append(
            Invite(
                message_id=part.message_id,
                uid=_text(event.get("UID")) or "",
                method=method,
                status=status,
                title=_text(event.get("SUMMARY")) or "",
                organizer=_address(organizer),
                organizer_name=_text(getattr(organizer, "params", {}).get("CN")) if organizer is not None else None,
                start=start,
                end=end,
                time_zone=zone,
                all_day=all_day,
                location=_text(event.get("LOCATION")),
                attendees=_attendees(event),
                recurrence=rule.to_ical().decode() if rule is not None else None,
                sequence=int(event.get("SEQUENCE", 0) or 0),
            )
        )
    return invites


def _invites(service: Service) -> list[Invite]:
    """The invites of every part Oaken handed over, in its order (newest mail first)."""
    settings = Settings.model_validate(service.settings.model_dump())
    return [invite for part in service.parts for invite in invites_in(part, settings)]


@plugin.operation(
    name="list_invites",
    summary="The calendar invites in an account's mail, newest mail first: title, organizer, start and end, place.",
    input=ListIn,
    output=InvitesOut,
    reads=CALENDAR_TYPES,
)
def list_invites(service: Service, data: ListIn) -> InvitesOut:
    return InvitesOut(invites=_invites(service)[: data.limit])


@plugin.operation(
    name="get_invite",
    summary="The calendar invites of one message.",
    input=GetIn,
    output=InvitesOut,
    reads=CALENDAR_TYPES,
)
def get_invite(service: Service, data: GetIn) -> InvitesOut:
    return InvitesOut(invites=_invites(service))
