"""The hourly send budgets rolled up from the real Redis into PostgreSQL: set, never summed; each tenant's counters
in its own tenant; concurrent runs agree; bounded runs finish over several; a keyspace full of other keys (a day of
task results) costs nothing, since only the hours' index sets are read; nothing harmful while Redis is away."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from apps.core import redis_client as redis_module
from apps.core.redis_client import redis_client
from apps.outbound import budget, rollup
from apps.outbound.models import BudgetUsage
from apps.outbound.tasks import roll_up_budgets_task
from config.celery import app
from tests.conftest import Person

# every test here spends or reads the hourly budgets: within one clock hour
pytestmark = pytest.mark.usefixtures("one_budget_hour")


@pytest.fixture(autouse=True)
def _fresh_pass() -> None:
    """Every test starts a pass of its own (a bounded run elsewhere may have left where it stopped)."""
    redis_client().delete(rollup.CURSOR_KEY)


@pytest.fixture
def task_results() -> Iterator[int]:
    """50,000 keys shaped like Celery's task results (kept a day by the result backend) in the same Redis."""
    client, names = redis_client(), [f"celery-task-meta-{uuid.uuid4()}" for _ in range(50_000)]
    for i in range(0, len(names), 5000):
        pipe = client.pipeline(transaction=False)
        for name in names[i : i + 5000]:
            pipe.set(name, '{"status": "SUCCESS", "result": 0}', ex=900)
        pipe.execute()
    yield len(names)
    for i in range(0, len(names), 5000):
        client.delete(*names[i : i + 5000])


def _stopped_at() -> tuple[str, str]:
    """(window, SSCAN cursor) of where the last run stopped its pass; ("", "") when it finished it."""
    saved = redis_client().get(rollup.CURSOR_KEY)
    window, _, cursor = (saved.decode() if isinstance(saved, bytes) else "").partition(":")
    return window, cursor


def _plant(key: str, value: object, window: int) -> None:
    """A counter Redis holds, listed in the index of `window` as take() lists it."""
    client = redis_client()
    client.set(key, str(value), ex=60)
    client.sadd(budget.index_key(window), key)
    if client.ttl(budget.index_key(window)) < 0:  # made here rather than by take(): it goes when its hour's would
        client.expire(budget.index_key(window), 3600 + budget.KEEP_AFTER_WINDOW_SECONDS)


