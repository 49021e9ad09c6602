"""A real Celery worker as a child process, serving the test session's database and Redis, so a test can kill it
the way an operating system does (SIGKILL: no warm shutdown, no acknowledgement, no cleanup)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.liveserver import _database_url
from tests.loopback import stop

# The worker program: Oaken's Celery app with the broker's transport options the test asks for (a short
# visibility timeout makes Redis hand an unacknowledged task to another worker in seconds, not an hour).
_MAIN = """
import json, sys
from config.celery import app
app.conf.broker_transport_options = json.loads(sys.argv[1])
app.worker_main(["worker", *sys.argv[2:]])
"""


class WorkerProcess:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(" ready." in line for line in self.lines):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("the Celery worker did not start:\n" + "".join(self.lines[-40:]))

    def kill(self) -> None:
        """SIGKILL, as the kernel's OOM killer or a lost machine would end it."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    @property
    def output(self) -> str:
        return "".join(self.lines)


@contextmanager
def worker_process(
    name: str,
    *,
    transport_options: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    pool: str = "solo",
    concurrency: int = 1,
) -> Iterator[WorkerProcess]:
    """A worker named `name` (a solo pool unless asked: prefork with N processes, as `oaken serve` runs it),
    started and ready; stopped (if still alive) afterwards."""
    environment = {**os.environ, "DATABASE_URL": _database_url(), "OAKEN_DB_CONN_MAX_AGE": "0", **(env or {})}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _MAIN,
            json.dumps(transport_options or {}),
            "--pool",
            pool,
            "--concurrency",
            str(concurrency),
            "--hostname",
            f"{name}-{os.getpid()}@%h",
            "--loglevel",
            "INFO",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
        ],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    worker = WorkerProcess(proc)
    try:
        worker.wait_ready()
        yield worker
    finally:
        if proc.poll() is None:
            stop(proc)
