"""What a display name may hold: a person's name and a mailbox's sender name both go into a From header, before
the address. One rule for every door that takes one (an operation's input, the sign-up form)."""

from __future__ import annotations

import unicodedata

from apps.core.bidi import BIDI_CONTROLS


def display_name_problem(value: str) -> str | None:
    """Why `value` cannot be a display name, in words, or None when it can. A control character (a line break
    above all: it would start another header) and a line or paragraph separator are refused, as are a
    bidirectional embedding, override or isolate (the name could read as another) and an @ (a name that reads
    as an address could pass for another sender). Its length is the caller's bound (SENDER_NAME_MAX_CHARS)."""
    if any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in value):
        return "must be one line with no control characters"
    if BIDI_CONTROLS.search(value):
        return "must hold no bidirectional embedding, override or isolate (U+202A-U+202E, U+2066-U+2069)"
    if "@" in value:
        return "must hold no @ (a name that looks like an address could pass for another sender)"
    return None