def _hour(now: float) -> datetime:
    return datetime.fromtimestamp(int(now) // 3600 * 3600, UTC)


def _rows(p: Person) -> set[tuple[str, str, datetime, int]]:
    found = BudgetUsage.objects.for_tenant(p.tenant).values_list("kind", "budget_id", "window_start", "used")
    return set(found)


def _spend(p: Person, kind: str, budget_id: str, amount: int, now: float) -> None:
    assert budget.take(budget.BudgetName(str(p.tenant.pk), kind, str(budget_id)), amount, 1000, now) is not None


def test_two_runs_give_the_same_rows_and_each_tenant_keeps_its_own(alice: Person, mallory: Person) -> None:
    now = time.time()
    _spend(alice, "apikey", "key-a", 3, now)
    _spend(alice, "person", str(alice.user.pk), 2, now)
    _spend(alice, "policy", "policy-a", 4, now - 3600)  # the hour before
    _spend(mallory, "apikey", "key-m", 5, now)
    first = rollup.roll_up()
    assert first["redis"] == "ok" and first["complete"] is True and first["rows"] >= 4
    ids = set(BudgetUsage.objects.for_tenant(alice.tenant).values_list("pk", flat=True))
    expected = {
        ("apikey", "key-a", _hour(now), 3),
        ("person", str(alice.user.pk), _hour(now), 2),
        ("policy", "policy-a", _hour(now - 3600), 4),
    }
    assert _rows(alice) == expected
    assert _rows(mallory) == {("apikey", "key-m", _hour(now), 5)}

    rollup.roll_up()  # again: the same rows, set again, not summed
    assert _rows(alice) == expected
    assert set(BudgetUsage.objects.for_tenant(alice.tenant).values_list("pk", flat=True)) == ids

    _spend(alice, "apikey", "key-a", 2, now)  # the latest figure wins
    rollup.roll_up()
    assert ("apikey", "key-a", _hour(now), 5) in _rows(alice)
    assert _rows(mallory) == {("apikey", "key-m", _hour(now), 5)}
    latest = BudgetUsage.objects.for_tenant(alice.tenant).get(budget_id="key-a")
    assert latest.rolled_up_at > datetime.now(UTC) - timedelta(minutes=1)


def test_an_older_reading_never_replaces_a_newer_one(alice: Person, mallory: Person) -> None:
    hour = _hour(time.time())
    later, earlier = datetime.now(UTC), datetime.now(UTC) - timedelta(seconds=5)
    assert rollup._upsert([(alice.tenant.pk, "apikey", "key-a", hour, 7)], later) == 1
    # a run that read Redis earlier but writes last (it was slow) changes nothing
    assert rollup._upsert([(alice.tenant.pk, "apikey", "key-a", hour, 4)], earlier) == 0
    assert _rows(alice) == {("apikey", "key-a", hour, 7)}
    assert not _rows(mallory)


def test_counters_of_gone_tenants_and_foreign_keys_are_left_alone(alice: Person, mallory: Person) -> None:
    now = time.time()
    window = int(now) // 3600
    # each listed in the current hour's index, as if take() had counted it
    _plant(f"{budget.KEY_PREFIX}00000000-0000-7000-8000-000000000000:apikey:k:{window}", 9, window)  # no tenant
    _plant(f"{budget.KEY_PREFIX}not-a-tenant:apikey:k:{window}", 9, window)
    _plant(f"{budget.KEY_PREFIX}{alice.tenant.pk}:unknown-kind:k:{window}", 9, window)
    _plant(f"{budget.KEY_PREFIX}{alice.tenant.pk}:apikey:k:not-a-window", 9, window)
    _plant(f"{budget.KEY_PREFIX}{alice.tenant.pk}:apikey:k:{window + 10_000_000}", 9, window)  # far future
    _plant(f"{budget.KEY_PREFIX}{alice.tenant.pk}:apikey:nonsense:{window}", "many", window)
    _plant(f"{budget.KEY_PREFIX}{alice.tenant.pk}:apikey:negative:{window}", -3, window)
    _plant(f"celery-task-meta-{uuid.uuid4()}", 9, window)  # not a counter at all
    redis_client().sadd(budget.index_key(window), f"{budget.KEY_PREFIX}{alice.tenant.pk}:apikey:gone:{window}")
    done = rollup.roll_up()
    assert done["redis"] == "ok" and done["ignored"] >= 6 + 2
    assert _rows(alice) == {("apikey", "negative", _hour(now), 0)}
    assert not _rows(mallory)


def test_old_hours_are_forgotten_after_the_retention(alice: Person, mallory: Person, settings: Any) -> None:
    assert settings.OPERATIONS["BUDGET_HISTORY_HOURS"] == 48
    hour = _hour(time.time())
    for p, hours in ((alice, (0, 47, 48, 49, 72)), (mallory, (1, 50))):
        BudgetUsage.objects.bulk_create(
            BudgetUsage(
                tenant=p.tenant,
                kind="apikey",
                budget_id="k",
                window_start=hour - timedelta(hours=h),
                used=1,
                rolled_up_at=hour,
            )
            for h in hours
        )
    # a counter of an hour past the retention (one that never expired) is not copied back in either
    _spend(alice, "apikey", "stale", 1, time.time() - 60 * 3600)
    done = rollup.roll_up()
    assert done["forgotten"] == 3
    kept = BudgetUsage.objects.for_tenant(alice.tenant).values_list("window_start", flat=True)
    assert sorted(kept) == [hour - timedelta(hours=48), hour - timedelta(hours=47), hour]
    assert list(BudgetUsage.objects.for_tenant(mallory.tenant).values_list("window_start", flat=True)) == [
        hour - timedelta(hours=1)
    ]


def test_a_bounded_run_leaves_the_rest_to_the_next(alice: Person, mallory: Person, settings: Any) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "BUDGET_ROLLUP_MAX_KEYS": 10}
    now = time.time()
    for i in range(40):
        _spend(alice, "apikey", f"key-{i:02}", i + 1, now)
    runs = [rollup.roll_up()]
    assert runs[0]["complete"] is False and runs[0]["keys"] < 40
    # where it stopped: an hour it reads (the one before may hold other tests' counters) and past the pass's start
    hour = int(now) // 3600
    assert _stopped_at()[0] in {str(hour - 1), str(hour)} and _stopped_at() != (str(hour - 1), "0")
    most = 2 * redis_client().dbsize() // 10 + 10  # generous: the whole keyspace, though only the index is read
    while not runs[-1]["complete"]:
        assert len(runs) < most
        runs.append(rollup.roll_up())
    assert redis_client().get(rollup.CURSOR_KEY) is None  # the pass is over: the next starts afresh
    assert _rows(alice) == {("apikey", f"key-{i:02}", _hour(now), i + 1) for i in range(40)}
    assert not _rows(mallory)


