"""Django's PostgreSQL backend, whose health check trusts a connection that was used a moment ago.

With CONN_HEALTH_CHECKS, Django asks a persistent connection SELECT 1 before the first query of every request, so
that a connection the server dropped (a restart, a failover) is replaced instead of failing the request: one round
trip more per request, 6% of an MCP call. A connection that began a query less than a second ago skips that
question: a server gone in that second fails the next request as it would fail a request under way. A connection
not used for longer is checked as Django checks it, and so is one whose query failed (Django checks a connection
with errors at the end of the request, and closes it if it does not answer).
"""

from __future__ import annotations

import time
from typing import Any

from django.db.backends.postgresql import base

# how long a query begun vouches for the connection
TRUSTED_FOR_SECONDS = 1.0


class DatabaseWrapper(base.DatabaseWrapper):
    health_check_done: bool
    _used_at = float("-inf")

    def create_cursor(self, name: Any = None) -> Any:
        cursor = super().create_cursor(name)
        self._used_at = time.monotonic()
        return cursor

    def close_if_health_check_failed(self) -> None:
        if not self.health_check_done and time.monotonic() - self._used_at < TRUSTED_FOR_SECONDS:
            self.health_check_done = True
        super().close_if_health_check_failed()

    def close(self) -> None:
        self._used_at = float("-inf")
        super().close()
