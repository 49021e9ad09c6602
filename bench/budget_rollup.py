"""The send budget roll-up against a bare read of the same counters, without and with unrelated keys in Redis.

Spends once from each of N hourly budgets (default 10,000, the default BUDGET_ROLLUP_MAX_KEYS) spread over 20 tenants
through apps.outbound.budget.take (which lists each counter in its hour's index set) in the bench's own embedded Redis
and PostgreSQL (var/bench). Then, first with nothing else in Redis and again with K keys shaped like Celery's task
results added (default 144,000: a day of results of 100 accounts synced every minute), it times a full roll-up pass
(apps.outbound.rollup: SSCAN pages of the hours' index sets, MGET + TIME, one upsert a page), once inserting every
row and then setting them again (best of three), against the baseline: the Redis side alone, the same SSCAN and MGET
pages, nothing written (best of three). It also counts the runs a pass takes at the default bound, and for
comparison times what the roll-up used to do, a SCAN + MGET of the whole keyspace, and the runs of the default bound
that walk would have taken.
The figures that matter: a run of the default bound fits well inside its minute, and the unrelated keys change
neither the time of a pass nor its runs.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

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


def bare_read(windows: list[int], page: int) -> tuple[int, float]:
    """(counters, seconds) of SSCAN + MGET over the hours' index sets, writing nothing."""
    from apps.core.redis_client import redis_client
    from apps.outbound import budget

    client, seen = redis_client(), 0
    start = time.perf_counter()
    for window in windows:
        cursor = 0
        while True:
            cursor, keys = client.sscan(budget.index_key(window), cursor=cursor, count=page)
            if keys:
                pipe = client.pipeline(transaction=True)
                pipe.mget(sorted(keys))
                pipe.time()
                pipe.execute()
            seen += len(keys)
            if cursor == 0:
                break
    return seen, time.perf_counter() - start


def keyspace_read(page: int) -> tuple[int, float]:
    """(counters found, seconds) of what the roll-up did before the index: SCAN of the whole keyspace for the
    counters' prefix (a run examined about BUDGET_ROLLUP_MAX_KEYS keys of it), MGET + TIME of each page found."""
    from apps.core.redis_client import redis_client
    from apps.outbound import budget

    client, found, cursor = redis_client(), 0, 0
    start = time.perf_counter()
    while True:
        cursor, keys = client.scan(cursor=cursor, match=f"{budget.KEY_PREFIX}*", count=page)
        if keys:
            pipe = client.pipeline(transaction=True)
            pipe.mget(sorted(keys))
            pipe.time()
            pipe.execute()
        found += len(keys)
        if cursor == 0:
            return found, time.perf_counter() - start