@pytest.mark.django_db(transaction=True)
def test_concurrent_runs_give_the_same_rows_as_one(alice: Person, mallory: Person) -> None:
    now = time.time()
    for i in range(30):
        _spend(alice, "apikey", f"key-{i:02}", i + 1, now)
        _spend(mallory, "oauth", f"conn-{i:02}", 2 * i + 1, now)
    start, results, errors = threading.Barrier(6), [], []

    def run() -> None:
        try:
            start.wait()
            for _ in range(3):
                results.append(rollup.roll_up())
        except Exception as error:  # a deadlock or a duplicate would land here
            errors.append(repr(error))
        finally:
            connection.close()

    workers = [threading.Thread(target=run) for _ in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == [] and len(results) == 18 and all(r["redis"] == "ok" for r in results)
    assert _rows(alice) == {("apikey", f"key-{i:02}", _hour(now), i + 1) for i in range(30)}
    assert _rows(mallory) == {("oauth", f"conn-{i:02}", _hour(now), 2 * i + 1) for i in range(30)}
    assert BudgetUsage.objects.for_tenant(alice.tenant).count() == 30


@pytest.mark.django_db(transaction=True)
def test_runs_while_requests_spend_end_with_the_final_figure(alice: Person, mallory: Person) -> None:
    now = time.time()
    stop, errors = threading.Event(), []

    def roll() -> None:
        try:
            while not stop.is_set():
                rollup.roll_up()
        except Exception as error:
            errors.append(repr(error))
        finally:
            connection.close()

    workers = [threading.Thread(target=roll) for _ in range(2)]
    for w in workers:
        w.start()
    for _ in range(100):
        _spend(alice, "apikey", "busy", 1, now)
    stop.set()
    for w in workers:
        w.join()
    rollup.roll_up()
    assert errors == []
    assert _rows(alice) == {("apikey", "busy", _hour(now), 100)}
    assert not _rows(mallory)


def test_without_redis_nothing_is_copied_and_the_log_says_so(
    alice: Person, mallory: Person, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    now = time.time()
    _spend(alice, "apikey", "key-a", 3, now)
    rollup.roll_up()
    before = set(BudgetUsage.objects.for_tenant(alice.tenant).values_list("pk", "used", "rolled_up_at"))
    settings.REDIS_URL = "unix:///nonexistent/redis.sock"
    redis_module.redis_client.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="oaken.outbound"):
            done = roll_up_budgets_task()
    finally:
        redis_module.redis_client.cache_clear()
    assert done["redis"] == "unavailable" and done["rows"] == 0
    assert set(BudgetUsage.objects.for_tenant(alice.tenant).values_list("pk", "used", "rolled_up_at")) == before
    assert "Redis is not answering" in caplog.text
    assert str(alice.tenant.pk) not in caplog.text and "key-a" not in caplog.text
    assert not _rows(mallory)


def test_beat_rolls_the_budgets_up_every_minute(settings: Any) -> None:
    entries = [e for e in app.conf.beat_schedule.values() if e["task"] == "outbound.roll_up_budgets"]
    assert len(entries) == 1 and entries[0]["schedule"] == 60.0 == settings.OPERATIONS["BUDGET_ROLLUP_SECONDS"]
    assert entries[0]["options"] == {"expires": 60}  # copies queued while no worker ran are dropped, not piled up


@pytest.mark.django_db(transaction=True)
def test_the_task_runs_on_a_real_worker(alice: Person, mallory: Person) -> None:
    from celery.contrib.testing.worker import start_worker

    now = time.time()
    _spend(alice, "oauth", "conn-a", 6, now)
    client = redis_client()
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        # beat's task stores no result; asked for, one is stored
        done = roll_up_budgets_task.apply_async(ignore_result=False).get(timeout=60)
        assert done["redis"] == "ok" and done["complete"] is True
        assert _rows(alice) == {("oauth", "conn-a", _hour(now), 6)}
        _spend(alice, "oauth", "conn-a", 1, now)
        as_beat_sends_it = roll_up_budgets_task.delay()
        asked = roll_up_budgets_task.apply_async(ignore_result=False)
        assert asked.get(timeout=60)["complete"] is True  # one worker, one task at a time: the first is done too
    assert _rows(alice) == {("oauth", "conn-a", _hour(now), 7)}
    assert not client.exists(f"celery-task-meta-{as_beat_sends_it.id}")
    assert client.exists(f"celery-task-meta-{asked.id}")
    assert not _rows(mallory)


def test_every_counter_is_in_its_hours_index_which_outlives_it(alice: Person, mallory: Person) -> None:
    now = time.time()
    window, client = int(now) // 3600, redis_client()
    index = budget.index_key(window)
    _spend(alice, "apikey", "key-a", 3, now)
    _spend(alice, "apikey", "key-a", 2, now)
    _spend(mallory, "apikey", "key-m", 1, now)
    alices = budget.window_key(budget.BudgetName(str(alice.tenant.pk), "apikey", "key-a"), now)[0]
    mallorys = budget.window_key(budget.BudgetName(str(mallory.tenant.pk), "apikey", "key-m"), now)[0]
    assert client.smismember(index, [alices, mallorys]) == [1, 1]
    counter_ttl, index_ttl = client.ttl(alices), client.ttl(index)
    # a little longer (every take here passes the same `now`, so the index's deadline may move by the seconds between)
    assert 0 < counter_ttl <= index_ttl <= counter_ttl + budget.INDEX_KEEP_AFTER_COUNTERS_SECONDS + 60
    # a request refused on a budget it never spent from makes neither a counter nor a member
    refused = budget.BudgetName(str(alice.tenant.pk), "apikey", "too-much")
    assert budget.take(refused, 5, 4, now) is None
    assert not client.exists(budget.window_key(refused, now)[0])
    assert not client.sismember(index, budget.window_key(refused, now)[0])
    # a counter made before the index existed (the hour this version arrives) is listed by its next take
    older = budget.BudgetName(str(alice.tenant.pk), "apikey", "key-older")
    client.set(budget.window_key(older, now)[0], 4, ex=budget.seconds_left(now) + budget.KEEP_AFTER_WINDOW_SECONDS)
    _spend(alice, "apikey", "key-older", 1, now)
    assert client.sismember(index, budget.window_key(older, now)[0])
    rollup.roll_up()
    assert _rows(alice) == {("apikey", "key-a", _hour(now), 5), ("apikey", "key-older", _hour(now), 5)}
    assert _rows(mallory) == {("apikey", "key-m", _hour(now), 1)}


def test_a_keyspace_full_of_task_results_costs_one_run(
    alice: Person, mallory: Person, settings: Any, task_results: int
) -> None:
    """A day of Celery results for many accounts is no longer walked: one run of the default bound copies every
    budget of the current and the previous hour, examining only the counters of those hours."""
    now, client = time.time(), redis_client()
    for i in range(150):
        _spend(alice, "apikey", f"key-{i:03}", i + 1, now)
        _spend(alice, "oauth", f"conn-{i:03}", i + 2, now - 3600)  # the hour before, in its 15 minutes' tail
        _spend(mallory, "policy", f"policy-{i:03}", 2 * i + 1, now)
    window = int(now) // 3600
    listed = sum(int(client.scard(budget.index_key(w))) for w in (window - 1, window, window + 1))
    max_keys = settings.OPERATIONS["BUDGET_ROLLUP_MAX_KEYS"]
    assert max_keys == 10_000 and client.dbsize() > task_results >= 5 * max_keys  # a SCAN pass: five runs or more
    done = rollup.roll_up()
    assert done["redis"] == "ok" and done["complete"] is True
    assert done["keys"] == listed <= max_keys  # the counters of those hours (other tests' too), not the keyspace
    assert _rows(alice) == {("apikey", f"key-{i:03}", _hour(now), i + 1) for i in range(150)} | {
        ("oauth", f"conn-{i:03}", _hour(now - 3600), i + 2) for i in range(150)
    }
    assert _rows(mallory) == {("policy", f"policy-{i:03}", _hour(now), 2 * i + 1) for i in range(150)}
    assert client.get(rollup.CURSOR_KEY) is None


def test_a_bounded_pass_goes_on_into_the_next_hour_and_a_stale_point_starts_afresh(
    alice: Person, mallory: Person, settings: Any, task_results: int
) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "BUDGET_ROLLUP_MAX_KEYS": 10}
    now, client = time.time(), redis_client()
    window = int(now) // 3600
    for i in range(25):
        _spend(alice, "apikey", f"key-{i:02}", i + 1, now - 3600)
        _spend(mallory, "apikey", f"key-{i:02}", i + 2, now)
    # where a run of long ago stopped, and a value that is no resume point: both start the pass at its beginning
    for stale in (f"{window - 5}:12345", "not a point"):
        client.set(rollup.CURSOR_KEY, stale)
        first = rollup.roll_up()
        assert first["complete"] is False and 0 < first["keys"] < 25
        assert _stopped_at()[0] == str(window - 1)
    listed = sum(int(client.scard(budget.index_key(w))) for w in (window - 1, window, window + 1))
    runs, points = [first], set()
    while not runs[-1]["complete"]:
        assert len(runs) < 2 * listed // 10 + 5  # the index's counters in pages, never the 50,000 other keys
        points.add(_stopped_at()[0])
        runs.append(rollup.roll_up())
    # it stopped in the hour before and in this one (at most once more at the start of the next)
    assert {str(window - 1), str(window)} <= points <= {str(window - 1), str(window), str(window + 1)}
    assert client.get(rollup.CURSOR_KEY) is None
    assert _rows(alice) == {("apikey", f"key-{i:02}", _hour(now - 3600), i + 1) for i in range(25)}
    assert _rows(mallory) == {("apikey", f"key-{i:02}", _hour(now), i + 2) for i in range(25)}
