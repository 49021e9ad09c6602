"""What the embedded servers share: the data folder, the secrets made once into it, a lock, the list of the
processes holding a server, and folders for unix sockets that only the server's user (and root) may enter.

Nothing here imports Django: the `oaken` command and the test plugin use it before Django starts, and so do the
settings (the data folder, the secret key's file).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

log = logging.getLogger("oaken.embedded")

BASE_DIR = Path(__file__).resolve().parent.parent.parent
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


def new_password() -> str:
    return secrets.token_urlsafe(32)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class Handles:
    """Pids of live processes that hold an embedded server, kept in a JSON file under a lock."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def live(self) -> list[int]:
        try:
            pids = json.loads(self.path.read_text() or "[]")
        except (FileNotFoundError, ValueError):
            return []
        return [p for p in pids if isinstance(p, int) and psutil.pid_exists(p)]

    def add(self, pid: int) -> None:
        pids = self.live()
        if pid not in pids:
            pids.append(pid)
        self.path.write_text(json.dumps(pids))

    def remove(self, pid: int) -> list[int]:
        """Drop pid; returns the live holders that remain."""
        pids = [p for p in self.live() if p != pid]
        self.path.write_text(json.dumps(pids))
        return pids


def private_folder(path: Path, owner: int) -> Path:
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


def alias(preferred: Path) -> Path:
    """A short folder under /tmp standing for `preferred` (one per data folder)."""
    digest = hashlib.sha256(str(preferred).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"oaken-{digest}"


def too_deep(preferred: Path) -> bool:
    return len(str(preferred / ".s.PGSQL.5432")) > _SOCKET_PATH_LIMIT


def socket_dir(preferred: Path) -> Path:
    """preferred when a socket path in it fits the kernel limit, else a short alias under /tmp only we may enter."""
    return private_folder(alias(preferred), os.geteuid()) if too_deep(preferred) else preferred


def socket_path(preferred: Path, name: str) -> Path:
    """A unix socket named `name` in the folder `preferred` (made, mode 0700), or, where that path is longer than
    the kernel allows, in a short folder under /tmp standing for it that only we may enter."""
    preferred.mkdir(mode=0o700, parents=True, exist_ok=True)
    if len(str(preferred / name)) <= _SOCKET_PATH_LIMIT:
        return preferred / name
    return private_folder(alias(preferred), os.geteuid()) / name


class EmbeddedServerAway(RuntimeError):
    """An embedded server that another process holds is not answering; this process will not start another."""
