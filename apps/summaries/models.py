"""The summary cache: one row per tenant, content and summarizer, and the messages it was made from.

A summary is keyed by what was summarized (a message's content hash, or a thread's: the hashes of its messages
in order) and by who summarized it (kind, model, prompt version), inside one tenant: the same content is never
summarized twice by the same summarizer, a new model or prompt makes new rows, and one tenant's row is never
read for another's, even for identical content. Deleting any message it was made from (or its account, or the
tenant) deletes the summary: the rows of SummarySource cascade with their message, and a trigger (migration
0001) deletes the summary whose source went.
"""

from __future__ import annotations

from django.db import models

from apps.core.tenancy import TenantOwned


class Scope(models.TextChoices):
    MESSAGE = "message"
    THREAD = "thread"


class State(models.TextChoices):
    PENDING = "pending"  # claimed by a call, its task queued or running
    DONE = "done"
    FAILED = "failed"  # the summarizer failed; `reason` says why in fixed words; the next call tries again


class Summary(TenantOwned):
    scope = models.CharField(max_length=16, choices=Scope.choices)
    content_hash = models.CharField(max_length=64)
    kind = models.CharField(max_length=16)  # local | llm
    model = models.CharField(max_length=200)
    prompt_version = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    text = models.TextField(blank=True)
    truncated = models.BooleanField(default=False)
    reason = models.CharField(max_length=200, blank=True)
    # the Celery task that owns a pending row: only it may fill it in
    task_id = models.CharField(max_length=64, blank=True)
    claimed_at = models.DateTimeField()
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "scope", "content_hash", "kind", "model", "prompt_version"],
                name="summary_unique_per_content_and_summarizer",
            )
        ]


class SummarySource(TenantOwned):
    """A message a summary was made from (several for a thread, one for a message; copies of one message in
    two accounts of a tenant share their summary)."""

    summary = models.ForeignKey(Summary, on_delete=models.CASCADE, related_name="sources")
    message = models.ForeignKey("mail.Message", on_delete=models.CASCADE, related_name="+")
    # the message's place in what was summarized (a thread's messages oldest first)
    position = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["summary", "message"], name="summary_source_once")]


class AutoSummaryAccount(TenantOwned):
    """A mail account whose new mail is summarized in the background (a person opted it in)."""

    account = models.OneToOneField("mail.MailAccount", on_delete=models.CASCADE, related_name="+")
    enabled_at = models.DateTimeField()
