"""Pages of a list, a cursor at a time: the cursor a page hands out, the position it names read back, and the
cut of one page. Operations and domain selectors both use it; it knows nothing of what is listed.

A cursor is opaque to callers (base64 of a JSON list of values); anything this service did not give out,
or that no longer parses as a position, is refused with one message, never repeating what was sent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from apps.core.errors import OakenError

NOT_A_CURSOR = "is not a cursor this service gave out"

T = TypeVar("T")
Row = TypeVar("Row")


def not_a_cursor() -> OakenError:
    return OakenError.invalid("cursor", NOT_A_CURSOR)


def encode_cursor(values: Sequence[Any]) -> str:
    """The cursor holding a position (a few JSON values: the sort keys of the last row of a page)."""
    return base64.urlsafe_b64encode(json.dumps(list(values), default=str).encode()).decode()


def read_cursor(cursor: str | None, size: int, parse: Callable[..., T]) -> T | None:
    """The position a cursor names: its `size` values handed to `parse`; None without a cursor.

    `parse` raises ValueError, TypeError or OakenError for values that are no position (a forged or stale
    cursor): the caller is answered INVALID_INPUT on `cursor` alike for all of them.
    """
    if cursor is None:
        return None
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        if not isinstance(values, list) or len(values) != size:
            raise ValueError("not a position")
        return parse(*values)
    except (ValueError, TypeError, OakenError):
        raise not_a_cursor() from None


def cut_page(rows: Iterable[Row], size: int, position: Callable[[Row], Sequence[Any]]) -> tuple[list[Row], str | None]:
    """One page of `rows` (fetched as size + 1, to know whether more follow) and the cursor after its last row,
    or None when this is the last page; `position` gives a row's sort keys (what read_cursor gets back)."""
    found = list(rows)
    if len(found) <= size:
        return found, None
    return found[:size], encode_cursor(position(found[size - 1]))
