"""Audit append throughput on one tenant: one writer against eight concurrent writers, in one run.

Every append is its own transaction, as a gate call's would be, on the bench's own embedded
servers (var/bench). The eight writers are threads with a connection each, all appending to the
same tenant's chain, so they queue on its chain head: the figure that matters is how many
events/s that one lock lets through. Afterwards the whole chain is verified (linear: seq 1..N,
every link intact). Prints both rates, their ratio and the verification rate.
Change (issue: audit): >= 500 appends/s with 8 writers.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from apps.workspaces.models import Tenant


def setup() -> None:
    os.environ.setdefault("OAKEN_DATA_DIR", str(ROOT / "var" / "bench"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from config import embedded

    embedded.ensure_environment()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def run_writers(tenant: Tenant, writers: int, per_writer: int) -> float:
    """Seconds for `writers` threads to append `per_writer` events each, one transaction per event."""
    from django.db import connection, transaction

    from apps.audit.log import append_record, input_digest
    from apps.core.changes import Change

    ready = threading.Barrier(writers + 1)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            connection.ensure_connection()  # connecting is not what is measured
            ready.wait()
            person = uuid.uuid4()
            for i in range(per_writer):
                with transaction.atomic():
                    append_record(
                        tenant=tenant,
                        principal="agent",
                        door="mcp",
                        operation="archive_messages",
                        outcome="ok",
                        person_id=person,
                        credential_id=f"conn-{n}",
                        credential_kind="oauth",
                        targets=[
                            Change(id=f"msg-{n}-{i}", before={"folder": "inbox"}, after={"folder": "archive"}),
                            Change(id=f"thread-{n}-{i}", before={"unread": 2}, after={"unread": 0}),
                        ],
                        input_digest=input_digest({"ids": [f"msg-{n}-{i}"], "writer": n}),
                    )
        except BaseException as exc:
            errors.append(exc)
            ready.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    ready.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--per-writer", type=int, default=300)
    args = parser.parse_args()
    total = args.writers * args.per_writer

    setup()
    from django.db import connection

    from apps.audit.log import verify_chain
    from apps.audit.models import AuditEvent
    from apps.workspaces.services import create_person

    tenant = create_person(email=f"bench-{time.time_ns()}@example.test", password=None).tenant
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('fsync'), current_setting('synchronous_commit')")
        fsync, synchronous_commit = cursor.fetchone()

    one_seconds = run_writers(tenant, 1, total)
    many_seconds = run_writers(tenant, args.writers, args.per_writer)

    start = time.perf_counter()
    checked, broken = verify_chain(tenant.pk)
    verify_seconds = time.perf_counter() - start
    seqs = list(AuditEvent.objects.for_tenant(tenant).order_by("seq").values_list("seq", flat=True))
    linear = broken is None and checked == 2 * total and seqs == list(range(1, 2 * total + 1))

    one_rate, many_rate = total / one_seconds, total / many_seconds
    print(
        f"server: fsync={fsync} synchronous_commit={synchronous_commit}, {os.cpu_count()} CPUs; "
        f"{total} appends per run, one tenant"
    )
    print(f"1 writer                : {one_rate:9.0f} appends/s  ({one_seconds:.2f} s)")
    print(f"{args.writers} concurrent writers    : {many_rate:9.0f} appends/s  ({many_seconds:.2f} s)   target >= 500")
    print(f"ratio ({args.writers} writers / 1)   : {many_rate / one_rate:.2f}")
    print(f"verify_chain            : {checked / verify_seconds:9.0f} events/s  ({checked} events)")
    print(f"chain linear            : {'yes' if linear else 'NO'}  (break: {broken})")
    if not linear:
        sys.exit(1)


if __name__ == "__main__":
    main()
