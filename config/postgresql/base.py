"""Django's PostgreSQL backend, whose health check trusts a connection that was used a moment ago, and whose
waits for the server's answer are watched (config.postgresql.watchdog): a server that stops answering ends the
wait within about DATABASE_WAITS' STALL + CONNECT seconds, with an OperationalError (SERVICE_UNAVAILABLE).

With CONN_HEALTH_CHECKS, Django asks a persistent connection SELECT 1 before the first query of every request, so
that a connection the server dropped (a restart, a failover) is replaced instead of failing the request: one round
trip more per request, 6% of an MCP call. A connection that began a query less than a second ago skips that
question: a server gone in that second fails the next request as it would fail a request under way. A connection
not used for longer is checked as Django checks it, and so is one whose query failed (Django checks a connection
with errors at the end of the request, and closes it if it does not answer).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from django.conf import settings
from django.db.backends.postgresql import base
from django.db.utils import DatabaseErrorWrapper, OperationalError
from django.utils.functional import cached_property

from config.postgresql import watchdog

# how long a query begun vouches for the connection
TRUSTED_FOR_SECONDS = 1.0


class _SessionEndedIsOperational(DatabaseErrorWrapper):
    """Django's translation of the driver's errors, where any error that ended the session (the server closed it:
    an idle-in-transaction timeout, 25P03, is an InternalError by its SQLSTATE class) is an OperationalError, as
    a server gone is: the call answers SERVICE_UNAVAILABLE, and the connection is replaced, not a 500."""

    def __init__(self, wrapper: DatabaseWrapper) -> None:
        super().__init__(wrapper)
        self.db = wrapper

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        if (
            exc_type is not None
            and issubclass(exc_type, psycopg.DatabaseError)
            and not issubclass(exc_type, psycopg.OperationalError)
            and self.db.connection is not None
            and self.db.connection.broken
        ):
            self.db.errors_occurred = True
            raise OperationalError(*exc_value.args).with_traceback(traceback) from exc_value
        super().__exit__(exc_type, exc_value, traceback)


# what psycopg.connect takes of Django's connection parameters for a probe (the rest configures Django's cursors)
_PROBE_PARAMS = {"dbname", "user", "password", "host", "port", "options", "sslmode", "service", "passfile"}


class _WatchedCopy:
    """A cursor whose COPY is watched: rows written to a server that stopped reading, and the wait for its answer at
    the end, are waits outside any statement Django runs."""

    db: DatabaseWrapper | None = None  # the connection's Django wrapper, set when the cursor is made

    @contextmanager
    def copy(self, statement: Any, params: Any = None, **options: Any) -> Iterator[Any]:
        if self.db is None:
            with super().copy(statement, params, **options) as copy:  # type: ignore[misc]
                yield copy
            return
        # the driver's errors as Django's (OperationalError: SERVICE_UNAVAILABLE), as for any statement
        with self.db.wrap_database_errors, self.db.waiting(), super().copy(statement, params, **options) as copy:  # type: ignore[misc]
            yield copy


class _ServerBindingCursor(_WatchedCopy, base.ServerBindingCursor):
    pass


class _Cursor(_WatchedCopy, base.Cursor):
    pass


# Django's cursor classes (server_side_binding or not), and ours that watch their COPY
_WATCHED = {base.ServerBindingCursor: _ServerBindingCursor, base.Cursor: _Cursor}


class _ServerSideCursor:
    """A server-side cursor (QuerySet.iterator()), whose fetches are watched: each is a wait for the server's
    answer outside the statement that declared it. Everything else is the cursor's own."""

    def __init__(self, cursor: Any, waiting: Callable[[], AbstractContextManager[None]]) -> None:
        self._cursor, self._waiting = cursor, waiting

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def fetchone(self) -> Any:
        with self._waiting():
            return self._cursor.fetchone()

    def fetchmany(self, size: int = 0) -> Any:
        with self._waiting():
            return self._cursor.fetchmany(size)

    def fetchall(self) -> Any:
        with self._waiting():
            return self._cursor.fetchall()

    def close(self) -> None:
        with self._waiting():
            self._cursor.close()

    def __iter__(self) -> Iterator[Any]:
        rows = iter(self._cursor)
        while True:
            with self._waiting():
                row = next(rows, _END)
            if row is _END:
                return
            yield row


