"""What a handler gets: who is calling, for which tenant, the clock, the bounds. Never a request or a token."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from apps.core.acts import Act


def _bounds() -> Mapping[str, Any]:
    return settings.OPERATIONS


@dataclass
class Context(Act):
    """An Act (caller, door, clock, the changes recorded) with what only operations need: the bounds, and
    lookups shared by the data-scope check, the preview and the handler of one call."""

    bounds: Mapping[str, Any] = field(default_factory=_bounds)
    memo: dict[Any, Any] = field(default_factory=dict)

    @property
    def workspaces(self) -> tuple[str, ...] | None:
        """Workspace names the caller's mail is limited to; None for every workspace."""
        return self.caller.workspace_filter

    def remember(self, key: Any, load: Callable[[], Any]) -> Any:
        """load() once per call for `key`."""
        if key not in self.memo:
            self.memo[key] = load()
        return self.memo[key]