def timed_passes() -> dict[str, Any]:
    """Full passes of one run each (a bound above everything): the first inserts every row, the best of three more
    sets them again; then the runs a pass takes at the default bound."""
    from django.conf import settings

    from apps.core.redis_client import redis_client
    from apps.outbound import rollup

    client = redis_client()
    default = settings.OPERATIONS
    client.delete(rollup.CURSOR_KEY)
    settings.OPERATIONS = {**default, "BUDGET_ROLLUP_MAX_KEYS": 10 * int(client.dbsize()) + 1000}
    try:
        times, done = [], []
        for _ in range(4):
            start = time.perf_counter()
            done.append(rollup.roll_up())
            times.append(time.perf_counter() - start)
    finally:
        settings.OPERATIONS = default
    runs, longest = 0, 0.0
    while runs < 1000:
        start = time.perf_counter()
        runs, complete = runs + 1, rollup.roll_up()["complete"]
        longest = max(longest, time.perf_counter() - start)
        if complete:
            break
    return {
        "first": times[0],
        "again": min(times[1:]),
        "complete": all(d["complete"] for d in done),
        "runs": runs,
        "longest_run": longest,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budgets", type=int, default=10_000)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--other-keys", type=int, default=144_000, help="unrelated keys (Celery task results)")
    args = parser.parse_args()

    setup()
    from django.conf import settings
    from django.db import connection

    from apps.core.redis_client import redis_client
    from apps.outbound import budget, rollup
    from apps.outbound.models import BudgetUsage
    from apps.workspaces.services import create_person

    client = redis_client()
    bound = settings.OPERATIONS["BUDGET_ROLLUP_MAX_KEYS"]
    tenants = [
        create_person(email=f"bench-{time.time_ns()}-{i}@example.test", password=None).tenant
        for i in range(args.tenants)
    ]
    now = time.time()
    current = int(now) // budget.WINDOW_SECONDS
    windows = list(range(current - rollup._HOURS_BACK, current + 2))
    names = [budget.BudgetName(str(tenants[i % args.tenants].pk), "apikey", f"bench-{i}") for i in range(args.budgets)]
    counters = [budget.window_key(name, now)[0] for name in names]
    others = [f"celery-task-meta-{uuid.uuid4()}" for _ in range(args.other_keys)]
    figures: dict[str, dict[str, Any]] = {}
    try:
        for i, name in enumerate(names):
            assert budget.take(name, i % 50 + 1, 10**6, now) is not None
        rollup.roll_up()  # warm up (connections, plans), so the first phase is not the one that pays for it
        for label in ("without", "with"):
            if label == "with":
                for at in range(0, len(others), 10_000):
                    pipe = client.pipeline(transaction=False)
                    for key in others[at : at + 10_000]:
                        pipe.set(key, '{"status": "SUCCESS", "result": 0, "children": []}', ex=3600)
                    pipe.execute()
            BudgetUsage.objects.unscoped().filter(tenant__in=tenants).delete()  # each first pass inserts
            with connection.cursor() as cursor:  # and into a table without the dead rows of the phase before
                cursor.execute(f"VACUUM {BudgetUsage._meta.db_table}")
            keys, bare_seconds = min((bare_read(windows, 500) for _ in range(3)), key=lambda r: r[1])
            passes = timed_passes()
            found, scan_seconds = min((keyspace_read(500) for _ in range(3)), key=lambda r: r[1])
            figures[label] = {
                "keys": keys,
                "bare": bare_seconds,
                "dbsize": int(client.dbsize()),
                "found": found,
                "scan": scan_seconds,
                **passes,
            }
        rows = BudgetUsage.objects.unscoped().filter(tenant__in=tenants).count()
    finally:
        for at in range(0, len(others), 10_000):
            client.delete(*others[at : at + 10_000])
        client.delete(*counters)
        client.srem(budget.index_key(current), *counters)
        BudgetUsage.objects.unscoped().filter(tenant__in=tenants).delete()

    print(
        f"{args.budgets} budget counters over {args.tenants} tenants, {os.cpu_count()} CPUs, "
        f"default bound {bound} counters a run"
    )
    for label, f in figures.items():
        print(
            f"{label} {args.other_keys if label == 'with' else ''} other keys ({f['dbsize']} keys in Redis, "
            f"{f['keys']} counters listed in the hours' indexes):".replace("  ", " ")
        )
        print(
            f"  bare SSCAN + MGET of the indexes : {f['keys'] / f['bare']:9.0f} counters/s  ({f['bare']:.2f} s, "
            "best of 3)"
        )
        for phase in ("first", "again"):
            what = "roll-up, first pass   " if phase == "first" else "roll-up, again (best) "
            print(
                f"  {what}           : {f['keys'] / f[phase]:9.0f} counters/s  ({f[phase]:.2f} s)  "
                f"ratio {f[phase] / f['bare']:.1f}x the bare read"
            )
        print(f"  runs for a pass at the bound     : {f['runs']} (the longest {f['longest_run']:.2f} s)")
        print(
            f"  before the index, SCAN + MGET    : {f['dbsize']} keys walked for {f['found']} counters "
            f"({f['scan']:.2f} s, ratio {f['scan'] / f['bare']:.1f}x the bare read), "
            f"about {math.ceil(f['dbsize'] / bound)} runs of the bound"
        )
    with_, without = figures["with"], figures["without"]
    print(
        f"with / without the other keys      : bare read {with_['bare'] / without['bare']:.2f}x, first pass "
        f"{with_['first'] / without['first']:.2f}x, again {with_['again'] / without['again']:.2f}x, "
        f"runs {with_['runs']} / {without['runs']}"
    )
    complete = all(f["complete"] for f in figures.values()) and rows == args.budgets
    print(
        f"rows                               : {rows} (expected {args.budgets}), "
        f"passes complete: {'yes' if complete else 'NO'}"
    )
    if not complete:
        sys.exit(1)


if __name__ == "__main__":
    main()
