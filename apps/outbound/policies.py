"""Writes of send policies (SPEC §10): a person's standing approval for requests to some recipients, made and
ended by persons only (the operations in apps.operations.defs.policies decide who may)."""

from __future__ import annotations

from datetime import datetime

from apps.accounts.models import User
from apps.mail.models import MailAccount
from apps.outbound.models import SendPolicy
from apps.workspaces.models import Tenant


def create_send_policy(
    *,
    tenant: Tenant,
    created_by: User,
    name: str,
    account: MailAccount | None,
    allowed_addresses: list[str],
    allowed_domains: list[str],
    recipients_per_hour: int,
    now: datetime,
) -> SendPolicy:
    """A new policy of `created_by`'s, for one account (None: any), with addresses and domains as stored."""
    return SendPolicy.objects.create(
        tenant=tenant,
        created_by=created_by,
        name=name,
        account=account,
        allowed_addresses=allowed_addresses,
        allowed_domains=allowed_domains,
        recipients_per_hour=recipients_per_hour,
        created_at=now,
    )


def delete_send_policy(*, tenant: Tenant, policy: SendPolicy) -> None:
    """End a policy: from now on the requests it would have approved wait for a person."""
    SendPolicy.objects.for_tenant(tenant).filter(pk=policy.pk).delete()
