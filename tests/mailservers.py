"""Real mail servers on loopback for the tests: Dovecot (IMAP, Debian's dovecot-imapd) and an SMTP server
(aiosmtpd) that can deliver into the Dovecot mailboxes and can misbehave on purpose.

Dovecot runs from a configuration written into a temporary folder: plaintext auth on 127.0.0.1 only, a
passwd-file of users, Maildir homes, special-use Sent/Drafts/Trash/Junk folders. As root it runs its mail
processes as the `dovecot` user (it refuses uid 0); as anyone else, as that user.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from pathlib import Path
from typing import Any

import pytest
from imapclient import IMAPClient

from tests.loopback import free_port, stop, wait_for_port

DOVECOT = shutil.which("dovecot") or "/usr/sbin/dovecot"
PASSWORD = "imap-secret-1"


_CONFIG = """\
base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
info_log_path = {root}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login{oauth_mechanisms}
auth_failure_delay = 0
default_login_user = {login_user}
default_internal_user = {internal_user}
first_valid_uid = 1
mail_location = maildir:~/Maildir
mail_max_userip_connections = 200
imap_capability = +CONDSTORE
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {root}/users
}}
{oauth_passdb}userdb {{
  driver = static
  args = uid={uid} gid={gid} home={root}/home/%u
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
service imap-login {{
  chroot =
}}
namespace inbox {{
  inbox = yes
  separator = /
  mailbox Sent {{
    special_use = \\Sent
    auto = subscribe
  }}
  mailbox Drafts {{
    special_use = \\Drafts
    auto = subscribe
  }}
  mailbox Trash {{
    special_use = \\Trash
    auto = subscribe
  }}
  mailbox Junk {{
    special_use = \\Junk
    auto = subscribe
  }}
  # not made by itself (auto = no): an Archive folder exists where a test creates it, with its special use
  mailbox Archive {{
    special_use = \\Archive
  }}
}}
"""

# With an introspection URL, Dovecot also takes XOAUTH2 and OAUTHBEARER, asking that URL whether a token is live
# and whose it is (RFC 7662): the loopback OAuth provider of tests/oauthprovider.py answers it.
_OAUTH_PASSDB = """\
passdb {{
  driver = oauth2
  mechanisms = xoauth2 oauthbearer
  args = {root}/oauth2.conf.ext
}}
"""
_OAUTH_CONF = """\
introspection_url = {url}
introspection_mode = post
username_attribute = username
active_attribute = active
active_value = true
"""


@dataclass
class ImapServer:
    """A running Dovecot: its port, and ways to make users and put mail in their folders."""

    root: Path
    port: int
    host: str = "127.0.0.1"
    users: list[str] = field(default_factory=list)
    _users_stamp: int = 0

    def add_user(self, name: str, password: str = PASSWORD) -> str:
        users = self.root / "users"
        with users.open("a") as fh:
            fh.write(f"{name}:{{PLAIN}}{password}::::::\n")
        # Dovecot looks at the passwd-file at most once a second, and re-reads it only when its mtime
        # (whole seconds) changed: step the mtime past the last one and let the second end, or a user
        # added within the second of the last look cannot log in yet
        written = time.time()
        stamp = max(int(written), self._users_stamp + 1)
        os.utime(users, (stamp, stamp))
        self._users_stamp = stamp
        time.sleep(max(0.0, int(written) + 1 - time.time()))
        self.users.append(name)
        return name

    def client(self, user: str, password: str = PASSWORD) -> IMAPClient:
        client = IMAPClient(self.host, port=self.port, ssl=False, timeout=30)
        client.login(user, password)
        return client

    def append(self, user: str, folder: str, raw: bytes, flags: tuple[bytes, ...] = ()) -> None:
        with self.client(user) as c:
            c.append(folder, raw, flags=flags)

    def folder_messages(self, user: str, folder: str) -> list[tuple[int, bytes, tuple[bytes, ...]]]:
        """(uid, raw bytes, flags) of every message in the folder."""
        with self.client(user) as c:
            c.select_folder(folder, readonly=True)
            uids = c.search("ALL")
            data = c.fetch(uids, ["BODY.PEEK[]", "FLAGS"]) if uids else {}
            return [(uid, data[uid][b"BODY[]"], tuple(data[uid][b"FLAGS"])) for uid in sorted(data)]


def _run_as() -> tuple[str, int, int]:
    if os.geteuid() == 0:
        entry = pwd.getpwnam("dovecot")
        return entry.pw_name, entry.pw_uid, entry.pw_gid
    entry = pwd.getpwuid(os.geteuid())
    return entry.pw_name, entry.pw_uid, entry.pw_gid


def start_dovecot(root: Path, extra: str = "", introspection_url: str = "") -> tuple[ImapServer, subprocess.Popen[Any]]:
    """`extra`: configuration appended (a capability list without IDLE, limits for many connections);
    `introspection_url`: bearer tokens that URL says are live log in too (XOAUTH2, OAUTHBEARER)."""
    if not Path(DOVECOT).exists():
        pytest.skip("dovecot is missing: install Debian's dovecot-imapd (bin/system-packages does, as root)")
    user, uid, gid = _run_as()
    login_user = "dovenull" if os.geteuid() == 0 else user
    for sub in ("run", "state", "home"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "users").touch()
    if os.geteuid() == 0:
        for path in (root / "home", root / "state"):
            os.chown(path, uid, gid)
    port = free_port()
    config = root / "dovecot.conf"
    oauth_passdb = ""
    if introspection_url:
        (root / "oauth2.conf.ext").write_text(_OAUTH_CONF.format(url=introspection_url))
        oauth_passdb = _OAUTH_PASSDB.format(root=root)
    config.write_text(
        _CONFIG.format(
            root=root,
            port=port,
            login_user=login_user,
            internal_user=user,
            uid=uid,
            gid=gid,
            oauth_mechanisms=" xoauth2 oauthbearer" if introspection_url else "",
            oauth_passdb=oauth_passdb,
        )
        + extra
    )
    proc = subprocess.Popen([DOVECOT, "-F", "-c", str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    log = root / "dovecot.log"
    wait_for_port(port, proc, "dovecot", lambda: log.read_text() if log.exists() else "")
    return ImapServer(root=root, port=port), proc


@contextmanager
def dovecot(extra: str = "", introspection_url: str = "") -> Iterator[ImapServer]:
    """A Dovecot in its own folder under /tmp (pytest's are private to root; Dovecot's processes run as
    another user and must read their configuration and homes), removed afterwards. With `introspection_url`, it
    also logs in by OAuth bearer tokens that URL says are live."""
    root = Path(tempfile.mkdtemp(prefix="oaken-dovecot-"))
    os.chmod(root, 0o755)  # noqa: S103 (test servers running as another user must read it)
    try:
        server, proc = start_dovecot(root, extra, introspection_url)
        try:
            yield server
        finally:
            stop(proc, timeout=15)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def imap_server() -> Iterator[ImapServer]:
    """One Dovecot for a test module; each test makes its own users (so tests never share mail)."""
    with dovecot() as server:
        yield server


# --- SMTP ----------------------------------------------------------------------------------------------------


@dataclass
class Received:
    mail_from: str
    recipients: list[str]
    data: bytes

    @property
    def message_id(self) -> str:
        return str(message_from_bytes(self.data).get("Message-ID", "")).strip()


class SmtpServer:
    """aiosmtpd on loopback. Every accepted message is kept in `received`; `data_commands` counts DATA
    transactions seen; with `drop_after_data` the server takes the message and closes the connection
    without answering (the client cannot know whether it was sent); with `stall_after_data` it takes the
    message and answers nothing until `release()` (a worker can be killed while it waits); `stall_at_rcpt` holds
    the first RCPT TO unanswered until `release()`, before any DATA (nothing can have been sent); `defer_mail` makes
    the next that many MAIL FROM commands answer 451 (try again later); `refuse_rcpt` answers every RCPT TO
    with 550; with `deliver_to` set to an ImapServer, each message is appended to every local recipient's
    INBOX there."""

    def __init__(self, deliver_to: ImapServer | None = None, bearer_check: Any = None) -> None:
        from aiosmtpd.controller import Controller

        self.received: list[Received] = []
        self.data_commands = 0
        self.connections = 0
        self.mail_commands = 0
        self.drop_after_data = False
        self.stall_after_data = False
        self.stall_at_rcpt = False
        self.rcpt_commands = 0
        self.defer_mail = 0
        self.refuse_rcpt = False
        self.deliver_to = deliver_to
        self._lock = threading.Lock()
        self._released = threading.Event()
        self.port = free_port()
        self.host = "127.0.0.1"
        # with `bearer_check(address, token) -> bool`, AUTH XOAUTH2 and OAUTHBEARER are offered (and only they),
        # `bearer_logins` keeps the addresses that logged in
        self.bearer_check = bearer_check
        self.bearer_logins: list[str] = []
        self.bearer_refusals = 0
        options: dict[str, Any] = {}
        if bearer_check is not None:
            options = {"auth_require_tls": False, "auth_exclude_mechanism": ["PLAIN", "LOGIN"]}
        self.controller = Controller(self, hostname=self.host, port=self.port, **options)

    async def handle_EHLO(
        self, server: Any, session: Any, envelope: Any, hostname: str, responses: list[str]
    ) -> list[str]:
        with self._lock:
            self.connections += 1
        session.host_name = hostname
        return responses

    async def handle_MAIL(self, server: Any, session: Any, envelope: Any, address: str, mail_options: list[str]) -> str:
        with self._lock:
            self.mail_commands += 1
            if self.defer_mail > 0:
                self.defer_mail -= 1
                return "451 4.3.0 try again later"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]) -> str:
        with self._lock:
            self.rcpt_commands += 1
        if self.stall_at_rcpt:
            await asyncio.get_running_loop().run_in_executor(None, self._released.wait, 300)
        if self.refuse_rcpt:
            return "550 5.1.1 no such user"
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = Received(envelope.mail_from, list(envelope.rcpt_tos), bytes(envelope.content))
        with self._lock:
            self.data_commands += 1
            self.received.append(message)
        if self.deliver_to is not None:
            for rcpt in message.recipients:
                if rcpt in self.deliver_to.users:
                    self.deliver_to.append(rcpt, "INBOX", message.data)
        if self.drop_after_data:
            server.transport.close()
            return "421 connection dropped"  # never reaches the client: the transport is closed
        if self.stall_after_data:
            # the message is taken; the client waits for an answer that comes only once released
            await asyncio.get_running_loop().run_in_executor(None, self._released.wait, 300)
        return "250 OK"

    async def _bearer(self, server: Any, args: list[str], mechanism: str) -> Any:
        from aiosmtpd.smtp import AuthResult

        if self.bearer_check is None or len(args) != 2:
            return AuthResult(success=False)
        try:
            text = base64.b64decode(args[1], validate=True).decode()
        except ValueError:
            return AuthResult(success=False)
        fields = dict(part.split("=", 1) for part in text.split("\x01") if "=" in part)
        address = fields.get("user", "")
        if mechanism == "OAUTHBEARER":  # "n,a=<address>,": the GS2 header (RFC 7628)
            header = text.split("\x01", 1)[0]
            address = next((p[2:] for p in header.split(",") if p.startswith("a=")), "")
        token = fields.get("auth", "").removeprefix("Bearer ")
        if self.bearer_check(address, token):
            with self._lock:
                self.bearer_logins.append(address)
            return AuthResult(success=True, auth_data=address)
        with self._lock:
            self.bearer_refusals += 1
        # an error challenge, then 535 once the client answers it (what Gmail does)
        await server.challenge_auth(json.dumps({"status": "401", "schemes": "bearer"}))
        return AuthResult(success=False)

    async def auth_XOAUTH2(self, server: Any, args: list[str]) -> Any:
        return await self._bearer(server, args, "XOAUTH2")

    async def auth_OAUTHBEARER(self, server: Any, args: list[str]) -> Any:
        return await self._bearer(server, args, "OAUTHBEARER")

    def release(self) -> None:
        """Let a stalled DATA answer (its client may be long gone)."""
        self._released.set()

    def start(self) -> SmtpServer:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.release()
        self.controller.stop()


@pytest.fixture
def smtp_server(imap_server: ImapServer) -> Iterator[SmtpServer]:
    """An SMTP server on loopback delivering into the module's Dovecot."""
    server = SmtpServer(deliver_to=imap_server).start()
    try:
        yield server
    finally:
        server.stop()
