"""Embedded PostgreSQL (with pgvector) and Redis for machines where none is configured.

When `DATABASE_URL` / `REDIS_URL` are unset, the entry points (the `oaken` command and the
test plugin) call `ensure_environment()` before Django starts. It starts, or attaches to, one
PostgreSQL server and one Redis server whose data live under the data folder, and exports
their URLs so that every child process (web, worker, beat) connects to the same servers.

Several processes may share one embedded server: each attaching process records its pid in a
handle list, and the server is stopped when the last live holder lets go.

Both servers ask every client for a password, made once into <data>/secrets/ (postgres-password,
redis-password; mode 0600) like the secret key; the exported URLs carry them, and nothing logs them. Being a
local process, or root, lets no one in: the sockets are in folders only the server's user (and root) may enter.

Each server has a module of its own (postgres, redis); what they share (the data folder, secrets, the holders'
list, socket folders) is in `common`. Every name the `oaken` command, the settings, the test plugin and the tests
use is importable from here.
"""

from __future__ import annotations

import atexit
import os

from config.embedded.common import (
    BASE_DIR,
    EmbeddedServerAway,
    data_dir,
    log,
    secret_from_file,
    socket_path,
)
from config.embedded.postgres import EmbeddedPostgres, start_server
from config.embedded.redis import EmbeddedRedis

__all__ = [
    "BASE_DIR",
    "EmbeddedPostgres",
    "EmbeddedRedis",
    "EmbeddedServerAway",
    "data_dir",
    "ensure_environment",
    "release_all",
    "secret_from_file",
    "socket_path",
    "start_server",
]

_started: list[EmbeddedPostgres | EmbeddedRedis] = []


def ensure_environment() -> None:
    """Export DATABASE_URL and REDIS_URL, starting embedded servers for the ones that are unset (their URLs carry
    the passwords: every child process, web, worker and beat, connects with them)."""
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
