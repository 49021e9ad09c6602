"""The send budget roll-up against a bare read of the same counters, in one run.

Spends from N hourly budgets (default 10,000, the default BUDGET_ROLLUP_MAX_KEYS) spread over 20 tenants in the
bench's own embedded Redis and PostgreSQL (var/bench), then times a full roll-up pass (apps.outbound.rollup:
SCAN pages, MGET + TIME, one upsert a page) twice: the first inserts every row, the second sets them again.
The baseline is the Redis side alone: the same SCAN and MGET pages, nothing written. Prints keys/s of each and
the ratios; the figure that matters is whether a run of the default bound fits well inside the default minute.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def setup() -> None:
    os.environ.setdefault("OAKEN_DATA_DIR", str(ROOT / "var" / "bench"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from config import embedded

    embedded.ensure_environment()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def bare_read(page: int) -> tuple[int, float]:
    """(keys, seconds) of SCAN + MGET over every budget counter, writing nothing."""
    from apps.outbound import budget
    from config.redis_client import redis_client

    client, cursor, seen = redis_client(), 0, 0
    start = time.perf_counter()
    while True:
        cursor, keys = client.scan(cursor=cursor, match=f"{budget.KEY_PREFIX}*", count=page)
        if keys:
            pipe = client.pipeline(transaction=True)
            pipe.mget(sorted(keys))
            pipe.time()
            pipe.execute()
        seen += len(keys)
        if cursor == 0:
            return seen, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budgets", type=int, default=10_000)
    parser.add_argument("--tenants", type=int, default=20)
    args = parser.parse_args()

    setup()
    from django.conf import settings

    from apps.outbound import budget, rollup
    from apps.outbound.models import BudgetUsage
    from apps.workspaces.services import create_person
    from config.redis_client import redis_client

    client = redis_client()
    tenants = [create_person(email=f"bench-{time.time_ns()}-{i}@example.test", password=None).tenant
               for i in range(args.tenants)]  # fmt: skip
    now = time.time()
    names = [f"{tenants[i % args.tenants].pk}:apikey:bench-{i}" for i in range(args.budgets)]
    pipe = client.pipeline(transaction=False)
    for i, name in enumerate(names):
        pipe.set(budget.window_key(name, now)[0], i % 50 + 1, ex=3600)
    pipe.execute()
    client.delete(rollup.CURSOR_KEY)
    # one pass per run, whatever else the keyspace holds
    settings.OPERATIONS = {**settings.OPERATIONS, "BUDGET_ROLLUP_MAX_KEYS": 2 * int(client.dbsize()) + 1000}
    try:
        keys, bare_seconds = bare_read(500)
        start = time.perf_counter()
        first = rollup.roll_up()
        first_seconds = time.perf_counter() - start
        start = time.perf_counter()
        second = rollup.roll_up()
        second_seconds = time.perf_counter() - start
        rows = BudgetUsage.objects.unscoped().filter(tenant__in=tenants).count()
    finally:
        client.delete(*[budget.window_key(n, now)[0] for n in names])
        BudgetUsage.objects.unscoped().filter(tenant__in=tenants).delete()

    print(f"{args.budgets} budget counters over {args.tenants} tenants ({keys} in Redis), {os.cpu_count()} CPUs")
    print(f"bare SCAN + MGET        : {keys / bare_seconds:9.0f} keys/s  ({bare_seconds:.2f} s)")
    print(f"roll-up, first pass     : {keys / first_seconds:9.0f} keys/s  ({first_seconds:.2f} s)  "
          f"ratio {first_seconds / bare_seconds:.1f}x the bare read")  # fmt: skip
    print(f"roll-up, again          : {keys / second_seconds:9.0f} keys/s  ({second_seconds:.2f} s)  "
          f"ratio {second_seconds / bare_seconds:.1f}x the bare read")  # fmt: skip
    complete = first["complete"] and second["complete"] and rows == args.budgets
    print(f"rows                    : {rows} (expected {args.budgets}), passes complete: {'yes' if complete else 'NO'}")
    if not complete:
        sys.exit(1)


if __name__ == "__main__":
    main()
