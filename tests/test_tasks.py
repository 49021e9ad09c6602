"""The import runs as a Celery task on a real worker, through the embedded Redis broker."""

from __future__ import annotations

from pathlib import Path

import pytest
from celery.contrib.testing.worker import start_worker

from apps.mail.models import Message
from apps.worker.tasks import import_mail_task
from config.celery import app
from tests.conftest import Person
from tests.mailfactory import conversation, write_mbox


@pytest.mark.django_db(transaction=True)
def test_the_import_task_runs_on_a_worker(alice: Person, mallory: Person, tmp_path: Path) -> None:
    source = write_mbox(tmp_path / "m", conversation(3))
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        result = import_mail_task.delay(
            tenant_id=str(alice.tenant.pk),
            workspace_id=str(alice.workspace.pk),
            account_name="A",
            path=str(source),
        )
        counts = result.get(timeout=60)
    assert (counts["imported"], counts["duplicates"], counts["failed"]) == (3, 0, 0)
    assert Message.objects.for_tenant(alice.tenant).count() == 3
    assert not Message.objects.for_tenant(mallory.tenant).exists()


def test_the_tasks_beat_runs_store_no_result_and_an_asked_for_one_does() -> None:
    """Beat's tasks and the per-account syncs it queues every minute would leave a result key each for a day
    (CELERY_RESULT_EXPIRES) that nobody reads; the import, whose caller reads its counts, keeps its result."""
    periodic = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert {"outbound.roll_up_budgets", "mail.sync_due_accounts", "outbound.release_scheduled"} <= periodic
    for name in periodic | {"mail.sync_account"}:
        assert app.tasks[name].ignore_result is True, name
    assert app.tasks["mail.import_mail"].ignore_result is False
