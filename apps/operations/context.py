"""What a handler gets: who is calling, for which tenant, the clock, the bounds. Never a request or a token."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from apps.core.changes import Change

if TYPE_CHECKING:
    from apps.core.callers import Caller
    from apps.workspaces.models import Tenant


@dataclass
class Context:
    caller: Caller
    door: str
    now: datetime
    bounds: Mapping[str, Any]
    touched: list[Change] = field(default_factory=list)
    # lookups shared by the data-scope check, the preview and the handler of one call
    memo: dict[Any, Any] = field(default_factory=dict)

    @property
    def tenant(self) -> Tenant:
        return self.caller.tenant

    @property
    def workspaces(self) -> tuple[str, ...] | None:
        """Workspace names the caller's mail is limited to; None for every workspace."""
        return self.caller.workspace_filter

    def remember(self, key: Any, load: Callable[[], Any]) -> Any:
        """load() once per call for `key`."""
        if key not in self.memo:
            self.memo[key] = load()
        return self.memo[key]

    def touch(self, id: object, before: Any = None, after: Any = None) -> None:
        """Record an id this call changed, for the audit event (values, never mail text)."""
        self.touched.append(Change(str(id), before, after))
