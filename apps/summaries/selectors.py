"""Reads of the summaries' own settings."""

from __future__ import annotations

from apps.mail.models import MailAccount
from apps.summaries.models import AutoSummaryAccount
from apps.workspaces.models import Tenant


def auto_summaries_enabled(*, tenant: Tenant, account: MailAccount) -> bool:
    """Whether the account's new mail is summarized in the background."""
    return AutoSummaryAccount.objects.for_tenant(tenant).filter(account=account).exists()
