"""Background summaries of new mail (an enricher, off unless OAKEN_SUMMARIZE_NEW_MAIL is on), for the accounts a
person opted in (`set_auto_summaries`). Each tenant's opted-in accounts get at most SUMMARIES_NEW_MAIL_PER_HOUR new
summaries an hour, counted in Redis, so a flood of mail cannot run up a model's bill; what the bound leaves out
waits for the next hour (or for someone to ask). Only mail that arrived after the account was opted in, and in
the last day, is looked at.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

import redis
from django.conf import settings
from django.db.models import Exists, OuterRef
from django.utils import timezone

from apps.core.bounds import bounds
from apps.core.redis_client import redis_client
from apps.mail.models import MailAccount, Message
from apps.summaries import services
from apps.summaries.models import AutoSummaryAccount, Scope, Summary
from apps.workspaces.models import Tenant

log = logging.getLogger("oaken.summaries")

# the most messages one run looks at per tenant
RUN_MAX = 100
_LOOKBACK = timedelta(days=1)
_BUDGET_KEY = "oaken:summaries-new-mail:{tenant}:{hour}"
# take up to ARGV[1] of a budget of ARGV[2] for this hour: what was granted
_TAKE = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local grant = math.min(tonumber(ARGV[1]), tonumber(ARGV[2]) - used)
if grant <= 0 then return 0 end
redis.call('INCRBY', KEYS[1], grant)
redis.call('EXPIRE', KEYS[1], 7200)
return grant
"""


def opt_in(*, account: MailAccount, enabled: bool) -> bool:
    """Turn background summaries on or off for an account; whether it was on before."""
    rows = AutoSummaryAccount.objects.for_tenant(account.tenant).filter(account=account)
    before = rows.exists()
    if enabled and not before:
        AutoSummaryAccount.objects.create(tenant=account.tenant, account=account, enabled_at=timezone.now())
    elif not enabled:
        rows.delete()
    return before


def _take(tenant: Tenant, wanted: int) -> int:
    limit = bounds.SUMMARIES_NEW_MAIL_PER_HOUR
    key = _BUDGET_KEY.format(tenant=tenant.pk, hour=int(time.time() // 3600))
    return int(redis_client().eval(_TAKE, 1, key, wanted, limit))


def summarize_new_mail() -> int:
    """Queue summaries of new mail in opted-in accounts, within each tenant's hourly bound; how many were queued."""
    if not settings.SUMMARIES["NEW_MAIL"]:
        return 0
    identity = services.current_identity()
    since = timezone.now() - _LOOKBACK
    queued = 0
    opted = AutoSummaryAccount.objects.unscoped().select_related("tenant").order_by("tenant_id")
    by_tenant: dict[object, list[AutoSummaryAccount]] = {}
    for row in opted:
        by_tenant.setdefault(row.tenant_id, []).append(row)
    for rows in by_tenant.values():
        tenant = rows[0].tenant
        summarized = Summary.objects.for_tenant(tenant).filter(
            scope=Scope.MESSAGE,
            content_hash=OuterRef("content_hash"),
            kind=identity.kind,
            model=identity.model,
            prompt_version=identity.prompt_version,
        )
        candidates: list[Message] = []
        for row in rows:
            candidates += list(
                Message.objects.for_tenant(tenant)
                .filter(account_id=row.account_id, received_at__gte=max(row.enabled_at, since))
                .exclude(Exists(summarized))
                .only("id", "content_hash")
                .order_by("-received_at")[:RUN_MAX]
            )
        if not candidates:
            continue
        try:
            granted = _take(tenant, min(len(candidates), RUN_MAX))
        except redis.RedisError:
            log.warning("background summaries wait: their hourly bound cannot be checked")
            return queued
        if granted:
            queued += services.queue(tenant=tenant, jobs=[services.message_job(m) for m in candidates[:granted]])
    return queued
