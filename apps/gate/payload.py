"""Request bodies at the operation doors (REST and MCP): read with a bound, parsed with a bound.

The largest call the bounds allow is an e-mail with its files in base64, so these doors take bodies of up to
OPERATION_BODY_MAX_BYTES: a body that says it is larger is refused first of all, by BodyBoundMiddleware, in the
one error shape (413), before a session, a CSRF check or a credential is looked at; a body is read (with the same
bound) only after the caller is authenticated. Every other endpoint keeps Django's own small
DATA_UPLOAD_MAX_MEMORY_SIZE.

JSON that is mostly objects or arrays costs many times its size in memory when parsed, and no operation takes more
than a few hundred of them, so a body with more than JSON_CONTAINERS_MAX is refused before it is parsed (a brace
inside a string counts too: real input has a handful). A flat array of millions of numbers is a handful of
containers, and parsing and validating it would hold a worker for tens of seconds: the items (array items and
object members) are bounded too, per container (OPERATIONS["INPUT_ARRAY_MAX"]) and in all
(OPERATIONS["INPUT_ITEMS_MAX"]), counted with a scan of the bytes before the body is parsed (`loads`) and exactly
right after, and by the gate for every door (`check_storable`): LIMIT_EXCEEDED naming the array, never its value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import pydantic_core
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from apps.core.bounds import bounds
from apps.core.errors import OakenError, error_response
from apps.core.links import MCP_PATH

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
    if _declared_length(meta) > limit:
        raise BodyTooLargeError
    data = stream.read(limit + 1) if stream is not None else b""
    if len(data) > limit:
        raise BodyTooLargeError
    return data


def _declared_length(meta: Mapping[str, Any]) -> int:
    try:
        return int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def body_bound(path: str) -> int | None:
    """The most bytes a request to `path` may carry when Oaken bounds it before Django does: the operation doors
    (/mcp, everything under /api/ but the import upload, whose view bounds its file by IMPORT_UPLOAD_MAX_BYTES
    before reading a byte of it, and audits the refusal). None: Django's DATA_UPLOAD_MAX_MEMORY_SIZE."""
    if path in (MCP_PATH, MCP_PATH + "/"):
        return int(settings.OPERATION_BODY_MAX_BYTES)
    if path.startswith("/api/") and path != reverse("import-upload"):
        return int(settings.OPERATION_BODY_MAX_BYTES)
    return None


def too_large_response() -> HttpResponse:
    return error_response(BodyTooLargeError(), 413, {"Cache-Control": "no-store"})


class BodyBoundMiddleware:
    """The one body bound of the operation doors, applied first: a request whose Content-Length is over it is
    answered 413 LIMIT_EXCEEDED in the one error shape before a session, a CSRF token, a credential or a byte of
    the body is read (DRF's CSRF check would otherwise read a form body under Django's smaller bound, and answer
    a page). A body that does not say its length is read with the same bound by the door (`read_body`)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = body_bound(request.path_info)
        if limit is not None and _declared_length(request.META) > limit:
            return too_large_response()
        return self.get_response(request)


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
    objects and arrays, or more items, than any operation takes; raises ValueError (or RecursionError) when it is
    not JSON, NotStrictJsonError (a ValueError) when it is not strict JSON."""
    data = raw.encode() if isinstance(raw, str) else raw
    containers = data.count(b"{") + data.count(b"[")
    if containers > JSON_CONTAINERS_MAX:
        raise OakenError("LIMIT_EXCEEDED", f"the body holds more than {JSON_CONTAINERS_MAX} JSON objects and arrays")
    _scan_items(data, containers)
    document = json.loads(strict_text(data), parse_constant=_no_constant, object_pairs_hook=unique_keys)
    check_items(document)
    return document


# ---------------------------------------------------------------- items: per array or object, and in all

Path = tuple[str | int, ...]
# a key named in an error: what a schema's field can be called; anything else is submitted text, never repeated
_NAMEABLE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def field_name(path: Path) -> str:
    """A place in the input as an error names it (`message_ids`, `attachments.3`): keys and indexes joined by dots,
    up to the first key no schema could have."""
    parts: list[str] = []
    for part in path:
        if isinstance(part, str) and not _NAMEABLE_KEY.match(part):
            break
        parts.append(str(part))
    return ".".join(parts)


class TooManyItemsError(OakenError):
    """LIMIT_EXCEEDED: an array (or object) holding more items than any operation takes, or an input holding more
    in all. `path` is where (the array, or where the count passed the bound); `document` the body as far as it
    was parsed, where a door finds what it needs to answer (a JSON-RPC id)."""

    def __init__(self, path: Path, *, per_container: bool, document: Any = None) -> None:
        self.path, self.per_container, self.document = path, per_container, document
        if per_container:
            what = f"at most {int(bounds.INPUT_ARRAY_MAX)} items in one array or object"
        else:
            what = f"at most {int(bounds.INPUT_ITEMS_MAX)} items (array items and object fields) in all"
        field = field_name(path)
        super().__init__("LIMIT_EXCEEDED", f"{field}: {what}" if field else what, field=field or None)

    def within(self, prefix: Path) -> TooManyItemsError:
        """The same refusal named from inside `prefix` (the MCP door names a tool's argument, not the envelope)."""
        if self.path[: len(prefix)] != prefix:
            return self
        return TooManyItemsError(self.path[len(prefix) :], per_container=self.per_container, document=self.document)


