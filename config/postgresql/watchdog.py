"""A deadline, kept from outside, on every wait for PostgreSQL's answer.

A server that stops answering (its processes stopped or frozen, its host gone) leaves a connection open and silent:
over a unix socket nothing ends the wait, TCP keepalives only notice a dead peer after minutes, connect_timeout
bounds only new connections, and statement_timeout is the stalled server's own. A thread of each process watches
the statements (and commits, rollbacks, health checks) under way: one waiting longer than STALL seconds has the
server probed with a new connection (bounded by CONNECT seconds); when that does not open either, the server is not
answering, and the waiting connections are cut (their socket shut down), which ends the wait at once with the
driver's OperationalError: the call answers SERVICE_UNAVAILABLE, and the next one connects again. A slow statement
on a server that answers is left alone, up to its ceiling (statement_timeout + CONNECT, past which the server ought
to have cancelled it). After a cut, or a connection that could not be opened, new connections to that server fail
at once for STALL seconds (config.postgresql.base), so a request meets the stall once, not at each query.

The watch costs a statement about 1 µs (two dictionary writes under a lock); the thread wakes a few times a second
and only probes when a statement is overdue, once per STALL seconds whatever the number of threads waiting.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("oaken.database")

TICK_SECONDS = 0.2


@dataclass(slots=True)
class _Wait:
    started: float
    socket: Callable[[], int | None]  # the connection's socket now (None once it is closed)
    probe: Callable[[], bool]  # whether the server opens a new connection in time
    server: str  # waits on one server share a probe
    ceiling: float | None  # seconds after which the wait is cut, whatever the probe says


@dataclass
class _Watchdog:
    stall: float = 2.0
    waits: dict[int, _Wait] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    numbers: Iterator[int] = field(default_factory=itertools.count)
    thread: threading.Thread | None = None
    answered: dict[str, float] = field(default_factory=dict)  # server -> when a probe last opened a connection
    silent: dict[str, float] = field(default_factory=dict)  # server -> when it last failed to answer

    def begin(self, wait: _Wait) -> int:
        if self.thread is None:
            self._start()
        with self.lock:
            number = next(self.numbers)
            self.waits[number] = wait
        return number

    def end(self, number: int) -> None:
        with self.lock:  # never while the thread is cutting this connection's socket
            del self.waits[number]

    def _start(self) -> None:
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="oaken-database-watchdog", daemon=True)
                self.thread.start()

    def forked(self) -> None:
        """In a child process (gunicorn's workers are forked): no thread of the parent's runs here."""
        self.lock = threading.Lock()
        self.waits.clear()
        self.answered.clear()
        self.silent.clear()
        self.thread = None

    def _run(self) -> None:
        while True:
            time.sleep(TICK_SECONDS)
            try:
                self._look()
            except Exception:  # the watch must outlive anything odd; the waits it misses keep their own bounds
                log.exception("the database watchdog failed a round")

    def _look(self) -> None:
        now = time.monotonic()
        with self.lock:
            overdue = {n: w for n, w in self.waits.items() if now - w.started >= self.stall}
        if not overdue:
            return
        silent: set[str] = set()
        for server, wait in {w.server: w for w in overdue.values()}.items():
            if now - self.answered.get(server, float("-inf")) < self.stall:
                continue  # it answered a probe a moment ago
            if wait.probe():
                self.answered[server] = time.monotonic()
            else:
                silent.add(server)
                self.silent[server] = time.monotonic()
        now = time.monotonic()
        for number, wait in overdue.items():
            if wait.server in silent or (wait.ceiling is not None and now - wait.started >= wait.ceiling):
                self._cut(number, wait, now)

    def _cut(self, number: int, wait: _Wait, now: float) -> None:
        with self.lock:
            if self.waits.get(number) is not wait:
                return  # answered meanwhile: its socket may already serve another statement
            fd = wait.socket()
            if fd is None:
                return
            # shut down, not closed: the driver still owns the descriptor; its wait ends with end-of-file
            with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        self.silent[wait.server] = time.monotonic()
        log.error("the database did not answer for %.1f s: its connection was cut", now - wait.started)


_watchdog = _Watchdog()
os.register_at_fork(after_in_child=_watchdog.forked)


def found_silent(server: str) -> None:
    """The server did not answer (a connection could not be opened in time, or a wait was cut)."""
    _watchdog.silent[server] = time.monotonic()


def found_answering(server: str) -> None:
    _watchdog.silent.pop(server, None)


def silent_lately(server: str) -> bool:
    """Whether the server failed to answer less than STALL seconds ago: a new connection is then not tried (it
    would wait CONNECT seconds more, as the failed one did, for every query of every request meanwhile); after
    that, the next one tries again, and the server running again is found by it."""
    since = _watchdog.silent.get(server)
    return since is not None and time.monotonic() - since < _watchdog.stall


def configure(stall: float) -> None:
    """Set how long a wait lasts before the server is probed (from settings, when a connection is made)."""
    _watchdog.stall = stall


def begin(
    socket_of: Callable[[], int | None], probe: Callable[[], bool], server: str, ceiling: float | None = None
) -> int:
    """A wait for the server's answer begins (end() it in a finally): watched from now on."""
    return _watchdog.begin(_Wait(time.monotonic(), socket_of, probe, server, ceiling))


def end(number: int) -> None:
    """The wait begun as `number` ended (answered, failed or cut)."""
    _watchdog.end(number)


@contextlib.contextmanager
def watched(
    socket_of: Callable[[], int | None], probe: Callable[[], bool], server: str, ceiling: float | None = None
) -> Iterator[None]:
    """Run the block (a wait for the server's answer) under the watch."""
    number = begin(socket_of, probe, server, ceiling)
    try:
        yield
    finally:
        end(number)


def probe(params: dict[str, Any], connect_timeout: int) -> bool:
    """Whether the server answers a new connection within `connect_timeout` seconds. A refusal is an answer: a
    server out of connection slots ("too many clients"), starting up or shutting down says so at once, and its
    busy connections are not stalled; only silence until the timeout (or libpq's own timeout) is."""
    import psycopg

    started = time.monotonic()
    try:
        psycopg.connect(**params, connect_timeout=connect_timeout, autocommit=True).close()
    except psycopg.Error as refused:
        silent = time.monotonic() - started >= connect_timeout / 2 or "timeout expired" in str(refused)
        return not silent
    return True
