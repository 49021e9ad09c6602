"""A message's text for embedding: quoted replies and signatures off, then cut into chunks at paragraphs.

What is quoted was written (and is found) in the message it quotes; a signature is the same in every
message of its writer. Left in, both would pull every reply towards its thread and every mail towards its
sender, and a long message's own point would be averaged away: each chunk is embedded on its own.
"""

from __future__ import annotations

import re

# "On Mon, 3 Mar 2026 at 10:00, Ann <ann@x> wrote:" and its translations; Outlook's "-----Original Message-----"
_QUOTE_HEADER = re.compile(
    r"^\s*(?:On .{0,300}wrote:|Le .{0,300}a écrit\s*:|Am .{0,300}schrieb .{0,200}:|El .{0,300}escribió:"
    r"|-{2,}\s*(?:Original Message|Forwarded message|Message d'origine|Ursprüngliche Nachricht)\s*-{2,})\s*$",
    re.IGNORECASE | re.MULTILINE,
)
_SIGNATURE = re.compile(r"^-- ?$", re.MULTILINE)
_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def own_text(body: str) -> str:
    """The body without quoted lines (> ...), what follows a reply header, and the signature."""
    header = _QUOTE_HEADER.search(body)
    if header:
        body = body[: header.start()]
    signature = _SIGNATURE.search(body)
    if signature:
        body = body[: signature.start()]
    return "\n".join(line for line in body.splitlines() if not line.lstrip().startswith(">")).strip()


def _pieces(text: str, size: int) -> list[str]:
    """Paragraphs, and sentences (or hard cuts) of paragraphs longer than size."""
    pieces: list[str] = []
    for paragraph in _PARAGRAPH.split(text):
        paragraph = " ".join(paragraph.split())
        if not paragraph:
            continue
        if len(paragraph) <= size:
            pieces.append(paragraph)
            continue
        for sentence in _SENTENCE_END.split(paragraph):
            while len(sentence) > size:
                pieces.append(sentence[:size])
                sentence = sentence[size:]
            if sentence:
                pieces.append(sentence)
    return pieces


def chunks(*, subject: str, body: str, attachments: list[str], size: int, most: int) -> list[str]:
    """At most `most` texts of about `size` characters; each starts with the subject, which is their context."""
    head = " ".join(subject.split())
    room = max(size - len(head) - 1, size // 2)
    texts: list[str] = []
    current = ""
    for piece in _pieces(own_text(body), room) + [p for a in attachments for p in _pieces(a, room)]:
        if current and len(current) + 1 + len(piece) > room:
            texts.append(current)
            current = ""
        current = f"{current} {piece}".strip()
    if current:
        texts.append(current)
    if not texts:
        return [head] if head else []
    return [f"{head}\n{text}" if head else text for text in texts[:most]]
