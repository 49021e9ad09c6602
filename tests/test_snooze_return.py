"""Snooze's return when beats run at the same time (apps.worker.snooze): each due message comes back once, in its own
tenant, however many runs race for it (a guarded UPDATE on the row's state, not a lock held in Python).

Apart from tests/test_snooze.py: these calls commit, from threads of their own, so the test owns its database.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.mail.models import Message
from apps.worker.snooze import return_due
from tests.callers import as_person, call
from tests.conftest import Person, give_mail

# ---------------------------------------------------------------- concurrent beats


@pytest.mark.django_db(transaction=True)
def test_concurrent_beats_return_each_message_once(alice: Person, mallory: Person, tmp_path: Path) -> None:
    mine = give_mail(alice, tmp_path, "alice", n=6)
    theirs = give_mail(mallory, tmp_path, "mallory", n=2)
    for who, box in ((alice, mine), (mallory, theirs)):
        call(as_person(who), "mark_read", {"message_ids": box.message_ids})
        call(
            as_person(who),
            "snooze_messages",
            {"message_ids": box.message_ids, "until": (timezone.now() + timedelta(days=1)).isoformat()},
        )
    past = timezone.now() - timedelta(minutes=1)
    Message.objects.unscoped().filter(snoozed_until__isnull=False).update(snoozed_until=past)

    runs = 4
    start = threading.Barrier(runs)
    counts: list[int] = []
    failures: list[BaseException] = []

    def beat() -> None:
        start.wait()
        try:
            counts.append(return_due())
        except BaseException as exc:  # reported below
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=beat) for _ in range(runs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert sum(counts) == 8
    for who, box in ((alice, mine), (mallory, theirs)):
        rows = Message.objects.for_tenant(who.tenant).filter(pk__in=box.message_ids).select_related("folder")
        assert {(m.folder.kind, m.snoozed_until, m.read) for m in rows} == {("inbox", None, False)}
        ok = AuditEvent.objects.for_tenant(who.tenant).filter(operation="return_snoozed_message", outcome="ok")
        assert sorted(t["id"] for e in ok for t in e.targets) == sorted(box.message_ids)
    assert return_due() == 0
