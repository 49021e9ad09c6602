"""Concurrent gate calls on one tenant append to one linear audit chain (SPEC §12)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from apps.audit.log import verify_chain
from apps.audit.models import AuditEvent
from apps.core.kinds import Door
from apps.gate.dispatch import dispatch
from tests.callers import as_agent, as_person
from tests.conftest import Person

WRITERS, CALLS = 8, 100


@pytest.mark.django_db(transaction=True)
def test_eight_writers_times_a_hundred_calls_make_one_linear_chain(alice: Person, mallory: Person) -> None:
    callers = [as_agent(alice, credential_id=f"key-{i}") for i in range(WRITERS)]
    start = threading.Barrier(WRITERS)
    failures: list[BaseException] = []

    def write(i: int) -> None:
        start.wait()
        try:
            for n in range(CALLS):
                if n % 2:
                    dispatch(callers[i], Door.MCP, "status", {})
                else:
                    dispatch(as_person(alice), Door.CLI, "list_accounts", {})
        except BaseException as exc:  # reported below, with the assertion
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    events = list(AuditEvent.objects.for_tenant(alice.tenant).order_by("seq").values_list("seq", "prev_hash", "hash"))
    assert [seq for seq, _, _ in events] == list(range(1, WRITERS * CALLS + 1))
    assert all(events[i][1] == events[i - 1][2] for i in range(1, len(events)))  # no fork: one predecessor each
    assert verify_chain(alice.tenant.pk) == (WRITERS * CALLS, None)
    assert not AuditEvent.objects.for_tenant(mallory.tenant).exists()
