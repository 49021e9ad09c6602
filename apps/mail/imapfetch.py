"""UID FETCH of whole messages, read straight off the IMAP connection.

imaplib reads a FETCH response a line at a time and imapclient then lexes it a character at a time,
which for a mailbox of small messages costs more than the server takes to send them. Here each
response is one line up to its literal, the literal itself (read in one piece), and the line after it;
only those short lines are tokenized. A response of a shape this reader does not know is handed to
imapclient's own parser, so nothing a server may say is refused for being unusual.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientAbortError, IMAPClientError
from imapclient.response_parser import parse_fetch_response

# a literal announced at the end of a line: {123} (or {123+} from a LITERAL+ server)
_LITERAL = re.compile(rb"\{(\d+)\+?\}\r\n\Z")
_FETCH_START = re.compile(rb"\* (\d+) FETCH \(")
_TOKEN = re.compile(rb'[ ]*(?:(\()|(\))|"((?:[^"\\]|\\.)*)"|([^\s()"]+))')
# A FETCH response of name-value pairs whose values are numbers, atoms, quoted strings without escapes or
# flat lists, with BODY[] last on the first line (its literal follows) and maybe more pairs after it.
_VALUE = rb'(?:\([^()"]*\)|"[^"\\]*"|[^\s()"{}]+)'
_USUAL_HEAD = re.compile(rb"\* \d+ FETCH \(((?:[A-Za-z0-9.-]+ " + _VALUE + rb" )*)BODY\[\] \{\d+\}\r\n")
_USUAL_TAIL = re.compile(rb"((?: [A-Za-z0-9.-]+ " + _VALUE + rb")*)\)\r\n")
_ATTRIBUTE = re.compile(rb"([A-Za-z0-9.-]+) (" + _VALUE + rb")")
# our own tags, never like imaplib's (four capitals and a number)
_tags = itertools.count(1)


# a literal over the caller's bound is read off the connection in pieces of this size and dropped
_DISCARD_CHUNK = 1024 * 1024
_SIZE_RESPONSE = re.compile(rb"\* \d+ FETCH \(([^(){}\"]*)\)\r\n")


@dataclass(frozen=True, slots=True)
class FetchedMessage:
    uid: int
    flags: tuple[bytes, ...]
    data: bytes
    # the body was larger than the caller's bound: read off the connection and dropped (data is empty)
    too_large: bool = False


def uid_set(uids: Iterable[int]) -> str:
    """An IMAP sequence set for these UIDs, runs written as ranges (1:5,8,10:12)."""
    ranges: list[str] = []
    start = previous = None
    for uid in sorted(set(uids)):
        if previous is not None and uid == previous + 1:
            previous = uid
            continue
        if start is not None:
            ranges.append(f"{start}:{previous}" if previous != start else str(start))
        start = previous = uid
    if start is not None:
        ranges.append(f"{start}:{previous}" if previous != start else str(start))
    return ",".join(ranges)


def fetch_messages(client: IMAPClient, uids: list[int], max_bytes: int | None = None) -> dict[int, FetchedMessage]:
    """The raw bytes and flags of these UIDs of the selected folder (a message expunged meanwhile is absent).
    A body over `max_bytes` is never held in memory: it comes back empty, marked too_large.

    Raises IMAPClientError when the server refuses the command, IMAPClientAbortError when the connection
    ends or is unreadable (the connection cannot be used after that)."""
    if not uids:
        return {}
    wanted = set(uids)
    found: dict[int, FetchedMessage] = {}
    command = b"UID FETCH " + uid_set(uids).encode() + b" (UID FLAGS BODY.PEEK[])"
    for segments, dropped in _command(client, command, max_bytes):
        message = _fetched(segments)
        if message is not None and message.uid in wanted:
            found[message.uid] = FetchedMessage(message.uid, message.flags, b"", too_large=True) if dropped else message
    return found


def fetch_sizes(client: IMAPClient, uids: list[int]) -> dict[int, int]:
    """The RFC822.SIZE of these UIDs of the selected folder, in octets (a message expunged meanwhile is absent)."""
    if not uids:
        return {}
    wanted = set(uids)
    sizes: dict[int, int] = {}
    for segments, _ in _command(client, b"UID FETCH " + uid_set(uids).encode() + b" (UID RFC822.SIZE)", None):
        usual = _SIZE_RESPONSE.fullmatch(segments[0]) if len(segments) == 1 else None
        attributes = _flat_attributes(usual.group(1)) if usual is not None else (_attributes(segments) or {})
        uid, size = attributes.get(b"UID"), attributes.get(b"RFC822.SIZE")
        if not (isinstance(uid, bytes) and uid.isdigit() and isinstance(size, bytes) and size.isdigit()):
            continue
        if int(uid) in wanted:
            sizes[int(uid)] = int(size)
    return sizes


def _command(client: IMAPClient, command: bytes, max_literal: int | None) -> Iterator[tuple[list[bytes], bool]]:
    """Send a FETCH command and yield each FETCH response of it (its segments, and whether a literal over
    `max_literal` was dropped) until the tagged answer."""
    imap = client._imap
    tag = b"oaken%d" % next(_tags)
    try:
        imap.send(tag + b" " + command + b"\r\n")
    except OSError as exc:
        raise IMAPClientAbortError("socket error") from exc
    while True:
        segments, dropped = _read_response(imap, max_literal)
        first = segments[0]
        if first.startswith(tag + b" "):
            status = first[len(tag) + 1 :].rstrip(b"\r\n").split(b" ", 1)[0].upper()  # "OK" may end the line
            if status != b"OK":
                raise IMAPClientError("fetch failed")
            return
        if first.startswith(b"* BYE"):
            raise IMAPClientAbortError("the server closed the connection")
        if _FETCH_START.match(first):
            yield segments, dropped
        # any other untagged response (EXISTS, EXPUNGE, OK [...]) says nothing a fetch needs


def _read_response(imap: Any, max_literal: int | None = None) -> tuple[list[bytes], bool]:
    """One response: its lines, with each literal as the element after the line that announced it, and
    whether a literal was over `max_literal` (read and dropped, left empty)."""
    segments: list[bytes] = []
    dropped = False
    while True:
        line = imap.readline()
        if not line.endswith(b"\r\n"):
            raise IMAPClientAbortError("the connection ended in a response")
        segments.append(line)
        literal = _LITERAL.search(line) if line.endswith(b"}\r\n") else None
        if literal is None:
            return segments, dropped
        size = int(literal.group(1))
        if max_literal is not None and size > max_literal:
            dropped = True
            while size > 0:
                piece = imap.read(min(size, _DISCARD_CHUNK))
                if not piece:
                    raise IMAPClientAbortError("the connection ended in a literal")
                size -= len(piece)
            segments.append(b"")
            continue
        data = imap.read(size)
        if len(data) != size:
            raise IMAPClientAbortError("the connection ended in a literal")
        segments.append(data)


def _fetched(segments: list[bytes]) -> FetchedMessage | None:
    """The UID, flags and body of one FETCH response, or None when it carries no body (a flag update)."""
    if len(segments) == 3:
        # the usual response: flat attributes, BODY[] as the one literal (two regular expressions, no lexing)
        head, tail = _USUAL_HEAD.fullmatch(segments[0]), _USUAL_TAIL.fullmatch(segments[2])
        if head is not None and tail is not None:
            attributes = _flat_attributes(head.group(1) + tail.group(1))
            uid, flags = attributes.get(b"UID", b""), attributes.get(b"FLAGS", b"")
            if uid.isdigit():
                flagged = tuple(flags[1:-1].split()) if flags.startswith(b"(") else ()
                return FetchedMessage(uid=int(uid), flags=flagged, data=segments[1])
    items = _attributes(segments)
    if items is None:  # a shape this reader does not know: imapclient's parser reads anything
        return _fetched_by_imapclient(segments)
    uid, flags, body = items.get(b"UID"), items.get(b"FLAGS"), items.get(b"BODY[]")
    if not isinstance(uid, bytes) or not uid.isdigit() or not isinstance(body, bytes):
        return None
    return FetchedMessage(uid=int(uid), flags=tuple(flags) if isinstance(flags, list) else (), data=body)


def _flat_attributes(text: bytes) -> dict[bytes, Any]:
    """{NAME: value} of name-value pairs whose values are atoms, numbers, quoted strings or flat lists, as
    the usual responses' regular expressions matched them (values as they stand in the response)."""
    return {name.upper(): value for name, value in _ATTRIBUTE.findall(text)}


