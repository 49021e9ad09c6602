"""The real web server (gunicorn, several workers) on a loopback port, serving the test session's database."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from apps.server.management.commands.serve import web_command
from tests.loopback import free_port, stop


def _database_url() -> str:
    """DATABASE_URL pointed at the test database pytest-django made."""
    url = os.environ["DATABASE_URL"]
    base, _, query = url.partition("?")
    scheme_host, _, _ = base.rpartition("/")
    name = settings.DATABASES["default"]["NAME"]
    return f"{scheme_host}/{name}" + (f"?{query}" if query else "")


def wait_until_serving(url: str, proc: subprocess.Popen[str], timeout: float = 60, *, log: Path | None = None) -> None:
    """Return once the gunicorn at `url` answers; raise with its output (its pipe, or the `log` file it writes)
    if it exits or the time runs out first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):  # noqa: S310 (loopback)
                return
        except urllib.error.HTTPError:
            return  # it answers (health may be 503 while a check warms up)
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                output = log.read_text() if log else proc.stdout.read() if proc.stdout else ""
                raise RuntimeError(f"gunicorn did not start: {output[-2000:]}") from None
            time.sleep(0.2)


@contextlib.contextmanager
def serving(extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """http://127.0.0.1:<port> of a gunicorn with two workers (no state may live in one of them), its environment
    the session's with `extra_env` on top (settings a module's tests need in the server too)."""
    port = free_port()
    env = {**os.environ, "DATABASE_URL": _database_url(), "OAKEN_DB_CONN_MAX_AGE": "0", **(extra_env or {})}
    # its output into a file: what it logs over a module's tests (errors a test provokes on purpose) would fill a
    # pipe nobody reads, and a worker writing to a full pipe stops answering
    with tempfile.TemporaryDirectory(prefix="oaken-live-") as folder:
        log = Path(folder) / "web.log"
        with open(log, "w") as output:
            proc = subprocess.Popen(
                web_command(f"127.0.0.1:{port}", 2, quiet=True),
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
            )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until_serving(url, proc, log=log)
            yield url
        finally:
            stop(proc)


@pytest.fixture(scope="module")
def live_url(django_db_setup: None, django_db_blocker: object) -> Iterator[str]:
    """The real web server for a module's tests (`serving`)."""
    with serving() as url:
        yield url
