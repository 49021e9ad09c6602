"""Drafts, outbound requests with their outbox, and send policies (SPEC §10).

A request is immutable content (recipients, subject, body, threading headers, attachments, send
time) bound to `content_hash`; only its state moves, always by a guarded UPDATE … WHERE state = expected
(apps.outbound.requests.transition), and each move is audited.
"""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.utils import timezone

from apps.core.tenancy import TenantOwned


class Draft(TenantOwned):
    account = models.ForeignKey("mail.MailAccount", on_delete=models.CASCADE, related_name="+")
    to = ArrayField(models.CharField(max_length=320), default=list, blank=True)
    cc = ArrayField(models.CharField(max_length=320), default=list, blank=True)
    bcc = ArrayField(models.CharField(max_length=320), default=list, blank=True)
    subject = models.TextField(blank=True)
    body = models.TextField(blank=True)
    # Message-IDs without angle brackets
    in_reply_to = models.TextField(blank=True)
    references = ArrayField(models.TextField(), default=list, blank=True)
    # the message this draft replies to or forwards, when there is one
    source_message = models.ForeignKey(
        "mail.Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["tenant", "account", "-updated_at"], name="draft_recent")]


class State(models.TextChoices):
    REQUESTED = "requested", "Requested"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    APPROVED = "approved", "Approved"
    QUEUED = "queued", "Queued"
    SENDING = "sending", "Sending"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"
    UNKNOWN = "unknown", "Outcome unknown"
    CANCELLED = "cancelled", "Cancelled"
    REJECTED = "rejected", "Rejected"


class Kind(models.TextChoices):
    """What a request does when it is executed: an e-mail over SMTP (a mailto: unsubscribe is one too, kept
    apart so the console and the agent can tell why it was made), or an RFC 8058 one-click POST to a list."""

    EMAIL = "email", "E-mail"
    UNSUBSCRIBE_MAIL = "unsubscribe_mail", "Unsubscribe by e-mail"
    UNSUBSCRIBE_POST = "unsubscribe_post", "One-click unsubscribe"


# States from which a request can still be stopped (nothing has reached a server yet).
CANCELLABLE = (State.REQUESTED, State.AWAITING_APPROVAL, State.APPROVED, State.QUEUED)


class OutboundRequest(TenantOwned):
    owner_field: ClassVar[str] = "requested_by"

    account = models.ForeignKey("mail.MailAccount", on_delete=models.PROTECT, related_name="+")
    draft = models.ForeignKey(Draft, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    state = models.CharField(max_length=20, choices=State.choices, default=State.REQUESTED)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.EMAIL, db_default=Kind.EMAIL)
    # unsubscribe requests: the message whose List-Unsubscribe header named where to go
    source_message = models.ForeignKey(
        "mail.Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # a one-click unsubscribe's https URL, part of the content hash; like a secret (its query string often
    # carries the list's token): never logged or audited, shown only as host and path (apps.outbound.unsubscribe)
    unsubscribe_url = models.TextField(blank=True, default="", db_default="")
    # the list's answer to the one-click POST (a redirect's status is its answer: never followed)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    # the content, fixed at creation
    sender = models.CharField(max_length=320)
    # the From header's display name, as sent (empty: the address alone)
    sender_name = models.CharField(max_length=200, blank=True, default="")
    to = ArrayField(models.CharField(max_length=320), default=list, blank=True)
    cc = ArrayField(models.CharField(max_length=320), default=list, blank=True)
    bcc = ArrayField(models.CharField(max_length=320), default=list, blank=True)
    subject = models.TextField(blank=True)
    body = models.TextField(blank=True)
    in_reply_to = models.TextField(blank=True)
    references = ArrayField(models.TextField(), default=list, blank=True)
    send_at = models.DateTimeField(null=True, blank=True)
    # without angle brackets; fixed here so a retry or a reconciliation can always recognise the message
    message_id = models.CharField(max_length=255)
    content_hash = models.CharField(max_length=64)
    recipient_count = models.PositiveIntegerField()
    # who asked, and through which door (never a secret)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    principal = models.CharField(max_length=10)
    door = models.CharField(max_length=10)
    credential_id = models.CharField(max_length=100, blank=True)
    credential_kind = models.CharField(max_length=10, blank=True)
    # idempotency: "<operation>:<key>" per caller
    caller_key = models.CharField(max_length=300)
    idempotency_key = models.CharField(max_length=300)
    # authority
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    approved_via = models.CharField(max_length=10, blank=True)  # "person" | "policy" | "standing"
    # why the person who rejected it did so, in their words (REJECT_REASON_MAX_CHARS; '' when none was given)
    reject_reason = models.TextField(blank=True, default="")
    policy = models.ForeignKey("SendPolicy", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    # execution: each claim by a worker is one attempt (its number guards the claim's later steps)
    attempts = models.PositiveIntegerField(default=0)
    # DATA began (an e-mail), or the POST began (a one-click unsubscribe): from then on never retried
    smtp_started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # a fixed reason code, never a server's text (it could quote the message)
    error = models.CharField(max_length=100, blank=True)
    refused_recipients = ArrayField(models.CharField(max_length=320), default=list, blank=True)
    copied_to_sent = models.BooleanField(default=False)
    reconcile_attempts = models.PositiveIntegerField(default=0)
    # a person who recorded how an unknown outcome ended (sent or not sent)
    settled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    settled_at = models.DateTimeField(null=True, blank=True)
    # sent by itself on a standing authority a person approved (an automatic reply): approved_via "standing"
    automation = models.ForeignKey(
        "Automation", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    # an agent's request: where it came from (apps.outbound.provenance): {"flags": [...], "evidence": [...],
    # "lockdown": bool}; message ids, addresses and times only, never mail text ({} for a person's own)
    provenance = models.JSONField(default=dict, blank=True, db_default={})
    # why an automatic send waits in `queued` (its budgets spent, or they cannot be checked); '' when it does not
    waiting = models.CharField(max_length=30, blank=True, default="", db_default="")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "caller_key", "idempotency_key"], name="outbound_key_once"),
        ]
        indexes = [
            models.Index(fields=["tenant", "state", "-created_at"], name="outbound_by_state"),
            models.Index(
                fields=["state", "send_at"],
                name="outbound_due",
                condition=Q(state__in=["approved", "queued", "sending", "unknown"]),
            ),
        ]


class OutboundAttachment(TenantOwned):
    """A file of a draft or of a request (a request's files are its own copies, part of its content hash)."""

    draft = models.ForeignKey(Draft, null=True, blank=True, on_delete=models.CASCADE, related_name="attachments")
    request = models.ForeignKey(
        OutboundRequest, null=True, blank=True, on_delete=models.CASCADE, related_name="attachments"
    )
    filename = models.TextField()
    content_type = models.CharField(max_length=255)
    content = models.BinaryField()
    sha256 = models.CharField(max_length=64)
    position = models.PositiveIntegerField(default=0)


class OutboxEntry(TenantOwned):
    """Written in the same transaction as the approval: the promise that a worker will deliver the request.

    `available_at` is when a queued request may next be claimed (a retry waits here, never in a broker ETA);
    `enqueued_at` is when a task was last handed to the broker (None: not since it became available). The
    sweeper hands a task over for a queued request that is available and was not handed, or whose task was
    lost. The task claims the request itself, so extra tasks are harmless.
    """

    request = models.OneToOneField(OutboundRequest, on_delete=models.CASCADE, related_name="outbox")
    available_at = models.DateTimeField()
    enqueued_at = models.DateTimeField(null=True, blank=True)
    enqueue_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)


