"""The email package's Message tree for plainly structured mail, built without its feedparser.

`email.parser.BytesParser` reads a message line by line through a stack of generators, which costs
more than everything else Oaken does with a message. Most mail is plain: a header block, a blank line
and a body, or multiparts whose boundaries are where they should be. For such mail `build_tree`
builds the very tree the feedparser would build (the same Message class and policy, the same raw
header values, the same payload strings, the same parts), so every reader of the tree answers exactly
as before. Anything it is not sure of (lone CR line ends, envelope lines inside headers, missing or
doubled boundaries, message/* parts, multipart/digest, RFC 2231 boundaries) makes it return None, and
the caller hands the bytes to the feedparser. tests/test_mail_fast_paths.py compares both over a
corpus and damaged variants of it.
"""

from __future__ import annotations

import re
from email.message import EmailMessage, Message
from email.policy import EmailPolicy
from typing import Any

# A header line as the feedparser's headerRE sees it (field name, then a colon); "From " lines and
# continuation lines are told apart before this is tried.
_FIELD = re.compile(rb"[\x21-\x39\x3b-\x7e]*:")
# A header block of named fields and their continuation lines only, each line ending in \n; and one
# field of it: the name, and the value without the blanks after the colon or the last line break.
_PLAIN_BLOCK = re.compile(r"(?:[\x21-\x39\x3b-\x7e]+:[^\n]*\n(?:[ \t][^\n]*\n)*)+")
_PLAIN_FIELD = re.compile(r"^([\x21-\x39\x3b-\x7e]+):[ \t]*([^\n]*(?:\n[ \t][^\n]*)*)\n", re.MULTILINE)
# What may follow the separator on a boundary line: "--" when it closes the multipart, then blanks.
_BOUNDARY_TAIL = re.compile(rb"(--)?[ \t]*(?:\r?\n|\Z)")
# Nesting deeper than this is left to the feedparser (it never occurs in real mail).
_MAX_DEPTH = 8


class _NotPlain(Exception):
    """The message needs the feedparser."""


class TreeMessage(EmailMessage):
    """An EmailMessage whose get() looks the first value of a header up in an index built with the tree
    (the same answer as scanning the headers, which readers of a parsed message do many times per part).
    The tree is only read: changing its headers would leave the index behind."""

    _first: dict[str, str]

    def get(self, name: str, failobj: Any = None) -> Any:
        """The first value of this header, as Message.get returns it."""
        return self._first.get(name.lower(), failobj)


def build_tree(raw: bytes, policy: EmailPolicy, lone_cr: bool | None = None) -> Message | None:
    """The Message tree BytesParser(policy=policy) builds from raw, or None when only the feedparser can tell.

    `lone_cr`: whether raw has a CR that does not begin a CRLF, when the caller knows already."""
    # The feedparser ends lines at \r too; mail with lone CRs is rare enough to leave to it.
    if lone_cr is None:
        lone_cr = b"\r" in raw and raw.count(b"\r") != raw.count(b"\r\n")
    if lone_cr:
        return None
    try:
        return _part(raw, 0, len(raw), policy, 0, strip_eol=False)
    except _NotPlain:
        return None
    except Exception:
        # the email package failing on a header (a broken RFC 2231 boundary, say): the feedparser decides
        return None


def _part(raw: bytes, start: int, end: int, policy: EmailPolicy, depth: int, strip_eol: bool) -> Message:
    """One message or body part occupying raw[start:end]."""
    # Any: the tree is filled in through the attributes the feedparser sets
    msg: Any = TreeMessage(policy=policy)
    body = _headers(raw, start, end, msg)
    first: dict[str, str] = {}
    for name, value in msg._headers:
        key = name.lower()
        if key not in first:
            first[key] = policy.header_fetch_parse(name, value)
    msg._first = first
    ctype = msg.get_content_type()
    maintype = ctype.partition("/")[0]
    if maintype == "message" or ctype == "multipart/digest":
        raise _NotPlain
    if maintype != "multipart":
        # RFC 2046: the line break before a boundary belongs to the boundary, not to the part.
        if strip_eol and body < end:
            if raw.startswith(b"\r\n", end - 2) and end - 2 >= body:
                end -= 2
            elif raw[end - 1] == 0x0A:
                end -= 1
        msg._payload = raw[body:end].decode("ascii", "surrogateescape")
        return msg
    if depth >= _MAX_DEPTH:
        raise _NotPlain
    boundary = msg.get_boundary()
    if boundary is None:
        raise _NotPlain
    try:
        separator = b"--" + boundary.encode("ascii", "surrogateescape")
    except UnicodeEncodeError:
        raise _NotPlain from None
    children: list[Message] = []
    found = _boundary_line(raw, separator, body, end)
    if found is None or found[1]:
        raise _NotPlain  # no start boundary: the feedparser makes the preamble the payload
    while True:
        part_start = found[2]
        following = _boundary_line(raw, separator, part_start, end)
        if following is None:
            raise _NotPlain  # no close boundary
        if following[0] == part_start:
            raise _NotPlain  # doubled boundary lines are skipped by the feedparser
        children.append(_part(raw, part_start, following[0], policy, depth + 1, strip_eol=True))
        if following[1]:
            break
        found = following
    msg._payload = children
    return msg


