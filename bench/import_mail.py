"""Import throughput: `oaken import-mail` against bare `mailbox.mbox` parsing of the same file, in one run.

Writes an mbox of N messages (plain text, HTML-only, multipart with attachments, threaded
conversations), times parsing it with the standard library's `mailbox.mbox` (the baseline),
then times Oaken's import (parse, thread, store) into a fresh tenant on the bench's own
embedded servers (var/bench). Prints messages/s for both, their ratio, and peak memory.
Target (issue 2): ratio >= 0.25 and peak RSS < 300 MB.
"""

from __future__ import annotations

import argparse
import mailbox
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORDS = (
    "meeting budget quarterly report draft review schedule project invoice travel lunch team update "
    "deadline contract proposal agenda notes follow-up customer release plan design feedback"
).split()


def _text(rng: random.Random, words: int) -> str:
    lines, line = [], []
    for _ in range(words):
        line.append(rng.choice(WORDS))
        if len(line) == 12:
            lines.append(" ".join(line))
            line = []
    lines.append(" ".join(line))
    return "\n".join(lines) + "\n"


def make_message(i: int, rng: random.Random) -> bytes:
    date = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=7 * i)
    conv = i // 5  # conversations of five
    subject = f"{rng.choice(WORDS).title()} {conv}"
    head = [
        f"From: Person {i % 97} <person{i % 97}@example.test>",
        f"To: alice@example.test, Someone <someone{i % 13}@example.test>",
        f"Subject: {'Re: ' if i % 5 else ''}{subject}",
        f"Date: {format_datetime(date)}",
        f"Message-ID: <bench-{i}@example.test>",
        "MIME-Version: 1.0",
    ]
    if i % 5:
        head.append(f"In-Reply-To: <bench-{i - 1}@example.test>")
        head.append("References: " + " ".join(f"<bench-{j}@example.test>" for j in range(conv * 5, i)))
    kind = i % 10
    if kind < 7:
        head.append("Content-Type: text/plain; charset=utf-8")
        return ("\n".join(head) + "\n\n" + _text(rng, 120)).encode()
    if kind < 9:
        head.append("Content-Type: text/html; charset=utf-8")
        body = "<html><body>" + "".join(f"<p>{line}</p>" for line in _text(rng, 150).splitlines()) + "</body></html>\n"
        return ("\n".join(head) + "\n\n" + body).encode()
    head.append('Content-Type: multipart/mixed; boundary="b"')
    parts = [
        "--b\nContent-Type: text/plain; charset=utf-8\n\n" + _text(rng, 80),
        '--b\nContent-Type: text/csv; name="data.csv"\n'
        'Content-Disposition: attachment; filename="data.csv"\n\n' + "a,b,c\n1,2,3\n" * 20,
        '--b\nContent-Type: application/pdf; name="doc.pdf"\n'
        'Content-Disposition: attachment; filename="doc.pdf"\n'
        "Content-Transfer-Encoding: base64\n\n"
        + "JVBERi0xLjQKJcfsj6IKNSAwIG9iago8PC9MZW5ndGggNiAwIFI+PgpzdHJlYW0K\n"
        * 30,
        "--b--\n",
    ]
    return ("\n".join(head) + "\n\n" + "".join(parts)).encode()


def write_mbox(path: Path, count: int) -> None:
    rng = random.Random(20261130)
    box = mailbox.mbox(str(path), create=True)
    box.lock()
    for i in range(count):
        box.add(make_message(i, rng))
    box.flush()
    box.unlock()
    box.close()


def bare_parse(path: Path) -> tuple[int, float]:
    start = time.perf_counter()
    n = 0
    for message in mailbox.mbox(str(path)):
        message.get("Message-ID")  # touch a header, as any reader would
        n += 1
    return n, time.perf_counter() - start


def fresh_database() -> str:
    """Import into an empty database each run, so earlier runs' rows do not weigh on the figure; returns
    its name (DATABASE_URL names it too, for Django set up afterwards)."""
    import atexit
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    url = os.environ["DATABASE_URL"]
    name = f"oaken_bench_{os.getpid()}_{time.monotonic_ns()}"
    parts = urlsplit(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    os.environ["DATABASE_URL"] = urlunsplit(parts._replace(path="/" + name))

    def drop() -> None:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    atexit.register(drop)
    return name


def migrated_fresh_database() -> None:
    """The bench's embedded servers up, a database of its own made anew, Django set up and migrated."""
    os.environ.setdefault("OAKEN_DATA_DIR", str(ROOT / "var" / "bench"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from config import embedded

    embedded.ensure_environment()
    fresh_database()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def oaken_import(path: Path) -> tuple[dict[str, int], float]:
    migrated_fresh_database()
    from apps.mail.importing import import_mail
    from apps.workspaces.services import create_person

    person = create_person(email=f"bench-{time.time_ns()}@example.test", password=None)
    start = time.perf_counter()
    counts = import_mail(tenant=person.tenant, workspace=person.workspace, account_name="bench", path=path)
    elapsed = time.perf_counter() - start
    return {"imported": counts.imported, "duplicates": counts.duplicates, "failed": counts.failed}, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.mbox"
        write_mbox(path, args.messages)
        size_mb = path.stat().st_size / 1e6
        # The machine's speed drifts over seconds: the baseline runs twice before the import and
        # twice after it, and its median stands for the whole run.
        before = [bare_parse(path) for _ in range(2)]
        counts, oaken_seconds = oaken_import(path)
        after = [bare_parse(path) for _ in range(2)]
        n = before[0][0]
        bare_seconds = statistics.median(seconds for _, seconds in before + after)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    bare_rate, oaken_rate = n / bare_seconds, counts["imported"] / oaken_seconds
    print(f"mbox: {n} messages, {size_mb:.1f} MB")
    print(f"bare mailbox.mbox parse : {bare_rate:9.0f} messages/s  ({bare_seconds:.2f} s)")
    print(f"oaken import            : {oaken_rate:9.0f} messages/s  ({oaken_seconds:.2f} s)  {counts}")
    print(f"ratio (oaken / bare)    : {oaken_rate / bare_rate:.3f}   target >= 0.25")
    print(f"peak RSS (whole process): {peak_mb:.0f} MB   target < 300 MB")


if __name__ == "__main__":
    main()
