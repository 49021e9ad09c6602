"""The internal door: how Celery tasks and schedules call operations, through the same gate."""

from __future__ import annotations

from typing import Any

from apps.core.callers import Caller
from apps.core.kinds import Door
from apps.gate.dispatch import Result, dispatch
from apps.workspaces.models import Tenant


def call_internal(tenant: Tenant, name: str, raw_input: dict[str, Any] | None = None) -> Result:
    """Run an operation as the system, for one tenant."""
    return dispatch(Caller.internal(tenant), Door.INTERNAL, name, raw_input or {})
