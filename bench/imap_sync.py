"""IMAP sync throughput: Oaken's full sync of a mailbox against a bare `imapclient` fetch of it, in one run.

Starts a Dovecot on loopback (tests.mailservers.dovecot), loads N messages into one user's INBOX (the
same mix as bench/import_mail.py: plain, HTML-only, multipart with attachments, threaded), times a
bare imapclient fetch of every message (UID FETCH BODY.PEEK[] + FLAGS in batches of the sync's batch
size, the baseline), then times Oaken's full first sync of the same mailbox (list folders, fetch, parse,
thread, store) into a fresh tenant on the bench's own embedded servers (var/bench). The sync runs
exactly as a Celery worker runs it (run_sync; the sync uses no child processes, so a daemonic worker
takes the same path). Prints messages/s for both and their ratio, the CPU time each side used (this
process, PostgreSQL, Dovecot) and where the sync's own time went. Target (issue 6): ratio >= 0.5.

`--runs N` repeats the baseline and the sync N times (a fresh database each time) and prints each run.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.import_mail import fresh_database, make_message  # noqa: E402
from tests.mailservers import PASSWORD, ImapServer, dovecot  # noqa: E402

USER = "bench@example.test"


def load(server: ImapServer, count: int) -> int:
    """Append `count` messages to the bench user's INBOX; returns the bytes loaded."""
    rng = random.Random(20261130)
    size = 0
    with server.client(USER) as client:
        chunk: list[bytes] = []
        for i in range(count):
            raw = make_message(i, rng).replace(b"\n", b"\r\n")
            size += len(raw)
            chunk.append(raw)
            if len(chunk) == 250 or i == count - 1:
                client.multiappend("INBOX", chunk)
                chunk = []
    return size


def _tree_cpu(root: psutil.Process | None) -> float:
    """CPU seconds of a process and its children, those still running and those it has reaped."""
    if root is None:
        return 0.0
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def _server_process(marker: str) -> psutil.Process | None:
    """The top process of a server whose command line names `marker` (its data or configuration folder)."""
    for process in psutil.process_iter(["cmdline", "ppid"]):
        cmdline = " ".join(process.info["cmdline"] or ())
        if marker in cmdline:
            try:
                parent = process.parent()
            except psutil.NoSuchProcess:
                continue
            if parent is None or marker not in " ".join(parent.cmdline()):
                return process
    return None


@dataclass
class Cpu:
    """CPU seconds used meanwhile by this process, PostgreSQL and Dovecot."""

    servers: dict[str, psutil.Process | None]
    start: dict[str, float] = field(default_factory=dict)
    used: dict[str, float] = field(default_factory=dict)

    def _now(self) -> dict[str, float]:
        me = psutil.Process().cpu_times()
        return {"process": me.user + me.system, **{name: _tree_cpu(p) for name, p in self.servers.items()}}

    def __enter__(self) -> Cpu:
        self.start = self._now()
        return self

    def __exit__(self, *exc: object) -> None:
        self.used = {name: value - self.start[name] for name, value in self._now().items()}

    def line(self) -> str:
        return ", ".join(f"{name} {seconds:.2f}" for name, seconds in self.used.items())


def bare_fetch(server: ImapServer, batch: int) -> tuple[int, float]:
    start = time.perf_counter()
    n = 0
    with server.client(USER) as client:
        client.select_folder("INBOX", readonly=True)
        uids = client.search("ALL")
        for i in range(0, len(uids), batch):
            data = client.fetch(uids[i : i + batch], ["BODY.PEEK[]", "FLAGS"])
            n += sum(1 for item in data.values() if b"BODY[]" in item)
    return n, time.perf_counter() - start


