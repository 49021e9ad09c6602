"""`oaken import-mail PATH --user E [--tenant ID] [--workspace W] [--account NAME]`"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandParser

from apps.cli.command import JsonCommand
from apps.mail.importing import ImportRefusedError, import_mail
from apps.workspaces.models import DEFAULT_WORKSPACE
from apps.workspaces.selectors import access_workspace_by_name


class Command(JsonCommand):
    help = "Import an mbox file, a Maildir or a folder of .eml files into a local mail account."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path")
        parser.add_argument("--user", required=True, help="the person's e-mail address")
        parser.add_argument("--tenant", help="tenant id (default: the person's first tenant)")
        parser.add_argument("--workspace", default=DEFAULT_WORKSPACE)
        parser.add_argument("--account", default="Imported", help="local account name (created if missing)")

    def handle(self, *args: Any, **options: Any) -> None:
        membership = self.membership(options["user"], options["tenant"])
        workspace = access_workspace_by_name(tenant=membership.tenant, name=options["workspace"])
        if workspace is None:
            self.fail("NOT_FOUND", "no such workspace", "workspace")
        account_name = options["account"].strip()
        if not account_name or len(account_name) > 200:
            self.fail("INVALID_INPUT", "account must be 1 to 200 characters", "account")
        try:
            counts = import_mail(
                tenant=membership.tenant,
                workspace=workspace,
                account_name=account_name,
                path=Path(options["path"]),
            )
        except ImportRefusedError as exc:
            self.fail(exc.code, exc.message, exc.field)
        self.emit(
            {
                "imported": counts.imported,
                "duplicates": counts.duplicates,
                "failed": counts.failed,
                "account_id": str(counts.account_id),
                "import_id": str(counts.run_id),
            }
        )
