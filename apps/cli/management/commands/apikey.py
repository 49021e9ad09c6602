"""`oaken apikey create --user EMAIL --scopes read,write[,send] [--workspaces a,b] [--ops x,y] [--expires-in 30d]`
and `oaken apikey revoke ID`: through the gate, as the person (the cli door)."""

from __future__ import annotations

import re
from typing import Any

from django.core.management.base import CommandParser

from apps.agents.models import ApiKey
from apps.cli.command import JsonCommand
from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.core.kinds import Door
from apps.gate.dispatch import dispatch
from apps.workspaces.models import Membership

_DAYS = re.compile(r"^(\d{1,4})d$")


def _names(value: str | None) -> list[str] | None:
    return None if value is None else [part.strip() for part in value.split(",") if part.strip()]


class Command(JsonCommand):
    help = "Create or revoke API keys."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="Create a key; it is printed once.")
        create.add_argument("--user", required=True)
        create.add_argument("--tenant")
        create.add_argument("--scopes", required=True, help="read,write,send")
        create.add_argument("--workspaces", help="comma-separated names (default: default; '' for every workspace)")
        create.add_argument("--ops", help="comma-separated operation allow-list")
        create.add_argument("--expires-in", help="e.g. 30d")
        create.add_argument("--name", default="")
        revoke = sub.add_parser("revoke", help="Revoke a key by id.")
        revoke.add_argument("id")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "create":
            self._create(options)
        else:
            self._revoke(options["id"])

    def _create(self, options: dict[str, Any]) -> None:
        membership = self.membership(options["user"], options["tenant"])
        data: dict[str, Any] = {"name": options["name"], "scopes": _names(options["scopes"])}
        if options["workspaces"] is not None:
            data["workspaces"] = _names(options["workspaces"])
        if options["ops"] is not None:
            data["operations"] = _names(options["ops"])
        if options["expires_in"] is not None:
            match = _DAYS.match(options["expires_in"].strip())
            if match is None:
                self.fail("INVALID_INPUT", "expires-in is a number of days, like 30d", "expires_in")
            data["expires_in_days"] = int(match.group(1))
        self._call(Caller.person(membership), "create_api_key", data)

    def _revoke(self, key_id: str) -> None:
        try:
            row = ApiKey.objects.unscoped().filter(pk=parse_id(key_id, "id")).select_related("tenant", "user").first()
        except OakenError:
            row = None
        if row is None:
            self.fail("NOT_FOUND", "no such key", "id")
        # revoked as the person who holds it: the server's operator acts through the owner's door
        membership = Membership.objects.for_user(row.user).select_related("tenant", "user").get(tenant=row.tenant)
        self._call(Caller.person(membership), "revoke_api_key", {"api_key_id": str(row.pk)})

    def _call(self, caller: Caller, name: str, data: dict[str, Any]) -> None:
        try:
            # the person typed exactly this command: that is the confirmation
            result = dispatch(caller, Door.CLI, name, data, confirm=True)
        except OakenError as error:
            self.emit({"error": error.as_dict()})
            raise SystemExit(1) from None
        self.emit(result.output)
