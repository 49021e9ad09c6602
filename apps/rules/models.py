"""Rules (SPEC §16's filters): a person's standing instructions for a mailbox or a workspace, run on new mail.

A rule is ordered, enabled or not, holds its conditions and actions as validated JSON (apps.rules.conditions),
and acts with the authority of its owner, the person who last confirmed it (apps.core.callers.Caller.standing):
never more than that person may do now. Every change of what it does (conditions, actions, match, enabled, scope)
makes a new version; a message is acted on at most once per rule version (`RuleApplication`, unique).

New mail waits for the rules in `RulePending`, filled by PostgreSQL itself (migration 0001's trigger on
mail_message) for the accounts an enabled rule covers, so import and sync alike queue it without knowing rules
exist; `apply_rule` queues existing mail for one rule the same way. The engine (apps.worker.rules) takes the
queue in batches, and each action is a gate call on the internal door.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from apps.core.tenancy import TenantOwned


class Rule(TenantOwned):
    workspace = models.ForeignKey("workspaces.Workspace", on_delete=models.CASCADE, related_name="+")
    # one mailbox, or (null) every mailbox of the workspace
    account = models.ForeignKey("mail.MailAccount", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    # whose authority it acts with: the person who last confirmed what it does
    owner = models.ForeignKey("accounts.User", on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100)
    position = models.PositiveIntegerField(default=0)
    enabled = models.BooleanField(default=True)
    match = models.CharField(max_length=3, default="all")  # all | any
    conditions = models.JSONField(default=list)
    actions = models.JSONField(default=list)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # stopped by the engine, why (a fixed reason: its owner left, or no longer reaches its workspace); cleared when
    # a person who may confirms it again
    stopped_reason = models.CharField(max_length=40, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    # its last failing action: the error code (never the text), and when; and how many messages it acted on
    last_error = models.CharField(max_length=40, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    applied_count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "name"], name="rule_name_unique_in_workspace")]
        indexes = [models.Index(fields=["tenant", "workspace", "position"], name="rule_in_order")]

    def __str__(self) -> str:
        return self.name


class RulePending(TenantOwned):
    """A message waiting for the rules: every enabled rule covering it (rule null), or one rule (apply_rule)."""

    message = models.ForeignKey("mail.Message", on_delete=models.CASCADE, related_name="+")
    rule = models.ForeignKey(Rule, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    queued_at = models.DateTimeField(default=timezone.now)
    # not taken before (a message an "about" condition waits on until the search enricher has embedded it)
    not_before = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["message"], condition=Q(rule__isnull=True), name="rule_pending_new_mail_once"
            ),
            models.UniqueConstraint(fields=["message", "rule"], name="rule_pending_once_per_rule"),
        ]
        indexes = [models.Index(fields=["queued_at"], name="rule_pending_order")]


class RuleApplication(TenantOwned):
    """A rule acted on a message: which version, the condition that matched (in words: the rule's own terms, never
    the mail's text), and each action with its outcome (ok, or the refusal's code). Kept when the rule is deleted
    (with its name then), so a message still says why it was moved."""

    rule = models.ForeignKey(Rule, null=True, on_delete=models.SET_NULL, related_name="applications")
    rule_name = models.CharField(max_length=100)
    version = models.PositiveIntegerField()
    message = models.ForeignKey("mail.Message", on_delete=models.CASCADE, related_name="+")
    matched = models.JSONField(default=list)
    actions = models.JSONField(default=list)
    applied_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rule", "version", "message"], name="rule_acts_once_per_version")
        ]
        indexes = [
            models.Index(fields=["message"], name="rule_application_message"),
            models.Index(fields=["rule", "-applied_at"], name="rule_application_history"),
        ]
