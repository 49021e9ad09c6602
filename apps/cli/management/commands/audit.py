"""`oaken audit verify [--tenant ID | --file chain.jsonl]`"""

from __future__ import annotations

import sys
import uuid
from typing import Any

from django.core.management.base import CommandParser

from apps.audit.chainfile import verify_file
from apps.audit.log import UnknownTenantError, verify_all
from apps.cli.command import JsonCommand


class Command(JsonCommand):
    help = "Check the audit log."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        verify = sub.add_parser(
            "verify", help="Walk the hash chains and name the first broken link (exit 1 when one is broken)."
        )
        which = verify.add_mutually_exclusive_group()
        which.add_argument("--tenant", help="tenant id (default: every tenant)")
        which.add_argument(
            "--file", help="an exported chain (JSON lines, docs/audit.md): verified offline, the database unread"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["file"] is not None:
            self._verify_file(options["file"])
            return
        tenant_id = None
        if options["tenant"] is not None:
            try:
                tenant_id = uuid.UUID(options["tenant"])
            except ValueError:
                self.fail("NOT_FOUND", "no such tenant", "tenant")
        try:
            results = verify_all(tenant_id)
        except UnknownTenantError:
            self.fail("NOT_FOUND", "no such tenant", "tenant")
        tenants = [
            {"tenant_id": str(tenant), "events": checked, "ok": broken is None} for tenant, checked, broken in results
        ]
        first = next((broken for _, _, broken in results if broken is not None), None)
        if first is None:
            self.emit({"ok": True, "tenants": tenants})
            return
        self.emit(
            {
                "ok": False,
                "tenants": tenants,
                "first_broken": {
                    "tenant_id": str(first.tenant_id),
                    "seq": first.seq,
                    "event_id": first.event_id,
                    "reason": first.reason,
                },
            }
        )
        sys.exit(1)

    def _verify_file(self, path: str) -> None:
        try:
            report = verify_file(path)
        except OSError:
            self.fail("NOT_FOUND", "the file cannot be read", "file")
        self.emit({**report.as_dict(), "summary": report.sentence()})
        if not report.ok:
            sys.exit(1)