_END = object()


class DatabaseWrapper(base.DatabaseWrapper):
    health_check_done: bool
    _used_at = float("-inf")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        watchdog.configure(settings.DATABASE_WAITS["STALL"])
        # a server that answers probes is still cut this long into a statement: it ought to have cancelled it
        statement = settings.DATABASE_SERVER_TIMEOUTS[settings.DATABASE_ROLE]["STATEMENT"]
        self._ceiling = statement + settings.DATABASE_WAITS["CONNECT"] if statement else None
        # first in the list, so it stays when `connection.execute_wrapper(...)` adds and removes its own
        self.execute_wrappers.append(self._watched_execute)

    @cached_property
    def wrap_database_errors(self) -> DatabaseErrorWrapper:
        return _SessionEndedIsOperational(self)

    # ---- every wait for the server's answer is watched

    def waiting(self) -> AbstractContextManager[None]:
        """The block (a wait for this connection's server) under the watchdog."""
        return watchdog.watched(self._socket, self._probe, self._server, self._ceiling)

    @property
    def _server(self) -> str:
        return f"{self.settings_dict['HOST']}:{self.settings_dict['PORT']}"

    def get_new_connection(self, conn_params: Any) -> Any:
        # a server that did not answer a moment ago is not asked again yet: the call fails now, not CONNECT s later
        if watchdog.silent_lately(self._server):
            raise psycopg.OperationalError("the database did not answer a moment ago")
        try:
            connection = super().get_new_connection(conn_params)
        except psycopg.OperationalError:
            watchdog.found_silent(self._server)
            raise
        watchdog.found_answering(self._server)
        connection.cursor_factory = _WATCHED.get(connection.cursor_factory, connection.cursor_factory)
        return connection

    def _socket(self) -> int | None:
        connection = self.connection
        if connection is None or connection.closed:
            return None
        try:
            return int(connection.pgconn.socket)
        except psycopg.Error:
            return None

    def _probe(self) -> bool:
        params = {k: v for k, v in self.get_connection_params().items() if k in _PROBE_PARAMS}
        return watchdog.probe(params, settings.DATABASE_WAITS["CONNECT"])

    def _watched_execute(self, execute: Callable[..., Any], sql: Any, params: Any, many: bool, context: Any) -> Any:
        waiting = watchdog.begin(self._socket, self._probe, self._server, self._ceiling)  # (no context manager:
        try:  # this runs for every statement)
            return execute(sql, params, many, context)
        finally:
            watchdog.end(waiting)

    def init_connection_state(self) -> None:
        with self.waiting():
            super().init_connection_state()

    def is_usable(self) -> bool:
        with self.waiting():
            return bool(super().is_usable())

    def _commit(self) -> Any:
        with self.waiting():
            return super()._commit()  # type: ignore[misc]

    def _rollback(self) -> Any:
        with self.waiting():
            return super()._rollback()  # type: ignore[misc]

    def _set_autocommit(self, autocommit: bool) -> None:
        with self.waiting():
            super()._set_autocommit(autocommit)  # type: ignore[misc]

    # ---- the health check that trusts a recent answer

    def create_cursor(self, name: Any = None) -> Any:
        cursor = super().create_cursor(name)
        self._used_at = time.monotonic()
        if name:
            return _ServerSideCursor(cursor, self.waiting)
        if isinstance(cursor, _WatchedCopy):
            cursor.db = self
        return cursor

    def close_if_health_check_failed(self) -> None:
        if not self.health_check_done and time.monotonic() - self._used_at < TRUSTED_FOR_SECONDS:
            self.health_check_done = True
        super().close_if_health_check_failed()

    def close(self) -> None:
        self._used_at = float("-inf")
        super().close()
