"""What a handler gets: who is calling, for which tenant, the clock, the bounds. Never a request or a token."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from apps.core.acts import Act
from apps.core.bounds import Bounds, bounds


@dataclass
class Context(Act):
    """An Act (caller, door, clock, the changes recorded) with what only operations need: the bounds, and the
    targets the operation's input names, resolved by the gate (apps.operations.registry explains when)."""

    bounds: Bounds = field(default_factory=lambda: bounds)
    targets: Any = None
    # what the operation's `gather` brought back from outside the database, before its transaction opened
    gathered: Any = None
    # the call's own transaction is open: targets resolved now are what the change works from (and may lock)
    in_transaction: bool = False
    # when the call began: `now`, unless it is a waiting operation's call again (apps.gate.waiting), which carries
    # the first one's time, so its defaults and deadline stay those of the call the client made
    began: datetime | None = None
    # for an operation that `composes` (apps.operations.registry): run another operation as this same caller through
    # the whole gate, inside this call's transaction, confirmed by this call's confirmation; `reverses` names the
    # audit event (its seq) the call undoes, which its own event records. Raises the call's refusal.
    call: Callable[..., dict[str, Any]] | None = None

    @property
    def started(self) -> datetime:
        return self.began or self.now

    @property
    def workspaces(self) -> tuple[str, ...] | None:
        """Workspace names the caller's mail is limited to; None for every workspace."""
        return self.caller.workspace_filter

    @property
    def person_name(self) -> str:
        """The name of the person calling, or whom the calling agent acts for ('' when there is none): a new
        mailbox's sender name."""
        user = self.caller.user
        return user.name if user is not None else ""
