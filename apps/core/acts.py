"""One call as domain code sees it: who acts, through which door, when, and the changes it records.

Domain services take it as a keyword argument (`act=`) beside their own; the operations layer's Context is
one, so a handler hands itself on, and the gate writes what was recorded into the call's audit event."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from apps.core.changes import Change

if TYPE_CHECKING:
    from apps.core.callers import Caller
    from apps.workspaces.models import Tenant


@dataclass
class Act:
    caller: Caller
    door: str
    now: datetime
    touched: list[Change] = field(default_factory=list)

    @property
    def tenant(self) -> Tenant:
        return self.caller.tenant

    def touch(self, id: object, before: Any = None, after: Any = None) -> None:
        """Record an id this call changed, for the audit event (values, never mail text)."""
        self.touched.append(Change(str(id), before, after))
