"""Files uploaded as a request's raw body, spooled to disk with a bound: never held in memory whole, refused
as soon as they are known to be too big. A spooled file is named by a random token; what becomes of it (an
import, say) is an operation's to decide, which takes the token and the size the door counted."""

from __future__ import annotations

import re
import secrets
import time
from pathlib import Path
from typing import Protocol

from django.conf import settings

from apps.core.errors import OakenError

_CHUNK = 1 << 20
_TOKEN = re.compile(r"[0-9a-f]{32}")


class _Readable(Protocol):
    def read(self, size: int = -1) -> bytes: ...


class UploadTooLargeError(Exception):
    """More bytes came than the bound allows; `size` is how many were counted (at most the bound + 1)."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def spool_dir() -> Path:
    path = Path(settings.IMPORT_UPLOAD_DIR) / "spool"
    path.mkdir(parents=True, exist_ok=True)
    return path


def spool(stream: _Readable, limit: int) -> tuple[str, int]:
    """Write the stream to a new spool file: its token and size; UploadTooLargeError (the file removed) as soon
    as more than `limit` bytes came."""
    token = secrets.token_hex(16)
    path = spool_dir() / token
    size = 0
    try:
        with open(path, "xb") as file:
            while chunk := stream.read(min(_CHUNK, limit + 1 - size)):
                size += len(chunk)
                if size > limit:
                    raise UploadTooLargeError(size)
                file.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return token, size


def spooled(token: str) -> Path | None:
    """The spool file of a token, or None (no such token, or not one at all)."""
    if not _TOKEN.fullmatch(token):
        return None
    path = spool_dir() / token
    return path if path.is_file() else None


def access_upload_by_token(token: str, *, field: str = "upload") -> Path:
    """The spool file of a token; NOT_FOUND (on `field`) when there is none (expired, taken, or never one)."""
    path = spooled(token)
    if path is None:
        raise OakenError.not_found(field)
    return path


def discard(token: str) -> None:
    path = spooled(token)
    if path is not None:
        path.unlink(missing_ok=True)


def purge_spool(older_than_seconds: int) -> int:
    """Remove spool files left by requests that never got to an operation (a process killed mid-upload)."""
    cutoff = time.time() - older_than_seconds
    removed = 0
    for path in spool_dir().iterdir():
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
        except FileNotFoundError:
            continue
    return removed
