"""Automatic replies on new mail (the beat's `outbound.auto_replies`): the engine, on the internal door.

Each active automatic reply whose schedule has begun reads its mailbox's mail stored since it was approved (by id,
which leads with the time, re-reading a margin behind: a sync whose ids were made earlier may commit later), a
batch at a time, holding its row (FOR UPDATE SKIP LOCKED: any number of workers, one per automation at a time).
Mail that gets no reply (lists, robots, automatic mail, Bcc copies, strangers when it answers known correspondents
only) is recorded with why, without a call; each other message is one call of `send_automatically` as the person who
approved it (Caller.standing: their role and workspaces of now, audited as "an automatic reply approved by …"),
which decides once per message and once per sender per window in the database, and makes the reply an outbound
request on the automation's authority. An approver who left the tenant, was deactivated, or no longer reaches
the mailbox ends the automation (`stop_automation`, audited): nothing is sent on an authority that is gone.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.kinds import CredentialKind, Door
from apps.gate.dispatch import dispatch
from apps.gate.internal import call_internal
from apps.outbound import automations
from apps.outbound.models import Automation, AutomationState
from apps.workspaces.models import Membership

log = logging.getLogger("oaken.outbound")

BATCH = 200


def run(now: datetime | None = None) -> int:
    """Every running automatic reply, one batch each; how many messages they decided."""
    now = now or timezone.now()
    # a forwarding rule's forward is the rules engine's to run (apps.worker.rules): it decides which messages go
    running = Automation.objects.unscoped().filter(
        Q(starts_at__isnull=True) | Q(starts_at__lte=now), state=AutomationState.ACTIVE, rule__isnull=True
    )
    return sum(run_one(pk, now) for pk in running.values_list("pk", flat=True))


def run_one(automation_id: Any, now: datetime) -> int:
    with transaction.atomic():
        automation = (
            Automation.objects.unscoped()
            .select_for_update(skip_locked=True, of=("self",))
            .select_related("tenant", "account__workspace")
            .filter(pk=automation_id, state=AutomationState.ACTIVE)
            .first()
        )
        if automation is None:
            return 0  # another worker has it, or it ended meanwhile
        caller = approver(automation)
        if caller is None:
            return 0
        messages = automations.waiting_messages(automation, now=now, limit=BATCH)
        own = automations.own_addresses(automation.account)
        skipped = []
        for message in messages:
            reason = automations.why_not(automation, message, own)
            if reason is not None:
                skipped.append((message, reason))
                continue
            try:
                dispatch(
                    caller,
                    Door.INTERNAL,
                    "send_automatically",
                    {"automation_id": str(automation.pk), "message_id": str(message.pk)},
                )
            except OakenError as error:  # recorded by the gate; the message is left as refused, never retried
                log.warning("automatic reply %s: a message was refused: %s", automation.pk, error.code)
                skipped.append((message, f"refused_{error.code.lower()}"[:30]))
        automations.record_skipped(automation, skipped, now=now)
        automations.advance(automation, messages)
        return len(messages)


def approver(automation: Automation) -> Caller | None:
    """The person whose authority it sends on, as they are now; None (and the automation ended, audited) when that
    authority is gone."""
    membership = (
        Membership.objects.filter(tenant=automation.tenant, user_id=automation.approved_by_id, user__is_active=True)
        .select_related("user", "tenant")
        .first()
        if automation.approved_by_id is not None
        else None
    )
    reason = ""
    if membership is None:
        reason = "approver_left"
    else:
        given = membership.workspace_names()
        if given is not None and automation.account.workspace.name not in given:
            reason = "approver_lost_mailbox"
    if reason:
        try:
            call_internal(automation.tenant, "stop_automation", {"automation_id": str(automation.pk), "reason": reason})
        except OakenError as error:
            log.warning("automatic reply %s could not be stopped: %s", automation.pk, error.code)
        return None
    assert membership is not None
    return Caller.standing(membership, kind=CredentialKind.AUTOREPLY, source_id=str(automation.pk))
