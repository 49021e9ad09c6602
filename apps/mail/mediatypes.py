"""Media types (type/subtype) as mail carries them: a third party writes them, so a malformed one is reported
as what it is to us, opaque bytes."""

from __future__ import annotations

import re

MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")
OPAQUE = "application/octet-stream"


def media_type(value: str) -> str:
    """The bare type/subtype, lower-cased, or application/octet-stream when `value` is not one."""
    kind = value.strip().lower()
    return kind if MEDIA_TYPE.match(kind) else OPAQUE
