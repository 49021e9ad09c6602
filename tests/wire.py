"""What this process's database connection sends to PostgreSQL, as libpq traces it (PQtrace): the round trips a
call really makes, where Django's query log also lists the BEGIN and COMMIT of a transaction block that psycopg
never sends when the block ran no statement."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db import connection
from psycopg.pq import Trace


@contextmanager
def traced(path: Path) -> Iterator[Path]:
    """Trace the connection's messages into `path` meanwhile."""
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with path.open("w") as trace:
        pgconn.trace(os.dup(trace.fileno()))
        pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield path
        finally:
            pgconn.untrace()


def sent(path: Path) -> list[list[str]]:
    """The messages the client sent in a trace, each as its tab-separated fields (kind at [2])."""
    return [line.split("\t") for line in path.read_text().splitlines() if line.startswith("F\t")]
