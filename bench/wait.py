"""wait_for_message: what 200 concurrent waiters cost the web server, and how soon mail wakes them.

One run, the bench's own embedded servers (var/bench), gunicorn as `oaken serve` runs it (two gthread workers of
four threads each). Measured at idle first (the baseline) and then with N waiters parked (POST
/api/v1/ops/wait_for_message with a read-only API key, each its own connection):
  * the web workers' threads and resident memory, and the database connections the bench database has;
  * the latency of an ordinary call (list_accounts) made meanwhile, against the same call at idle;
  * once one matching message is imported, how long until every waiter has its answer.
Prints each figure at idle and with the waiters, and their ratio. A server holding a thread per waiter would
need N threads (and stop answering once its eight are taken); this one holds none.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.audit_append import setup  # noqa: E402
from bench.mcp_latency import _start  # noqa: E402
from tests.loopback import free_port, stop  # noqa: E402


def _workers(master: int) -> list[int]:
    """The gunicorn master's worker processes."""
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return [int(pid) for pid in children]


def _threads_and_memory(pids: list[int]) -> tuple[int, float]:
    """Threads and resident MB of these processes together."""
    threads, rss = 0, 0
    for pid in pids:
        threads += len(os.listdir(f"/proc/{pid}/task"))
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1])
    return threads, rss / 1024


def _connections() -> int:
    """Connections to the bench database other than this process's own."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        (count,) = cursor.fetchone()
    return int(count)


def _data(workdir: Path) -> tuple[Any, str, str]:
    """A person with a mailbox of a few messages and a read-only key: (person, account id, key)."""
    from django.utils import timezone

    from apps.agents.keys import issue_key
    from apps.mail.importing import import_mail
    from apps.workspaces.models import Membership
    from apps.workspaces.services import create_person
    from bench.import_mail import write_mbox

    person = create_person(email=f"wait-{time.time_ns()}@example.test", password=secrets.token_urlsafe(16))
    person.user.email_verified_at = timezone.now()
    person.user.save(update_fields=["email_verified_at"])
    mbox = workdir / "start.mbox"
    write_mbox(mbox, 20)
    counts = import_mail(tenant=person.tenant, workspace=person.workspace, account_name="bench", path=mbox)
    membership = Membership.objects.for_user(person.user).get(tenant=person.tenant)
    _, key = issue_key(
        membership=membership, scopes=["read"], workspaces=["default"], allow_list=None, expires_at=None, name="bench"
    )
    return person, str(counts.account_id), key


def _deliver(person: Any, workdir: Path, subject: str) -> None:
    from apps.mail.importing import import_mail
    from tests.mailfactory import raw_message, write_mbox

    path = workdir / f"{time.time_ns()}.mbox"
    write_mbox(path, [raw_message(subject=subject, message_id=f"<{time.time_ns()}@bench.test>")])
    import_mail(tenant=person.tenant, workspace=person.workspace, account_name="bench", path=path)


def _latency(client: Any, url: str, calls: int) -> float:
    """Median ms of list_accounts."""
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        answer = client.post(url + "/api/v1/ops/list_accounts", json={})
        times.append(time.perf_counter() - began)
        assert answer.status_code == 200, answer.text[:300]
    return statistics.median(times) * 1000


def _warm(url: str, headers: dict[str, str]) -> None:
    """Every thread of both workers started, and each with its database connection, before the idle figures."""
    import httpx2

    def some() -> None:
        with httpx2.Client(headers=headers, timeout=30) as own:
            for _ in range(20):
                assert own.post(url + "/api/v1/ops/list_accounts", json={}).status_code == 200

    threads = [threading.Thread(target=some) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _measure(master: int, client: Any, url: str, calls: int) -> tuple[float, float, float, float]:
    threads, rss = _threads_and_memory(_workers(master))
    return threads, rss, _connections(), _latency(client, url, calls)


def _park_and_wake(
    person: Any,
    workdir: Path,
    url: str,
    headers: dict[str, str],
    account: str,
    count: int,
    master: int,
    client: Any,
    args: argparse.Namespace,
) -> tuple[tuple[float, float, float, float], list[float], float]:
    """`count` waiters parked, measured, then woken by one matching message: (figures, seconds from the import's
    start to each answer, the import's own seconds)."""
    import httpx2

    answers: list[tuple[float, dict[str, Any]]] = []
    lock = threading.Lock()
    token = f"bench code {time.time_ns()}"
    asked = {"account_id": account, "subject_contains": token, "timeout_seconds": 120}

    def wait() -> None:
        with httpx2.Client(headers=headers, timeout=180) as own:
            answer = own.post(url + "/api/v1/ops/wait_for_message", json=asked)
        with lock:
            answers.append((time.monotonic(), answer.json()))

    waiters = [threading.Thread(target=wait, daemon=True) for _ in range(count)]
    for waiter in waiters:
        waiter.start()
    time.sleep(3 + count / 50)  # every request made and parked
    assert not answers, f"{len(answers)} waits answered before any mail came"
    busy = _measure(master, client, url, args.calls)
    began = time.monotonic()
    _deliver(person, workdir, f"Your {token}")
    stored = time.monotonic() - began
    for waiter in waiters:
        waiter.join(60)
    assert len(answers) == count and all(a["matched"] for _, a in answers), "a waiter was not answered"
    return busy, sorted(at - began for at, _ in answers), stored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--waiters", type=int, default=200)
    parser.add_argument("--calls", type=int, default=50, help="list_accounts calls timed at idle and while waiting")
    args = parser.parse_args()
    os.environ["OAKEN_MCP_REQUESTS_PER_MINUTE"] = "1000000000"
    setup()
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    import httpx2

    from apps.server.management.commands.serve import web_command

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        person, account, key = _data(workdir)
        port = free_port()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        web = _start("gunicorn", web_command(f"127.0.0.1:{port}", 2, quiet=True), port, env)
        url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {key}"}
        try:
            client = httpx2.Client(headers=headers, timeout=30)
            _warm(url, headers)
            idle = _measure(web.pid, client, url, args.calls)
            rows = []
            for count in sorted({max(1, args.waiters // 4), args.waiters}):
                rows.append(
                    (count, *_park_and_wake(person, workdir, url, headers, account, count, web.pid, client, args))
                )
        finally:
            stop(web)

    print("wait_for_message: waiters parked on gunicorn (2 workers x 4 threads), against the same server idle")
    names = ("web worker threads", "web worker memory (MB)", "database connections", "list_accounts median (ms)")
    for count, busy, woken, stored in rows:
        print(f"{count} waiters{'':22}{'idle':>10}{'waiting':>10}{'ratio':>8}")
        for name, before, during in zip(names, idle, busy, strict=True):
            print(f"  {name:30}{before:>10.1f}{during:>10.1f}{during / before if before else float('nan'):>8.2f}")
        print(
            f"  answered after the import began: median {statistics.median(woken) * 1000:.0f} ms, last "
            f"{woken[-1] * 1000:.0f} ms; the import itself took {stored * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()
