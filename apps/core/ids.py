"""Ids: new ones in time order, and a caller's id parsed so that a malformed one behaves like an unknown one."""

from __future__ import annotations

import os
import threading
import time
import uuid

from apps.core.errors import OakenError

# the longest idempotency key a caller may send, on every door (the gate's record keeps it whole)
IDEMPOTENCY_KEY_MAX_CHARS = 255
# what a key is made of, on every door: printable ASCII, not starting or ending with a space, which is exactly what
# an HTTP header carries unchanged (RFC 9110 strips a field value's outer spaces) and what any text column stores
# (no NUL, no control character); a UUID, a ULID or "retry-2" all fit. The OpenAPI document and the MCP tool list
# publish this pattern; the gate holds every key to it (apps.gate.dispatch)
IDEMPOTENCY_KEY_PATTERN = r"^[!-~]([ -~]*[!-~])?$"


class _RandomPool(threading.local):
    """OS randomness fetched in blocks: one getrandom() call per id is slow on busy imports."""

    block = 16 * 1024

    def __init__(self) -> None:
        self.pid, self.buffer, self.offset = 0, b"", 0

    def take(self, n: int) -> bytes:
        if self.pid != os.getpid() or self.offset + n > len(self.buffer):
            # a forked child must never reuse its parent's bytes
            self.pid, self.buffer, self.offset = os.getpid(), os.urandom(self.block), 0
        chunk = self.buffer[self.offset : self.offset + n]
        self.offset += n
        return chunk


_random = _RandomPool()


def new_id() -> uuid.UUID:
    """A random UUID whose leading bits are the time (UUIDv7 layout), so new rows index in order."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(_random.take(10), "big")
    value = (millis & ((1 << 48) - 1)) << 80 | rand & ((1 << 80) - 1)
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return uuid.UUID(int=value)


def parse_id(value: object, field: str) -> uuid.UUID:
    """The UUID a caller named; a malformed one is NOT_FOUND, exactly like an id that does not exist."""
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise OakenError.not_found(field) from None
