"""The hourly send budgets, rolled up from Redis into PostgreSQL for the console (SPEC §10, §18).

Redis stays the authority that refuses a request over its budget (apps.outbound.budget); the roll-up copies each
window's counter into BudgetUsage, so the console can show the last hours after Redis has let them expire, and a
figure (marked as rolled up) while Redis is away.

It is safe to run twice or at once. A row is set to what Redis said and when it said it (Redis's own clock, read in
the same MULTI/EXEC as the counters), and a reading replaces only an earlier one: rows are set, never summed, and
never go back to an older figure. Rows are written in one fixed order, so concurrent runs cannot deadlock.
It never walks the keyspace (which holds the broker's queues, task results and more): apps.outbound.budget puts each
counter's key in its hour's index set as it counts, and a run reads only the index sets of the hours whose counters
may still be alive (the previous, the current and the next, for clocks a little apart). The work of one run is
bounded: SSCAN in pages, at most about BUDGET_ROLLUP_MAX_KEYS counters examined; where a run stops, its hour and SSCAN
cursor are kept in Redis and the next run goes on from there.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import redis
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from apps.core.bounds import bounds
from apps.core.ids import new_id
from apps.core.redis_client import redis_client
from apps.outbound import budget
from apps.outbound.models import BudgetExhaustion, BudgetUsage
from apps.workspaces.models import Tenant

log = logging.getLogger("oaken.outbound")

# where a run that stopped early left its pass, "<window>:<SSCAN cursor>"; forgotten after an hour (a fresh pass
# starts then, as it does when that hour's counters are gone)
CURSOR_KEY = "oaken:send-budget-rollup:cursor"
_CURSOR_TTL_SECONDS = 3600
_SCAN_PAGE = 500
# the hours before the current one whose index (and so counters) may still be alive
_HOURS_BACK = math.ceil(
    (budget.KEEP_AFTER_WINDOW_SECONDS + budget.INDEX_KEEP_AFTER_COUNTERS_SECONDS) / budget.WINDOW_SECONDS
)
_INT_MAX = 2**31 - 1

_UPSERT = f"""
INSERT INTO {BudgetUsage._meta.db_table} AS u (id, tenant_id, kind, budget_id, window_start, used, rolled_up_at)
SELECT v.id, v.tenant_id, v.kind, v.budget_id, v.window_start, v.used, %(at)s
FROM unnest(%(ids)s::uuid[], %(tenants)s::uuid[], %(kinds)s::text[], %(budget_ids)s::text[],
            %(windows)s::timestamptz[], %(used)s::integer[]) AS v(id, tenant_id, kind, budget_id, window_start, used)
