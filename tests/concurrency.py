"""Work raced from threads of its own (each with its own database connection), started together by a barrier."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection


def race(runs: int, work: Callable[[], Any]) -> list[Any]:
    """`work` run `runs` times at once; what each returned (in the order they ended). A failing run fails the test."""
    start = threading.Barrier(runs)
    results: list[Any] = []
    failures: list[BaseException] = []

    def one() -> None:
        start.wait()
        try:
            results.append(work())
        except BaseException as exc:  # reported below
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one) for _ in range(runs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    return results
