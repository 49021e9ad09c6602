"""IMAP sync throughput: Oaken's full sync of a mailbox against a bare `imapclient` fetch of it, in one run.

Starts a Dovecot on loopback (tests.mailservers.dovecot), loads N messages into one user's INBOX (the
same mix as bench/import_mail.py: plain, HTML-only, multipart with attachments, threaded), times a
bare imapclient fetch of every message (UID FETCH BODY.PEEK[] in batches of the sync's batch size, the
baseline), then times Oaken's full first sync of the same mailbox (list folders, fetch, parse, thread,
store) into a fresh tenant on the bench's own embedded servers (var/bench). Prints messages/s for
both and their ratio. Target (issue 6): ratio >= 0.5.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

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


def oaken_sync(server: ImapServer) -> tuple[dict[str, int], float]:
    os.environ.setdefault("OAKEN_DATA_DIR", str(ROOT / "var" / "bench"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["OAKEN_MAIL_ALLOW_PRIVATE_HOSTS"] = "true"  # the bench's Dovecot is on loopback
    from config import embedded

    embedded.ensure_environment()
    fresh_database()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    from apps.mail.models import AccountKind, MailAccount
    from apps.mail.sync import run_sync
    from apps.workspaces.services import create_person

    person = create_person(email=f"bench-{time.time_ns()}@example.test", password=None)
    part = {"host": server.host, "port": server.port, "security": "none", "username": USER, "password": PASSWORD}
    account = MailAccount.objects.create(
        tenant=person.tenant, workspace=person.workspace, name="bench", kind=AccountKind.IMAP,
        credentials={"imap": part, "smtp": part},
    )  # fmt: skip
    start = time.perf_counter()
    outcome = run_sync(account.pk, force=True)
    elapsed = time.perf_counter() - start
    if outcome.state != "synced":
        raise SystemExit(f"the sync did not run: {outcome.state} {outcome.reason}")
    counts = outcome.counts
    return {"stored": counts.stored, "failed": counts.failed, "folders": counts.folders}, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000)
    args = parser.parse_args()
    batch = int(os.environ.get("OAKEN_SYNC_BATCH_SIZE", "200"))
    with dovecot() as server:
        server.add_user(USER)
        size_mb = load(server, args.messages) / 1e6
        # The machine's speed drifts over seconds: the baseline runs twice before the sync and twice
        # after it, and its median stands for the whole run.
        before = [bare_fetch(server, batch) for _ in range(2)]
        counts, oaken_seconds = oaken_sync(server)
        after = [bare_fetch(server, batch) for _ in range(2)]
    n = before[0][0]
    bare_seconds = statistics.median(seconds for _, seconds in before + after)
    bare_rate, oaken_rate = n / bare_seconds, counts["stored"] / oaken_seconds
    print(f"mailbox: {n} messages, {size_mb:.1f} MB, batches of {batch}")
    print(f"bare imapclient fetch   : {bare_rate:9.0f} messages/s  ({bare_seconds:.2f} s)")
    print(f"oaken full sync         : {oaken_rate:9.0f} messages/s  ({oaken_seconds:.2f} s)  {counts}")
    print(f"ratio (oaken / bare)    : {oaken_rate / bare_rate:.3f}   target >= 0.5")


if __name__ == "__main__":
    main()
