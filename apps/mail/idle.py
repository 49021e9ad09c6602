"""One IMAP connection that waits in IDLE (RFC 2177) on a mailbox's INBOX, over asyncio streams.

Only what waiting needs: the greeting, STARTTLS, LOGIN (or AUTHENTICATE PLAIN for other than ASCII, as the
sync does), CAPABILITY, EXAMINE INBOX (read-only: waiting changes nothing on the server), IDLE and DONE. TLS
is the sync's (apps.mail.imap.open_imap): the system's default context, the certificate checked against the
host. A server's words are never logged nor raised (they could quote what was sent): failures are IdleError
with a fixed reason.
"""

from __future__ import annotations

import asyncio
import base64
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

# untagged responses that say the mailbox changed: new mail (EXISTS, RECENT), mail gone (EXPUNGE), flags (FETCH)
_EVENT = re.compile(rb"^\* \d+ (EXISTS|RECENT|EXPUNGE|FETCH)\b", re.IGNORECASE)
_LITERAL = re.compile(rb"\{(\d+)\+?\}\r?\n$")
_LINE_MAX = 64 * 1024
_LITERAL_MAX = 1024 * 1024


class IdleError(Exception):
    """The connection failed or the server refused: `reason` is fixed text, never the server's."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NoIdleError(IdleError):
    """The server does not offer IDLE: the account is left to polling."""

    def __init__(self) -> None:
        super().__init__("no_idle")


@dataclass(frozen=True)
class ImapLogin:
    """Where and as whom to log in (the password lives only in the watcher's memory; never in a repr)."""

    host: str
    port: int
    security: str  # "ssl" | "starttls" | "none"
    username: str
    password: str = field(repr=False)
    # an OAuth mailbox: an access token and the provider's SASL mechanism (XOAUTH2 or OAUTHBEARER) instead
    bearer: str = field(default="", repr=False)
    mechanism: str = ""
    # where to connect: the address `host` was resolved to and checked at (apps.mail.imap.pinned_address); TLS
    # checks the certificate against `host`. Empty: `host` itself
    address: str = ""


def _quoted(value: str) -> bytes:
    if any(c in value for c in "\r\n\x00"):
        raise IdleError("unsupported_characters")
    return b'"' + value.replace("\\", "\\\\").replace('"', '\\"').encode() + b'"'


class IdleConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float) -> None:
        self.reader, self.writer, self.timeout = reader, writer, timeout
        self.capabilities: set[str] = set()
        self._tag = 0

    @classmethod
    async def open(cls, login: ImapLogin, timeout: float) -> IdleConnection:
        context = ssl.create_default_context() if login.security in {"ssl", "starttls"} else None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    login.address or login.host,
                    login.port,
                    ssl=context if login.security == "ssl" else None,
                    server_hostname=login.host if login.security == "ssl" else None,
                    limit=_LINE_MAX,
                ),
                timeout,
            )
        except ssl.SSLError:
            raise IdleError("tls_failed") from None
        except (OSError, TimeoutError, UnicodeError):
            raise IdleError("connection_failed") from None
        conn = cls(reader, writer, timeout)
        try:
            greeting = await conn._line(timeout)
            if not greeting.upper().startswith(b"* OK"):
                raise IdleError("server_error")
            if login.security == "starttls":
                await conn.command(b"STARTTLS")
                assert context is not None
                if getattr(reader, "_buffer", b""):
                    # bytes sent before the handshake would be read as if they came over TLS (an injection)
                    raise IdleError("tls_failed")
                try:
                    await asyncio.wait_for(writer.start_tls(context, server_hostname=login.host), timeout)
                except (ssl.SSLError, OSError, TimeoutError):
                    raise IdleError("tls_failed") from None
            await conn._login(login)
            for line in await conn.command(b"CAPABILITY"):
                if line.upper().startswith(b"* CAPABILITY "):
                    conn.capabilities |= set(line[13:].decode("ascii", "replace").upper().split())
        except BaseException:
            conn.close()
            raise
        return conn

    async def _login(self, login: ImapLogin) -> None:
        if login.bearer:
            await self._bearer_login(login)
            return
        if f"{login.username}{login.password}".isascii():
            await self.command(b"LOGIN " + _quoted(login.username) + b" " + _quoted(login.password), refusal="login")
            return
        tag = self._send(b"AUTHENTICATE PLAIN")
        line = await self._line(self.timeout)
        if not line.startswith(b"+"):
            raise IdleError("unsupported_characters")
        secret = b"\x00" + login.username.encode() + b"\x00" + login.password.encode()
        self.writer.write(base64.b64encode(secret) + b"\r\n")
        await self._complete(tag, refusal="login")

    async def _bearer_login(self, login: ImapLogin) -> None:
        """AUTHENTICATE with the access token (the same initial response the sync sends); a refusal comes as a
        challenge (the server's error, JSON) that an empty line answers before the tagged NO."""
        from apps.mail.imap import bearer_response

        mechanism = login.mechanism or "XOAUTH2"
        if mechanism not in ("XOAUTH2", "OAUTHBEARER"):
            raise IdleError("unsupported_mechanism")
        tag = self._send(b"AUTHENTICATE " + mechanism.encode())
        await self.writer.drain()
        if not (await self._line(self.timeout)).startswith(b"+"):
            raise IdleError("login_failed")
        self.writer.write(bearer_response(mechanism, login.username, login.bearer).encode() + b"\r\n")
        await self.writer.drain()
        await self._complete(tag, refusal="login", challenged=True)

    def _send(self, command: bytes) -> bytes:
        self._tag += 1
        tag = b"W%d" % self._tag
        self.writer.write(tag + b" " + command + b"\r\n")
        return tag

    async def _line(self, timeout: float | None) -> bytes:
        """One response line, a literal in it read along (FETCH may carry one); ConnectionError at the end."""
        try:
            line = await asyncio.wait_for(self.reader.readline(), timeout)
        except (ValueError, asyncio.LimitOverrunError):
            raise IdleError("server_error") from None
        if not line:
            raise ConnectionError("closed")
        while (literal := _LITERAL.search(line)) is not None:
            size = int(literal[1])
            if size > _LITERAL_MAX:
                raise IdleError("server_error")
            data = await asyncio.wait_for(self.reader.readexactly(size), self.timeout)
            rest = await asyncio.wait_for(self.reader.readline(), self.timeout)
            line = line + data + rest
        return line

    async def _complete(
        self,
        tag: bytes,
        *,
        refusal: str = "server_error",
        on_line: Callable[[bytes], None] | None = None,
        challenged: bool = False,
    ) -> list[bytes]:
        untagged: list[bytes] = []
        while True:
            line = await self._line(self.timeout)
            if challenged and line.startswith(b"+"):  # a SASL challenge: the empty answer ends the exchange
                self.writer.write(b"\r\n")
                await self.writer.drain()
                continue
            if line.startswith(tag + b" "):
                if line[len(tag) + 1 :].upper().startswith(b"OK"):
                    return untagged
                raise IdleError("login_failed" if refusal == "login" else refusal)
            if line.upper().startswith(b"* BYE"):
                raise ConnectionError("bye")
            if on_line is not None:
                on_line(line)
            untagged.append(line)

    async def command(self, command: bytes, *, refusal: str = "server_error") -> list[bytes]:
        tag = self._send(command)
        await self.writer.drain()
        return await self._complete(tag, refusal=refusal)

    async def examine_inbox(self) -> None:
        await self.command(b"EXAMINE INBOX")

    async def idle(self, seconds: float, changed: Callable[[], None]) -> None:
        """IDLE for `seconds` (then DONE), calling `changed` whenever the server says INBOX changed."""
        if "IDLE" not in self.capabilities:
            raise NoIdleError()

        def look(line: bytes) -> None:
            if _EVENT.match(line):
                changed()

        tag = self._send(b"IDLE")
        await self.writer.drain()
        while True:
            line = await self._line(self.timeout)
            if line.startswith(b"+"):
                break
            if line.startswith(tag + b" "):
                raise IdleError("server_error")
            look(line)
        loop = asyncio.get_running_loop()
        ends = loop.time() + seconds
        while (left := ends - loop.time()) > 0:
            try:
                line = await self._line(left)
            except TimeoutError:
                break
            if line.upper().startswith(b"* BYE"):
                raise ConnectionError("bye")
            look(line)
        self.writer.write(b"DONE\r\n")
        await self.writer.drain()
        await self._complete(tag, on_line=look)

    def close(self) -> None:
        self.writer.close()