@dataclass
class Stages:
    """Thread CPU seconds of the sync's stages: fetching and parsing (the read-ahead thread), storing."""

    seconds: dict[str, float] = field(default_factory=lambda: {"fetch": 0.0, "parse": 0.0, "store": 0.0})
    lock: threading.Lock = field(default_factory=threading.Lock)

    def timed(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                with self.lock:
                    self.seconds[name] += time.thread_time() - started

        return wrapper


@contextmanager
def observed(stages: Stages) -> Iterator[None]:
    """Count the CPU time of each stage of the sync (wrappers around three functions, called once a batch)."""
    from apps.mail import store, sync

    originals = (sync.fetch_messages, sync.parse_batch, store.MessageStore.run_batch)
    sync.fetch_messages = stages.timed("fetch", originals[0])
    sync.parse_batch = stages.timed("parse", originals[1])
    store.MessageStore.run_batch = stages.timed("store", originals[2])  # type: ignore[method-assign]
    try:
        yield
    finally:
        sync.fetch_messages, sync.parse_batch = originals[0], originals[1]
        store.MessageStore.run_batch = originals[2]  # type: ignore[method-assign]


def setup_django() -> None:
    os.environ.setdefault("OAKEN_DATA_DIR", str(ROOT / "var" / "bench"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["OAKEN_MAIL_ALLOW_PRIVATE_HOSTS"] = "true"  # the bench's Dovecot is on loopback
    from config import embedded

    embedded.ensure_environment()


def oaken_sync(server: ImapServer, postgres: psutil.Process | None, dovecot_process: psutil.Process | None):
    """One full first sync into a fresh database; returns (counts, seconds, cpu, stages)."""
    name = fresh_database()
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    connections.close_all()
    connections["default"].settings_dict["NAME"] = name  # a later run's fresh database
    call_command("migrate", interactive=False, verbosity=0)
    from apps.mail.models import AccountKind, MailAccount
    from apps.mail.sync import run_sync
    from apps.workspaces.services import create_person

    person = create_person(email=f"bench-{time.time_ns()}@example.test", password=None)
    part = {"host": server.host, "port": server.port, "security": "none", "username": USER, "password": PASSWORD}
    account = MailAccount.objects.create(
        tenant=person.tenant,
        workspace=person.workspace,
        name="bench",
        kind=AccountKind.IMAP,
        credentials={"imap": part, "smtp": part},
    )
    stages = Stages()
    with observed(stages), Cpu({"postgres": postgres, "dovecot": dovecot_process}) as cpu:
        start = time.perf_counter()
        outcome = run_sync(account.pk, force=True)
        elapsed = time.perf_counter() - start
    if outcome.state != "synced":
        raise SystemExit(f"the sync did not run: {outcome.state} {outcome.reason}")
    counts = outcome.counts
    return {"stored": counts.stored, "failed": counts.failed, "folders": counts.folders}, elapsed, cpu, stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    setup_django()
    from config.settings.operations import OPERATIONS

    batch = OPERATIONS["SYNC_BATCH_SIZE"]
    postgres = _server_process(str(Path(os.environ["DATABASE_URL"].split("host=")[-1])))
    ratios = []
    with dovecot() as server:
        server.add_user(USER)
        size_mb = load(server, args.messages) / 1e6
        dovecot_process = _server_process(str(server.root))
        print(f"mailbox: {args.messages} messages, {size_mb:.1f} MB, batches of {batch}, {os.cpu_count()} CPUs")
        for run in range(1, args.runs + 1):
            # The machine's speed drifts over seconds: the baseline runs twice before the sync and twice
            # after it, and its median stands for the run.
            before = []
            for _ in range(2):
                with Cpu({"dovecot": dovecot_process}) as bare_cpu:
                    before.append(bare_fetch(server, batch))
            load_before = os.getloadavg()[0]
            counts, oaken_seconds, cpu, stages = oaken_sync(server, postgres, dovecot_process)
            after = [bare_fetch(server, batch) for _ in range(2)]
            n = before[0][0]
            bare_seconds = statistics.median(seconds for _, seconds in before + after)
            bare_rate, oaken_rate = n / bare_seconds, counts["stored"] / oaken_seconds
            ratios.append(oaken_rate / bare_rate)
            print(f"run {run} (load average {load_before:.2f} before the sync, {os.getloadavg()[0]:.2f} after)")
            print(f"  bare imapclient fetch : {bare_rate:9.0f} messages/s  ({bare_seconds:.2f} s)")
            print(f"  oaken full sync       : {oaken_rate:9.0f} messages/s  ({oaken_seconds:.2f} s)  {counts}")
            print(f"  ratio (oaken / bare)  : {ratios[-1]:.3f}   target >= 0.5")
            print(f"  CPU s, bare fetch     : {bare_cpu.line()}")
            print(f"  CPU s, oaken sync     : {cpu.line()}")
            print("  sync stages, thread CPU s: " + ", ".join(f"{k} {v:.2f}" for k, v in stages.seconds.items()))
    if args.runs > 1:
        print(f"ratios: {' '.join(f'{r:.3f}' for r in ratios)}; median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
