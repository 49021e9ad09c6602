"""`oaken apikey create --user EMAIL --scopes read,write[,send] [--workspaces a,b] [--ops x,y | --tool-set NAME]
[--expires-in 30d]`
and `oaken apikey revoke ID --user EMAIL`: through the gate, as the person (the cli door), with the operations the
console uses."""

from __future__ import annotations

import re
from typing import Any

from django.core.management.base import CommandParser

from apps.cli.command import JsonCommand

_DAYS = re.compile(r"^(\d{1,4})d$")


def _names(value: str | None) -> list[str] | None:
    return None if value is None else [part.strip() for part in value.split(",") if part.strip()]


class Command(JsonCommand):
    help = "Create or revoke API keys."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="Create a key; it is printed once.")
        self.add_person_arguments(create, "the person the key acts for")
        create.add_argument("--scopes", required=True, help="read,write,send")
        create.add_argument("--workspaces", help="comma-separated names (default: default; '' for every workspace)")
        create.add_argument("--ops", help="comma-separated operation allow-list")
        create.add_argument("--tool-set", help="a tool set to limit the key to (e.g. mail-read; list_tool_sets)")
        create.add_argument("--expires-in", help="e.g. 30d")
        create.add_argument("--name", default="")
        revoke = sub.add_parser("revoke", help="Revoke a key by id, as a person who may (its holder, or an ADMIN).")
        revoke.add_argument("id")
        self.add_person_arguments(revoke, "the person revoking it")

    def handle(self, *args: Any, **options: Any) -> None:
        membership = self.membership(options["user"], options["tenant"])
        # the person typed exactly this command: that is the confirmation
        if options["action"] == "revoke":
            self.call(membership, "revoke_api_key", {"api_key_id": options["id"]}, confirm=True)
            return
        data: dict[str, Any] = {"name": options["name"], "scopes": _names(options["scopes"])}
        if options["workspaces"] is not None:
            data["workspaces"] = _names(options["workspaces"])
        if options["ops"] is not None:
            data["operations"] = _names(options["ops"])
        if options["tool_set"] is not None:
            data["tool_set"] = options["tool_set"]
        if options["expires_in"] is not None:
            match = _DAYS.match(options["expires_in"].strip())
            if match is None:
                self.fail("INVALID_INPUT", "expires-in is a number of days, like 30d", "expires_in")
            data["expires_in_days"] = int(match.group(1))
        self.call(membership, "create_api_key", data, confirm=True)
