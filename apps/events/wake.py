"""Waking whoever waits for new mail (wait_for_message), without a thread or a database connection per waiter.

When mail of an account is stored, `events_emit` NOTIFYs the channel `oaken_wake` with the account's id
(events/0003: delivered at commit, once per transaction and account). One thread per process, started by the
first wait, LISTENs for it on a connection of its own and keeps the waiters: each a set of keys (account ids), a
deadline, and a callback it runs once, from that thread, when one of its keys is woken, when its deadline comes, or
when the listening connection was lost (what happened meanwhile is unknown: every waiter looks again). A callback
only hands work on (the web worker resumes a parked request, a waiting thread wakes up): the wake is a hint, and
the one woken reads the truth through the gate (apps.gate.waiting).

So 200 waiters in a web process cost 200 small records, one thread and one connection, however long they wait.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from django.db import connection

logger = logging.getLogger(__name__)

CHANNEL = "oaken_wake"
# how often the listening thread looks at its deadlines while nothing is woken (a deadline is met this late at most)
_TICK_SECONDS = 0.2
_RECONNECT_MAX_SECONDS = 30.0
# how long a key's last wake is remembered, for a waiter that subscribes after a wake it would have missed
_REMEMBER_SECONDS = 300.0
# with no waiter this long, the thread ends and its connection closes (the next wait starts them again)
_IDLE_SECONDS = 60.0


@dataclass(eq=False)
class Waiter:
    keys: tuple[str, ...]
    deadline: float  # time.monotonic()
    callback: Callable[[], None]
    done: bool = field(default=False)


class Hub:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, set[Waiter]] = {}
        self._deadlines: list[tuple[float, int, Waiter]] = []
        self._order = itertools.count()
        self._woken_at: dict[str, float] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._idle_since = time.monotonic()
        self._params: dict[str, Any] = {}
        # set while LISTEN is in force (waiters subscribed before are all woken once then: a wake may have been missed)
        self.listening = threading.Event()
        self.backend_pid = 0  # the listening connection's server process (tests end it, as a restart would)

    # ------------------------------------------------------------ for the waiting side

    def subscribe(
        self, keys: Iterable[str], deadline: float, callback: Callable[[], None], *, since: float | None = None
    ) -> Waiter:
        """Run `callback` once (from the hub's thread) when a key is woken, at `deadline` (time.monotonic()), or
        when wakes may have been lost. `since`: when the caller last looked (time.monotonic()): a key woken after
        that runs it at once."""
        waiter = Waiter(tuple(keys), deadline, callback)
        with self._lock:
            self._start()
            missed = since is not None and any(self._woken_at.get(key, -1.0) >= since for key in waiter.keys)
            if not missed:
                for key in waiter.keys:
                    self._by_key.setdefault(key, set()).add(waiter)
                heapq.heappush(self._deadlines, (deadline, next(self._order), waiter))
        if missed:
            self._run_callback(waiter)
        return waiter

    def wait(self, keys: Iterable[str], deadline: float, *, since: float | None = None) -> None:
        """Block this thread until a key is woken or `deadline` (time.monotonic()) comes (for a door with no worker
        to park a request with: the test client, `manage.py runserver`, the CLI)."""
        woken = threading.Event()
        self.subscribe(keys, deadline, woken.set, since=since)
        woken.wait(max(0.0, deadline - time.monotonic()) + 1.0)

    def wake_all(self) -> None:
        """Run every waiter's callback now (a web worker that stops answers its parked requests)."""
        self._fire(self._take_all())

    def stop(self) -> None:
        """End the thread and close its connection (a test session, before its database goes), answering every
        waiter."""
        with self._lock:
            thread, self._stopping = self._thread, True
        if thread is not None:
            thread.join(10)
        with self._lock:
            self._stopping = False

    @property
    def waiting(self) -> int:
        with self._lock:
            return sum(1 for _, _, w in self._deadlines if not w.done)

    # ------------------------------------------------------------ the listening thread

    def _start(self) -> None:
        """Start the listening thread unless it runs (under the lock)."""
        if self._thread is not None:
            return
        # the database the process's own connection uses (a test run's test database included)
        self._params = {**connection.get_connection_params(), "autocommit": True}
        self._idle_since = time.monotonic()
        self._thread = threading.Thread(target=self._listen_forever, name="oaken-wake", daemon=True)
        self._thread.start()

    def _listen_forever(self) -> None:
        pause = 1.0
        while True:
            try:
                with psycopg.connect(**self._params) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.backend_pid = conn.info.backend_pid
                    self.listening.set()
                    pause = 1.0
                    self._fire(self._take_all())  # subscribed before LISTEN was in force
                    self._listen(conn)
                self._fire(self._take_all())
                return  # idle or stopped: the connection is closed (a waiter may have come meanwhile: answered)
            except (psycopg.Error, OSError) as exc:
                logger.warning("wake: the listening connection failed (%s); waiters look again", type(exc).__name__)
            except Exception:
                logger.exception("wake: the listening thread failed; waiters look again")
            self.listening.clear()
            self._fire(self._take_all())
            with self._lock:
                if self._stopping:
                    self._thread = None
                    return
            time.sleep(pause)
            pause = min(pause * 2, _RECONNECT_MAX_SECONDS)

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        """Until stopped, or idle for _IDLE_SECONDS (then the thread is no longer the hub's: the next subscribe
        starts another)."""
        while True:
            for notify in conn.notifies(timeout=_TICK_SECONDS):
                self._fire(self._take_key(notify.payload))
            now = time.monotonic()
            self._fire(self._take_due(now))
            with self._lock:
                if self._deadlines:
                    self._idle_since = now
                if self._stopping or now - self._idle_since > _IDLE_SECONDS:
                    self._thread = None
                    self.listening.clear()
                    return

    def _take_key(self, key: str) -> list[Waiter]:
        now = time.monotonic()
        with self._lock:
            self._woken_at[key] = now
            if len(self._woken_at) > 10_000:
                self._woken_at = {k: t for k, t in self._woken_at.items() if now - t < _REMEMBER_SECONDS}
            return self._detach(self._by_key.pop(key, set()))

    def _take_due(self, now: float) -> list[Waiter]:
        with self._lock:
            due = []
            while self._deadlines and (self._deadlines[0][0] <= now or self._deadlines[0][2].done):
                due.append(heapq.heappop(self._deadlines)[2])
            return self._detach(due)

    def _take_all(self) -> list[Waiter]:
        with self._lock:
            waiters = [w for _, _, w in self._deadlines]
            self._deadlines.clear()
            return self._detach(waiters)

    def _detach(self, waiters: Iterable[Waiter]) -> list[Waiter]:
        """The waiters not yet called back, marked done and off every key (under the lock)."""
        taken = []
        for waiter in waiters:
            if waiter.done:
                continue
            waiter.done = True
            for key in waiter.keys:
                others = self._by_key.get(key)
                if others is not None:
                    others.discard(waiter)
                    if not others:
                        del self._by_key[key]
            taken.append(waiter)
        return taken

    def _fire(self, waiters: list[Waiter]) -> None:
        for waiter in waiters:
            self._run_callback(waiter)

    @staticmethod
    def _run_callback(waiter: Waiter) -> None:
        waiter.done = True
        try:
            waiter.callback()
        except Exception:
            logger.exception("wake: a waiter's callback failed")


hub = Hub()
