"""A change as every layer records it: an id with its value before and after (never mail text)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Change:
    """One thing a call changes or would change: its id, and its values before and after where they help."""

    id: str
    before: Any = None
    after: Any = None


# the target by which a call's audit event names the event it reverses (undo_agent_actions; docs/audit.md):
# {"id": REVERSES, "before": None, "after": {"event": <seq>}}, first among the event's targets
REVERSES = "reverses"