def _boundary_line(raw: bytes, separator: bytes, position: int, end: int) -> tuple[int, bool, int] | None:
    """The first boundary line at or after `position` (a line start) and before `end`: where it starts, whether
    it closes the multipart, where the next line starts. Like the feedparser's boundaryre on each line."""
    if raw.startswith(separator, position, end):
        candidate = position
    else:
        found = raw.find(b"\n" + separator, position, end)
        candidate = found + 1 if found != -1 else -1
    while candidate != -1:
        tail = _BOUNDARY_TAIL.match(raw, candidate + len(separator), end)
        if tail is not None:
            return candidate, tail.group(1) is not None, tail.end()
        found = raw.find(b"\n" + separator, candidate, end)
        candidate = found + 1 if found != -1 else -1
    return None


def _headers(raw: bytes, start: int, end: int, msg: Any) -> int:
    """Read the header block at raw[start:end] into msg as the feedparser does; returns where the body starts."""
    if raw.startswith(b"From ", start):
        return _header_lines(raw, start, end, msg)
    # The usual block: fields up to a blank line, read by two regular expressions instead of line by line.
    blank = raw.find(b"\n\r\n", start, end)
    if blank == -1 or raw.find(b"\n\n", start, blank) >= 0:
        blank = raw.find(b"\n\n", start, end)
        separator = 1
    else:
        separator = 2
    if blank == -1:
        return _header_lines(raw, start, end, msg)
    block = raw[start : blank + 1].decode("ascii", "surrogateescape")
    if not _PLAIN_BLOCK.fullmatch(block):
        return _header_lines(raw, start, end, msg)
    msg._headers = [(name, value.rstrip("\r\n")) for name, value in _PLAIN_FIELD.findall(block)]
    return blank + 1 + separator


def _header_lines(raw: bytes, start: int, end: int, msg: Any) -> int:
    """_headers for any header block, a line at a time."""
    position = start
    name: str | None = None
    value: list[str] = []
    headers = msg._headers
    first = True
    while position < end:
        newline = raw.find(b"\n", position, end)
        line_end = end if newline == -1 else newline + 1
        lead = raw[position]
        if lead == 0x20 or lead == 0x09:  # continuation
            if name is None:
                raise _NotPlain
            value.append(raw[position:line_end].decode("ascii", "surrogateescape"))
        elif raw.startswith(b"From ", position):
            if not first:
                raise _NotPlain
            # the envelope line of an mbox message (the feedparser keeps it as the unixfrom)
            msg._unixfrom = raw[position:line_end].decode("ascii", "surrogateescape").rstrip("\r\n")
        else:
            field = _FIELD.match(raw, position, line_end)
            if field is None:
                if line_end - position <= 2 and raw[position:line_end] in (b"\n", b"\r\n"):
                    position = line_end  # the blank line after the headers
                # else the body starts without a blank line
                break
            colon = field.end() - 1
            if colon == position:
                raise _NotPlain  # a header without a name
            if name is not None:
                headers.append((name, "".join(value).rstrip("\r\n")))
            name = raw[position:colon].decode("ascii")
            value = [raw[colon + 1 : line_end].decode("ascii", "surrogateescape").lstrip(" \t")]
        first = False
        position = line_end
    if name is not None:
        headers.append((name, "".join(value).rstrip("\r\n")))
    return position