class SendPolicy(TenantOwned):
    """Authority a person gave in advance: requests made for them whose every recipient is allowed, up to
    a number of recipients an hour, are approved without asking."""

    owner_field: ClassVar[str] = "created_by"

    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=200)
    # None: any account the request's caller may reach
    account = models.ForeignKey("mail.MailAccount", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    allowed_addresses = ArrayField(models.CharField(max_length=320), default=list, blank=True)
    allowed_domains = ArrayField(models.CharField(max_length=255), default=list, blank=True)
    recipients_per_hour = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)


class BudgetUsage(TenantOwned):
    """Recipients one hourly send budget had used in one clock hour, copied from its Redis counter by the
    roll-up (apps.outbound.rollup) for the console. Redis stays the authority; this is the record."""

    kind = models.CharField(max_length=10)  # apikey | oauth | person | policy (apps.outbound.budget.KINDS)
    budget_id = models.CharField(max_length=100)  # the credential's, person's or policy's id
    window_start = models.DateTimeField()  # the clock hour
    used = models.PositiveIntegerField()
    # when Redis gave this figure: a later reading replaces an earlier one, never the other way round
    rolled_up_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "kind", "budget_id", "window_start"], name="budget_usage_once"),
        ]
        indexes = [models.Index(fields=["window_start"], name="budget_usage_age")]


class BudgetExhaustion(TenantOwned):
    """An hourly send budget that refused a request (apps.outbound.requests): kept once per budget and clock hour,
    written with the refusal's audit event, so the feed says `budget.exhausted` once an hour however many requests
    are refused after it (the trigger of events/0003 writes the event with this row). Forgotten with BudgetUsage."""

    kind = models.CharField(max_length=10)  # apikey | oauth | person (apps.outbound.budget.KINDS)
    budget_id = models.CharField(max_length=100)  # the credential's or person's id
    window_start = models.DateTimeField()  # the clock hour
    per_hour = models.PositiveIntegerField()  # the recipients the hour allowed
    # the mailbox the first refused request was for (its workspace is the event's)
    account = models.ForeignKey("mail.MailAccount", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "kind", "budget_id", "window_start"], name="budget_spent_once"),
        ]
        indexes = [models.Index(fields=["window_start"], name="budget_spent_age")]


