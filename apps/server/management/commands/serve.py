"""`oaken serve`: migrate, then run the web server, a Celery worker, Celery beat and the IMAP IDLE watcher until
stopped. The watcher, when it dies, is started again (after a wait that doubles while it keeps dying, up to a
minute): polling covers its accounts meanwhile; any other child's end stops the whole."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from config.embedded import socket_path
from config.env import env_int

STOP_GRACE_SECONDS = 20
RESTART_WAIT_MAX_SECONDS = 60.0


@dataclass
class Child:
    name: str
    args: list[str]
    process: subprocess.Popen[bytes] | None = None
    # started again when it ends (the others' end stops serve)
    restart: bool = False
    restart_wait: float = 1.0
    restart_at: float | None = None
    started_at: float = 0.0


def control_socket(bind: str) -> Path:
    """gunicorn's control socket (what `gunicornc` talks to), in the data folder and named by the address served.
    gunicorn's own default is one path in the home folder ($XDG_RUNTIME_DIR or ~/.gunicorn), which a second
    instance on the host takes over (it unlinks the first one's socket) and removes when it stops."""
    return socket_path(settings.DATA_DIR / "run", "gunicorn-" + re.sub(r"[^A-Za-z0-9.-]", "_", bind) + ".ctl")


def web_command(bind: str, workers: int, *, quiet: bool = False) -> list[str]:
    """The web server as `oaken serve` runs it (gunicorn, threaded workers whose own refusals are in the error shape,
    and a log that quotes no token: config.web_worker); quiet: warnings only, no access log
    (the test suite's and the benchmarks' servers)."""
    return [
        sys.executable, "-m", "gunicorn", "config.wsgi:application", "--bind", bind, "--workers", str(workers),
        "--worker-class", "config.web_worker.ThreadWorker", "--logger-class", "config.web_worker.WebLogger",
        "--threads", "4", "--graceful-timeout", "10",
        "--control-socket", str(control_socket(bind)),
        *(["--log-level", "warning"] if quiet else ["--access-logfile", "-"]),
    ]  # fmt: skip


class Command(BaseCommand):
    help = "Serve the whole product: web (gunicorn), Celery worker, Celery beat and the IMAP IDLE watcher."

    def add_arguments(self, parser: CommandParser) -> None:
        # settings read OAKEN_PORT and OAKEN_BIND: links made outside a request point there (apps.core.links)
        parser.add_argument("--port", type=int, default=settings.SERVE_PORT)
        parser.add_argument("--bind", default=settings.SERVE_BIND)
        parser.add_argument("--web-workers", type=int, default=env_int("OAKEN_WEB_WORKERS", 2, minimum=1))
        parser.add_argument("--worker-concurrency", type=int, default=env_int("OAKEN_WORKER_CONCURRENCY", 2, minimum=1))

    def handle(self, *args: Any, **options: Any) -> None:
        # with the system checks, which call_command skips unless asked: a setting an operation names wrongly
        # stops the start here (apps.operations.checks)
        call_command("migrate", interactive=False, verbosity=0, skip_checks=False)
        host, port = options["bind"], options["port"]
        python = sys.executable
        children = [
            Child(
                "web",
                web_command(f"{host}:{port}", options["web_workers"]),
            ),
            Child(
                "worker",
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "config",
                    "worker",
                    "--loglevel",
                    "INFO",
                    "--concurrency",
                    str(options["worker_concurrency"]),
                    "--hostname",
                    f"worker@oaken-{port}",
                ],
            ),
            Child(
                "beat",
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "config",
                    "beat",
                    "--loglevel",
                    "INFO",
                    "--schedule",
                    str(settings.DATA_DIR / "celerybeat-schedule"),
                ],
            ),
            Child("watcher", [python, "-m", "config.cli", "watch-mail", "--id", f"watcher@oaken-{port}"], restart=True),
        ]
        stopping = False

        def request_stop(signum: int, frame: FrameType | None) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        for child in children:
            # Own sessions: a terminal's Ctrl-C reaches only this supervisor, which then stops
            # the children in order, before the embedded servers they use.
            child.process = subprocess.Popen(child.args, start_new_session=True)
            child.started_at = time.monotonic()
        display_host = "127.0.0.1" if host in {"0.0.0.0", "::"} else host  # noqa: S104
        self.stdout.write(f"Oaken is serving at http://{display_host}:{port}/  (Ctrl-C stops it)", ending="\n")
        self.stdout.flush()
        exit_code = 0
        while not stopping:
            for child in children:
                assert child.process is not None
                if child.process.poll() is None:
                    continue
                if child.restart:
                    self._restart(child)
                    continue
                self.stderr.write(f"{child.name} exited with status {child.process.returncode}; stopping")
                exit_code, stopping = 1, True
            time.sleep(0.2)
        self._stop(children)
        if exit_code:
            sys.exit(exit_code)

    def _restart(self, child: Child) -> None:
        """Start a child that ended again, once its wait is over (the wait doubles while it keeps ending)."""
        now = time.monotonic()
        if child.restart_at is None:
            assert child.process is not None
            if now - child.started_at > RESTART_WAIT_MAX_SECONDS:
                child.restart_wait = 1.0  # it had run a while: not one that keeps dying
            status, wait = child.process.returncode, child.restart_wait
            self.stderr.write(f"{child.name} exited with status {status}; starting it again in {wait:.0f} s")
            child.restart_at = now + child.restart_wait
            child.restart_wait = min(child.restart_wait * 2, RESTART_WAIT_MAX_SECONDS)
            return
        if now < child.restart_at:
            return
        child.restart_at = None
        child.process = subprocess.Popen(child.args, start_new_session=True)
        child.started_at = now

    def _stop(self, children: list[Child]) -> None:
        for child in children:
            if child.process is not None and child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for child in children:
            if child.process is None:
                continue
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait()
        self.stdout.write("Oaken stopped.")
