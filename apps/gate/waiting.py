"""A waiting operation (wait_for_message) at a door, without a web thread or a database connection per waiter.

The gate never waits. A waiting operation's call answers at once with what it finds, and while it has found
nothing and its deadline has not come, its output says what it waits for (Operation.waits: keys and a deadline).
The door then calls it again, the whole gate (the credential, its scopes and reach checked, the call audited),
when one of the keys is woken (apps.events.wake) or at the deadline, with the first call's time (`began`, so
"arrived after the call's start" and the deadline stay those of the call the client made), until it answers
for good. The client sees one request and one answer.

Under `oaken serve`'s web worker (config.web_worker) the request is parked: the door answers a ParkedResponse,
which the worker never sends; it gives the thread back, keeps the connection and the request's body, and runs the
request again when woken, marked RESUMED. Its database connection went back when the first answer was made. A
worker that stops resumes its parked requests for a last answer. Where no worker can park (the test client,
`manage.py runserver`, a worker that is stopping) the thread waits for the same wake-ups, its database connection
closed meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.http import HttpResponse
from django.utils import timezone

from apps.events.wake import hub
from apps.gate.dispatch import Result
from apps.operations.registry import Operation, Wait

# in a request's environ, set by the web worker: it can park this request (config.web_worker)
PARK = "oaken.park"
# in a request's environ, set by the web worker: this is a parked request run again; its value is `began`
RESUMED = "oaken.resumed"


@dataclass(frozen=True)
class Park:
    keys: tuple[str, ...]
    deadline: float  # time.monotonic()
    began: datetime
    since: float  # time.monotonic() before the answer that found nothing was read


class ParkedResponse(HttpResponse):
    """What a door answers for a request the worker parks: never sent (the worker sends the answer of the request's
    run that answers for good)."""

    def __init__(self, park: Park) -> None:
        super().__init__(status=202)
        self.oaken_park = park


def began(meta: Mapping[str, Any]) -> datetime:
    """When the call the client made began: now, or the time a resumed request carries (`meta`: its environ)."""
    resumed = meta.get(RESUMED)
    return resumed if isinstance(resumed, datetime) else timezone.now()


def settle(
    meta: Mapping[str, Any],
    op: Operation | None,
    answer: Any,
    again: Callable[[], Any],
    *,
    since: float,
    start: datetime,
) -> Any:
    """The door's answer to a call of `op`: `answer` (what dispatch gave: a Result, or the door's refusal) when it
    is final, a ParkedResponse when the worker parks the request, or, where nothing can park it, the answer of
    `again` once a wake-up or the deadline has come (as often as it still waits). `meta`: the request's environ
    (empty for the CLI); `since`: time.monotonic() before `answer` was read; `start`: began(meta)."""
    while True:
        wait = _waits(op, answer)
        if wait is None:
            return answer
        deadline = time.monotonic() + max(0.0, (wait.deadline - timezone.now()).total_seconds())
        if meta.get(PARK):
            return ParkedResponse(Park(wait.keys, deadline, start, since))
        if RESUMED in meta:
            return answer  # its worker is stopping: the answer as it is now
        if not connection.in_atomic_block:
            connection.close()  # not held while it waits
        hub.wait(wait.keys, deadline, since=since)
        since = time.monotonic()
        answer = again()


def _waits(op: Operation | None, answer: Any) -> Wait | None:
    if op is None or op.waits is None or not isinstance(answer, Result):
        return None
    return op.waits(answer.output)
