"""Bidirectional-text controls in text from mail, made visible (issue 35, item 7).

A right-to-left override (U+202E) in a file name makes `invoice\u202egpj.exe` read as `invoiceexe.jpg`; the
embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069) reorder whatever follows them, so a sender name,
a subject or a file name holding one can show something other than what it is. Wherever such text leaves Oaken
for a person or an agent, each of them is replaced by a visible marker naming it, `[U+202E]`: the text then reads
in its stored order, and the marker says something was there. The console's JavaScript does the same to every
text it shows (static/console/lib.js, `el`), so text that no operation marked is covered too.

The marks (U+200E, U+200F, U+061C) are left as they are: they cannot reorder letters, only settle where neutral
characters such as punctuation go, and names and subjects in Arabic or Hebrew use them. The console shows mail
text isolated (`dir="auto"`), so neither they nor right-to-left letters spill into the text around them.
"""

from __future__ import annotations

import re

BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")


def _marker(found: re.Match[str]) -> str:
    return f"[U+{ord(found.group()):04X}]"


def mark_bidi_controls(text: str) -> str:
    """`text` with every bidirectional embedding, override and isolate control replaced by `[U+XXXX]`."""
    if BIDI_CONTROLS.search(text) is None:
        return text
    return BIDI_CONTROLS.sub(_marker, text)
