"""`oaken import-mail PATH --user E [--tenant ID] [--workspace W] [--account NAME]`: the operation `import_mail`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandParser

from apps.cli.command import JsonCommand
from apps.workspaces.models import DEFAULT_WORKSPACE


class Command(JsonCommand):
    help = "Import an mbox file, a Maildir or a folder of .eml files into a local mail account."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path")
        self.add_person_arguments(parser, "the person's e-mail address (an ADMIN of the tenant)")
        parser.add_argument("--workspace", default=DEFAULT_WORKSPACE)
        parser.add_argument("--account", default="Imported", help="local account name (created if missing)")

    def handle(self, *args: Any, **options: Any) -> None:
        membership = self.membership(options["user"], options["tenant"])
        data = {
            # the path as this shell means it: the operation takes absolute paths only
            "path": str(Path(options["path"]).absolute()),
            "workspace": options["workspace"],
            "account_name": options["account"],
        }
        self.call(membership, "import_mail", data)
