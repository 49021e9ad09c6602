"""May this caller call this operation: the gate's first two checks (exposure, then authority, SPEC §4), asked in
one place by the gate, which refuses with them, and by the doors that ask before the call (the upload door before
it reads a byte, the console before it offers a button)."""

from __future__ import annotations

from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.kinds import Door
from apps.operations.exposure import is_offered, is_permitted, refusal
from apps.operations.registry import Operation, registry


def may_call(caller: Caller, door: Door, name: str) -> bool:
    """Whether the gate would let this caller through to operation `name` by `door` (the call's input, data scope
    and limits are still the gate's to check)."""
    op = registry.get(name)
    return op is not None and is_offered(caller, op, door=door) and is_permitted(caller, op)


def reachable(caller: Caller, door: Door, name: str) -> Operation:
    """The operation `name`, when may_call would say so; else the refusal (NOT_AVAILABLE, INSUFFICIENT_SCOPE or
    FORBIDDEN) that tells the caller no more than it may know."""
    op = registry.get(name) if isinstance(name, str) else None
    if op is None or not is_offered(caller, op, door=door):
        raise OakenError.not_available()
    if not is_permitted(caller, op):
        raise refusal(caller, op)
    return op
