"""A small IMAP server on loopback that speaks Gmail's extensions (X-GM-EXT-1), for the tests of Gmail sync.

Like Gmail, it keeps each message once, with its labels, and shows it in every folder its labels name: INBOX
(\\Inbox), [Gmail]/Sent Mail (\\Sent), [Gmail]/Drafts (\\Draft), [Gmail]/Starred (\\Flagged), a folder per user
label, and [Gmail]/All Mail (\\All) for every message not in Trash or Spam. Each folder gives a message its own
UID the first time the folder shows it. Enough of IMAP4rev1 for what the sync sends: CAPABILITY, LOGIN, LIST,
SELECT / EXAMINE, STATUS, UID SEARCH, UID FETCH (UID, FLAGS, RFC822.SIZE, BODY.PEEK[], the Message-ID header,
X-GM-MSGID, X-GM-LABELS; CHANGEDSINCE), UID STORE (FLAGS, X-GM-LABELS), ENABLE CONDSTORE, NOOP, CLOSE,
LOGOUT. Plaintext, 127.0.0.1, a port the
system picks; an asyncio loop in a thread of its own. Every command is kept in `commands` (user, folder, line).
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from imapclient.imap_utf7 import decode as utf7_decode
from imapclient.imap_utf7 import encode as utf7_encode

PASSWORD = "gmail-secret-1"
ALL_MAIL, TRASH, SPAM = "[Gmail]/All Mail", "[Gmail]/Trash", "[Gmail]/Spam"
_SYSTEM = {
    "INBOX": "\\Inbox",
    "[Gmail]/Sent Mail": "\\Sent",
    "[Gmail]/Drafts": "\\Draft",
    "[Gmail]/Starred": "\\Starred",
    "[Gmail]/Important": "\\Important",
}
_USE = {
    "[Gmail]/All Mail": "\\All",
    "[Gmail]/Sent Mail": "\\Sent",
    "[Gmail]/Drafts": "\\Drafts",
    "[Gmail]/Starred": "\\Flagged",
    "[Gmail]/Important": "\\Important",
    "[Gmail]/Trash": "\\Trash",
    "[Gmail]/Spam": "\\Junk",
}
CAPABILITIES = "IMAP4rev1 X-GM-EXT-1 UIDPLUS CONDSTORE ENABLE"
_TOKEN = re.compile(rb'\s*(?:(\()|(\))|"((?:[^"\\]|\\.)*)"|\{(\d+)\+?\}$|([^\s()"]+))')


@dataclass
class GmailMessage:
    msgid: int
    raw: bytes
    labels: set[str]
    flags: set[str] = field(default_factory=set)
    place: str = ""  # "", "trash" or "spam"
    modseq: int = 0


@dataclass
class Mailbox:
    password: str
    messages: list[GmailMessage] = field(default_factory=list)
    # per folder: {msgid: uid}, the next UID, and the UIDVALIDITY
    uids: dict[str, dict[int, int]] = field(default_factory=dict)
    next_uid: dict[str, int] = field(default_factory=dict)
    # CONDSTORE: every change to a message (flags, labels, where it is) gives it the next MODSEQ
    modseq: int = 1

    def touch(self, message: GmailMessage) -> None:
        self.modseq += 1
        message.modseq = self.modseq


class GmailServer:
    def __init__(self) -> None:
        self.host = "127.0.0.1"
        self.port = 0
        self.boxes: dict[str, Mailbox] = {}
        self.commands: list[tuple[str, str, str]] = []
        self.selects: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._msgids = iter(range(1_600_000_000_000_000_000, 1 << 62, 7919))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None

    # --- what tests do to the mailboxes ------------------------------------------------------------------

    def add_user(self, user: str, password: str = PASSWORD) -> str:
        with self._lock:
            self.boxes[user] = Mailbox(password)
        return user

    def deliver(
        self, user: str, raw: bytes, labels: tuple[str, ...] = ("\\Inbox",), flags: tuple[str, ...] = ()
    ) -> int:
        with self._lock:
            message = GmailMessage(next(self._msgids), raw, set(labels), set(flags))
            self.boxes[user].messages.append(message)
            self.boxes[user].touch(message)
            return message.msgid

    def relabel(self, user: str, msgid: int, add: tuple[str, ...] = (), remove: tuple[str, ...] = ()) -> None:
        with self._lock:
            message = self._message(user, msgid)
            message.labels = (message.labels | set(add)) - set(remove)
            self.boxes[user].touch(message)

    def move_to(self, user: str, msgid: int, place: str) -> None:
        """Into Trash ("trash") or Spam ("spam"), or back ("")."""
        with self._lock:
            self._message(user, msgid).place = place
            self.boxes[user].touch(self._message(user, msgid))

    def _message(self, user: str, msgid: int) -> GmailMessage:
        return next(m for m in self.boxes[user].messages if m.msgid == msgid)

    def selected(self, user: str) -> list[str]:
        """The folders the user's sessions selected or examined, in order."""
        return [name for who, name in self.selects if who == user]

    def bodies_fetched(self, user: str) -> int:
        return sum(1 for who, _, line in self.commands if who == user and "BODY.PEEK[]" in line.upper())

    # --- the folders as Gmail shows them -----------------------------------------------------------------

    def _folders(self, box: Mailbox) -> list[str]:
        labels = sorted({label for m in box.messages for label in m.labels if not label.startswith("\\")})
        return ["INBOX", *_USE, *labels]

    @staticmethod
    def _member(folder: str, m: GmailMessage) -> bool:
        if folder == TRASH:
            return m.place == "trash"
        if folder == SPAM:
            return m.place == "spam"
        if m.place:
            return False
        if folder == ALL_MAIL:
            return True
        if folder == "[Gmail]/Starred":
            return "\\Flagged" in m.flags
        return _SYSTEM.get(folder, folder) in m.labels

    def _view(self, box: Mailbox, folder: str) -> list[tuple[int, GmailMessage]]:
        """(uid, message) of the folder, by UID; a message shown for the first time gets the next UID."""
        uids = box.uids.setdefault(folder, {})
        members = [m for m in box.messages if self._member(folder, m)]
        for m in members:
            if m.msgid not in uids:
                uids[m.msgid] = box.next_uid.get(folder, 1)
                box.next_uid[folder] = uids[m.msgid] + 1
        present = {m.msgid for m in members}
        for msgid in [k for k in uids if k not in present]:
            del uids[msgid]  # expunged from this folder: its UID is never given again
        return sorted(((uids[m.msgid], m) for m in members), key=lambda pair: pair[0])

    # --- the protocol -------------------------------------------------------------------------------------

    def start(self) -> GmailServer:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._session, self.host, 0), self._loop)
        self._server = future.result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _read_command(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> list[Any] | None:
        """One command as tokens (strings, bytes for literals, lists for parentheses), or None at the end."""
        data = b""
        while True:
            line = await reader.readline()
            if not line:
                return None
            data += line
            literal = re.search(rb"\{(\d+)\+?\}\r\n$", line)
            if not literal:
                break
            if not line.rstrip().endswith(b"+}"):
                writer.write(b"+ go ahead\r\n")
                await writer.drain()
            data += await reader.readexactly(int(literal.group(1)))
        return _parse(data.rstrip(b"\r\n"))

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        user = ""
        folder = ""
        writer.write(f"* OK [CAPABILITY {CAPABILITIES}] Gimap ready\r\n".encode())
        try:
            while True:
                words = await self._read_command(reader, writer)
                if words is None or len(words) < 2:
                    break
                tag, command, args = words[0], str(words[1]).upper(), words[2:]
                with self._lock:
                    self.commands.append((user, folder, " ".join(_show(w) for w in words[1:])))
                    out, user, folder, done = self._answer(tag, command, args, user, folder)
                writer.write(out)
                await writer.drain()
                if done:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    def _answer(self, tag: str, command: str, args: list[Any], user: str, folder: str) -> tuple[bytes, str, str, bool]:
        ok = f"{tag} OK {command} done\r\n".encode()
        if command == "CAPABILITY":
            return f"* CAPABILITY {CAPABILITIES}\r\n".encode() + ok, user, folder, False
        if command == "ENABLE":
            return b"* ENABLED CONDSTORE\r\n" + ok, user, folder, False
        if command in ("NOOP", "CHECK"):
            return ok, user, folder, False
        if command == "LOGOUT":
            return b"* BYE bye\r\n" + ok, user, folder, True
        if command == "LOGIN":
            name, password = (_str(a) for a in args[:2])
            box = self.boxes.get(name)
            if box is None or box.password != password:
                return f"{tag} NO [AUTHENTICATIONFAILED] Invalid credentials\r\n".encode(), user, folder, False
            return ok, name, folder, False
        if not user:
            return f"{tag} BAD log in first\r\n".encode(), user, folder, False
        box = self.boxes[user]
        if command == "LIST":
            lines = [b'* LIST (\\HasChildren \\Noselect) "/" "[Gmail]"\r\n']
            for name in self._folders(box):
                flags = " ".join(f for f in ("\\HasNoChildren", _USE.get(name)) if f)
                lines.append(f'* LIST ({flags}) "/" {_quote(utf7_encode(name).decode())}\r\n'.encode())
            return b"".join(lines) + ok, user, folder, False
        if command in ("SELECT", "EXAMINE", "STATUS"):
            name = utf7_decode(_str(args[0]).encode())
            if name not in self._folders(box):
                return f"{tag} NO [NONEXISTENT] Unknown Mailbox\r\n".encode(), user, folder, False
            view = self._view(box, name)
            validity = 1
            if command == "STATUS":
                line = f"* STATUS {_quote(_str(args[0]))} (UIDVALIDITY {validity})\r\n"
                return line.encode() + ok, user, folder, False
            text = (
                "* FLAGS (\\Answered \\Flagged \\Draft \\Deleted \\Seen)\r\n"
                f"* {len(view)} EXISTS\r\n* 0 RECENT\r\n"
                f"* OK [UIDVALIDITY {validity}] UIDs valid\r\n* OK [UIDNEXT {box.next_uid.get(name, 1)}] next\r\n"
                f"* OK [HIGHESTMODSEQ {box.modseq}] modseq\r\n"
                f"{tag} OK [{'READ-ONLY' if command == 'EXAMINE' else 'READ-WRITE'}] {name} selected\r\n"
            )
            self.selects.append((user, name))
            return text.encode(), user, name, False
        if command in ("CLOSE", "UNSELECT"):
            return ok, user, "", False
        if command == "UID" and folder and args:
            sub, rest = str(args[0]).upper(), args[1:]
            view = self._view(box, folder)
            if sub == "SEARCH":
                found = [str(uid) for uid, m in view if _matches(rest, uid, m, view)]
                return f"* SEARCH {' '.join(found)}\r\n".replace(" \r", "\r").encode() + ok, user, folder, False
            if sub == "FETCH":
                wanted = _uids(str(rest[0]), view)
                items = [str(i).upper() for i in (rest[1] if isinstance(rest[1], list) else [rest[1]])]
                since = -1
                if len(rest) > 2 and isinstance(rest[2], list) and str(rest[2][0]).upper() == "CHANGEDSINCE":
                    since = int(rest[2][1])
                    items.append("MODSEQ")
                out = b"".join(
                    _fetch_line(seq, uid, m, items)
                    for seq, (uid, m) in enumerate(view, 1)
                    if uid in wanted and m.modseq > since
                )
                return out + ok, user, folder, False
            if sub == "STORE":
                wanted = _uids(str(rest[0]), view)
                what = str(rest[1]).upper()
                values = rest[2] if isinstance(rest[2], list) else [rest[2]]
                names = {utf7_decode(_str(v).encode()) for v in values}
                for uid, m in view:
                    if uid not in wanted:
                        continue
                    target = m.labels if "X-GM-LABELS" in what else m.flags
                    if what.startswith("+"):
                        target |= names
                    elif what.startswith("-"):
                        target -= names
                    else:
                        target.clear()
                        target |= names
                    box.touch(m)
                return ok, user, folder, False
        return f"{tag} BAD unknown command\r\n".encode(), user, folder, False


def _parse(data: bytes) -> list[Any]:
    stack: list[list[Any]] = [[]]
    position = 0
    while position < len(data):
        literal = re.match(rb"\s*\{(\d+)\+?\}\r\n", data[position:])
        if literal:
            size = int(literal.group(1))
            start = position + literal.end()
            stack[-1].append(data[start : start + size])
            position = start + size
            continue
        token = _TOKEN.match(data, position)
        if token is None or token.end() == position:
            break
        position = token.end()
        opened, closed, quoted, _, atom = token.groups()
        if opened:
            stack.append([])
        elif closed:
            done = stack.pop()
            stack[-1].append(done)
        elif quoted is not None:
            stack[-1].append(re.sub(rb"\\(.)", rb"\1", quoted).decode())
        elif atom is not None:
            stack[-1].append(atom.decode())
    return stack[0]


def _show(word: Any) -> str:
    if isinstance(word, list):
        return "(" + " ".join(_show(w) for w in word) + ")"
    return "<literal>" if isinstance(word, bytes) else str(word)


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _uids(spec: str, view: list[tuple[int, GmailMessage]]) -> set[int]:
    highest = view[-1][0] if view else 0
    found: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.partition(":")
        a = highest if low == "*" else int(low)
        b = a if not high else (highest if high == "*" else int(high))
        found.update(uid for uid, _ in view if min(a, b) <= uid <= max(a, b))
    return found


def _message_id(raw: bytes) -> str:
    found = re.search(rb"^Message-ID:\s*(\S+)", raw, re.IGNORECASE | re.MULTILINE)
    return found.group(1).decode() if found else ""


def _matches(criteria: list[Any], uid: int, m: GmailMessage, view: list[tuple[int, GmailMessage]]) -> bool:
    def one(index: int) -> tuple[bool, int]:
        key = str(criteria[index]).upper()
        if key == "ALL":
            return True, index + 1
        if key == "UID":
            return uid in _uids(str(criteria[index + 1]), view), index + 2
        if key == "X-GM-MSGID":
            return m.msgid == int(criteria[index + 1]), index + 2
        if key == "HEADER":
            return _message_id(m.raw) == _str(criteria[index + 2]), index + 3
        if key == "OR":
            left, after = one(index + 1)
            right, end = one(after)
            return left or right, end
        raise ValueError(key)

    index, result = 0, True
    while index < len(criteria):
        matched, index = one(index)
        result = result and matched
    return result


def _fetch_line(seq: int, uid: int, m: GmailMessage, items: list[str]) -> bytes:
    parts: list[bytes] = [f"UID {uid}".encode()]
    literals: list[tuple[bytes, bytes]] = []
    for item in items:
        if item == "FLAGS":
            parts.append(f"FLAGS ({' '.join(sorted(m.flags))})".encode())
        elif item == "RFC822.SIZE":
            parts.append(f"RFC822.SIZE {len(m.raw)}".encode())
        elif item == "MODSEQ":
            parts.append(f"MODSEQ ({m.modseq})".encode())
        elif item == "X-GM-MSGID":
            parts.append(f"X-GM-MSGID {m.msgid}".encode())
        elif item == "X-GM-THRID":
            parts.append(f"X-GM-THRID {m.msgid}".encode())
        elif item == "X-GM-LABELS":
            shown = [
                label if label.startswith("\\") else _quote(utf7_encode(label).decode()) for label in sorted(m.labels)
            ]
            parts.append(f"X-GM-LABELS ({' '.join(shown)})".encode())
        elif item in ("BODY.PEEK[]", "BODY[]", "RFC822"):
            literals.append((b"BODY[]" if item != "RFC822" else b"RFC822", m.raw))
        elif item.startswith("BODY.PEEK[HEADER.FIELDS"):
            header = f"Message-ID: {_message_id(m.raw)}\r\n\r\n".encode()
            literals.append((b"BODY[HEADER.FIELDS (MESSAGE-ID)]", header))
    out = f"* {seq} FETCH (".encode() + b" ".join(parts)
    for name, data in literals:
        out += b" " + name + b" {" + str(len(data)).encode() + b"}\r\n" + data
    return out + b")\r\n"


@contextmanager
def gmail_like() -> Iterator[GmailServer]:
    """A running Gmail-like server, stopped afterwards."""
    server = GmailServer().start()
    try:
        yield server
    finally:
        server.stop()
