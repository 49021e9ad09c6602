"""New mail's latency with the IMAP IDLE watcher, against polling, in one run; and the watcher's memory per account.

Starts a Dovecot on loopback (tests.mailservers.dovecot, with limits for many connections), a fresh database on
the bench's own embedded servers (var/bench), a Celery worker (solo pool) and `oaken watch-mail`, as `oaken serve`
runs them. Then:

1. Latency: N messages are appended to one mailbox's INBOX one at a time; for each, the time from the APPEND's
   answer to the message being in `list_messages` (asked every 20 ms through the gate, as a person). Median and
   p95. The baseline, polling at the default interval (SYNC_INTERVAL_SECONDS), is measured in the same run: each
   message is appended, then waits for the poll's next tick (a phase drawn uniformly over the interval, as mail
   arrives at any moment of it; the wait is added, not slept) and the same sync task, queued as the beat queues
   it, lists it. So the baseline is the real sync and listing time plus the poll's wait.
2. Memory: the watcher's resident memory (RSS) watching one account, then with `--accounts` more idle accounts
   (Dovecot users made in bulk, one connection each): the difference per account, in KB.

Target (issue 38): a message visible within 5 s (median and p95 well under it).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.imap_sync import setup_django  # noqa: E402
from bench.import_mail import fresh_database  # noqa: E402
from tests.mailservers import PASSWORD, ImapServer, dovecot  # noqa: E402

# many idle connections: imap processes serving many clients each, login processes that stay
MANY = """
default_process_limit = 2000
default_client_limit = 5000
service imap {
  service_count = 0
  client_limit = 100
  process_limit = 100
}
service imap-login {
  service_count = 0
  client_limit = 1000
  process_min_avail = 2
}
"""


class Child:
    """A child process whose output is kept (read in a thread)."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def count(self, text: str) -> int:
        return sum(text in line for line in list(self.lines))

    def wait_for(self, text: str, n: int = 1, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.count(text) < n:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"waited for {n} x {text!r}:\n" + "".join(self.lines[-30:]))
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def bulk_users(server: ImapServer, names: list[str]) -> None:
    """Dovecot users in one write (ImapServer.add_user waits out a second per user)."""
    with (server.root / "users").open("a") as fh:
        fh.writelines(f"{name}:{{PLAIN}}{PASSWORD}::::::\n" for name in names)
    stamp = int(time.time()) + 1
    os.utime(server.root / "users", (stamp, stamp))
    time.sleep(max(0.0, stamp + 1 - time.time()))
    server.users.extend(names)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=30)
    parser.add_argument("--accounts", type=int, default=1000)
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # Dovecot and the watcher inherit it
    setup_django()
    fresh_database()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    from apps.core.callers import Caller
    from apps.core.kinds import Door
    from apps.gate.dispatch import dispatch
    from apps.mail.models import AccountKind, MailAccount
    from apps.mail.tasks import sync_account_task
    from apps.workspaces.models import Membership
    from apps.workspaces.services import create_person
    from config.settings.operations import OPERATIONS
    from tests.mailfactory import raw_message

    interval = OPERATIONS["SYNC_INTERVAL_SECONDS"]
    env = {**os.environ, "OAKEN_DB_CONN_MAX_AGE": "0", "OAKEN_WATCH_SCAN_SECONDS": "1"}
    with dovecot(MANY) as server:
        user = "latency@example.test"
        server.add_user(user)
        person = create_person(email=f"bench-{time.time_ns()}@example.test", password=None)
        part = {"host": server.host, "port": server.port, "security": "none", "username": user, "password": PASSWORD}
        account = MailAccount.objects.create(
            tenant=person.tenant,
            workspace=person.workspace,
            name="latency",
            kind=AccountKind.IMAP,
            credentials={"imap": part, "smtp": part},
        )
        caller = Caller.person(Membership.objects.for_user(person.user).get(tenant=person.tenant))

        def listed(subject: str) -> bool:
            out: dict[str, Any] = dispatch(
                caller, Door.UI, "list_messages", {"account_id": str(account.pk), "limit": 5}
            ).output
            return any(m["subject"] == subject for m in out["messages"])

        def until_listed(subject: str, since: float) -> float:
            while not listed(subject):
                if time.monotonic() - since > 120:
                    raise SystemExit(f"{subject} never showed")
                time.sleep(0.02)
            return time.monotonic() - since

        worker = Child(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "solo", "--loglevel", "INFO",
             "--without-mingle", "--without-gossip", "--hostname", f"bench-{os.getpid()}@%h"],
            env,
        )  # fmt: skip
        watcher = Child([sys.executable, str(ROOT / "manage.py"), "watch_mail", "--id", "bench"], env)
        try:
            worker.wait_for(" ready.")
            sync_account_task.delay(account_id=str(account.pk))  # the first sync
            watcher.wait_for("is watching account")
            time.sleep(2)
            idle: list[float] = []
            for i in range(args.messages):
                subject = f"Idle {i}"
                server.append(user, "INBOX", raw_message(subject=subject, message_id=f"<idle-{i}@bench.test>"))
                idle.append(until_listed(subject, time.monotonic()))
                time.sleep(0.3)
            # the baseline: the watcher stopped, each message found by the poll's sync at its next tick
            watcher.stop()
            rng = random.Random(20261207)
            polled: list[float] = []
            for i in range(args.messages):
                subject = f"Polled {i}"
                server.append(user, "INBOX", raw_message(subject=subject, message_id=f"<poll-{i}@bench.test>"))
                phase = rng.uniform(0, interval)
                start = time.monotonic()
                sync_account_task.delay(account_id=str(account.pk))
                polled.append(phase + until_listed(subject, start))
            print(f"latency, delivery -> list_messages, {args.messages} messages, {os.cpu_count()} CPUs")
            for name, values in (("IDLE watcher", idle), (f"poll every {interval} s", polled)):
                print(
                    f"  {name:<18}: median {statistics.median(values):7.3f} s   p95 {percentile(values, 95):7.3f} s"
                    f"   max {max(values):7.3f} s"
                )
            print(f"  ratio of medians (poll / watcher): {statistics.median(polled) / statistics.median(idle):.0f}x")

            # memory: the watcher with one account, then with --accounts more, all idle
            watcher = Child([sys.executable, str(ROOT / "manage.py"), "watch_mail", "--id", "bench-memory"], env)
            watcher.wait_for("is watching account")
            time.sleep(3)
            before = psutil.Process(watcher.proc.pid).memory_info().rss
            names = [f"idle-{n}@bench.test" for n in range(args.accounts)]
            bulk_users(server, names)
            MailAccount.objects.bulk_create(
                MailAccount(
                    tenant=person.tenant,
                    workspace=person.workspace,
                    name=f"idle {n}",
                    kind=AccountKind.IMAP,
                    credentials={"imap": {**part, "username": name}, "smtp": {**part, "username": name}},
                    sync_next_at=None,
                )
                for n, name in enumerate(names)
            )
            started = time.monotonic()
            watcher.wait_for("is watching account", args.accounts + 1, timeout=600)
            connected = time.monotonic() - started
            time.sleep(5)
            after = psutil.Process(watcher.proc.pid).memory_info().rss
            failures = watcher.count("watching failed")
            print(f"memory: {args.accounts} idle accounts connected in {connected:.1f} s ({failures} retried)")
            print(f"  watcher RSS {before / 1e6:.1f} MB with 1 account, {after / 1e6:.1f} MB with {args.accounts + 1}")
            print(f"  per account: {(after - before) / args.accounts / 1024:.1f} KB")
        finally:
            watcher.stop()
            worker.stop()


if __name__ == "__main__":
    main()
