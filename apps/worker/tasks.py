"""Celery tasks that enter through the internal door: thin interfaces over apps.worker.delivery, and the import,
which runs the operation `import_mail` so the work it starts is checked and audited as any call is."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import shared_task
from django.utils import timezone

from apps.agents import services as agent_services
from apps.core.bounds import bounds
from apps.core.errors import OakenError, error_body
from apps.events import feed
from apps.gate.internal import call_internal
from apps.mail.importing import fail_run
from apps.outbound.models import Kind, OutboundRequest, State
from apps.outbound.requests import DELIVER_TASK
from apps.webhooks import delivery as webhook_delivery
from apps.worker import ailabels, autoreplies, awaiting, delivery, rules, snooze
from apps.workspaces.models import Tenant


@shared_task(name=DELIVER_TASK, acks_late=True)
def deliver_task(request_id: str) -> str:
    """Deliver one approved request; any number of copies of this task deliver it at most once."""
    return str(delivery.deliver(request_id))


@shared_task(name="outbound.release_scheduled", ignore_result=True)
def release_scheduled_task() -> int:
    return delivery.release_scheduled()


@shared_task(name="mail.return_snoozed", ignore_result=True)
def return_snoozed_task() -> int:
    """Bring back the snoozed messages whose time has come (each once, whatever runs this at the same time)."""
    return snooze.return_due()


@shared_task(name="rules.run", ignore_result=True)
def run_rules_task() -> int:
    """Rules acting on the mail waiting for them (apps.worker.rules)."""
    return rules.run()


@shared_task(name="mail.nudge_awaiting", ignore_result=True)
def nudge_awaiting_task() -> int:
    """Bring back to the inbox the threads waiting for reply of persons who turned the nudge on (each once per
    last message, whatever runs this at the same time)."""
    return awaiting.nudge_due()


@shared_task(name="mail.ai_labels", ignore_result=True)
def ai_labels_task() -> int:
    """Label new mail that matches a label's description (each message once per description version)."""
    return ailabels.label_new_mail()


@shared_task(name="outbound.auto_replies", ignore_result=True)
def auto_replies_task() -> int:
    """Automatic replies answering new mail (apps.worker.autoreplies; each message once, each sender once a window)."""
    return autoreplies.run()


@shared_task(name="events.prune", ignore_result=True)
def prune_events_task() -> int:
    """The event feed keeps EVENTS_RETENTION_DAYS (a cursor older than that answers CURSOR_EXPIRED), and so do
    webhooks' settled deliveries."""
    before = timezone.now() - timedelta(days=bounds.EVENTS_RETENTION_DAYS)
    return feed.prune(before=before) + webhook_delivery.prune(before=before)


@shared_task(name="agents.notice_expiring", ignore_result=True)
def notice_expiring_task() -> int:
    """The feed's connection.expiring for each key and connection entering its last CREDENTIAL_EXPIRING_DAYS
    (once per credential and deadline, whatever runs this at the same time)."""
    return agent_services.notice_expiring(now=timezone.now(), days=bounds.CREDENTIAL_EXPIRING_DAYS)


@shared_task(name="webhooks.deliver", ignore_result=True)
def deliver_webhooks_task() -> dict[str, int]:
    """Send each due webhook what it is due, in order, one worker per endpoint (apps.webhooks.delivery)."""
    return webhook_delivery.run()


@shared_task(name="outbound.sweep_outbox", ignore_result=True)
def sweep_outbox_task() -> dict[str, int]:
    return delivery.sweep()


@shared_task(name="outbound.reconcile_unknown", ignore_result=True)
def reconcile_unknown_task() -> dict[str, int]:
    """Look for every request of unknown outcome in its account's Sent folder."""
    found = {"sent": 0, "unknown": 0}
    unknown = OutboundRequest.objects.unscoped().filter(state=State.UNKNOWN).exclude(kind=Kind.UNSUBSCRIBE_POST)
    ids = unknown.values_list("pk", flat=True)[:200]
    for request_id in list(ids):
        found["sent" if delivery.reconcile(request_id) == State.SENT else "unknown"] += 1
    return found


@shared_task(name="mail.import_mail")
def import_mail_task(*, tenant_id: str, workspace_id: str, account_name: str, path: str) -> dict[str, Any]:
    """Run an import in a worker, as the system (the operation `import_mail`): the counts, or {"error": {...}}
    in the one error shape when the gate refused it (an unknown workspace, a path that is no mail source)."""
    tenant = Tenant.objects.get(pk=tenant_id)
    data = {"path": path, "workspace_id": workspace_id, "account_name": account_name}
    try:
        return call_internal(tenant, "import_mail", data).output
    except OakenError as error:
        return error_body(error)


@shared_task(name="mail.start_import")
def start_import_task(*, tenant_id: str, import_id: str) -> dict[str, Any]:
    """Run an upload's queued import (upload_import) as the system, through the operation `import_mail`. It never
    stays queued or running when this ends: a refusal or a crash marks it failed with a reason (a code)."""
    try:
        tenant = Tenant.objects.get(pk=tenant_id)
        return call_internal(tenant, "import_mail", {"import_id": import_id}).output
    except OakenError as error:
        if error.code != "CONFLICT":  # CONFLICT: another copy of this task has it (or had it) running
            fail_run(import_id, error.code)
        return error_body(error)
    except BaseException as exc:
        fail_run(import_id, type(exc).__name__)
        raise
