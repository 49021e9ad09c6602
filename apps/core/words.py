"""Plain words for what a change will do: counts and names as a person reads them in a confirmation."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime


def count(n: int, one: str, many: str | None = None) -> str:
    """'1 message', '3 messages' ('no messages' for none)."""
    word = one if n == 1 else (many or f"{one}s")
    return f"{n} {word}" if n else f"no {many or one + 's'}"


def named(text: object) -> str:
    """A name as the sentence quotes it: “ci-bot”."""
    return f"\u201c{text}\u201d"


def listed(items: Iterable[str], *, empty: str = "none") -> str:
    """'a', 'a and b', 'a, b and c'."""
    words = [str(i) for i in items if str(i)]
    if not words:
        return empty
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


SCOPE_WORDS = {"read": ("read",), "write": ("organize", "draft"), "send": ("ask to send",)}


def scopes(granted: Iterable[str]) -> str:
    """What scopes allow, in words: 'read, organize, draft and ask to send mail'."""
    given = set(granted)
    verbs = [verb for scope, said in SCOPE_WORDS.items() if scope in given for verb in said]
    return f"{listed(verbs)} mail" if verbs else "nothing"


def workspaces(names: Iterable[str]) -> str:
    """The workspaces a key or connection reaches: 'every workspace', 'the workspace “work”'."""
    names = list(names)
    if not names:
        return "every workspace"
    label = "workspace" if len(names) == 1 else "workspaces"
    return f"the {label} {listed(named(n) for n in names)}"


MAILBOXES_NAMED_MAX = 10


def mailboxes_reached(who: str, mailboxes: list[tuple[str, str]], *, every: bool) -> str:
    """What a person will reach, for an invitation or a change of workspaces: "You will be able to read and send
    as every mailbox of this tenant (now Work <a@x>)", or as those listed, or as none. `who` is "You" or "They";
    `mailboxes` are (name, address), at most MAILBOXES_NAMED_MAX named."""
    shown = [f"{name} <{address}>" if address else name for name, address in mailboxes[:MAILBOXES_NAMED_MAX]]
    if len(mailboxes) > MAILBOXES_NAMED_MAX:
        shown.append(count(len(mailboxes) - MAILBOXES_NAMED_MAX, "more"))
    if every:
        now = f" (now {listed(shown)})" if shown else " (none is connected yet)"
        return f"{who} will be able to read and send as every mailbox of this tenant{now}."
    if not shown:
        them = "you" if who == "You" else "them"
        return f"{who} will not be able to read or send as any mailbox until an admin gives {them} a workspace."
    return f"{who} will be able to read and send as {listed(shown)}, and no other mailbox of this tenant."


def moment(when: datetime) -> str:
    """A time as a person reads it, in UTC: '7 December 2026 at 09:30 UTC'."""
    at = when.astimezone(UTC)
    return f"{at.day} {at:%B %Y} at {at:%H:%M} UTC"


def size(n: int) -> str:
    """Bytes as a person reads them: '900 bytes', '12 KB', '3.4 MB'."""
    if n < 1024:
        return count(n, "byte")
    if n < 1024 * 1024:
        return f"{round(n / 1024)} KB"
    return f"{n / (1024 * 1024):.1f} MB"
