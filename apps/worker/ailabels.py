"""AI labels on new mail (the beat's `mail.ai_labels`): each label with a description decides the mail of its account
stored after the description was set, once the search enricher has embedded it, and puts itself on what matches.

Each label acts as the person who set its description (Caller.standing, with the label as its credential), rebuilt
from their membership read afresh at every run: never more than that person may do now, through the internal door
and the gate (`add_labels`, confirmed, audited with credential_kind "ailabel"). A person who left the tenant, or no
longer reaches the account's workspace, stops the label, visibly (Label.ai_stopped, in list_labels and the console).

A message is decided once per description version: the decision row (search.LabelDecision, unique per label,
message and version) and the label go on in one transaction, so a retry, a second worker or a re-sync finds the row
and passes. A refused call is recorded on the decision (failed, with the gate's code) and never stops the others.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef

from apps.core.bounds import bounds
from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.httpclient import HttpFailure
from apps.core.kinds import CredentialKind, Door
from apps.gate.dispatch import dispatch
from apps.mail import services
from apps.mail.models import Label, Message, MessageLabel
from apps.search import labelling
from apps.search.embedders import EmbeddingsUnavailable, current_embedder
from apps.search.indexing import model_of
from apps.search.models import LabelDecision
from apps.workspaces.models import Membership

log = logging.getLogger("oaken.search")

LEFT_TENANT = "the person who set its description is no longer a member"
LOST_WORKSPACE = "the person who set its description no longer reaches this mailbox's workspace"


def label_new_mail() -> int:
    """Run every AI label that labels; how many messages they decided."""
    decided = 0
    labels = (
        Label.objects.unscoped()
        .exclude(description="")
        .filter(ai_stopped="")
        .select_related("tenant", "account__workspace")
    )
    for label in labels:
        try:
            decided += run_label(label)
        except (EmbeddingsUnavailable, HttpFailure) as failure:  # the model is away: the mail waits for the next run
            log.warning("AI label %s waits: %s", label.pk, type(failure).__name__)
    return decided


def standing_caller(label: Label) -> Caller | None:
    """The person behind the label as they are now, or None when the label stopped (and why is recorded)."""
    membership = (
        Membership.objects.filter(tenant=label.tenant, user_id=label.description_by_id, user__is_active=True)
        .select_related("user")
        .first()
        if label.description_by_id is not None
        else None
    )
    if membership is None:
        services.stop_ai_label(tenant=label.tenant, label_id=label.pk, reason=LEFT_TENANT)
        return None
    reaches = membership.workspace_names()
    if reaches is not None and label.account.workspace.name not in reaches:
        services.stop_ai_label(tenant=label.tenant, label_id=label.pk, reason=LOST_WORKSPACE)
        return None
    return Caller.standing(membership, kind=CredentialKind.AILABEL, source_id=str(label.pk))


def _waiting(label: Label) -> list[Message]:
    """The label's account's mail stored after its description, embedded by the current model, not yet decided in
    this version and not carrying the label already; the oldest first, at most AI_LABEL_BATCH."""
    model = model_of(current_embedder())
    decided = LabelDecision.objects.for_tenant(label.tenant).filter(
        label=label, version=label.description_version, message=OuterRef("pk")
    )
    carrying = MessageLabel.objects.for_tenant(label.tenant).filter(label=label, message=OuterRef("pk"))
    return list(
        Message.objects.for_tenant(label.tenant)
        .filter(account_id=label.account_id, received_at__gte=label.description_at, embedding_state__model=model)
        .exclude(Exists(decided))
        .exclude(Exists(carrying))
        .order_by("received_at", "pk")[: bounds.AI_LABEL_BATCH]
    )


def run_label(label: Label) -> int:
    """Decide this label's waiting mail; how many messages it decided."""
    if label.description_at is None:
        return 0
    caller = standing_caller(label)
    if caller is None:
        return 0
    messages = _waiting(label)
    if not messages:
        return 0
    if labelling.model_selected():
        others = list(
            Label.objects.for_tenant(label.tenant).filter(account_id=label.account_id).exclude(description="")
        )
        verdicts = {}
        for m in messages:
            try:
                verdicts[str(m.pk)] = labelling.by_model(label, others, m)
            except HttpFailure as failure:  # this message waits for the next run; the others go on
                log.warning("AI label %s: the model did not decide a message (%s)", label.pk, failure.reason)
    else:
        verdicts = labelling.by_embeddings(label, [m.pk for m in messages])
    for message in messages:
        verdict = verdicts.get(str(message.pk))
        if verdict is not None:
            _decide(caller, label, message, verdict)
    return len(verdicts)


def _decide(caller: Caller, label: Label, message: Message, verdict: labelling.Verdict) -> None:
    fields: dict[str, Any] = {
        "tenant": label.tenant,
        "label": label,
        "message": message,
        "version": label.description_version,
        "method": verdict.method,
        "labelled": verdict.labelled,
        "score": verdict.score,
        "reason": verdict.reason[:200],
        "examples": list(verdict.examples),
    }
    try:
        with transaction.atomic():
            LabelDecision.objects.create(**fields, outcome="applied" if verdict.labelled else "")
            if verdict.labelled:
                dispatch(
                    caller,
                    Door.INTERNAL,
                    "add_labels",
                    {"message_ids": [str(message.pk)], "label_ids": [str(label.pk)]},
                    confirm=True,
                )
    except IntegrityError:
        return  # decided already, by another worker or an earlier run
    except OakenError as error:
        log.warning("AI label %s could not label a message: %s", label.pk, error.code)
        try:
            with transaction.atomic():
                LabelDecision.objects.create(**fields, outcome="failed", error=error.code[:40])
        except IntegrityError:
            return