class Snippet(TenantOwned):
    """A reusable text of one person in one tenant (create_snippet), with placeholders ({first_name}, …) filled
    as plain text when a draft is written from it (apps.outbound.snippets); never evaluated."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100)
    text = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user", "name"], name="snippet_name_unique_per_person")
        ]

    def __str__(self) -> str:
        return self.name


class AutomationKind(models.TextChoices):
    AUTO_REPLY = "auto_reply", "Automatic reply"
    FORWARD = "forward", "Forwarding"


class AutomationState(models.TextChoices):
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    ACTIVE = "active", "Active"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"


class Automation(TenantOwned):
    """A standing send behaviour (issue 40): approved once by a person, it then sends by itself on that authority,
    exactly as approved. Its content (what it sends and to whom) is bound to `content_hash`; nothing edits it: a
    change is a new automation, the old one cancelled (apps.outbound.automations)."""

    account = models.ForeignKey("mail.MailAccount", on_delete=models.CASCADE, related_name="+")
    # where an agent's automation came from (apps.outbound.provenance, as a request's): {"flags", "evidence",
    # "lockdown"}; ids, addresses and times only ({} for a person's own). It waits for a person's approval anyway:
    # the flags tell them why they might refuse it
    provenance = models.JSONField(default=dict, blank=True, db_default={})
    kind = models.CharField(max_length=20, choices=AutomationKind.choices)
    state = models.CharField(max_length=20, choices=AutomationState.choices)
    subject = models.TextField(blank=True)
    body = models.TextField(blank=True)
    audience = models.CharField(max_length=10, blank=True)  # everyone | known (addresses the person has written to)
    once_per_days = models.PositiveSmallIntegerField(default=0)
    # forwarding: where each message goes
    forward_to = models.CharField(max_length=320, blank=True, default="")
    # a forwarding rule's forward (the rules engine decides which messages): the rule, and its terms as approved
    # (its match and conditions, and the versions of the AI labels they name: canonical JSON, in the content hash)
    rule = models.ForeignKey("rules.Rule", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    terms = models.TextField(blank=True, default="")
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    tz = models.CharField(max_length=64, default="UTC")
    content_hash = models.CharField(max_length=64)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    principal = models.CharField(max_length=10)
    door = models.CharField(max_length=10)
    credential_id = models.CharField(max_length=100, blank=True)
    credential_kind = models.CharField(max_length=10, blank=True)
    # the person whose authority it sends on (who approved it), and when
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    reject_reason = models.TextField(blank=True, default="")
    cancelled_at = models.DateTimeField(null=True, blank=True)
    stopped_reason = models.CharField(max_length=30, blank=True, default="")
    # the engine reads the account's mail stored after this id (ids are in time order), less a margin
    scanned_to = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["account", "kind"],
                name="automation_one_active",
                condition=Q(state="active", rule__isnull=True),
            ),
            models.UniqueConstraint(
                fields=["rule", "forward_to"],
                name="automation_one_active_per_rule",
                condition=Q(state="active", rule__isnull=False),
            ),
        ]
        indexes = [
            models.Index(fields=["state", "kind"], name="automation_running", condition=Q(state="active")),
            models.Index(fields=["tenant", "-created_at"], name="automation_by_tenant"),
        ]


class AutoReplyDecision(TenantOwned):
    """What an automatic reply did with one message: replied (its request) or why not. Once per message."""

    automation = models.ForeignKey(Automation, on_delete=models.CASCADE, related_name="decisions")
    message = models.ForeignKey("mail.Message", null=True, on_delete=models.SET_NULL, related_name="+")
    message_key = models.UUIDField()  # the message's id, kept after the message is gone
    sender = models.CharField(max_length=320, blank=True)
    outcome = models.CharField(max_length=30)  # replied | a reason it was not
    request = models.ForeignKey(OutboundRequest, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    decided_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["automation", "message_key"], name="auto_reply_once_a_message"),
        ]
        indexes = [models.Index(fields=["automation", "-decided_at"], name="auto_reply_history")]


class AutoReplied(TenantOwned):
    """When an account last replied by itself to an address: at most once per address per window (RFC 3834)."""

    account = models.ForeignKey("mail.MailAccount", on_delete=models.CASCADE, related_name="+", db_index=False)
    address = models.CharField(max_length=320)  # casefolded
    last_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["account", "address"], name="auto_replied_once")]
