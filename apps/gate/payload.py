"""Request bodies at the operation doors (REST and MCP): read with a bound, parsed with a bound.

The largest call the bounds allow is an e-mail with its files in base64, so these doors take bodies of up to
OPERATION_BODY_MAX_BYTES, after the caller is authenticated; every other endpoint keeps Django's own small
DATA_UPLOAD_MAX_MEMORY_SIZE. JSON that is mostly objects or arrays costs many times its size in memory when
parsed, and no operation takes more than a few hundred of them, so a body with more than JSON_CONTAINERS_MAX
is refused before it is parsed (a brace inside a string counts too: real input has a handful).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from django.conf import settings

from apps.core.errors import OakenError

JSON_CONTAINERS_MAX = 20_000


class _Readable(Protocol):
    def read(self, size: int = -1) -> bytes: ...


class BodyTooLargeError(OakenError):
    """LIMIT_EXCEEDED for a whole body: the doors answer it with HTTP 413."""

    def __init__(self) -> None:
        limit = int(settings.OPERATION_BODY_MAX_BYTES)
        super().__init__("LIMIT_EXCEEDED", f"the request body is larger than the largest call allows ({limit} bytes)")


def read_body(stream: _Readable | None, meta: Mapping[str, Any]) -> bytes:
    """The whole body, refused as soon as it is known to be over OPERATION_BODY_MAX_BYTES."""
    limit = int(settings.OPERATION_BODY_MAX_BYTES)
    try:
        declared = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        raise BodyTooLargeError
    data = stream.read(limit + 1) if stream is not None else b""
    if len(data) > limit:
        raise BodyTooLargeError
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class NotStrictJsonError(ValueError):
    """JSON a lenient parser would take but that is not strict JSON (RFC 8259, I-JSON): not UTF-8, or an object
    that repeats a key. Its message is fixed: it never quotes the body."""


def strict_text(data: bytes) -> str:
    """The body as text: UTF-8 only (json.loads would guess UTF-16 or UTF-32, and pass encoded surrogates)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise NotStrictJsonError("the body is not UTF-8") from None


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object_pairs_hook: an object, refused when it names a key twice (else the last one would silently win,
    and what a check read could differ from what an operation used)."""
    made = dict(pairs)
    if len(made) != len(pairs):
        raise NotStrictJsonError("an object in the body repeats a key")
    return made


def loads(raw: bytes | str) -> Any:
    """Parse strict JSON (UTF-8, no NaN or Infinity, no repeated keys), refusing (LIMIT_EXCEEDED) a body of more
    objects and arrays than any operation takes; raises ValueError (or RecursionError) when it is not JSON,
    NotStrictJsonError (a ValueError) when it is not strict JSON."""
    data = raw.encode() if isinstance(raw, str) else raw
    if data.count(b"{") + data.count(b"[") > JSON_CONTAINERS_MAX:
        raise OakenError("LIMIT_EXCEEDED", f"the body holds more than {JSON_CONTAINERS_MAX} JSON objects and arrays")
    return json.loads(strict_text(data), parse_constant=_no_constant, object_pairs_hook=unique_keys)


# Characters no text column can hold: NUL (PostgreSQL refuses it in text) and lone surrogates (not UTF-8 at all).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
NESTING_MAX = 32


def _invalid_at(path: tuple[str, ...], phrase: str) -> OakenError:
    return OakenError.invalid(".".join(path), phrase)


def check_storable(raw: Any, refuse: Callable[[tuple[str, ...], str], OakenError] = _invalid_at) -> None:
    """Refuse input holding text that cannot be stored, or nested deeper than any operation takes, naming the
    field (never the value) before the input is parsed: INVALID_INPUT instead of a database error later.
    `refuse` makes the refusal from where and what (the gate names only what the operation's schema knows)."""
    stack: list[tuple[Any, tuple[str, ...]]] = [(raw, ())]
    while stack:
        value, path = stack.pop()
        if len(path) > NESTING_MAX:
            raise refuse(path[:NESTING_MAX], "is nested too deeply")
        if isinstance(value, str):
            if _UNSTORABLE.search(value):
                raise refuse(path, "holds a character that cannot be stored (NUL or a lone surrogate)")
        elif isinstance(value, dict):
            for key, item in value.items():
                name = str(key)
                if _UNSTORABLE.search(name):
                    raise refuse(path, "names a field with a character that cannot be stored")
                stack.append((item, (*path, name)))
        elif isinstance(value, list | tuple):
            stack.extend((item, (*path, str(i))) for i, item in enumerate(value))