ON CONFLICT (tenant_id, kind, budget_id, window_start) DO UPDATE
SET used = EXCLUDED.used, rolled_up_at = EXCLUDED.rolled_up_at
WHERE u.rolled_up_at <= EXCLUDED.rolled_up_at
"""  # noqa: S608 (the table name is the model's own; every value is a parameter)


def window_start(window: int) -> datetime:
    """The clock hour a budget window number stands for."""
    return datetime.fromtimestamp(window * budget.WINDOW_SECONDS, UTC)


def roll_up(*, now: datetime | None = None) -> dict[str, Any]:
    """Copy the budget counters into BudgetUsage and forget rows past BUDGET_HISTORY_HOURS; what it did.

    With Redis away it copies nothing, logs that (never a key or a value) and says so in its answer."""
    moment = now or timezone.now()
    current = int(moment.timestamp()) // budget.WINDOW_SECONDS
    oldest = current - bounds.BUDGET_HISTORY_HOURS
    done: dict[str, Any] = {"redis": "ok", "keys": 0, "rows": 0, "ignored": 0, "complete": False}
    done["forgotten"] = _forget(before=window_start(oldest), limit=bounds.BUDGET_ROLLUP_MAX_KEYS)
    windows = list(range(current - _HOURS_BACK, current + 2))
    try:
        _copy(done, windows, oldest=oldest, newest=current + 1, max_keys=bounds.BUDGET_ROLLUP_MAX_KEYS)
    except redis.RedisError as exc:
        log.warning(
            "send budgets were not rolled up: Redis is not answering (%s); the console shows the figures "
            "rolled up before",
            type(exc).__name__,
        )
        done["redis"] = "unavailable"
    return done


def _copy(done: dict[str, Any], windows: list[int], *, oldest: int, newest: int, max_keys: int) -> None:
    """One pass over the index sets of `windows`, oldest first, or the part of it the bound allows."""
    client = redis_client()
    page = min(_SCAN_PAGE, max_keys)
    at, cursor = _resume(client.get(CURSOR_KEY), windows)
    # pages of `page` counters, and one call more for each index that is empty or gone
    for _ in range(math.ceil(max_keys / page) + len(windows)):
        cursor, keys = client.sscan(budget.index_key(windows[at]), cursor=cursor, count=page)
        done["keys"] += len(keys)
        _copy_page(done, client, [k.decode() if isinstance(k, bytes) else str(k) for k in keys], oldest, newest)
        if cursor == 0:
            at += 1
            if at == len(windows):
                client.delete(CURSOR_KEY)
                done["complete"] = True
                return
        if done["keys"] >= max_keys:
            break
    client.set(CURSOR_KEY, f"{windows[at]}:{cursor}", ex=_CURSOR_TTL_SECONDS)


def _resume(saved: bytes | str | None, windows: list[int]) -> tuple[int, int]:
    """(position in `windows`, SSCAN cursor) where the pass goes on: where the last run stopped, if that hour is
    still read, else at the start."""
    text = saved.decode(errors="replace") if isinstance(saved, bytes) else saved or ""
    window, _, cursor = text.partition(":")
    if window.isdigit() and cursor.isdigit() and int(window) in windows:
        return windows.index(int(window)), int(cursor)
    return 0, 0


def _copy_page(done: dict[str, Any], client: redis.Redis, keys: list[str], oldest: int, newest: int) -> None:
    found: dict[str, tuple[uuid.UUID, str, str, int]] = {}
    for key in keys:
        parsed = budget.parse_key(key)
        tenant = _uuid(parsed[0].tenant_id) if parsed else None
        if parsed is None or tenant is None or not oldest <= parsed[1] <= newest or len(parsed[0].budget_id) > 100:
            done["ignored"] += 1
            continue
        found[key] = (tenant, parsed[0].kind, parsed[0].budget_id, parsed[1])
    if not found:
        return
    names = sorted(found)  # one order for every run: concurrent upserts lock rows alike, so they cannot deadlock
    pipe = client.pipeline(transaction=True)
    pipe.mget(names)
    pipe.time()
    values, (seconds, micros) = pipe.execute()
    at = datetime.fromtimestamp(int(seconds) + int(micros) / 1_000_000, UTC)
    tenants = set(Tenant.objects.filter(pk__in={t for t, _, _, _ in found.values()}).values_list("pk", flat=True))
    rows = []
    for name, value in zip(names, values, strict=True):
        tenant, kind, budget_id, window = found[name]
        used = _count(value)
        if used is None or tenant not in tenants:  # expired since SCAN, not a count, or its tenant is gone
            done["ignored"] += 1
            continue
        rows.append((tenant, kind, budget_id, window_start(window), used))
    done["rows"] += _upsert(rows, at)


def _upsert(rows: Sequence[tuple[uuid.UUID, str, str, datetime, int]], at: datetime) -> int:
    if not rows:
        return 0
    params: dict[str, Any] = {
        "at": at,
        "ids": [new_id() for _ in rows],
        "tenants": [r[0] for r in rows],
        "kinds": [r[1] for r in rows],
        "budget_ids": [r[2] for r in rows],
        "windows": [r[3] for r in rows],
        "used": [r[4] for r in rows],
    }
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_UPSERT, params)
            written = cursor.rowcount
    except IntegrityError:  # a tenant deleted meanwhile: the next run copies the others again without it
        log.warning("a page of send budgets was not rolled up: a tenant went away meanwhile")
        return 0
    return max(written, 0)


def _forget(*, before: datetime, limit: int) -> int:
    """Remove up to `limit` rows of hours older than `before`, of the figures and of the hours a budget was found
    spent in (housekeeping across every tenant)."""
    deleted = 0
    for model in (BudgetUsage, BudgetExhaustion):
        old = model.objects.unscoped().filter(window_start__lt=before)
        ids = list(old.values_list("pk", flat=True)[:limit])
        if ids:
            deleted += model.objects.unscoped().filter(pk__in=ids).delete()[0]
    return deleted


def _uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def _count(value: bytes | None) -> int | None:
    if value is None:
        return None
    try:
        return min(max(0, int(value)), _INT_MAX)
    except ValueError:
        return None
