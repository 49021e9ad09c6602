"""PostgreSQL session advisory locks, for work on one account that spans transactions (a sync, a push).

A session lock is held by the database connection, not by a transaction: it stays across the commits of a
long sync, and goes when the worker's connection closes, even if the worker dies holding it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def session_lock(key: str, *, wait: float = 0.0) -> Iterator[bool]:
    """Hold the lock named `key`, waiting up to `wait` seconds for it; yields whether it is held."""
    deadline = time.monotonic() + wait
    with connection.cursor() as cursor:
        while True:
            cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [key])
            held = bool(cursor.fetchone()[0])
            if held or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [key])
