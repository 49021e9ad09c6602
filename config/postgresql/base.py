"""Django's PostgreSQL backend, whose health check trusts a connection that answered a moment ago.

With CONN_HEALTH_CHECKS, Django asks a persistent connection SELECT 1 before the first query of every request, so
that a connection the server dropped (a restart, a failover) is replaced instead of failing the request: one round
trip more per request, 6% of an MCP call. A connection that answered the request before, less than a second ago,
skips that question: a server gone in that second fails the next request as it would fail a request under way.
A connection not heard from for longer is checked as Django checks it.
"""

from __future__ import annotations

import time
from typing import Any

from django.db.backends.postgresql import base

# how long an answer vouches for the connection
TRUSTED_FOR_SECONDS = 1.0


class DatabaseWrapper(base.DatabaseWrapper):
    health_check_done: bool
    _used = False
    _answered_at = float("-inf")

    def create_cursor(self, name: Any = None) -> Any:
        self._used = True
        return super().create_cursor(name)

    def close_if_health_check_failed(self) -> None:
        if not self.health_check_done and time.monotonic() - self._answered_at < TRUSTED_FOR_SECONDS:
            self.health_check_done = True
        super().close_if_health_check_failed()

    def close_if_unusable_or_obsolete(self) -> None:
        """At a request's start and end: a connection the request used without errors, still open, answered."""
        super().close_if_unusable_or_obsolete()
        if self._used and self.connection is not None and not self.errors_occurred:
            self._answered_at = time.monotonic()
        self._used = False

    def close(self) -> None:
        self._answered_at = float("-inf")
        super().close()
