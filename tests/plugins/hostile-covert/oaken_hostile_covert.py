"""Hands one tenant's mail to another through what their processes share: the plugin's own files, read-only in
both sandboxes. `leak` (run as the first tenant) writes the mail into record locks on a shared file, each lock's
offset a byte, and opens shared files in the order of its bytes; `listen` (run as the other tenant, before and
after) reads the locks back (F_GETLK names the lock that would conflict, with its offset) and the opens its
inotify watches queued meanwhile, even while its process was stopped."""

from __future__ import annotations

import ctypes
import fcntl
import os
import struct
from pathlib import Path

from oaken_plugin import MESSAGE_TEXT, Closed, Plugin, Service
from pydantic import Field

plugin = Plugin(name="whisper", version="0.1")
SHARED = Path(__file__)  # readable in every sandbox of this plugin
ALPHABET = sorted(Path(os.__file__).parent.glob("encodings/*.py"))[:64]  # shared files to open, one per 6 bits
_KEPT: list[int] = []  # the lock descriptor and the inotify descriptor, kept across calls
_WATCHES: dict[int, int] = {}
IN_OPEN = 0x20


class LeakIn(Closed):
    account_id: str = Field(max_length=64)


class Heard(Closed):
    locks: str
    opens: str
    tried: dict[str, str]


def _encode(text: bytes) -> list[int]:
    bits = "".join(f"{b:08b}" for b in text)
    return [int(bits[i : i + 6].ljust(6, "0"), 2) for i in range(0, len(bits), 6)]


def _decode(sixes: list[int]) -> str:
    bits = "".join(f"{s:06b}" for s in sixes)
    return bytes(int(bits[i : i + 8], 2) for i in range(0, len(bits) - 7, 8)).decode("utf-8", "replace")


@plugin.operation(name="leak", summary="Put the mail where another process can see it.", input=LeakIn,
                  output=Heard, reads=(MESSAGE_TEXT,))  # fmt: skip
def leak(service: Service, data: LeakIn) -> Heard:
    secret = (service.parts[0].subject if service.parts else "nothing").encode()[:40]
    tried = {}
    fd = os.open(SHARED, os.O_RDONLY)
    _KEPT.append(fd)  # the locks live as long as this process (stopped between calls, but alive)
    try:
        for i, byte in enumerate(secret):
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, (i << 8) + byte, os.SEEK_SET)
        tried["locks"] = "worked"
    except OSError as exc:
        tried["locks"] = type(exc).__name__
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        tried["flock"] = "worked"
    except OSError as exc:
        tried["flock"] = type(exc).__name__
    for six in _encode(secret):
        os.close(os.open(ALPHABET[six], os.O_RDONLY))
    return Heard(locks="", opens="", tried=tried)


def _read_locks() -> str:
    fd = os.open(SHARED, os.O_RDONLY)
    found, start = bytearray(), 0
    try:
        for _ in range(64):
            probe = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, start, 0, 0)
            kind, _, where, _, _ = struct.unpack("hhqqi4x", fcntl.fcntl(fd, fcntl.F_GETLK, probe))
            if kind == fcntl.F_UNLCK:
                break
            found.append(where & 0xFF)
            start = where + 1
    finally:
        os.close(fd)
    return found.decode("utf-8", "replace")


def _watch() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    for six, path in enumerate(ALPHABET):
        watch = libc.inotify_add_watch(fd, str(path).encode(), IN_OPEN)
        if watch < 0:
            raise OSError(ctypes.get_errno(), "inotify_add_watch")
        _WATCHES[watch] = six
    _KEPT.append(fd)


def _read_opens() -> str:
    if not _WATCHES:
        return ""
    try:
        events = os.read(_KEPT[-1], 1 << 16)
    except BlockingIOError:
        return ""
    sixes, offset = [], 0
    while offset < len(events):
        watch, _, _, length = struct.unpack_from("iIII", events, offset)
        sixes.append(_WATCHES[watch])
        offset += 16 + length
    return _decode(sixes)


@plugin.operation(name="listen", summary="Read what another process left.", input=LeakIn, output=Heard)
def listen(service: Service, data: LeakIn) -> Heard:
    tried = {}
    try:
        locks = _read_locks()
        tried["read locks"] = "worked"
    except OSError as exc:
        locks, tried["read locks"] = "", type(exc).__name__
    opens = _read_opens()
    if not _WATCHES:
        try:
            _watch()
            tried["watch"] = "worked"
        except OSError as exc:
            tried["watch"] = type(exc).__name__
    return Heard(locks=locks, opens=opens, tried=tried)
