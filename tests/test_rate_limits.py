"""Per-credential request limits counted in Redis for every web process, a share at a time
(apps.core.redis_client.SharedWindowLimit), against the real Redis of the test session."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from apps.core import redis_client as redis_module
from apps.core.redis_client import SharedWindowLimit


@pytest.fixture
def key() -> Iterator[str]:
    name = f"test-limit-{uuid.uuid4()}"
    yield name
    redis_module.redis_client().delete(name)


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every count sent to Redis, as (key, events asked for); the counting itself is Redis's own."""
    sent: list[tuple[str, int]] = []
    real = redis_module._count

    def counting(key: str, window_seconds: int, events: int) -> tuple[int, int]:
        sent.append((key, events))
        return real(key, window_seconds, events)

    monkeypatch.setattr(redis_module, "_count", counting)
    return sent


def _count_in_redis(key: str) -> int:
    value = redis_module.redis_client().get(key)
    assert isinstance(value, bytes)
    return int(value)


def _allowed(limit: SharedWindowLimit, key: str, cap: int, calls: int, window: int = 60) -> int:
    return sum(limit.wait(key, cap, window) is None for _ in range(calls))


def test_one_process_gets_exactly_the_limit_in_a_few_round_trips(key: str, round_trips: list[Any]) -> None:
    limit = SharedWindowLimit()
    assert _allowed(limit, key, 2000, 2000) == 2000
    waits = [limit.wait(key, 2000, 60) for _ in range(5)]
    assert all(w is not None and 0 < w <= 60 for w in waits)
    # shares of up to 16, one at a time near the limit: far fewer round trips than calls, and none for a refusal
    # once the window is known to be used up
    assert 2000 / 16 <= len(round_trips) < 400
    assert round_trips[0] == (key, 16) and round_trips[-1][1] == 1
    assert _count_in_redis(key) >= 2000


def test_a_small_limit_is_counted_one_request_at_a_time(key: str, round_trips: list[Any]) -> None:
    limit = SharedWindowLimit()
    assert [limit.wait(key, 3, 60) is None for _ in range(4)] == [True, True, True, False]
    # the third count reached the limit: the fourth is refused here, without asking
    assert [n for _, n in round_trips] == [1, 1, 1]
    assert _count_in_redis(key) == 3


def test_processes_sharing_a_key_never_get_more_than_the_limit_together(key: str) -> None:
    processes = [SharedWindowLimit() for _ in range(4)]
    chance = random.Random(7)
    allowed = sum(chance.choice(processes).wait(key, 1000, 60) is None for _ in range(3000))
    # what a process took and did not spend is lost with the window: at most `most` (16) per process early
    assert 1000 - 4 * 16 <= allowed <= 1000


def test_threads_of_one_process_never_get_more_than_the_limit(key: str) -> None:
    limit, allowed, lock = SharedWindowLimit(), [0], threading.Lock()

    def hammer() -> None:
        mine = _allowed(limit, key, 500, 200)
        with lock:
            allowed[0] += mine

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 500 - 8 * 16 <= allowed[0] <= 500


def test_each_key_has_its_own_window(key: str) -> None:
    other = f"{key}-other"
    limit = SharedWindowLimit()
    try:
        assert _allowed(limit, key, 5, 10) == 5
        assert _allowed(limit, other, 5, 10) == 5
    finally:
        redis_module.redis_client().delete(other)


def test_a_new_window_allows_again_and_no_share_outlives_its_window(key: str) -> None:
    limit = SharedWindowLimit()
    assert _allowed(limit, key, 3000, 40, window=1) == 40  # three shares of 16 taken: 8 left unspent here
    assert limit._shares[key][1] == 8
    time.sleep(1.2)
    # the old window's share is gone with it: a limit of 1 in the new window allows exactly one
    assert _allowed(limit, key, 1, 3, window=1) == 1


def test_the_memory_stays_bounded() -> None:
    limit = SharedWindowLimit(max_keys=3)
    keys = [f"test-limit-{uuid.uuid4()}" for _ in range(6)]
    try:
        for name in keys:
            assert limit.wait(name, 10, 60) is None
        assert len(limit._shares) <= 3
    finally:
        redis_module.redis_client().delete(*keys)