def check_items(value: Any, *, document: Any = None) -> None:
    """Refuse (TooManyItemsError) an array or object of more than INPUT_ARRAY_MAX items, or more than
    INPUT_ITEMS_MAX in all. The work is bounded by the bounds, not by the input: a container's length is read
    before its items are, and the walk stops as soon as the count passes."""
    per_max, total_max = int(bounds.INPUT_ARRAY_MAX), int(bounds.INPUT_ITEMS_MAX)
    document = value if document is None else document
    total = 0
    stack: list[tuple[Any, Path]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if not isinstance(node, dict | list | tuple):
            continue
        if len(node) > per_max:
            raise TooManyItemsError(path, per_container=True, document=document)
        total += len(node)
        if total > total_max:
            raise TooManyItemsError(path, per_container=False, document=document)
        children = node.items() if isinstance(node, dict) else enumerate(node)
        stack.extend((child, (*path, key)) for key, child in children if isinstance(child, dict | list | tuple))


def _scan_items(data: bytes, containers: int) -> None:
    """Refuse a body of more items than INPUT_ITEMS_MAX before it is parsed, by scanning its bytes (C loops, tens
    of milliseconds for the largest body): items are the commas outside strings, and one more per container. Most
    bodies hold fewer commas than that in all and are not scanned further; a string is found by its quotes once
    its escapes are blanked (same length, so a place in the scan is that place in the body), and a body of more
    strings than twice the bound holds more items than the bound too (each is a key or an item)."""
    total_max = int(bounds.INPUT_ITEMS_MAX)
    if data.count(b",") + containers <= total_max:
        return
    blank = data.replace(b"\\\\", b"__").replace(b'\\"', b"__") if b"\\" in data else data
    quotes_max = 4 * total_max + 4
    scanned, too_many_strings = len(blank), False
    if blank.count(b'"') > quotes_max:
        scanned, too_many_strings = _after_nth(blank, b'"', quotes_max), True
    offset, counted = 0, 0
    for index, part in enumerate(blank[:scanned].split(b'"')):
        if index % 2 == 0:  # outside a string
            commas = part.count(b",")
            if counted + commas >= total_max:
                cut = offset + _after_nth(part, b",", total_max - counted) - 1
                raise _refusal_at(data[:cut])
            counted += commas
        offset += len(part) + 1
    if too_many_strings:
        raise _refusal_at(data[:scanned])


def _after_nth(data: bytes, needle: bytes, n: int) -> int:
    """The position just after the n-th `needle` in `data` (which holds at least n)."""
    position = -1
    for _ in range(n):
        position = data.index(needle, position + 1)
    return position + 1


def _refusal_at(prefix: bytes) -> TooManyItemsError:
    """The refusal of a body whose count passed the bound at the end of `prefix`, naming the place: an array of
    too many items in what the prefix parses to, else the innermost container open where the prefix ends. The
    prefix holds about INPUT_ITEMS_MAX items, so parsing it costs what a body within the bounds does."""
    try:
        document = pydantic_core.from_json(prefix, allow_inf_nan=False, allow_partial=True)
    except ValueError:
        return TooManyItemsError((), per_container=False)
    try:
        check_items(document)
    except TooManyItemsError as refused:
        if refused.per_container:
            return refused
    path: Path = ()
    node = document
    while isinstance(node, dict | list) and node:
        key: str | int
        if isinstance(node, dict):
            key = next(reversed(node))
            child = node[key]
        else:
            key = len(node) - 1
            child = node[key]
        if not isinstance(child, dict | list):
            break
        path, node = (*path, key), child
    return TooManyItemsError(path, per_container=False, document=document)


# Characters no text column can hold: NUL (PostgreSQL refuses it in text) and lone surrogates (not UTF-8 at all).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
NESTING_MAX = 32


def _invalid_at(path: tuple[str, ...], phrase: str) -> OakenError:
    return OakenError.invalid(".".join(path), phrase)


def check_storable(raw: Any, refuse: Callable[[tuple[str, ...], str], OakenError] = _invalid_at) -> None:
    """Refuse input of more items than any operation takes (LIMIT_EXCEEDED, at every door: the cli's input is
    no body), holding text that cannot be stored, or nested deeper than any operation takes, naming the field
    (never the value) before the input is parsed: INVALID_INPUT instead of a database error later.
    `refuse` makes the refusal from where and what (the gate names only what the operation's schema knows)."""
    check_items(raw)
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