def _attributes(segments: list[bytes]) -> dict[bytes, Any] | None:
    """The attribute list of a FETCH response as {NAME: value}: atoms and strings as bytes, lists as lists."""
    stack: list[list[Any]] = [[]]
    for index, segment in enumerate(segments):
        if index % 2:  # a literal
            stack[-1].append(segment)
            continue
        text = segment[:-2]
        if index + 1 < len(segments):  # drop the {n} that announced the literal
            text = text[: text.rindex(b"{")]
        text = text.rstrip(b" ")
        if index == 0:
            start = _FETCH_START.match(text)
            if start is None:
                return None
            position = start.end()
            stack.append([])
        else:
            position = 0
        length = len(text)
        while position < length:
            token = _TOKEN.match(text, position)
            if token is None:
                return None
            position = token.end()
            opened, closed, quoted, atom = token.groups()
            if opened:
                stack.append([])
            elif closed:
                if len(stack) < 2:
                    return None
                done = stack.pop()
                stack[-1].append(done)
            elif quoted is not None:
                if b"\\" in quoted:
                    quoted = re.sub(rb"\\(.)", rb"\1", quoted)
                stack[-1].append(quoted)
            else:
                stack[-1].append(None if atom == b"NIL" else atom)
    if len(stack) != 1 or len(stack[0]) != 1 or not isinstance(stack[0][0], list):
        return None
    values = stack[0][0]
    if len(values) % 2:
        return None
    return {
        name.upper(): value for name, value in zip(values[::2], values[1::2], strict=True) if isinstance(name, bytes)
    }


def _fetched_by_imapclient(segments: list[bytes]) -> FetchedMessage | None:
    # imaplib's shape: a line announcing a literal and the literal as a pair, other lines as they are
    lines: list[Any] = []
    index = 0
    while index < len(segments):
        line = segments[index][:-2]
        if index + 1 < len(segments):
            lines.append((line, segments[index + 1]))
            index += 2
        else:
            lines.append(line)
            index += 1
    try:
        parsed = parse_fetch_response(lines, False, True)
    except Exception as exc:  # imapclient raises ProtocolError and friends for nonsense
        raise IMAPClientError("unreadable fetch response") from exc
    for uid, item in parsed.items():
        body = item.get(b"BODY[]")
        if isinstance(body, bytes) and b"UID" in item:
            return FetchedMessage(uid=int(uid), flags=tuple(item.get(b"FLAGS", ())), data=body)
    return None
