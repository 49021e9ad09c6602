"""Celery tasks for mail: thin interfaces over the mail services."""

from __future__ import annotations

from pathlib import Path

from celery import shared_task

from apps.mail.importing import import_mail
from apps.workspaces.models import Tenant, Workspace


@shared_task(name="mail.import_mail")
def import_mail_task(*, tenant_id: str, workspace_id: str, account_name: str, path: str) -> dict[str, object]:
    """Run an import in a worker (the web console's upload path); returns the counts."""
    tenant = Tenant.objects.get(pk=tenant_id)
    workspace = Workspace.objects.for_tenant(tenant).get(pk=workspace_id)
    counts = import_mail(tenant=tenant, workspace=workspace, account_name=account_name, path=Path(path))
    return {
        "imported": counts.imported,
        "duplicates": counts.duplicates,
        "failed": counts.failed,
        "account_id": str(counts.account_id),
        "import_id": str(counts.run_id),
    }
