"""`oaken ops list [--json]` and `oaken ops docs [--check]`"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandParser

from apps.cli.command import JsonCommand
from apps.operations import docs
from apps.operations.registry import registry
from apps.operations.schema import input_json_schema


class Command(JsonCommand):
    help = "The operation registry."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        listing = sub.add_parser("list", help="List every operation.")
        listing.add_argument("--json", action="store_true")
        generate = sub.add_parser("docs", help="Write docs/operations.md from the registry.")
        generate.add_argument("--check", action="store_true", help="exit 1 when the file is stale")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "docs":
            text = docs.render()
            if options["check"]:
                stale = not docs.DOC_PATH.exists() or docs.DOC_PATH.read_text() != text
                self.stdout.write("docs/operations.md is stale" if stale else "docs/operations.md is current")
                sys.exit(1 if stale else 0)
            docs.DOC_PATH.parent.mkdir(exist_ok=True)
            docs.DOC_PATH.write_text(text)
            self.stdout.write(f"wrote {docs.DOC_PATH}")
            return
        rows = [
            {
                "name": op.name,
                "summary": op.summary,
                "class": op.op_class.value,
                "scope": op.scope.value,
                "ceiling": op.ceiling.value,
                "role": op.role,
                "callers": op.callers.value,
                "input_schema": input_json_schema(op),
                "output_schema": op.output_model.model_json_schema(),
            }
            for op in registry
        ]
        if options["json"]:
            self.emit({"operations": rows})
            return
        width = max(len(r["name"]) for r in rows)
        for r in rows:
            self.stdout.write(f"{r['name']:<{width}}  {r['class']:<6}  {r['ceiling']:<5}  {r['summary']}")
